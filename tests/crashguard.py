"""One crash is one failed test: pytest's session runs in a child process, watched by the parent.

A test that runs training steps, compiled code or native libraries in-process
can kill the interpreter (a segmentation fault or abort in a C++ kernel);
without this plugin that ends the whole run at that test. With it, the
``pytest`` process the user started (the parent) starts the real session as a
child ``python -m pytest`` with the same arguments and waits. The child writes
each test's start and finish and its session's end to a state file (JSON
lines). When the child dies by a signal, or ends without reaching pytest's
own end (``os._exit`` in a test; ``pytest.exit`` and Ctrl-C do reach it), the
parent records the test in progress as failed (its node id and the signal or
exit code), starts a new child with every finished test and the
crashed one deselected, and so on until a child ends by itself; at the end it
prints the failures that a crashed child never reported, a ``FAILED`` line per
crashed test and one combined line (``N failed, N passed, ...``), and exits 1
(or the last child's own code when that is 2 or more). A SIGTERM, SIGHUP or
Ctrl-C to the parent is passed on and ends the run: nothing resumes. When no
child crashes the parent exits with the child's own code (5 for "no tests"
included) and adds nothing to the output. Cost: one more interpreter start
and pytest configuration (about a second), none per test.

Loaded by tests/conftest.py (its hooks are imported there). Off in a child,
with ``--collect-only``, ``--help``, ``--version``, ``--fixtures`` and
``--markers``, under pytest-xdist, and with ``GPULAB_CRASHGUARD=off``. The
variable naming the state file is removed from the child's environment at
start, so a pytest that a test starts supervises its own session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

STATE = "GPULAB_CRASHGUARD_STATE"     # set for a child: where it writes its progress
SKIP = "GPULAB_CRASHGUARD_DESELECT"   # set for a resumed child: node ids (JSON lines) not to run again
SWITCH = "GPULAB_CRASHGUARD"          # "off": no supervision
_ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error")


def _unsupervised(config) -> bool:
    opt = config.option
    return (os.environ.get(SWITCH, "").lower() in ("off", "0", "no")
            or getattr(opt, "collectonly", False) or getattr(opt, "help", False)
            or getattr(opt, "version", False) or getattr(opt, "showfixtures", False)
            or getattr(opt, "markers", False) or getattr(opt, "fixtures_per_test", False)
            or bool(getattr(opt, "numprocesses", None)) or "PYTEST_XDIST_WORKER" in os.environ)


def signal_name(returncode: int) -> str:
    """``-6`` -> ``SIGABRT``; a number when the signal has no name."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def read_state(path: Path) -> tuple[dict[str, list[str]], str | None, list[dict], bool]:
    """(finished node id -> its outcome categories, the node id started but not finished or None,
    the failure reports ``{"node", "when", "text"}`` of the finished tests, whether the session reached
    its end: pytest's own exit, for any reason, pytest.exit and Ctrl-C included)."""
    done: dict[str, list[str]] = {}
    running = None
    failures: list[dict] = []
    ended = False
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a line cut short by the crash
            continue
        if rec.get("start"):
            running = rec["start"]
        elif "done" in rec:
            done[rec["done"]] = list(rec.get("outcomes", []))
            failures += [{"node": rec["done"], **f} for f in rec.get("failures", [])]
            if running == rec["done"]:
                running = None
        elif "end" in rec:
            ended = True
    return done, running, failures, ended


