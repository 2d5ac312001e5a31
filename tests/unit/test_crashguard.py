"""tests/crashguard.py: a test that kills the interpreter is one failed test, and the session goes on.

Each case runs a small pytest session in a temporary folder with the guard loaded as tests/conftest.py
loads it, as a user would start it (``python -m pytest``)."""

import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = "from tests.crashguard import pytest_addoption, pytest_cmdline_main  # noqa: F401\n"
MIXED = """
import os, pytest
from pathlib import Path

def ran(name):
    with open(Path(__file__).parent / "ran.txt", "a") as f:
        f.write(name + "\\n")

def test_one():
    ran("one")

def test_abort():
    ran("abort")
    os.abort()

@pytest.mark.skip(reason="not here")
def test_skipped():
    ran("skipped")

def test_fails():
    ran("fails")
    assert False

@pytest.mark.parametrize("x", [1, 2])
def test_par(x):
    ran(f"par{x}")
"""
LAST = """
import os, signal
from test_a import ran

def test_before():
    ran("before")

def test_exits():
    ran("exits")
    os._exit(7)

def test_segv():
    ran("segv")
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def session(tmp: Path, files: dict, *args, start=subprocess.run, **kw):
    (tmp / "conftest.py").write_text(CONFTEST)
    for name, text in files.items():
        (tmp / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GPULAB_CRASHGUARD"))}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # quicker starts; the guard needs no plugin
    return start(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp,
        env=env,
        **(kw or {"capture_output": True, "text": True, "timeout": 120}),
    )


def test_an_abort_and_a_segfault_are_two_failed_tests_and_every_other_test_runs_once(tmp_path):
    r = session(tmp_path, {"test_a.py": MIXED, "test_b.py": LAST}, "-ra")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    # every test ran once, in order, the ones after each crash included
    assert (tmp_path / "ran.txt").read_text().split() == [
        "one",
        "abort",
        "fails",
        "par1",
        "par2",
        "before",
        "exits",
        "segv",
    ]
    assert "FAILED test_a.py::test_abort - killed by SIGABRT" in out
    assert "FAILED test_b.py::test_segv - killed by SIGSEGV" in out
    assert "FAILED test_b.py::test_exits - ended by exit code 7 before pytest's end" in out
    # an ordinary failure in a session that crashed later: its report is printed by the guard
    assert "FAILED test_a.py::test_fails (call)" in out and "assert False" in out
    closing = out.strip().splitlines()[-1]
    assert "4 failed, 4 passed, 1 skipped in " in closing, out
    assert (
        "test_a.py::test_abort killed by SIGABRT; test_b.py::test_exits ended by exit code 7 before pytest's end; "
        "test_b.py::test_segv killed by SIGSEGV"
    ) in closing
    assert "Fatal Python error: Aborted" in r.stderr  # the crashed test's own traceback is kept
    # -x: the crash is the first failure, nothing after it runs
    (tmp_path / "ran.txt").unlink()
    r = session(tmp_path, {}, "-x")
    assert r.returncode == 1 and (tmp_path / "ran.txt").read_text().split() == ["one", "abort"], r.stdout
    assert "1 failed, 1 passed in " in r.stdout.strip().splitlines()[-1]


def test_without_a_crash_the_exit_code_and_output_are_pytest_s_own(tmp_path):
    r = session(tmp_path, {"test_ok.py": "def test_ok():\n    pass\n"})
    assert r.returncode == 0 and "crash guard" not in r.stdout + r.stderr, r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("=") and "1 passed" in r.stdout
    r = session(tmp_path, {"test_ok.py": "def test_ok():\n    assert False\n"})
    assert r.returncode == 1 and "crash guard" not in r.stdout + r.stderr
    r = session(tmp_path, {"test_ok.py": "import pytest\n\ndef test_ok():\n    pytest.exit('stop here', 3)\n"})
    assert r.returncode == 3 and "crash guard" not in r.stdout + r.stderr  # pytest.exit is pytest's own end
    (tmp_path / "test_ok.py").unlink()
    r = session(tmp_path, {})
    assert r.returncode == 5 and "no tests ran" in r.stdout  # "no tests" is not hidden


def test_sigterm_to_pytest_stops_the_session_and_nothing_resumes(tmp_path):
    sleeper = (
        "import os, time\nfrom pathlib import Path\n\n"
        "def test_sleeps():\n    Path('pid').write_text(str(os.getpid()))\n    time.sleep(120)\n\n"
        "def test_after():\n    Path('after').write_text('ran')\n"
    )
    proc = session(
        tmp_path,
        {"test_s.py": sleeper},
        start=subprocess.Popen,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    while not (tmp_path / "pid").is_file() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline and proc.poll() is None, "the test never started"
        time.sleep(0.1)
    child = int((tmp_path / "pid").read_text())
    proc.send_signal(signal.SIGTERM)  # to the supervisor only: it passes the stop on
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert not (tmp_path / "after").exists() and "crash guard" not in out, out
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


SHARED = """
import os, time, pytest
from pathlib import Path

