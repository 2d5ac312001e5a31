"""The README's walk through the lab's memory, run as written: its commands are read from the README
("The lab's memory") and run in a lab folder whose results/ holds a sweep and a validate output;
`invoke validate` (which needs GPU hosts: tests/integration) is stood in for by the validate.json it
writes, made by lab.validate itself, and the gated sweep (tests/integration/test_history_lab.py runs it on
an SSH test host) by what its health gate records, through lab.history.sweeps and lab.validate.health."""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from histdata import write_sweep, write_validation

ROOT = Path(__file__).resolve().parents[3]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## The lab's memory\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_walk_runs_as_written(tmp_path):
    from lab.history import memory as history

    lab = tmp_path / "lab"
    write_sweep(lab / "results", "sweep-1", {"r740-03": 3}, runs_per_host=3)
    t0 = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    write_validation(lab / "results" / "validate" / "t0", "r740-03", fail_gpu=2, when=t0.isoformat())
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"))
    env.pop("INVOKE_GPULAB_RESULTS", None)
    seen = []
    for line in readme_commands():
        argv = shlex.split(line)
        assert argv[0] == "invoke", line
        if argv[1] == "sweep" and "--dry-run" not in argv:  # its health gate: GPU 1 with a row remap pending
            seen.append(("gated sweep", gate_records(lab / "results" / "history.sqlite")))
            continue
        if argv[1] == "validate":  # what it leaves: a passing validate.json, recorded in the history
            later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)).isoformat()
            done = write_validation(lab / "results" / "validate" / "t1", "r740-03", when=later)
            seen.append(("validate", history.record([done], f"sqlite:///{lab / 'results' / 'history.sqlite'}")))
            continue
        p = subprocess.run(
            [sys.executable, "-m", "invoke", "-r", str(ROOT), *argv[1:]],
            cwd=lab,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, (line, p.stdout, p.stderr)
        seen.append((argv[1], p.stdout))
    out = dict(seen)
    assert [name for name, _ in seen] == [
        "history.import",
        "history",
        "quarantine.add",
        "quarantine",
        "sweep",
        "gated sweep",
        "history",
        "validate",
        "quarantine.release",
        "quarantine.release",
    ]
    assert seen[0][1].startswith("3 run(s) added, 0 already there; 1 validation(s) added")
    assert "h2d_bandwidth_gbs" in seen[1][1] and "r740-03" in seen[1][1]
    assert seen[5][1] == [
        "r740-03 GPU 1: quarantined (row remapping: row remap pending (1 uncorrectable): reset the "
        "GPU; action reset_gpu: A remap is pending: reset the GPU to apply it; a remapping failure "
        "is an RMA case)"
    ]
    assert "row remapping" in seen[6][1] and "FAIL" in seen[6][1]
    assert "r740-03 GPU 2" in out["quarantine"] and "row remap pending" in out["quarantine"]
    assert "quarantine: r740-03: GPU(s) 2 quarantined (GPU 2: row remap pending): runs use GPU(s) 0,1" in out["sweep"]
    assert out["validate"].startswith("history: 0 run(s) added, 0 already there; 1 validation(s) added")
    assert seen[8][1].startswith("r740-03 GPU 2: released (the validate of ")
    assert seen[9][1].strip() == "r740-03 GPU 1: released (GPU reset by hand; validate next)"


def gate_records(path: Path) -> list[str]:
    """What the gated sweep's health check records for r740-03 (three GPUs, GPU 1's row remap pending)."""
    from lab.history import sweeps
    from lab.validate import health

    gpus = [
        {
            "index": i,
            "uuid": f"GPU-5eed000{i}-0000-0000-0000-00000000000{i}",
            "name": "Tesla T4",
            "row_remap": {"correctable": 0, "uncorrectable": int(i == 1), "pending": i == 1, "failure": False},
        }
        for i in range(3)
    ]
    doc = {
        "kind": "gpulab-health",
        "schema": 1,
        "collected_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "boot_id": "b",
        "uptime_s": 10.0,
        "nvidia": None,
        "gpu_count": 3,
        "gpus": gpus,
        "xid": {"source": "dmesg", "error": None, "events": []},
    }
    memory = sweeps.open_for(f"sqlite:///{path}", "gated")
    try:
        return memory.record_health("r740-03", health.judge(doc, expect_gpus=True), doc)
    finally:
        memory.close()
