"""`invoke datasets` against the SSH test lab: tiny archives in the real formats, served
from an HTTP server on the lab's controller address (the `gpulab_mirror` of the hosts),
go through the real role, the fetch module and runner.datasets on two hosts.

One lab, one sequence: the first run prepares five datasets and the two pretrained backbones
(tiny stand-ins; Detectron's R-50.pkl published with an md5 only, no sha256, no size) on both hosts
while the server cuts the first transfer of ml-20m.zip to each host mid-file (the download
resumes with a Range request); the second run changes nothing; a corrupted archive fails naming the file
and both sums, and is removed; with shared storage one host prepares and both check; archives kept on the
controller are copied."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

from tests.unit.datasets.dataset_archives import build

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
LAB_VARS = {"gpulab_gpu_model": "T4", "gpulab_gpu_count": 1, "gpulab_stack": "current"}
ROOT = "/var/lib/gpulab/data"


class Mirror:
    """Files under ``root`` over HTTP with Range support; can cut a file's first transfer per client."""

    def __init__(self, root: Path, address: str):
        self.root = root
        self.log: list[tuple[str, str, str]] = []  # client, path, range
        self.cut: dict[str, int] = {}  # path -> bytes to send before closing, once per client
        self._cut_done: set = set()
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                rng = self.headers.get("Range", "")
                mirror.log.append((self.client_address[0], self.path, rng))
                f = mirror.root / self.path.lstrip("/")
                if not f.is_file():
                    self.send_error(404)
                    return
                data = f.read_bytes()
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", rng)
                if m:
                    start = int(m.group(1))
                    if start >= len(data):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                key = (self.client_address[0], self.path)
                if self.path in mirror.cut and key not in mirror._cut_done and not m:
                    mirror._cut_done.add(key)
                    self.wfile.write(data[start : start + mirror.cut[self.path]])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(data[start:])

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{address}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _invoke(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(INVOKE), "datasets", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def _summary(out: str, host: str) -> dict:
    m = re.search(rf"^{host}: (\w+)\s+ok=(\d+) changed=(\d+) failed=(\d+)", out, re.M)
    assert m, out
    return {"state": m.group(1), "ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(4))}


def test_datasets_on_two_hosts(testlab, tmp_path):
    lab = testlab(2, prefix="ds", all_vars=LAB_VARS)
    entries, facts = build(tmp_path / "src")
    www = tmp_path / "www"
    for name in entries:  # the mirror layout: <mirror>/datasets/<dataset>/<file>
        (www / "datasets" / name).mkdir(parents=True)
        for a in entries[name]["artifacts"]:
            os.link(tmp_path / "src" / name / a["file"], www / "datasets" / name / a["file"])
    # the benchmarks of inventory/datasets.yml: ssd and maskrcnn also read their pretrained backbone
    # (tiny stand-ins in the published forms; R-50.pkl with an md5 alone, no sha256, no size)
    real = yaml.safe_load((REPO / "inventory" / "datasets.yml").read_text())
    assert set(entries) == set(real["datasets"])
    assert entries["r50-msra"]["artifacts"][0]["sha256"] is None and entries["r50-msra"]["artifacts"][0]["md5"]
    weights = (tmp_path / "src" / "r50-msra" / "R-50.pkl").read_bytes()
    cat = {
        "schema": 1,
        "version": "lab-test-1",
        "origins": {"nowhere": None},
        "benchmarks": real["benchmarks"],
        "datasets": {
            n: {**e, "artifacts": [{**a, "origin": "nowhere"} for a in e["artifacts"]]} for n, e in entries.items()
        },
    }
    (tmp_path / "catalogue.yml").write_text(yaml.safe_dump(cat, sort_keys=False))
    mirror = Mirror(www, lab.controller)
    try:
        inv = yaml.safe_load(lab.inventory.read_text())
        inv["all"].setdefault("vars", {})["gpulab_mirror"] = mirror.url
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
        # Ansible's artifacts in the test's folder, not the checkout's artifacts/
        env = {
            **os.environ,
            **lab.ansible_env(),
            "PYTHONPATH": str(REPO),
            "INVOKE_GPULAB_ARTIFACTS": str(tmp_path / "artifacts"),
        }
        common = [
            "--inventory",
            str(tmp_path / "inventory.yml"),
            "--catalogue",
            str(tmp_path / "catalogue.yml"),
            "--host",
            ",".join(lab.names),
        ]
        ml = entries["ml-20m"]["artifacts"][0]
        mirror.cut["/datasets/ml-20m/ml-20m.zip"] = ml["size"] // 2

        # 1. everything fetched, prepared and checked on both hosts; ml-20m.zip resumed
        p = _invoke(*common, "--names", "resnet50,ssd,gnmt,transformer,ncf,maskrcnn", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        for host in lab.names:
            assert _summary(p.stdout, host)["state"] == "changed"
            addr = lab.hosts[host].address
            tries = [r for c, path, r in mirror.log if c == addr and path.endswith("/ml-20m.zip")]
            assert tries == ["", f"bytes={ml['size'] // 2}-"], tries
            for ds in ("imagenet", "coco", "wmt16", "wmt17", "ml-20m"):
                doc = json.loads(lab.exec(host, f"cat {ROOT}/{ds}/gpulab-dataset.json").stdout)
                assert doc["dataset"] == ds and doc["catalogue_version"] == "lab-test-1"
                for key, want in entries[ds]["expect"].items():
                    assert doc["counts"][key] == want, (host, ds, key)
            doc = json.loads(lab.exec(host, f"cat {ROOT}/r50-msra/gpulab-dataset.json").stdout)
            assert doc["files"]["R-50.pkl"] == {"sha256": hashlib.sha256(weights).hexdigest(), "size": len(weights)}
            (a,) = entries["resnet34-torchvision"]["artifacts"]
            doc = json.loads(lab.exec(host, f"cat {ROOT}/resnet34-torchvision/gpulab-dataset.json").stdout)
            assert doc["files"][a["file"]] == {"sha256": a["sha256"], "size": a["size"]}
            got = lab.exec(host, f"sha256sum {ROOT}/.archives/ml-20m.zip").stdout.split()[0]
            assert got == ml["sha256"]
            n = lab.exec(host, f"ls {ROOT}/imagenet/val/n01443537 | wc -l").stdout.strip()
            assert int(n) == facts["imagenet"]["val_per_class"]["n01443537"]

        # 2. a rerun with everything in place changes nothing
        requests = len(mirror.log)
        p = _invoke(*common, "--names", "resnet50,ssd,gnmt,transformer,ncf,maskrcnn", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        for host in lab.names:
            s = _summary(p.stdout, host)
            assert s["state"] == "ok" and s["changed"] == 0, p.stdout
        assert len(mirror.log) == requests  # nothing fetched again

        # 3. a corrupted archive: the run fails naming the file and both sums, the file is removed
        host = lab.names[0]
        lab.exec(host, f"rm -f {ROOT}/.archives/ml-20m.zip {ROOT}/.archives/ml-20m.zip.sha256")
        served = www / "datasets" / "ml-20m" / "ml-20m.zip"
        data = bytearray(served.read_bytes())
        served.unlink()
        data[len(data) // 3] ^= 0xFF
        served.write_bytes(bytes(data))
        bad = hashlib.sha256(bytes(data)).hexdigest()
        p = _invoke(
            "--inventory",
            str(tmp_path / "inventory.yml"),
            "--catalogue",
            str(tmp_path / "catalogue.yml"),
            "--host",
            host,
            "--names",
            "ncf",
            env=env,
        )
        assert p.returncode == 1, p.stdout + p.stderr
        assert f"ml-20m.zip: sha256 mismatch: expected {ml['sha256']}, found {bad}" in p.stdout, p.stdout
        left = lab.exec(host, f"ls -a {ROOT}/.archives").stdout.split()
        assert not [f for f in left if f.startswith("ml-20m.zip")], left
        # the prepared data it had stays complete
        lab.exec(host, f"cd {ROOT}/.tools && PYTHONPATH=. python3 -m runner.datasets check ncf --data {ROOT}")

        # 4. shared storage (a folder of the controller mounted on both hosts): one host fetches and
        #    prepares, every host checks what it reads there
        served.unlink()
        os.link(tmp_path / "src" / "ml-20m" / "ml-20m.zip", served)
        shared = tmp_path / "shared"
        shared.mkdir()
        for name in lab.names:
            h = lab.hosts[name]
            subprocess.run(
                [
                    "nsenter",
                    "-t",
                    str(h.init_pid),
                    "--mount",
                    "sh",
                    "-c",
                    f"mkdir -p {h.dir}/mnt/root/srv/shared && mount --bind {shared} {h.dir}/mnt/root/srv/shared",
                ],
                check=True,
                timeout=30,
            )
        before = len(mirror.log)
        p = _invoke(*common, "--names", "ncf", "--storage", "shared", "--root", "/srv/shared/data", env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        clients = {c for c, _, _ in mirror.log[before:]}
        assert clients == {lab.hosts[lab.names[0]].address}, mirror.log[before:]
        assert _summary(p.stdout, lab.names[0])["changed"] > 0
        second = _summary(p.stdout, lab.names[1])
        assert second["state"] == "ok" and second["changed"] == 0 and second["failed"] == 0, p.stdout
        assert re.search(
            rf"\[{lab.names[1]}\] ok\s+(datasets : )?Check every prepared dataset on this host", p.stdout
        ), p.stdout
        assert json.loads((shared / "data" / "ml-20m" / "gpulab-dataset.json").read_text())["dataset"] == "ml-20m"

        # 5. archives kept on the controller (datasets_origins: controller:/folder) are copied to the host,
        #    verified and prepared there; a rerun changes nothing
        flat = tmp_path / "flat"
        flat.mkdir()
        for ds in ("coco", "resnet34-torchvision"):  # what ssd reads
            for a in entries[ds]["artifacts"]:
                os.link(tmp_path / "src" / ds / a["file"], flat / a["file"])
        inv2 = yaml.safe_load(lab.inventory.read_text())
        inv2["all"].setdefault("vars", {})["datasets_origins"] = {"nowhere": f"controller:{flat}"}
        (tmp_path / "inventory2.yml").write_text(yaml.safe_dump(inv2))
        host = lab.names[1]
        args = [
            "--inventory",
            str(tmp_path / "inventory2.yml"),
            "--catalogue",
            str(tmp_path / "catalogue.yml"),
            "--host",
            host,
            "--names",
            "ssd",
            "--root",
            "/var/lib/gpulab/data-ctl",
        ]
        before = len(mirror.log)
        for run in (1, 2):
            p = _invoke(*args, env=env)
            assert p.returncode == 0, p.stdout + p.stderr
            assert _summary(p.stdout, host)["state"] == ("changed" if run == 1 else "ok"), p.stdout
        assert len(mirror.log) == before
        doc = json.loads(lab.exec(host, "cat /var/lib/gpulab/data-ctl/coco/gpulab-dataset.json").stdout)
        assert doc["counts"]["val2017_images"] == entries["coco"]["expect"]["val2017_images"]
    finally:
        mirror.close()
