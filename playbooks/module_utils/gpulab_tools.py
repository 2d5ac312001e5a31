# -*- coding: utf-8 -*-
"""The version markers of the tools the bwtools role builds (nccl-tests, nvbandwidth), read back.

The role writes ``<tools dir>/<tool>.json`` after a build: {tool, version, url, sha256 (of the
release tarball), commands, bin_dir, installed {binary: sha256}}. Read here, with the one rule of
what makes a built tool sound: every installed binary still there with the sum it was installed
with. Used by the role's own state module (gpulab_tool_state: build again?) and by the audit's
gpulab_stack_facts (which version is there?).
"""

import hashlib
import json
import os
import re

TOOL_NAMES = ("nccl-tests", "nvbandwidth")  # the tools the role knows how to build (a profile's `tools`)
MARKER = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}\.json$")
MARKER_MAX = 64 * 1024


def sha256_of(path):
    """The SHA256 of a regular file, or None where there is none to read."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except (IOError, OSError):
        return None
    return digest.hexdigest()


def read_marker(path):
    """One marker: its document with ``problem`` (None when sound), or None where there is no file."""
    if not os.path.lexists(path):
        return None
    doc = None
    try:
        if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) <= MARKER_MAX:
            with open(path, encoding="utf-8", errors="replace") as f:
                doc = json.load(f)
    except (IOError, OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), str):
        return {"version": None, "problem": "unreadable version marker"}
    problems = []
    installed = doc.get("installed") if isinstance(doc.get("installed"), dict) else {}
    for binary, want in sorted(installed.items()):
        found = sha256_of(os.path.join(str(doc.get("bin_dir") or ""), os.path.basename(str(binary))))
        if found is None:
            problems.append("%s missing" % binary)
        elif found != want:
            problems.append("%s changed since its build" % binary)
    if not installed:
        problems.append("no binary installed")
    return dict(doc, problem="; ".join(problems) or None)


def built_tools(tools_dir):
    """{tool: {version, source, problem, sha256, url}} of every marker in ``tools_dir``."""
    out = {}
    try:
        names = sorted(n for n in os.listdir(tools_dir) if MARKER.match(n))
    except (IOError, OSError):
        return out
    for name in names:
        path = os.path.join(tools_dir, name)
        doc = read_marker(path) or {}
        out[name[:-5]] = {
            "version": doc.get("version"),
            "source": path,
            "problem": doc.get("problem"),
            "sha256": doc.get("sha256"),
            "url": doc.get("url"),
        }
    return out


def found(tool):
    """A built tool's version as the drift shows it (its problem beside it), or None."""
    if not tool:
        return None
    if not tool.get("version"):
        return tool.get("problem")
    return "%s (%s)" % (tool["version"], tool["problem"]) if tool.get("problem") else tool["version"]
