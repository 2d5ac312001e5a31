"""How a host's GPU stack is read from its files: where the cuDNN and NCCL headers, the
CUDA toolkit's version files and the libraries are, how a version is read from each, and
which Python packages carry NVIDIA's libraries.

One owner of these rules for both readers: the runner's probe (runner.probe, for the run
directory and `invoke validate`) and the audit's Ansible module
(playbooks/library/gpulab_stack_facts.py, which imports this very file as module_utils
through playbooks/module_utils/gpulab_stackread.py). Every path is relative to a root
(``/`` on a host, a temporary tree in tests). This file runs on managed hosts too
(Python 3.6 and later): standard library only, no annotations.
"""

import glob
import json
import os
import re

# headers, relative to the root, in the order they are read
CUDNN_HEADERS = (
    "usr/include/cudnn_version.h",
    "usr/include/*-linux-gnu/cudnn_version.h",
    "usr/include/*-linux-gnu/cudnn_version_v*.h",
    "usr/include/cudnn_version_v*.h",
    "usr/include/cudnn.h",
    "usr/include/*-linux-gnu/cudnn.h",
    "usr/include/*-linux-gnu/cudnn_v*.h",
    "usr/include/cudnn_v*.h",
    "usr/local/cuda/include/cudnn_version.h",
    "usr/local/cuda/include/cudnn.h",
)
NCCL_HEADERS = ("usr/include/nccl.h", "usr/include/*-linux-gnu/nccl.h", "usr/local/cuda/include/nccl.h")
CUDNN_DEFINES = ("CUDNN", ("MAJOR", "MINOR", "PATCHLEVEL"))
NCCL_DEFINES = ("NCCL", ("MAJOR", "MINOR", "PATCH"))
# library folders, relative to the root
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/cuda/lib64",
    "usr/local/cuda/lib",
)
CUDA_HOME = "usr/local/cuda"
# Python packages (distributions) that carry NVIDIA's libraries, in the order they are tried
DISTS = {
    "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu11"),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "cuda": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"),
}


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def header_version(text, defines):
    """'9.1.0' from a header's ``#define CUDNN_MAJOR 9`` ... lines; None when one is missing."""
    prefix, names = defines
    values = []
    for name in names:
        m = re.search(r"#define\s+%s_%s\s+\(?([0-9]+)" % (prefix, name), text or "")
        if not m:
            return None
        values.append(m.group(1))
    return ".".join(values)


def headers(root, patterns, defines):
    """[(path, version)] of every header under ``root`` that matches ``patterns`` and names a
    version, in pattern order, each file once (a link and its target are one file)."""
    out, seen = [], set()
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(str(root), pattern))):
            real = os.path.realpath(path)
            if real in seen:
                continue
            version = header_version(read(path), defines)
            if version:
                seen.add(real)
                out.append((path, version))
    return out


def libraries(root, prefix):
    """[(path, version)] of the ``<prefix>.so.A.B[.C[.D]]`` files in the library folders under ``root``."""
    out = []
    for d in LIB_DIRS:
        base = os.path.join(str(root), d)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            m = re.match(r"^%s\.so\.([0-9]+(?:\.[0-9]+){1,3})$" % re.escape(prefix), name)
            if m:
                out.append((os.path.join(base, name), m.group(1)))
    return out


def cuda_version(home):
    """(version, file) of the CUDA toolkit in ``home``: version.json, else version.txt, else
    include/cuda.h (13000 -> 13.0); (None, None) when none names one."""
    home = str(home)
    path = os.path.join(home, "version.json")
    data = read(path)
    if data:
        try:
            return str(json.loads(data)["cuda"]["version"]), path
        except (ValueError, KeyError, TypeError):
            pass
    path = os.path.join(home, "version.txt")
    m = re.search(r"CUDA Version\s+([0-9.]+)", read(path) or "")
    if m:
        return m.group(1), path
    path = os.path.join(home, "include", "cuda.h")
    m = re.search(r"#define\s+CUDA_VERSION\s+([0-9]+)", read(path) or "")
    if m:
        n = int(m.group(1))
        return "%d.%d" % (n // 1000, (n % 1000) // 10), path
    return None, None
