"""What a sweep shows while it runs and when it ends.

On a terminal: a live table with one row per host (run i of n, workload, what
it is doing, elapsed), redrawn by rich. Elsewhere (a pipe, a log file, CI):
one line per event. At the end, a table of every run and the failures named.
"""

from __future__ import annotations

import sys
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lab.core.errors import printable

# the state and outcome words in colour (rich leaves colour out off a terminal and under NO_COLOR)
STYLES = {
    "complete": "green",
    "success": "green",
    "target_missed": "yellow",
    "failed": "bold red",
    "interrupted": "yellow",
}


class Progress:
    """Receives events from the host threads; thread-safe."""

    def __init__(self, units: dict[str, int], *, live: bool | None = None, stream=None):
        self.stream = stream or sys.stdout
        # markup off: a run's reason or a host's message is text, never rich's [style] tags ('[/]' raised)
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True, markup=False)
        self.live_mode = self.console.is_terminal if live is None else live
        self.rows = {
            u: {"i": 0, "n": n, "run": "", "doing": "waiting", "since": None, "epoch": None} for u, n in units.items()
        }
        self.estimates: dict[str, float] = {}  # run id -> its estimated seconds (lab.sweep.study.estimate)
        self._lock = threading.Lock()
        self._live: Live | None = None

    # -- lifecycle ---------------------------------------------------------
    def __enter__(self):
        if self.live_mode:
            self._live = Live(
                self._table(), console=self.console, refresh_per_second=4, get_renderable=self._table, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def print(self, text: str) -> None:
        text = printable(text)  # a host's message: an escape sequence shown as \x1b, never sent to the terminal
        with self._lock:
            if self._live is not None:
                self._live.console.print(text, markup=False)
            else:
                print(text, file=self.stream, flush=True)

    # -- events ------------------------------------------------------------
    def run_started(self, unit: str, i: int, n: int, run_id: str, where: str = "") -> None:
        with self._lock:
            self.rows[unit].update(i=i, n=n, run=run_id, doing="running", since=time.monotonic(), epoch=None)
        if self._live is None:
            est = self.estimates.get(run_id)
            self.print(
                f"  [{unit}] {i}/{n} {run_id} started{where}"
                + (f" (estimate {_duration(est)})" if est is not None else "")
            )

    def status(self, unit: str, doing: str) -> None:
        with self._lock:
            self.rows[unit]["doing"] = doing
        if self._live is None and doing.startswith(("waiting", "stopping", "reconnecting", "fetching again")):
            self.print(f"  [{unit}] {doing}")

    def run_ended(self, unit: str, run) -> None:
        with self._lock:
            self.rows[unit].update(doing="idle", since=None)
        if self._live is None:
            detail = (
                run.state + (f" ({run.outcome})" if run.outcome else "") + (f": {run.reason}" if run.reason else "")
            )
            self.print(f"  [{unit}] {run.run_id} {detail}")

    def epoch(self, unit: str, epoch: int | None) -> None:
        """The running run's current epoch (its MLLOG's last epoch_start), for the live table."""
        with self._lock:
            self.rows[unit]["epoch"] = epoch

    def unit_done(self, unit: str, note: str = "done") -> None:
        with self._lock:
            self.rows[unit].update(doing=note, since=None)

    def _table(self) -> Table:
        t = Table(title="sweep", expand=False)
        for col in ("host", "run", "of", "doing", "epoch", "elapsed", "ETA"):
            t.add_column(col)
        now = time.monotonic()
        with self._lock:
            for unit, r in self.rows.items():
                running = r["since"] is not None
                el = now - r["since"] if running else None
                est = self.estimates.get(r["run"]) if running else None
                eta = (
                    ""
                    if not running
                    else (
                        "no estimate"
                        if est is None
                        else f"{_duration(est - el)} left"
                        if est > el
                        else "past its estimate"
                    )
                )
                epoch = "" if not running else ("-" if r["epoch"] is None else str(r["epoch"]))
                t.add_row(
                    unit,
                    r["run"] or "-",
                    f"{r['i']} of {r['n']}",
                    Text(printable(r["doing"])),  # a host's message among them: no markup
                    epoch,
                    _duration(el) if el is not None else "",
                    eta,
                )
        return t


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def final_table(runs, console: Console | None = None) -> None:
    """Every run of the sweep: host, run id, state, outcome, duration, reason."""
    console = console or Console(highlight=False, soft_wrap=True, markup=False)
    t = Table(title="sweep result")
    for col in ("host", "run", "state", "outcome", "GPUs", "reason"):
        t.add_column(col, overflow="fold")
    for r in runs:
        where = ",".join(r.nodes) if r.nodes else r.host
        t.add_row(
            where,
            r.run_id,
            Text(r.state, style=STYLES.get(r.state, "")),
            Text(r.outcome or "", style=STYLES.get(r.outcome or "", "")),
            ",".join(map(str, r.gpu_ids)) or "cpu",
            Text(printable(r.reason or "")),  # the host's words: no markup, no escape sequence
        )
    console.print(t)
