#!/usr/bin/python
"""Ansible module: fetch one dataset artifact, resuming, and verify its sha256."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpulab_dataset_fetch
short_description: Fetch a dataset artifact with HTTP Range resume and a sha256 check
description:
  - Downloads C(url) to C(dest) through C(dest).part. An interrupted transfer continues
    from where it stopped (HTTP Range), within the same run up to C(retries) times and
    in the next run from the kept .part file.
  - A local source (an absolute path or file:/// URL, e.g. a lab's NFS copy of a licensed
    dataset) is verified in place and linked, not copied.
  - The sum is verified before the file is put in place. A mismatch removes the bad file
    and fails naming the file, the expected and the found sum.
  - A file already in place whose verified sum is recorded beside it (C(dest).sha256,
    with its size and modification time) is not read again; nothing changes.
options:
  url: {description: http(s) URL, file:/// URL or absolute path on the host, required: true, type: str}
  dest: {description: where the artifact goes, required: true, type: path}
  sha256: {description: expected sha256 (64 hex digits), required: true, type: str}
  size: {description: expected size in bytes, required: true, type: int}
  retries: {description: resumed attempts after a broken transfer in this run, type: int, default: 3}
  timeout: {description: seconds without data before an attempt is given up, type: int, default: 60}
author: gpulab
"""

import hashlib
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

CHUNK = 1 << 20


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def stamp(path):
    st = os.stat(path)
    return "%d %d" % (st.st_size, st.st_mtime_ns)


def recorded_ok(dest, sha256):
    """True when dest exists and the sidecar says it was verified as it is now."""
    side = dest + ".sha256"
    try:
        with open(side) as f:
            digest, rest = f.read().strip().split(" ", 1)
        return digest == sha256 and rest == stamp(dest)
    except (OSError, ValueError):
        return False


def record(dest, sha256):
    with open(dest + ".sha256.tmp", "w") as f:
        f.write("%s %s\n" % (sha256, stamp(dest)))
    os.replace(dest + ".sha256.tmp", dest + ".sha256")


def remove(*paths):
    for p in paths:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def download(module, url, part, size, retries, timeout):
    """Bring part to size bytes; returns (attempts, resumed_from list). Fails the module when it cannot."""
    resumed = []
    last_error = None
    for attempt in range(retries + 1):
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if have > size:
            remove(part)
            have = 0
        if have == size:
            return attempt, resumed
        headers = {"Range": "bytes=%d-" % have} if have else {}
        if have:
            resumed.append(have)
        try:
            resp = open_url(url, headers=headers, timeout=timeout, follow_redirects="all")
            status = resp.getcode()
            if have and status == 206:
                mode = "ab"
            elif status == 200:
                mode, have = "wb", 0
            else:
                module.fail_json(msg="%s: HTTP %s" % (url, status))
            with open(part, mode) as out:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    have += len(block)
                    if have > size:
                        break
        except Exception as exc:  # a broken connection, a timeout, a refused request: try again from here
            code = getattr(exc, "code", None)
            if code == 416:  # the part is already as long as the server's file
                remove(part)
            elif code is not None and code not in (408, 429, 500, 502, 503, 504):
                module.fail_json(msg="%s: HTTP %s (%s)" % (url, code, exc))
            last_error = exc
            time.sleep(min(5, 0.5 * (attempt + 1)))
            continue
        if os.path.getsize(part) >= size:
            return attempt + 1, resumed
        last_error = "the server closed the connection at %d of %d bytes" % (os.path.getsize(part), size)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    module.fail_json(msg="%s: download incomplete after %d attempt(s): %d of %d bytes (%s); "
                         "the next run resumes from %s" % (url, retries + 1, have, size, last_error, part),
                     bytes=have)


def main():
    module = AnsibleModule(
        argument_spec=dict(url=dict(type="str", required=True), dest=dict(type="path", required=True),
                           sha256=dict(type="str", required=True), size=dict(type="int", required=True),
                           retries=dict(type="int", default=3), timeout=dict(type="int", default=60)),
        supports_check_mode=True)
    p = module.params
    url, dest, want, size = p["url"], p["dest"], p["sha256"].lower(), p["size"]
    if os.path.exists(dest) and recorded_ok(dest, want):
        module.exit_json(changed=False, dest=dest, sha256=want, msg="present and verified")
    if module.check_mode:
        module.exit_json(changed=True, dest=dest, msg="would fetch %s" % url)
    local = url[len("file://"):] if url.startswith("file://") else url if url.startswith("/") else None
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    if local is not None:
        if not os.path.isfile(local):
            module.fail_json(msg="%s: source not found on this host" % local)
        found = sha256_of(local)
        if found != want:
            module.fail_json(msg="%s: sha256 mismatch: expected %s, found %s (the source is left as it is)"
                                 % (local, want, found))
        remove(dest, dest + ".sha256")
        os.symlink(os.path.abspath(local), dest)
        record(dest, want)
        module.exit_json(changed=True, dest=dest, sha256=want, msg="verified in place and linked", source=local)
    if os.path.exists(dest):  # present but not recorded as verified: check it once
        if os.path.getsize(dest) == size and sha256_of(dest) == want:
            record(dest, want)
            module.exit_json(changed=False, dest=dest, sha256=want, msg="present; verified")
        remove(dest, dest + ".sha256")
    part = dest + ".part"
    attempts, resumed = download(module, url, part, size, p["retries"], p["timeout"])
    found = sha256_of(part)
    got = os.path.getsize(part)
    if found != want or got != size:
        remove(part, dest, dest + ".sha256")
        module.fail_json(msg="%s: sha256 mismatch: expected %s, found %s (%d bytes, %d expected); the file was "
                             "removed" % (os.path.basename(dest), want, found, got, size),
                         expected=want, found=found, dest=dest)
    os.replace(part, dest)
    record(dest, want)
    module.exit_json(changed=True, dest=dest, sha256=want, size=size, attempts=attempts, resumed_from=resumed,
                     msg="fetched%s" % (" (resumed at %s)" % ", ".join(map(str, resumed)) if resumed else ""))


if __name__ == "__main__":
    main()
