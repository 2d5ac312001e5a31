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

``--processes N`` (N > 1): N children at once, each watched as above, share the
session's test files (tests/sharing.py: whole files, the test lab's in process
1); their output lines come through the parent, each with ``[n] ``, each with
OMP_NUM_THREADS of the cores split between them, and the parent always ends with
one closing line over all of them (``... (N processes)``) and one JUnit XML.

Loaded by tests/conftest.py (its hooks are imported there). Off in a child,
with ``--collect-only``, ``--help``, ``--version``, ``--fixtures`` and
``--markers``, under pytest-xdist, and with ``GPULAB_CRASHGUARD=off``. The
variable naming the state file is removed from the child's environment at
start, so a pytest that a test starts supervises its own session.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests import sharing

STATE = "GPULAB_CRASHGUARD_STATE"  # set for a child: where it writes its progress
SKIP = "GPULAB_CRASHGUARD_DESELECT"  # set for a resumed child: node ids (JSON lines) not to run again
SWITCH = "GPULAB_CRASHGUARD"  # "off": no supervision
_ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error")


def _unsupervised(config) -> bool:
    opt = config.option
    return (
        os.environ.get(SWITCH, "").lower() in ("off", "0", "no")
        or getattr(opt, "collectonly", False)
        or getattr(opt, "help", False)
        or getattr(opt, "version", False)
        or getattr(opt, "showfixtures", False)
        or getattr(opt, "markers", False)
        or getattr(opt, "fixtures_per_test", False)
        or bool(getattr(opt, "numprocesses", None))
        or "PYTEST_XDIST_WORKER" in os.environ
    )


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


def summary_line(counts: dict[str, int], seconds: float, crashed: list[tuple[str, str]], processes: int = 1) -> str:
    """pytest's closing line over all children, with the crashes and the number of processes at once named."""
    parts = [f"{counts[k]} {'errors' if k == 'error' and counts[k] != 1 else k}" for k in _ORDER if counts.get(k)]
    parts += [f"{v} {k}" for k, v in sorted(counts.items()) if k not in _ORDER and v]
    notes = [f"{processes} processes"] if processes > 1 else []
    if crashed:
        notes.append("crash guard: " + "; ".join(f"{node} {how}" for node, how in crashed))
    return f"{', '.join(parts) or 'no tests ran'} in {seconds:.2f}s" + "".join(f" ({n})" for n in notes)


_live: list[subprocess.Popen] = []  # the children running now
_told: list[int] = []  # the stops this process was told (Ctrl-C, SIGTERM, SIGHUP)
_print = threading.Lock()


def _forward(signum, frame):  # a stop meant for the session: the children get it, nothing resumes after
    _told.append(signum)
    for child in _live.copy():  # a copy: the children's threads change the list
        child.send_signal(signum)


def _run_child(args: list[str], cwd: str, state: Path, skip: Path | None, env_extra: dict, prefix: str | None) -> int:
    """The child's return code. ``prefix``: the child's output goes through this process, each line
    with it (a shared session's processes); None: the child writes to this process's own stdout and stderr."""
    # unbuffered: what a child printed before it died reaches the log
    env = {**os.environ, **env_extra, STATE: str(state), "PYTHONUNBUFFERED": "1"}
    if skip is not None:
        env[SKIP] = str(skip)
    pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if prefix is not None else {}
    child = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, **pipe)
    _live.append(child)
    try:
        if prefix is not None:
            for line in child.stdout:
                with _print:
                    sys.stdout.buffer.write(prefix.encode() + line)
                    sys.stdout.buffer.flush()
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:  # Ctrl-C reaches the child too (same process group): wait for its report
                _told.append(signal.SIGINT)
    finally:
        _live.remove(child)


class _Slot:
    """One process number of the session: its children one after another (a new one after each crash)."""

    def __init__(
        self,
        n: int,
        args: list[str],
        cwd: str,
        tmp: str,
        maxfail: int,
        env: dict,
        shared: bool,
        xml: Path | None = None,
    ):
        self.n, self.args, self.cwd, self.tmp, self.maxfail, self.env = n, args, cwd, tmp, maxfail, env
        self.xml = xml  # a shared session's --junitxml: each child writes its own part, merged at the end
        self.prefix = f"[{n}] " if shared else None
        self.crashed: list[tuple[str, str]] = []
        self.done: dict[str, list[str]] = {}
        self.lost: list[dict] = []
        self.xml_parts: list[Path] = []
        self.rc, self.crash = 0, False

    def run(self) -> None:
        skip_file = None
        for attempt in range(1, 100_000):
            state = Path(self.tmp, f"state-{self.n}-{attempt}.jsonl")
            env = dict(self.env)
            if self.xml is not None:
                self.xml_parts.append(Path(f"{self.xml}.{self.n}.{attempt}"))
                env[sharing.XML] = str(self.xml_parts[-1])
            self.rc = _run_child(self.args, self.cwd, state, skip_file, env, self.prefix)
            finished, running, failures, ended = read_state(state)
            self.done.update(finished)
            # a signal, or an exit that skipped pytest's end
            self.crash = not _told and (self.rc < 0 or not ended)
            if not self.crash:
                return
            self.lost += failures  # this child never printed its failures: they are printed at the end
            how = (
                f"killed by {signal_name(self.rc)}"
                if self.rc < 0
                else f"ended by exit code {self.rc} before pytest's end"
            )
            if running is None:  # outside any test (collection, session teardown): nothing to resume past
                self.crashed.append(("(outside any test)", how))
                return
            self.crashed.append((running, how))
            with _print:
                print(
                    f"\n{self.prefix or ''}crash guard: the test process running {running} was {how}; it counts "
                    "as failed, the rest of the session goes on in a new process",
                    file=sys.stderr,
                    flush=True,
                )
            nfail = sum(cat in ("failed", "error") for outs in self.done.values() for cat in outs) + len(self.crashed)
            if self.maxfail and nfail >= self.maxfail:
                return
            skip_file = Path(self.tmp, f"deselect-{self.n}.jsonl")
            skip_file.write_text(
                "".join(json.dumps(n) + "\n" for n in [*self.done, *(c for c, _ in self.crashed)]), encoding="utf-8"
            )


