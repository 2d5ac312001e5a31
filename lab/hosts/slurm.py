"""The lab's Slurm as gpulab talks to it: the client commands (``sinfo``, ``sbatch``, ``scontrol``,
``scancel``) of the controller machine (or of a node), each with a hard time limit, and their
output parsed into plain data.

* ``available()``: does ``sinfo`` answer here (``gpulab.sweep.backend: auto`` picks Slurm then);
* ``nodes()``: every node's state and reason (``scontrol show node -o``: one line per node);
* ``drain(node, reason)`` / ``resume(node)``: the only two changes gpulab makes to a node;
  ``ours(reason)``: a reason gpulab wrote (it starts ``gpulab:``), the only kind gpulab ever
  touches again;
* ``submit(script, options)``: ``sbatch --parsable``, the job id;
* ``tasks(job_ids, name)``: each array task's state, reason, exit code and node (``scontrol show job -o``:
  the records of finished jobs stay there ``MinJobAge`` seconds; no accounting database needed), of the
  jobs of that name only;
* ``cancel(job_ids)``: ``scancel`` of those jobs (or array tasks) only.

What the commands print is input: a record's free text (a node's Reason, an admin's) never takes the
place of another key or starts a record of its own, control characters come back escaped, and an
output that does not say what is asked (no readable state) is never read as a good answer.

Slurm's own settings (``SLURM_CONF``, the munge socket) come from the environment, as for any Slurm
command. Nothing here builds a shell line: every command is an argument list.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

from lab.core import limits
from lab.core.errors import ConfigError, HostError, line_of, printable
from lab.hosts import capped

TIMEOUT_S = 30
PREFIX = "gpulab:"  # the start of every drain reason gpulab writes
MAX_REASON = 200  # Slurm keeps longer reasons, sinfo -R cuts them: one readable line
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
JOB_RE = re.compile(r"[0-9]{1,12}")  # ASCII digits: str.isdigit and \d take any script's digits, Slurm does not
TASK_RE = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,6})?")  # a job, or one task of an array: <job id>_<task id>
MAX_TASK = limits.PLANNED_RUNS.hi - 1  # the highest array task id of gpulab's (an array holds runs of one sweep)
_OUT = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING"}  # states and flags of a node out of use
# IDLE, IDLE+DRAIN, DOWN+DRAIN+NOT_RESPONDING (a flag this Slurm has no word for: "?"), DOWN*+DRAIN (older)
_NODE_STATE = re.compile(r"[A-Z_]{1,32}[*~#!%$@^-]?(?:\+(?:[A-Z_]{1,32}|\?)){0,31}")
_AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName")  # a node record's last keys
_STATE = re.compile(r"[A-Z][A-Z_]{0,31}")  # a job state as scontrol prints it: PENDING, NODE_FAIL, ...
# scontrol's one-line records: Key=value pairs separated by spaces; a value may hold spaces only in the
# keys that take free text (Reason, Comment, Command...), so a value runs to the next " Key=".
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9:/_]*)=")


def _bin(name: str) -> str | None:
    return shutil.which(name)


def run(args: list[str], *, timeout: float = TIMEOUT_S, check: bool = True, stdin: str | None = None):
    """One Slurm command; HostError (one line) when it is missing, times out, prints more than
    limits.OUTPUT_BYTES on a stream or (``check``) fails."""
    exe = _bin(args[0])
    if exe is None:
        raise HostError(f"slurm: {args[0]} is not installed here (Slurm's client commands are needed)")
    try:  # each stream read up to limits.OUTPUT_BYTES; past it, or its time, it is killed (lab.hosts.capped)
        res = capped.run(
            [exe, *args[1:]], timeout=timeout, stdin=None if stdin is None else stdin.encode(), env=os.environ.copy()
        )
    except subprocess.TimeoutExpired:
        raise HostError(f"slurm: {' '.join(args[:3])} did not answer within {timeout:g} s") from None
    except capped.TooMuch as exc:
        raise capped.refusal("slurm", shlex.join(args), exc) from None
    except OSError as exc:  # not a program this machine runs (another architecture, a broken #! line), or gone
        raise HostError(f"slurm: {exe} could not be started: {exc.strerror or exc}") from None
    # bytes that are not UTF-8 (an admin's reason typed in Latin-1) read as U+FFFD; a "\r" stays a "\r" (text=True
    # would make it a line end: a record of its own)
    res.stdout, res.stderr = (b.decode("utf-8", "replace") for b in (res.stdout, res.stderr))
    if check and res.returncode != 0:
        why = line_of(res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}", 200)
        raise HostError(f"slurm: {' '.join(args[:3])}: {why}")
    return res


def available(timeout: float = 10) -> bool:
    """Whether a Slurm controller answers ``sinfo`` from here."""
    if _bin("sinfo") is None:
        return False
    try:
        return run(["sinfo", "-h", "-o", "%P"], timeout=timeout, check=False).returncode == 0
    except HostError:
        return False


def record(line: str) -> dict[str, str]:
    """One line of ``scontrol show ... -o``. Slurm prints each key once, so a key met again is free text that
    looks like a key (a node's Reason ``x NodeName=other State=IDLE``, ``maint Reason=gpulab: ...``): it stays
    part of the value before it, which never takes another key's place."""
    starts: list[tuple[str, int, int]] = []  # (key, where its "Key=" starts, where its value starts)
    seen: set[str] = set()
    for m in _KEY.finditer(line):
        if m.group(1) not in seen:
            seen.add(m.group(1))
            starts.append((m.group(1), m.start(), m.end()))
    ends = [s for _, s, _ in starts[1:]] + [len(line)]
    return {key: line[value:end].strip() for (key, _, value), end in zip(starts, ends)}


def records(text: str) -> list[dict[str, str]]:
    """``scontrol show ... -o`` output: one dict per line (see record). Lines end at "\\n" only, as Slurm ends
    them: str.splitlines also ends one at a reason's U+2028, \\x1e or \\r, which would start a record of its own."""
    return [record(line) for line in text.split("\n") if "=" in line]


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # scontrol's State, e.g. IDLE, MIXED+DRAIN, DOWN*+DRAIN
    reason: str  # "" when none
    gres: str = ""
    stamp: str = ""  # when the reason was set: the ``[user@time]`` scontrol adds (the controller's local time)

    @property
    def drained(self) -> bool:
        """Drained, down or failing; also a state scontrol's record does not give readably (no node to plan on)."""
        if not _NODE_STATE.fullmatch(self.state):
            return True
        return any(part.rstrip("*~#!%$@^-") in _OUT for part in self.state.split("+"))

    @property
    def ours(self) -> bool:
        return ours(self.reason)


def ours(reason: str | None) -> bool:
    return bool(reason) and reason.startswith(PREFIX)


_STAMP = re.compile(r"\s*\[[^][@\s]*@([0-9T:-]+)\]$")  # " [user@time]": a user name holds no bracket or space


def _reason_text(reason: str) -> tuple[str, str]:
    """A reason as scontrol shows it: (the text without the ``[user@time]`` stamp it adds, the time)."""
    m = _STAMP.search(reason or "")
    return ((reason or "")[: m.start()].strip(), m.group(1)) if m else ((reason or "").strip(), "")


def reason_time(name: str) -> _dt.datetime | None:
    """When the node's reason was set (aware, from the controller's local time), None when unknown."""
    node = nodes().get(check_node(name))
    try:
        return _dt.datetime.strptime(node.stamp, "%Y-%m-%dT%H:%M:%S").astimezone(_dt.timezone.utc)
    except (AttributeError, ValueError):
        return None


def nodes() -> dict[str, Node]:
    out = {}
    for rec in records(run(["scontrol", "show", "node", "-o"]).stdout):
        name = rec.get("NodeName")
        if name in out:  # Slurm lists a node once: the other is free text (a Comment's line break), not which
            raise HostError(f"slurm: scontrol show node lists node {line_of(name, 64)} twice: which record is its own?")
        if name:
            keys = list(rec)  # in the order printed: Slurm prints the Reason before these free texts, so a
            if "Reason" in rec and any(keys.index(k) < keys.index("Reason") for k in _AFTER_REASON if k in rec):
                del rec["Reason"]  # "Reason=" after them is their text (Comment=x Reason=gpulab: y), no reason
            reason, stamp = ("", "") if rec.get("Reason") in (None, "(null)") else _reason_text(rec.get("Reason", ""))
            # an admin's free text: shown wherever gpulab prints or keeps it, so control characters escaped
            out[name] = Node(name, printable(rec.get("State", "")), printable(reason), rec.get("Gres", ""), stamp)
    return out


def check_node(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(f"slurm: {str(name)[:80]!r} is not a node name")
    return name


def reason_line(check: str, why: str, action: str | None) -> str:
    """``gpulab: <check>: <why> -> <action>``, one line of at most MAX_REASON printable characters."""
    text = " ".join(f"{PREFIX} {check}: {why}".split()) + (f" -> {' '.join(action.split())}" if action else "")
    text = printable(text.replace('"', "'"))  # a NUL or an escape sequence of a runner's output: shown, not sent
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def drain(name: str, reason: str) -> str:
    """Drain a node with ``reason`` (gpulab's, it starts ``gpulab:``) unless someone else drained it.

    Returns what was done: "drained", "kept" (drained by gpulab already), or "left: <their reason>"."""
    check_node(name)
    if not ours(reason):
        raise ConfigError(f"slurm: a drain reason of gpulab starts {PREFIX!r}")
    node = nodes().get(name)
    if node is None:
        raise ConfigError(f"slurm: no node {name!r} in this cluster (scontrol show node)")
    if node.reason and not node.ours:
        return f"left: drained by someone else ({node.reason})"
    if node.drained and node.ours:
        return "kept"
    run(["scontrol", "update", f"nodename={name}", "state=drain", f"reason={reason}"])
    return "drained"


def resume(name: str) -> str:
    """Resume a node gpulab drained; "resumed", "not drained", or "left: <their reason>"."""
    check_node(name)
    node = nodes().get(name)
    if node is None:
        raise ConfigError(f"slurm: no node {name!r} in this cluster (scontrol show node)")
    if not node.drained and not node.reason:
        return "not drained"
    if not node.ours:
        return f"left: drained by someone else ({node.reason})"
    run(["scontrol", "update", f"nodename={name}", "state=resume"])
    return "resumed"


def literal(folder: str) -> str:
    """``folder`` as the literal start of an sbatch filename pattern (--output): a ``%`` of its own is ``%%``, so
    that ``/scratch/%u`` is that folder and not the user's; a backslash turns Slurm's patterns off already."""
    return folder if "\\" in folder else folder.replace("%", "%%")


def after_any(jobs: list[str]) -> list[str]:
    """sbatch's option that starts a job once those jobs ended, whatever their end (none: no option)."""
    return [f"--dependency=afterany:{':'.join(jobs)}"] if jobs else []


def submit(script: str, options: list[str]) -> str:
    """``sbatch --parsable OPTIONS`` with the script on stdin; the job id."""
    res = run(["sbatch", "--parsable", *options], stdin=script)
    job = res.stdout.strip().split(";")[0]
    if not JOB_RE.fullmatch(job):
        raise HostError(f"slurm: sbatch answered {line_of(repr(res.stdout), 80)}, not a job id")
    return job


@dataclass(frozen=True)
class Task:
    job: str  # the array's job id
    task: int
    state: str  # PENDING RUNNING COMPLETED FAILED TIMEOUT CANCELLED PREEMPTED NODE_FAIL OUT_OF_MEMORY ...
    reason: str  # Slurm's Reason (None -> "")
    exit_code: str  # "0:0"
    nodes: str  # NodeList ("(null)" -> "")

    @property
    def finished(self) -> bool:
        return self.state not in (
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "SUSPENDED",
            "REQUEUED",
            "RESIZING",
            "SIGNALING",
            "STAGE_OUT",
            "REQUEUE_HOLD",
            "REQUEUE_FED",
        )


def _task_ids(text: str) -> set[int]:
    """ArrayTaskId: ``3``, or a pending range ``1-3%1`` / ``1,4-5``; only ids up to MAX_TASK (a range past it,
    ``0-4294967294``, is no array of gpulab's and is not spelled out)."""
    spans = []
    for part in text.split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        if re.fullmatch(r"[0-9]{1,12}", lo) and (not hi or re.fullmatch(r"[0-9]{1,12}", hi)):
            spans.append((int(lo), min(int(hi or lo), MAX_TASK)))
    ids: set[int] = set()
    done = -1  # each id spelled out once, however often the ranges repeat or overlap
    for lo, hi in sorted(spans):
        ids.update(range(max(lo, done + 1), hi + 1))
        done = max(done, hi)
    return ids


def tasks(job_ids: list[str], name: str | None = None) -> dict[tuple[str, int], Task]:
    """Each task of those array jobs that Slurm still knows; a job id it no longer knows gives nothing, nor
    (``name``) a job of another name: an id read back from a file may be another job's now (ids are reused)."""
    out = {}
    for job in job_ids:
        if not isinstance(job, str) or not JOB_RE.fullmatch(job):
            raise ConfigError(f"slurm: {str(job)[:40]!r} is not a job id")
        res = run(["scontrol", "show", "job", "-o", job], check=False)
        if res.returncode != 0 and "Invalid job id" in res.stderr:  # gone past MinJobAge
            continue
        if res.returncode != 0:  # the controller did not answer (restarting, munge): not "gone"
            raise HostError(
                f"slurm: scontrol show job {job}: {line_of(res.stderr.strip() or f'exit {res.returncode}', 200)}"
            )
        for rec in records(res.stdout):
            if rec.get("ArrayJobId") != job or not _STATE.fullmatch(rec.get("JobState", "")):
                continue  # another job's record, or one without a state gpulab can read: not known
            if name is not None and rec.get("JobName") != name:
                continue
            reason = "" if rec.get("Reason") in (None, "None", "(null)") else printable(rec.get("Reason", ""))
            node = "" if rec.get("NodeList") in (None, "(null)") else printable(rec.get("NodeList", ""))
            for t in _task_ids(rec.get("ArrayTaskId", "")):
                out[(job, t)] = Task(job, t, rec.get("JobState", ""), reason, printable(rec.get("ExitCode", "")), node)
    return out


def cancel(job_ids: list[str]) -> None:
    """``scancel`` of these jobs or array tasks (``<job>_<task>``), and nothing else."""
    ids = [j for j in job_ids if isinstance(j, str) and TASK_RE.fullmatch(j)]
    if ids:
        run(["scancel", *ids], check=False)
