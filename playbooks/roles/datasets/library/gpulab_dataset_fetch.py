#!/usr/bin/python
"""Ansible module: fetch one dataset artifact, resuming, and verify its sha256 (or the md5 its publisher gives)."""

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
    and fails naming the file, the expected and the found sum. Where the publisher gives
    no sha256 (C(sha256) omitted), C(md5) is checked instead; where it gives no size
    (C(size) omitted), the transfer runs to the server's end of the file.
  - A file already in place whose verified sum is recorded beside it (C(dest).sha256,
    with its size and modification time) is not read again; nothing changes.
options:
  url: {description: http(s) URL, file:/// URL or absolute path on the host, required: true, type: str}
  dest: {description: where the artifact goes, required: true, type: path}
  sha256: {description: expected sha256 (64 hex digits); C(sha256) or C(md5) is required, type: str}
  md5: {description: expected md5 (32 hex digits), checked when no sha256 is given, type: str}
  size: {description: expected size in bytes (omitted where unpublished), type: int}
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


def digest_of(path, algo):
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


class Want(object):
    """The sum to verify: the sha256, or where none is published the md5 ("md5:<hex>" in the sidecar)."""

    def __init__(self, sha256, md5):
        self.algo = "sha256" if sha256 else "md5"
        self.value = (sha256 or md5).lower()
        self.key = self.value if sha256 else "md5:" + self.value

    def found(self, path):
        return digest_of(path, self.algo)


def stamp(path):
    st = os.stat(path)
    return "%d %d" % (st.st_size, st.st_mtime_ns)


def recorded_ok(dest, key):
    """True when dest exists and the sidecar says it was verified as it is now."""
    side = dest + ".sha256"
    try:
        with open(side) as f:
            digest, rest = f.read().strip().split(" ", 1)
        return digest == key and rest == stamp(dest)
    except (OSError, ValueError):
        return False


def record(dest, key):
    with open(dest + ".sha256.tmp", "w") as f:
        f.write("%s %s\n" % (key, stamp(dest)))
    os.replace(dest + ".sha256.tmp", dest + ".sha256")


def remove(*paths):
    for p in paths:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def server_total(resp, status):
    """The file's whole size as the server states it (Content-Range of a 206, Content-Length of a 200)."""
    try:
        if status == 206:
            return int(resp.headers.get("Content-Range", "").rsplit("/", 1)[1])
        return int(resp.headers.get("Content-Length"))
    except (TypeError, ValueError, IndexError):
        return None


def download(module, url, part, size, retries, timeout):
    """Bring part to size bytes (size None: to the size the server states, or the end of its
    stream); returns (attempts, resumed_from list). Fails the module when it cannot."""
    resumed = []
    last_error = None
    published = size
    for attempt in range(retries + 1):
        have = os.path.getsize(part) if os.path.exists(part) else 0
        if size is not None and have > size:
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
            if published is None:  # no published size: take the server's word for this transfer
                size = server_total(resp, status)
            with open(part, mode) as out:
                while True:
                    block = resp.read(CHUNK)
                    if not block:
                        break
                    out.write(block)
                    have += len(block)
                    if size is not None and have > size:
                        break
        except Exception as exc:  # a broken connection, a timeout, a refused request: try again from here
            code = getattr(exc, "code", None)
            if code == 416 and published is None:  # the part already holds the server's whole file
                return attempt + 1, resumed
            if code == 416:  # the part is as long as the server's file, but not the size expected
                remove(part)
            elif code is not None and code not in (408, 429, 500, 502, 503, 504):
                module.fail_json(msg="%s: HTTP %s (%s)" % (url, code, exc))
            last_error = exc
            time.sleep(min(5, 0.5 * (attempt + 1)))
            continue
        if size is None or os.path.getsize(part) >= size:  # unknown size: a clean end of the stream
            return attempt + 1, resumed
        last_error = "the server closed the connection at %d of %d bytes" % (os.path.getsize(part), size)
    have = os.path.getsize(part) if os.path.exists(part) else 0
    module.fail_json(
        msg="%s: download incomplete after %d attempt(s): %d of %s bytes (%s); "
        "the next run resumes from %s" % (url, retries + 1, have, size or "?", last_error, part),
        bytes=have,
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            sha256=dict(type="str"),
            md5=dict(type="str"),
            size=dict(type="int"),
            retries=dict(type="int", default=3),
            timeout=dict(type="int", default=60),
        ),
        required_one_of=[["sha256", "md5"]],
        supports_check_mode=True,
    )
    p = module.params
    url, dest, size = p["url"], p["dest"], p["size"]
    want = Want(p["sha256"], p["md5"])
    if os.path.exists(dest) and recorded_ok(dest, want.key):
        module.exit_json(changed=False, dest=dest, **{want.algo: want.value}, msg="present and verified")
    if module.check_mode:
        module.exit_json(changed=True, dest=dest, msg="would fetch %s" % url)
    local = url[len("file://") :] if url.startswith("file://") else url if url.startswith("/") else None
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    if local is not None:
        if not os.path.isfile(local):
            module.fail_json(msg="%s: source not found on this host" % local)
        found = want.found(local)
        if found != want.value:
            module.fail_json(
                msg="%s: %s mismatch: expected %s, found %s (the source is left as it is)"
                % (local, want.algo, want.value, found)
            )
        remove(dest, dest + ".sha256")
        os.symlink(os.path.abspath(local), dest)
        record(dest, want.key)
        module.exit_json(
            changed=True, dest=dest, msg="verified in place and linked", source=local, **{want.algo: want.value}
        )
    if os.path.exists(dest):  # present but not recorded as verified: check it once
        if size in (None, os.path.getsize(dest)) and want.found(dest) == want.value:
            record(dest, want.key)
            module.exit_json(changed=False, dest=dest, msg="present; verified", **{want.algo: want.value})
        remove(dest, dest + ".sha256")
    part = dest + ".part"
    attempts, resumed = download(module, url, part, size, p["retries"], p["timeout"])
    found = want.found(part)
    got = os.path.getsize(part)
    if found != want.value or size not in (None, got):
        remove(part, dest, dest + ".sha256")
        module.fail_json(
            msg="%s: %s mismatch: expected %s, found %s (%d bytes, %s expected); the file was "
            "removed" % (os.path.basename(dest), want.algo, want.value, found, got, size or "size not published"),
            expected=want.value,
            found=found,
            dest=dest,
        )
    os.replace(part, dest)
    record(dest, want.key)
    module.exit_json(
        changed=True,
        dest=dest,
        size=got,
        attempts=attempts,
        resumed_from=resumed,
        msg="fetched%s" % (" (resumed at %s)" % ", ".join(map(str, resumed)) if resumed else ""),
        **{want.algo: want.value},
    )


if __name__ == "__main__":
    main()