def _count(done: dict[str, list[str]], crashed: list[tuple[str, str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcomes in done.values():
        for cat in outcomes:
            counts[cat] = counts.get(cat, 0) + 1
    counts["failed"] = counts.get("failed", 0) + len(crashed)
    return counts


def summary_line(counts: dict[str, int], seconds: float, crashed: list[tuple[str, str]]) -> str:
    """pytest's closing line over all children, with the crashes named."""
    parts = [f"{counts[k]} {'errors' if k == 'error' and counts[k] != 1 else k}"
             for k in _ORDER if counts.get(k)]
    parts += [f"{v} {k}" for k, v in sorted(counts.items()) if k not in _ORDER and v]
    killed = "; ".join(f"{node} {how}" for node, how in crashed)
    return f"{', '.join(parts) or 'no tests ran'} in {seconds:.2f}s (crash guard: {killed})"


def _run_child(args: list[str], cwd: str, state: Path, skip: Path | None) -> tuple[int, bool]:
    """(the child's return code, whether this process was told to stop meanwhile: Ctrl-C, SIGTERM, SIGHUP)."""
    # unbuffered: what a child printed before it died reaches the log
    env = {**os.environ, STATE: str(state), "PYTHONUNBUFFERED": "1"}
    if skip is not None:
        env[SKIP] = str(skip)
    child = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env)
    told = []

    def forward(signum, frame):  # a stop meant for the session: the child gets it, nothing resumes after
        told.append(signum)
        child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        while True:
            try:
                return child.wait(), bool(told)
            except KeyboardInterrupt:  # Ctrl-C reaches the child too (same process group): wait for its report
                told.append(signal.SIGINT)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def supervise(args: list[str], cwd: str, maxfail: int = 0) -> int:
    """Run the session in children until one ends by itself; the exit code as described above."""
    t0 = time.time()
    crashed: list[tuple[str, str]] = []
    done: dict[str, list[str]] = {}
    lost: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpulab-crashguard-") as tmp:
        skip_file = None
        for attempt in range(1, 100_000):
            state = Path(tmp, f"state-{attempt}.jsonl")
            rc, told = _run_child(args, cwd, state, skip_file)
            finished, running, failures, ended = read_state(state)
            done.update(finished)
            crash = not told and (rc < 0 or not ended)  # a signal, or an exit that skipped pytest's end
            if crash:  # this child never printed its failures: they are printed at the end
                lost += failures
            else:
                if not crashed:
                    return rc if rc >= 0 else 128 - rc  # no crash: the child's own code and output
                break
            how = f"killed by {signal_name(rc)}" if rc < 0 else f"ended by exit code {rc} before pytest's end"
            if running is None:  # outside any test (collection, session teardown): nothing to resume past
                crashed.append(("(outside any test)", how))
                break
            crashed.append((running, how))
            print(f"\ncrash guard: the test process running {running} was {how}; it counts as failed, "
                  f"the rest of the session goes on in a new process", file=sys.stderr, flush=True)
            nfail = sum(cat in ("failed", "error") for outs in done.values() for cat in outs) + len(crashed)
            if maxfail and nfail >= maxfail:
                break
            skip_file = Path(tmp, "deselect.jsonl")
            skip_file.write_text("".join(json.dumps(n) + "\n" for n in [*done, *(c for c, _ in crashed)]),
                                 encoding="utf-8")
    if lost:
        print(f"{'=' * 10} failures in a session that crashed later (its own summary never came) {'=' * 10}")
    for f in lost:
        print(f"{'_' * 10} {f['node']} ({f['when']}) {'_' * 10}\n{f['text']}", flush=True)
    for f in lost:
        print(f"FAILED {f['node']} ({f['when']})", flush=True)
    for node, how in crashed:
        print(f"FAILED {node} - {how} (crash guard: the session went on without it)", flush=True)
    counts = _count(done, crashed)
    line = summary_line(counts, time.time() - t0, crashed)
    print(f"{'=' * 10} {line} {'=' * 10}", flush=True)
    if told:
        return 2
    return rc if not crash and rc not in (0, 1, 5) else 1  # 2 and up: what stopped the last child


# --- the child's side -------------------------------------------------------------------------

class Child:
    """The child session's plugin: each test's start and finish (with its outcome categories) to
    the state file, and the deselection of the tests a resumed session must not run again."""

    def __init__(self, config, state: Path, skip: set[str]):
        self.config, self.state, self.skip = config, state, skip
        self.outcomes: dict[str, list[str]] = {}
        self.failures: dict[str, list[dict]] = {}

    def _write(self, rec: dict) -> None:
        with open(self.state, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def pytest_collection_modifyitems(self, config, items):
        gone = [i for i in items if i.nodeid in self.skip]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = [i for i in items if i.nodeid not in self.skip]

    def pytest_runtest_logstart(self, nodeid):
        self._write({"start": nodeid})

    def pytest_runtest_logreport(self, report):
        cat = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if cat:
            self.outcomes.setdefault(report.nodeid, []).append(cat)
        if report.failed:
            self.failures.setdefault(report.nodeid, []).append({"when": report.when, "text": report.longreprtext})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self._write({"end": int(exitstatus)})

    def pytest_runtest_logfinish(self, nodeid):
        self._write({"done": nodeid, "outcomes": self.outcomes.pop(nodeid, []),
                     "failures": self.failures.pop(nodeid, [])})


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The parent: supervise (returns the exit code, pytest runs nothing itself); the child: note its
    progress (returns None, the session runs here)."""
    if os.environ.get(STATE):
        state = Path(os.environ.pop(STATE))  # popped: a pytest that a test starts supervises its own session
        skip = os.environ.pop(SKIP, None)
        nodes = {json.loads(x) for x in Path(skip).read_text(encoding="utf-8").splitlines()} if skip else set()
        config.pluginmanager.register(Child(config, state, nodes), "gpulab-crashguard-child")
        return None
    if _unsupervised(config):
        return None
    return supervise(list(config.invocation_params.args), str(config.invocation_params.dir),
                     maxfail=getattr(config.option, "maxfail", 0) or 0)
