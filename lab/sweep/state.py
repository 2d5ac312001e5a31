"""A sweep's state, kept in ``<root>/sweep.json`` (written atomically, read
back through lab.sweep.statefile): the runs, their states and reasons, and what
carries over when the same sweep is opened again.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import bounded
from lab.core import writes
from lab.results import checksums
from lab.hosts import runnerdist
from lab.sweep import statefile
from lab.core.errors import GpulabError, line_of
from lab.core.fields import OUTCOMES, RunState
from lab.sweep.plan import PlannedRun, SCHEMA, utcnow


# --------------------------------------------------------------------------- the state


@dataclass
class Sweep:
    """The state of one sweep, kept in ``<root>/sweep.json``."""

    root: Path
    name: str
    runs: list[PlannedRun]
    hosts: dict[str, dict] = field(default_factory=dict)
    created: str = field(default_factory=utcnow)
    options: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def state_file(self) -> Path:
        return self.root / "sweep.json"

    def run_dir(self, run: PlannedRun, host: str | None = None) -> Path:
        """results/<sweep>/<host>/<run id>: refused (ConfigError) if it would leave the sweep folder."""
        return statefile.run_dir(self.root, host or run.host, run.run_id, str(self.state_file))

    def problems(self, run: PlannedRun) -> list[str]:
        """Problems of the local copies of a run (every node); empty when all verify."""
        out = []
        for h in run.hosts:
            out += [f"{h}: {p}" for p in checksums.verify(self.run_dir(run, h))]
        return out

    def save(self) -> None:
        with self._lock:
            try:
                controller = runnerdist.local_version()
            except GpulabError:
                controller = None
            doc = {
                "schema": SCHEMA,
                "name": self.name,
                "created": self.created,
                "updated": utcnow(),
                "controller": controller,
                "options": self.options,
                "hosts": self.hosts,
                "runs": [r.to_json() for r in self.runs],
            }
            writes.folder(self.root, "sweep folder")
            writes.write_text(self.state_file, json.dumps(doc, indent=1) + "\n", "sweep state")

    @classmethod
    def load(cls, root: Path) -> "Sweep":
        """The saved sweep; its sweep.json read with bounds and checked like the command line."""
        doc = statefile.read(Path(root))
        sweep = cls(
            root=Path(root),
            name=doc["name"],
            runs=[PlannedRun(**r) for r in doc["runs"]],
            hosts=doc["hosts"],
            created=doc["created"] or utcnow(),
            options=doc["options"],
        )
        for run in sweep.runs:  # every folder a run names stays inside the sweep
            for h in run.hosts:
                sweep.run_dir(run, h)
        return sweep

    @classmethod
    def open(cls, root: Path, name: str, runs: list[PlannedRun], options: dict) -> "Sweep":
        """A new sweep, or the saved one with the same name: complete and verified runs carry over."""
        sweep = cls(root=Path(root), name=name, runs=runs, options=options)
        if sweep.state_file.exists():
            old = cls.load(root)
            sweep.created, sweep.hosts = old.created, old.hosts
            saved = {(r.host, r.run_id): r for r in old.runs}
            for run in runs:
                prev = saved.get((run.host, run.run_id))
                if prev is None or (prev.settings, prev.max_epochs) != (run.settings, run.max_epochs):
                    continue  # another recipe or epoch limit: a run of its own, never the old one's result
                run.attempts, run.token, run.slurm_job = prev.attempts, prev.token, prev.slurm_job
                if prev.state == RunState.COMPLETE and not sweep.problems(prev):
                    run.state, run.outcome, run.reason = RunState.COMPLETE, prev.outcome, prev.reason
                    run.started, run.ended, run.gpu_ids = prev.started, prev.ended, prev.gpu_ids
                elif run.state == RunState.PLANNED and prev.state != RunState.PLANNED:
                    run.reason = f"previous attempt: {prev.state}: {prev.reason}"
        return sweep


def read_run_json(path: Path) -> dict:
    """A run directory's JSON file (status.json), read with bounds; {} when it is not one."""
    try:
        doc = bounded.read_json(path, root=Path(path).parent)
        return doc if isinstance(doc, dict) else {}
    except bounded.Unreadable:
        return {}


REASON_CHARS = 240  # a run's reason in sweep.json: one line (the runner writes one sentence)


def run_outcome(status: dict) -> tuple[str | None, str]:
    """(outcome, reason) of a fetched run's status.json as sweep.json may hold them: an outcome of
    lab.core.fields.OUTCOMES, else None; the reason as one printable line of at most REASON_CHARS, else "".
    A host's status.json is input: a reason that is an object, or an outcome of its own, saved as it was made a
    sweep.json that every later command refused."""
    outcome, reason = status.get("outcome"), status.get("reason")
    reason = line_of(reason, REASON_CHARS) if isinstance(reason, str) else ""
    return (outcome if isinstance(outcome, str) and outcome in OUTCOMES else None), reason


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""
