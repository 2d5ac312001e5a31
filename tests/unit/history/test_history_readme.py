"""The README's walk through the lab's memory, run as written: its commands are read from the README
("The lab's memory") and run in a lab folder whose results/ holds a sweep and a validate output;
`invoke validate` (which needs GPU hosts: tests/integration) is stood in for by the validate.json it
writes, made by lab.validate itself."""

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
    from lab import history

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
        if argv[1] == "validate":   # what it leaves: a passing validate.json, recorded in the history
            later = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)).isoformat()
            done = write_validation(lab / "results" / "validate" / "t1", "r740-03", when=later)
            seen.append(("validate", history.record([done], f"sqlite:///{lab / 'results' / 'history.sqlite'}")))
            continue
        p = subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *argv[1:]], cwd=lab, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (line, p.stdout, p.stderr)
        seen.append((argv[1], p.stdout))
    out = dict(seen)
    assert [name for name, _ in seen] == ["history.import", "history", "quarantine.add", "quarantine", "sweep",
                                          "validate", "quarantine.release"]
    assert seen[0][1].startswith("3 run(s) added, 0 already there; 1 validation(s) added")
    assert "h2d_bandwidth_gbs" in out["history"] and "r740-03" in out["history"]
    assert "r740-03 GPU 2" in out["quarantine"] and "row remap pending" in out["quarantine"]
    assert "quarantine: r740-03: GPU(s) 2 quarantined (GPU 2: row remap pending): runs use GPU(s) 0,1" \
        in out["sweep"]
    assert out["validate"].startswith("history: 0 run(s) added, 0 already there; 1 validation(s) added")
    assert out["quarantine.release"].startswith("r740-03 GPU 2: released (the validate of ")