@pytest.fixture(scope="module")
def made(request):
    with open(Path(__file__).parent / "made.txt", "a") as f:
        f.write(f"{Path(__file__).stem}\\n")

@pytest.mark.parametrize("x", range(3))
def test_t(made, x, request):
    with open(Path(__file__).parent / "ran.txt", "a") as f:
        f.write(f"{Path(__file__).stem}-{x} {os.getpid()}\\n")
    time.sleep(0.2)
    CRASH
"""
LAB = """
import pytest
from pathlib import Path

@pytest.mark.MARK
def test_pinned(request):
    Path("MARK-slot").write_text(str(request.config.pluginmanager.get_plugin("gpulab-crashguard-sharer").slot))
"""


def test_two_processes_share_the_files_and_a_crash_is_still_one_failed_test(tmp_path):
    """--processes 2: every test runs once, a file's tests in one process (its module fixture made once), the lab's
    file and the one marked checkout in process 1; an abort is one failed test; one closing line and one JUnit XML
    for the whole session."""
    files = {
        f"test_s{i}.py": SHARED.replace("CRASH", "os.abort() if x == 1 else None" if i == 2 else "")
        for i in range(1, 6)
    }
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    lab: the test lab\n    checkout: watches it\n")
    pinned = {"test_lab.py": LAB.replace("MARK", "lab"), "test_watch.py": LAB.replace("MARK", "checkout")}
    r = session(tmp_path, {**files, **pinned}, "--processes", "2", "--junitxml", "out.xml")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    ran = (tmp_path / "ran.txt").read_text().split("\n")[:-1]
    assert sorted(line.split()[0] for line in ran) == sorted(f"test_s{i}-{x}" for i in range(1, 6) for x in range(3))
    pids = {}
    for line in ran:
        name, pid = line.split()
        pids.setdefault(name.split("-")[0], set()).add(pid)
    assert all(len(p) == 1 for name, p in pids.items() if name != "test_s2"), pids  # s2 resumes in a new process
    made = (tmp_path / "made.txt").read_text().split()
    assert sorted(made) == sorted([f"test_s{i}" for i in range(1, 6)] + ["test_s2"]), made
    assert (tmp_path / "lab-slot").read_text() == (tmp_path / "checkout-slot").read_text() == "1"
    assert "FAILED test_s2.py::test_t[1] - killed by SIGABRT" in out
    closing = out.strip().splitlines()[-1]
    assert "1 failed, 16 passed in " in closing and "(2 processes)" in closing, out
    assert all(line.startswith(("[1] ", "[2] ")) for line in out.splitlines()[:5]), out
    suite = ET.parse(tmp_path / "out.xml").getroot().find("testsuite")
    # the children that ended wrote theirs (a crashed one writes none), merged into one file and its counts
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) >= 1 and not list(tmp_path.glob("out.xml.*")), suite.attrib
    assert {c.get("classname") for c in cases} <= {f"test_s{i}" for i in range(1, 6)} | {"test_lab", "test_watch"}
    r = session(tmp_path, {f"test_s{i}.py": "def test_ok():\n    pass\n" for i in range(1, 6)}, "--processes", "2")
    assert r.returncode == 0 and "7 passed in " in r.stdout.strip().splitlines()[-1], r.stdout
    r = session(tmp_path, {}, "--processes", "0")
    assert r.returncode == 4 and "'0' is not a number of processes from 1 to 16" in r.stderr, r.stderr
