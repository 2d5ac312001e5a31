"""Every task fed a spread of malformed values and files, through the command line a user types.

The cases are generated: for each kind of option (a count, a duration, a name,
a path to read, a folder to write, a host selector) a list of bad values, and
for each task the options of each kind. Every case must end with exit code 2,
exactly one line on stderr starting 'gpulab: ', no traceback, and nothing
written: not in the results or artifacts folders, not in HOME, not in the
checkout (Ansible's own ~/.ansible, which every Ansible command makes, aside).
The example inventory's hosts (inventory/hosts.yml) are TEST-NET
addresses: a value that slipped through would try them and fail otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit import checkout as checkouts

# git status --ignored of the whole checkout: under --processes never beside the test lab's tests, which write
# artifacts/ and results/ there (tests/sharing.py)
pytestmark = pytest.mark.checkout

ROOT = Path(__file__).resolve().parents[2]

# bad values by kind; FILES are made by the fixture (a FIFO, a binary file, a folder, ...)
COUNTS = ["abc", "-5", "0", "1e309", "nan", "99999999999", " "]
DURATIONS = ["0", "-5", "abc", "nan", "inf", "1e309"]
NAMES = ["../../outside", "a/b", "$(touch pwned)", "x" * 300, ".", "ü;rm", "name\n"]
READ_FILES = ["{missing}", "{fifo}", "{binary}", "{folder}", "/dev/zero", "{devzero_link}"]
OUT_FOLDERS = ["{file}", "{file}/below"]
SELECTORS = [
    ("--host", "nosuch"),
    ("--host", ","),
    ("--device", "a100"),
    ("--limit", "~(["),
    ("--limit", "r740-01,nosuch"),
    ("--limit", "nothing*"),
]


def cases():
    out = []

    def add(task, *args):
        out.append((task, tuple(args)))

    for v in COUNTS:
        add("sweep", "--device", "v100", "--seeds", v)
        add("sweep", "--device", "v100", "--nodes", v)
        add("demo", "--seeds", v)
    for v in ["0", "abc", "-1", "99999", "1,abc"]:
        add("sweep", "--device", "v100", "--gpus", v)
    for v in DURATIONS:
        add("sweep", "--device", "v100", "--timeout", v, "--dry-run")
    for v in NAMES:
        add("sweep", "--device", "v100", "--name", v)
        add("sweep", "--device", "v100", "--workloads", v)
        add("provision", "--host", "r740-01", "--stack", v)
        add("datasets", "--host", "r740-01", "--names", v)
    for v in ["nosuch", ",", "ncf,nosuch"]:
        add("sweep", "--device", "v100", "--workloads", v, "--seeds", "1")
        add("demo", "--workloads", v)
    for opt, v in SELECTORS:
        for task in ("sweep", "provision", "audit", "validate", "datasets"):
            add(task, opt, v, *(["--names", "ncf"] if task == "datasets" else []))
    for f in READ_FILES:
        add("sweep", "--inventory", f, "--dry-run")
        add("audit", "--inventory", f)
        add("validate", "--host", "r740-01", "--references", f)
        add("datasets", "--host", "r740-01", "--names", "ncf", "--catalogue", f)
        add("collect", f)
        if f != "{binary}":  # a readable file that holds no MLPerf log is listed as skipped in the report
            add("report", f)
    for f in OUT_FOLDERS:
        add("report", "{sweep}", "--out", f)
        add("validate", "--host", "r740-01", "--out", f)
    for v in ["relative/path", "/a/../b", "~user/x", ""]:
        add("datasets", "--host", "r740-01", "--names", "ncf", "--root", v)
    add("datasets", "--host", "r740-01", "--names", "ncf", "--storage", "cloud")
    add("validate", "--host", "r740-01", "--level", "extreme")
    add("report", ",")
    add("report", "{sweep}", "--format", "pdf")
    add("report", "{sweep}", "--compare", "{missing}")
    add("sweep", "--device", "v100", "--mode", "fast")
    add("sweep", "--device", "v100", "--scale", "huge")
    add("sweep", "--stak")
    add(
        "sweep",
        "--device",
        "v100",
        "--seeds",
        "1000",
        "--gpus",
        "1,2,3",
        "--workloads",
        "ncf,gnmt,transformer,resnet50",
    )
    return out


CASES = cases()


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    files = {
        "missing": base / "missing.yml",
        "fifo": base / "fifo.yml",
        "binary": base / "binary.yml",
        "folder": base / "folder",
        "file": base / "a-file",
        "devzero_link": base / "zero.yml",
        "sweep": base / "sweep",
    }
    os.mkfifo(files["fifo"])
    files["binary"].write_bytes(b"\x00\xff\xfe\x80" * 64)
    files["folder"].mkdir()
    files["file"].write_text("x\n")
    files["devzero_link"].symlink_to("/dev/zero")
    files["sweep"].mkdir()
    (files["sweep"] / "run.log").write_text(":::MLLOG {}\n")
    home = base / "home"
    home.mkdir()
    return {
        "files": {k: str(v) for k, v in files.items()},
        "base": base,
        "home": home,
        "results": base / "results",
        "artifacts": base / "artifacts",
    }


@pytest.fixture(scope="module")
def checkout():
    before = checkouts.state()
    yield
    new = sorted(checkouts.state() - before)
    assert not new, f"written into the checkout: {new}"


@pytest.mark.parametrize("task, args", CASES, ids=[f"{t} {' '.join(a)[:60]}" for t, a in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(place, checkout, task, args):
    argv = [a.format(**place["files"]) for a in args]
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(place["home"]),
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
        INVOKE_GPULAB_RESULTS=str(place["results"]),
        INVOKE_GPULAB_ARTIFACTS=str(place["artifacts"]),
    )
    home_before = sorted({p.name for p in place["home"].iterdir()} | {".ansible"})
    p = subprocess.run(
        [sys.executable, "-m", "invoke", task, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    assert p.returncode == 2, f"exit {p.returncode}: {p.stdout[-1500:]}{p.stderr[-1500:]}"
    assert len(lines) == 1 and lines[0].startswith("gpulab: "), p.stderr
    assert not place["results"].exists() and not place["artifacts"].exists()
    assert sorted({p.name for p in place["home"].iterdir()} | {".ansible"}) == home_before
