"""benchmarks/stack_readback.py, the one-shot read-back of a real NVIDIA stack, in its parts that
run without one: bad input, the one line without a driver, the records written when a step fails,
the process-group time-out, the version reads, the wheel unpacking, the verdict."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "stack_readback.py"
PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Mon Sep 29 23:04:19 UTC 2025\n"
)


@pytest.fixture(scope="module")
def rb():
    spec = importlib.util.spec_from_file_location("stack_readback", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, words in (
        (["--wheels", str(tmp_path / "none"), "--out", str(tmp_path / "o")], "no such folder"),
        (["--wheels", str(tmp_path), "--out", str(tmp_path / "o"), "--real", "cudnn=nine"], "use KEY=VERSION"),
        (["--wheels", str(tmp_path), "--out", str(tmp_path / "o"), "--budget", "5"], "60 to 3600"),
    ):
        res = run(*args)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
        assert "Traceback" not in res.stderr and not (tmp_path / "o").exists()


@pytest.mark.skipif(
    Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None,
    reason="this machine has an NVIDIA driver",
)
def test_without_a_driver_one_line_and_the_records(tmp_path):
    out = tmp_path / "out"
    res = run("--wheels", str(tmp_path), "--out", str(out))
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        "stack_readback: driver: no NVIDIA driver on this machine (no /proc/driver/nvidia/version, nvidia-smi "
        f"and NVML do not answer): nothing to read back (records in {out})"
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is False and summary["step"] == "driver"
    evidence = (out / "evidence.txt").read_text()
    assert "$ cat /proc/driver/nvidia/version   [exit 1]" in evidence and "$ uname -r   [exit 0]" in evidence


def test_a_failing_step_still_leaves_evidence_and_summary(tmp_path):
    """A driver (stand-in version file) but a wheel folder without the controller's wheels."""
    proc = tmp_path / "version"
    proc.write_text(PROC_580)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    out = tmp_path / "out"
    res = run("--wheels", str(wheels), "--out", str(out), "--proc", str(proc), "--real", "nccl=2.28.3")
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("stack_readback: controller packages: ") and "Traceback" not in res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["step"] == "controller packages" and summary["ok"] is False
    assert summary["read_independently"]["driver"] == "580.159.04"
    assert summary["used"]["driver"] == "580.159.04" and summary["used"]["nccl"] == "2.28.3"
    assert (out / "evidence.txt").stat().st_size > 0


def test_a_command_past_its_time_is_killed_with_its_children(rb, tmp_path):
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    res = rb.sh(f"echo $$ > {pidfile}; sleep 60 & sleep 60", timeout=1)
    assert res.timed_out and res.returncode is None and time.monotonic() - t0 < 15
    pgid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the backgrounded child outlived the time-out")
    # and the run's budget caps every command
    clock = rb.CLOCK
    try:
        rb.CLOCK = rb.Clock(16)  # 1 s left after the 15 s reserve
        t0 = time.monotonic()
        assert rb.sh("sleep 30", timeout=600).timed_out and time.monotonic() - t0 < 10
    finally:
        rb.CLOCK = clock


def test_versions_read_from_headers_and_the_driver_file(rb, tmp_path):
    cudnn = tmp_path / "cudnn_version.h"
    cudnn.write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 14\n#define CUDNN_PATCHLEVEL 0\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n"
    )
    nccl = tmp_path / "nccl.h"
    nccl.write_text('#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 3\n#define NCCL_SUFFIX ""\n')
    assert (
        rb._header_version([tmp_path / "absent.h", cudnn], ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"))
        == "9.14.0"
    )
    assert rb._header_version([nccl], ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")) == "2.28.3"
    assert rb._header_version([nccl], ("CUDNN_MAJOR",)) is None
    proc = tmp_path / "version"
    proc.write_text(PROC_580)
    assert rb.driver_version(proc, sys.executable) == "580.159.04"
    assert rb.wrong_version({"nccl": "2.28.3"}) == ("nccl", "2.27.7")
    assert rb.wrong_version({"nccl": "2.27.5"}) == ("nccl", "2.26.2")


def test_wheels_unpacked_without_pip_give_working_scripts(rb, tmp_path):
    whl = tmp_path / "wheels" / "hello_pkg-1.0-py3-none-any.whl"
    whl.parent.mkdir()
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("hello_pkg/__init__.py", "def main():\n    print('hello from', __name__)\n    return 3\n")
        z.writestr("hello_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hello-pkg\nVersion: 1.0\n")
        z.writestr("hello_pkg-1.0.dist-info/entry_points.txt", "[console_scripts]\nhello-cli = hello_pkg:main\n")
    site = tmp_path / "site"
    rb._install_unpacked(whl.parent, site)
    res = subprocess.run(
        [str(site / "bin" / "hello-cli")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert (res.returncode, res.stdout) == (3, "hello from hello_pkg\n")
    with pytest.raises(RuntimeError, match="no wheels in"):
        rb._install_unpacked(tmp_path / "site", tmp_path / "site2")


def _audit(drift, state="ok"):
    rc = 0 if not drift and state == "ok" else 1
    doc = {
        "ok": rc == 0,
        "hosts": {
            "localhost": {
                "stack": "real",
                "state": state,
                "error": None,
                "installed": {},
                "drift": [{"component": c, "expected": e, "found": f} for c, e, f in drift],
            }
        },
    }
    return {"rc": rc, "stdout": json.dumps(doc)}


def _validate(failing=()):
    comps = ("driver", "cuda", "cudnn", "nccl", "torch")
    checks = [{"check": "GPU present", "verdict": "PASS", "measured": 1, "expected": "auto GPU(s)"}]
    checks += [
        {"check": f"stack {c}", "verdict": "FAIL" if c in failing else "PASS", "measured": "x", "expected": "y"}
        for c in comps
    ]
    return {"rc": 1 if failing else 0, "stdout": json.dumps({"hosts": {"localhost": {"checks": checks}}})}


def test_the_verdict(rb):
    wrong = ("nccl", "2.27.7")
    one = [("nccl", "2.27.7", "2.28.3")]
    good = rb.judge(
        {"real": _audit([]), "wrong": _audit(one)}, {"real": _validate(), "wrong": _validate(["nccl"])}, wrong
    )
    assert good["ok"] and good["audit_drift"]["wrong"] == one
    assert good["validate_stack_checks"]["wrong"]["stack nccl"][0] == "FAIL"
    # a second drift line, drift under `real`, a host not audited, output that is not JSON: not held
    for audits, validates in (
        (
            {"real": _audit([]), "wrong": _audit(one + [("driver", "580.159.04", "580.95.05")])},
            {"real": _validate(), "wrong": _validate(["nccl"])},
        ),
        (
            {"real": _audit([("cudnn", "9.14.0", "9.19.0")]), "wrong": _audit(one)},
            {"real": _validate(), "wrong": _validate(["nccl"])},
        ),
        (
            {"real": _audit([], state="unreachable"), "wrong": _audit(one)},
            {"real": _validate(), "wrong": _validate(["nccl"])},
        ),
        ({"real": _audit([]), "wrong": _audit(one)}, {"real": _validate(["cuda"]), "wrong": _validate(["nccl"])}),
        (
            {"real": _audit([]), "wrong": _audit(one)},
            {"real": {"rc": 1, "stdout": "Traceback"}, "wrong": _validate(["nccl"])},
        ),
    ):
        assert not rb.judge(audits, validates, wrong)["ok"]