def supervise(args: list[str], cwd: str, maxfail: int = 0, processes: int = 1, xmlpath: str | None = None) -> int:
    """Run the session in children until each ends by itself; the exit code as described above.
    ``processes`` > 1: that many children at once share the session's files (tests/sharing.py)."""
    t0 = time.time()
    shared = processes > 1
    old = {s: signal.signal(s, _forward) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with tempfile.TemporaryDirectory(prefix="gpulab-crashguard-") as tmp:
            claims = Path(tmp, "claims")
            claims.mkdir()
            xml = Path(cwd, xmlpath) if shared and xmlpath else None
            env = {}
            if shared:  # the cores split between the processes (runner.launch's rule for CPU ranks): N x 2
                # threads on 2 cores leave OpenMP threads spinning for descheduled peers
                from runner.launch import cpu_threads_per_process

                env = {
                    sharing.CLAIMS: str(claims),
                    "OMP_NUM_THREADS": str(cpu_threads_per_process(os.environ.get("OMP_NUM_THREADS"), processes)),
                    # Hypothesis's cache (.hypothesis/ in the working folder) not in a checkout a test watches
                    "HYPOTHESIS_STORAGE_DIRECTORY": os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
                    or str(Path(tmp, "hypothesis")),
                }
            slots = [
                _Slot(n, args, cwd, tmp, maxfail, {**env, sharing.SLOT: str(n)} if shared else {}, shared, xml)
                for n in range(1, processes + 1)
            ]
            if not shared:
                slots[0].run()
            else:
                threads = [threading.Thread(target=s.run, daemon=True) for s in slots]
                for t in threads:
                    t.start()
                for t in threads:
                    while t.is_alive():
                        try:
                            t.join()
                        except KeyboardInterrupt:  # the children have it too (same process group)
                            _told.append(signal.SIGINT)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    crashed = [c for s in slots for c in s.crashed]
    if not shared and not crashed:
        rc = slots[0].rc
        return rc if rc >= 0 else 128 - rc  # no crash: the child's own code and output
    if shared and xmlpath:
        sharing.merge_junit(Path(cwd, xmlpath), [p for s in slots for p in s.xml_parts], time.time() - t0)
    lost = [f for s in slots for f in s.lost]
    if lost:
        print(f"{'=' * 10} failures in a session that crashed later (its own summary never came) {'=' * 10}")
    for f in lost:
        print(f"{'_' * 10} {f['node']} ({f['when']}) {'_' * 10}\n{f['text']}", flush=True)
    for f in lost:
        print(f"FAILED {f['node']} ({f['when']})", flush=True)
    for node, how in crashed:
        print(f"FAILED {node} - {how} (crash guard: the session went on without it)", flush=True)
    done = {k: v for s in slots for k, v in s.done.items()}
    line = summary_line(_count(done, crashed), time.time() - t0, crashed, processes)
    print(f"{'=' * 10} {line} {'=' * 10}", flush=True)
    if _told:
        return 2
    codes = [s.rc if s.rc >= 0 else 128 - s.rc for s in slots if not s.crash]
    worst = [c for c in codes if c not in (0, 1, 5)]
    if worst:  # 2 and up: what stopped a child
        return worst[0]
    if crashed or 1 in codes:
        return 1
    return 5 if codes and all(c == 5 for c in codes) else 0


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
        self._write(
            {"done": nodeid, "outcomes": self.outcomes.pop(nodeid, []), "failures": self.failures.pop(nodeid, [])}
        )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The parent: supervise (returns the exit code, pytest runs nothing itself); the child: note its
    progress (returns None, the session runs here)."""
    if os.environ.get(STATE):
        state = Path(os.environ.pop(STATE))  # popped: a pytest that a test starts supervises its own session
        skip = os.environ.pop(SKIP, None)
        nodes = {json.loads(x) for x in Path(skip).read_text(encoding="utf-8").splitlines()} if skip else set()
        config.pluginmanager.register(Child(config, state, nodes), "gpulab-crashguard-child")
        sharing.start_child(config)
        return None
    if _unsupervised(config):
        return None
    return supervise(
        list(config.invocation_params.args),
        str(config.invocation_params.dir),
        maxfail=getattr(config.option, "maxfail", 0) or 0,
        processes=getattr(config.option, "gpulab_processes", 1),
        xmlpath=getattr(config.option, "xmlpath", None),
    )


def _processes(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 16:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of processes from 1 to 16")
    return int(value)


def pytest_addoption(parser):
    parser.addoption(
        "--processes",
        type=_processes,
        default=1,
        dest="gpulab_processes",
        metavar="N",
        help="run the session in N pytest processes at once, each taking whole test files (the test "
        "lab's files all in the first); each is watched by the crash guard (tests/crashguard.py)",
    )
