"""The datasets role's fetch module (gpulab_dataset_fetch), run by Ansible on this machine
(local connection): resume over HTTP Range from a loopback server, sums, removal of a bad
file, a host path verified in place, nothing done when everything is in place."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LIBRARY = REPO / "playbooks" / "roles" / "datasets" / "library"


class Server:
    def __init__(self, files: dict[str, bytes], cut_first: int | None = None):
        self.files, self.log, self.cut_first = files, [], cut_first
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                rng = self.headers.get("Range", "")
                srv.log.append((self.path, rng))
                data = srv.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                m = re.fullmatch(r"bytes=(\d+)-", rng)
                start = int(m.group(1)) if m else 0
                self.send_response(206 if m else 200)
                if m:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if srv.cut_first is not None and len(srv.log) == 1:
                    self.wfile.write(data[: srv.cut_first])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data[start:])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def fetch(tmp_path, **args) -> dict:
    """Run the module once through `ansible localhost -m ...`; its JSON result."""
    line = " ".join(f"{k}={v}" for k, v in args.items())
    r = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-c",
            "local",
            "-i",
            "localhost,",
            "-M",
            str(LIBRARY),
            "-m",
            "gpulab_dataset_fetch",
            "-a",
            line,
            "-o",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "ANSIBLE_HOME": str(tmp_path / ".a"),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".a" / "tmp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        },
    )
    m = re.search(r"localhost \| (\w+)[^{]*=> (\{.*\})\s*$", r.stdout, re.S)
    assert m, r.stdout + r.stderr
    doc = json.loads(m.group(2))
    doc["_status"] = m.group(1)
    return doc


@pytest.fixture
def blob():
    data = bytes(range(256)) * 4096  # 1 MiB
    return data, hashlib.sha256(data).hexdigest()


def test_an_interrupted_download_resumes_with_range(tmp_path, blob):
    data, digest = blob
    srv = Server({"/a.bin": data}, cut_first=300_000)
    try:
        r = fetch(tmp_path, url=f"{srv.url}/a.bin", dest=tmp_path / "a.bin", sha256=digest, size=len(data))
    finally:
        srv.close()
    assert r["_status"] == "CHANGED" and r["resumed_from"] == [300_000], r
    assert srv.log == [("/a.bin", ""), ("/a.bin", "bytes=300000-")]
    assert (tmp_path / "a.bin").read_bytes() == data and not (tmp_path / "a.bin.part").exists()
    # everything in place: nothing is read or fetched again
    again = fetch(tmp_path, url="http://127.0.0.1:9/unused", dest=tmp_path / "a.bin", sha256=digest, size=len(data))
    assert again["_status"] == "SUCCESS" and again["changed"] is False


def test_a_corrupted_download_is_removed_and_both_sums_named(tmp_path, blob):
    data, digest = blob
    bad = bytearray(data)
    bad[1000] ^= 1
    srv = Server({"/a.bin": bytes(bad)})
    try:
        r = fetch(tmp_path, url=f"{srv.url}/a.bin", dest=tmp_path / "a.bin", sha256=digest, size=len(data))
    finally:
        srv.close()
    assert r["_status"] == "FAILED"
    assert r["msg"].startswith(f"a.bin: sha256 mismatch: expected {digest}, found {hashlib.sha256(bad).hexdigest()}")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_a_host_path_is_verified_in_place_and_linked(tmp_path, blob):
    data, digest = blob
    lab = tmp_path / "nfs"
    lab.mkdir()
    (lab / "ILSVRC2012_img_val.tar").write_bytes(data)
    dest = tmp_path / "archives" / "ILSVRC2012_img_val.tar"
    r = fetch(tmp_path, url=lab / "ILSVRC2012_img_val.tar", dest=dest, sha256=digest, size=len(data))
    assert r["_status"] == "CHANGED" and dest.is_symlink() and dest.resolve() == lab / "ILSVRC2012_img_val.tar"
    assert (
        fetch(tmp_path, url=lab / "ILSVRC2012_img_val.tar", dest=dest, sha256=digest, size=len(data))["changed"]
        is False
    )
    (lab / "other.tar").write_bytes(data[:-1] + b"x")
    r = fetch(
        tmp_path,
        url=f"file://{lab / 'other.tar'}",
        dest=tmp_path / "archives" / "other.tar",
        sha256=digest,
        size=len(data),
    )
    assert r["_status"] == "FAILED" and "other.tar: sha256 mismatch: expected " + digest in r["msg"]
    assert (lab / "other.tar").exists()  # a lab's own copy is never removed


def test_an_md5_only_artifact_of_unpublished_size_is_fetched_and_checked(tmp_path, blob):
    # Detectron publishes R-50.pkl with an md5 and nothing else: the transfer runs to the
    # server's end, the md5 is checked, and a wrong file is removed naming both md5s
    data, _ = blob
    md5 = hashlib.md5(data).hexdigest()
    srv = Server({"/R-50.pkl": data, "/bad.pkl": data[:-1] + b"!"}, cut_first=200_000)
    try:
        r = fetch(tmp_path, url=f"{srv.url}/R-50.pkl", dest=tmp_path / "R-50.pkl", md5=md5)
        bad = fetch(tmp_path, url=f"{srv.url}/bad.pkl", dest=tmp_path / "bad.pkl", md5=md5)
    finally:
        srv.close()
    assert r["_status"] == "CHANGED" and r["md5"] == md5 and r["size"] == len(data), r
    assert r["resumed_from"] == [200_000] and (tmp_path / "R-50.pkl").read_bytes() == data
    assert fetch(tmp_path, url="http://127.0.0.1:9/unused", dest=tmp_path / "R-50.pkl", md5=md5)["changed"] is False
    assert bad["_status"] == "FAILED"
    assert bad["msg"].startswith(f"bad.pkl: md5 mismatch: expected {md5}, found ")
    assert not (tmp_path / "bad.pkl").exists() and not (tmp_path / "bad.pkl.part").exists()
