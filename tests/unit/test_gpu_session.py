"""benchmarks/gpu_session.sh, the GPU work still to be recorded, names only files and options that exist.

The script runs on the GPU machine only (no GPU here); its --dry-run prints each
part's commands. Each command's options are checked against the --help of the
program it calls, so that a renamed option or a moved script fails here and not
in a device call that costs GPU time.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
PARTS = ("gpu-tests", "maxpool", "gpu-tests-long", "throughput", "ttfs", "ttfs-shipped", "validate", "nvbandwidth")


def dry_run(*parts: str, env_out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", *parts], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "OUT": str(env_out),
                                           "GPULAB_SESSION_WORK": str(env_out / "work")})


def commands(tmp_path) -> dict[str, list[str]]:
    r = dry_run(*PARTS, env_out=tmp_path / "out")
    assert r.returncode == 0, r.stderr
    found = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^([a-z-]+) \(\d+s\): (.*)$", line)
        if m:
            found[m.group(1)] = shlex.split(m.group(2))
    return found


def help_of(argv: list[str]) -> str:
    r = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, (argv, r.stderr[-2000:])
    return r.stdout


def options(argv: list[str]) -> set[str]:
    return {a.split("=")[0] for a in argv if a.startswith("--")}


def test_every_part_is_listed_and_nothing_is_written(tmp_path):
    found = commands(tmp_path)
    assert set(found) == {"gpu-tests", "maxpool", "gpu-tests-long", "throughput", "ttfs-cold", "ttfs-warm",
                          "shipped-pilot", "shipped-second", "validate", "nvbandwidth-build", "nvbandwidth-run", "validate-burnin"}
    assert not (tmp_path / "out").exists() and not (tmp_path / "out" / "work").exists()


def test_an_unknown_part_is_refused_before_anything_runs(tmp_path):
    r = dry_run("gpu-tests", "nosuch", env_out=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith("gpu_session: no part named nosuch")


@pytest.mark.slow
def test_the_options_each_command_uses_exist(tmp_path):
    found = commands(tmp_path)
    python = [c[c.index("python3"):] for c in found.values() if "python3" in c]
    assert len(python) == 10
    for argv in python:
        argv = argv[1:]
        if argv[:2] == ["-m", "pytest"]:
            marker = argv[argv.index("-m", 1) + 1]
            assert re.fullmatch(r"(not )?long", marker)
            assert (ROOT / argv[2]).is_dir()
            continue
        if argv[:2] == ["-m", "runner"]:
            text = help_of(["-m", "runner", "run"])
        elif argv[:2] == ["-m", "invoke"]:
            text = help_of(["-m", "invoke", argv[2]])
            levels = argv[argv.index("--level") + 1]
            assert levels in ("standard", "burn-in")
        else:
            assert (ROOT / argv[0]).is_file(), argv[0]
            text = help_of([argv[0]])
        missing = {o for o in options(argv) if o not in text}
        assert not missing, (argv, missing)
