"""The history and quarantine commands as functions (invoke history, history.import, history.page, quarantine,
quarantine.add, quarantine.release): a database URL and plain values in, the lines to print out.

``default``: the URL is the default database (no gpulab.history_url, no --url): only a command that adds makes
its SQLite file and results folder. ``backend``: gpulab.sweep.backend; where the lab's hosts are Slurm nodes
(slurm, or auto with ``sinfo`` answering: ``on_slurm``, asked only where it matters) quarantining a whole
host drains its node with a reason that starts ``gpulab:``, the list shows drained nodes too, and a release
resumes a node gpulab drained.
A quarantined GPU of a host that stays up drains nothing: Slurm cannot drain one GPU, and gpulab's own Slurm
sweeps leave that host out (lab.sweep.driver.slurm_held).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from lab.core.errors import CheckFailed, ConfigError, excerpt
from lab.core.settings import default as declared_default
from lab.history import db as historydb, memory


@contextlib.contextmanager
def database(url: str, *, default: bool, create: bool = False):
    """The history database at ``url``, closed when the block ends. Only ``create`` (a command that adds) makes
    the default database's SQLite file and results folder (as a sweep makes it); a command that reads, or
    refuses, leaves no file behind (lab.history.db.open_db)."""
    if create and default:
        historydb.sqlite_folder(url)
    db = historydb.open_db(url, create=create, default=default)
    try:
        yield db
    finally:
        db.close()


def typed_line(**texts) -> None:
    """What a user typed as one line (``--reason``, ``--action``, ``--who``, ``--note``): ConfigError for a control
    character in it (a bell, an escape: kept by the database, carried into a Slurm drain reason); line breaks and
    tabs are spaces (lab.history.quarantine). Text other programs wrote (a validate's reasons) is not judged here."""
    for name, value in texts.items():
        if isinstance(value, str) and not " ".join(value.split()).isprintable():
            raise ConfigError(f"quarantine: --{name} {excerpt(ascii(value), 60)} holds a control character")


def by_whom(given: str | None = None) -> str:
    """``given`` (``''`` too: refused as no one), else the login name, else "unknown"."""
    import getpass

    if given is not None:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def on_slurm(backend: str | None) -> bool:
    """Whether the lab's hosts are Slurm nodes: the backend (gpulab.sweep.backend) is slurm, or auto with sinfo
    answering here."""
    from lab.hosts import slurm

    chosen = str(declared_default("sweep.backend") if backend in (None, "") else backend).strip().lower()
    return chosen == "slurm" or (chosen == "auto" and slurm.available())


@dataclass
class Imported:
    """Files loaded into the history: what was added (its line) and one line per input skipped."""

    added: str
    skipped: list[str]


def import_files(paths: list[str | Path], url: str, *, make_folder: bool = False) -> Imported:
    """Load run directories and validate outputs under ``paths`` (importing twice adds nothing)."""
    from lab.history.values import printable

    found = [Path(p) for p in paths if str(p).strip()]
    if not found:
        raise ConfigError("history.import: give a results folder, run directories or validate.json files")
    added, skipped = memory.import_paths(found, url, make_folder=make_folder)
    return Imported(added.line(), [printable(line) for line in skipped])


def show(url: str, *, default: bool, host=None, gpu=None, metric=None, since=None, until=None, limit=200) -> list[str]:
    """The history of checks and runs by GPU, host, metric and time, newest first: the table's lines."""
    from lab.history import query

    with database(url, default=default) as db:
        rows = query.history_rows(db, host=host, gpu=gpu, metric=metric, since=since, until=until, limit=limit)
    return query.table(rows)


@dataclass(frozen=True)
class Page:
    """The history's HTML page written: its path, the plots drawn and those found."""

    path: Path
    drawn: int
    found: int

    def line(self) -> str:
        more = f" of {self.found}: narrow it with --host, --gpu, --metric" if self.found > self.drawn else ""
        return f"wrote {self.path} ({self.drawn} plot(s){more})"


def page(url: str, out: str | Path, *, default: bool, host=None, gpu=None, metric=None, since=None, until=None) -> Page:
    """An HTML page of the history: one trend plot per GPU and metric. ``out`` is checked before the database
    is touched."""
    from lab.history import page as pages

    pages.check_out(out)
    with database(url, default=default) as db:
        return Page(*pages.write_page(db, out, host=host, gpu=gpu, metric=metric, since=since, until=until))


def drained_lines(entries) -> list[str]:
    """Slurm nodes drained or down, gpulab's quarantine aside: one line each (an admin's reason as it is)."""
    from lab.history.values import printable
    from lab.hosts import slurm

    held = {e.host for e in entries if e.gpu_index is None}
    return [
        f"{printable(n.name):<24} Slurm {printable(n.state.lower())}: {printable(n.reason or 'no reason')}"
        + (" (gpulab's drain)" if n.ours else "")
        for n in slurm.nodes().values()
        if n.drained and n.name not in held
    ]


def quarantine_list(url: str, *, default: bool, backend: str | None = None) -> list[str]:
    """The GPUs and hosts in quarantine: who put them there, when and why (on Slurm, drained nodes too)."""
    from lab.history import quarantine as q

    with database(url, default=default) as db:
        entries = q.active(db)
    lines = q.table(entries)
    if on_slurm(backend):
        drained = drained_lines(entries)
        if drained and not entries:
            lines = []
        lines += drained
    return lines


@dataclass(frozen=True)
class Quarantined:
    """A quarantine added (``added``; False: it was there already) and, on Slurm, what the drain said."""

    target: str
    added: bool
    slurm: str | None = None


@dataclass(frozen=True)
class Released:
    """A release: its note (None where only gpulab's Slurm drain was lifted) and, on Slurm, what the resume said."""

    target: str
    note: str | None
    slurm: str | None = None


def quarantine_add(
    url: str,
    target: str,
    *,
    default: bool,
    reason: str | None = None,
    action: str | None = None,
    who: str | None = None,
    backend: str | None = None,
    inventory: str | Path | None = None,
    echo=print,
) -> Quarantined:
    """Keep a GPU or a host (``HOST`` or ``HOST:GPU_INDEX``) out of sweeps until released; each line to ``echo``
    as it happens (the quarantine is said before a Slurm drain is tried). Bad input before the database is
    touched: with ``inventory`` (the task's --inventory, else gpulab.inventory), a host that is not one of its
    hosts, or a GPU index past the host's gpulab_gpu_count."""
    from lab.history import quarantine as q

    tgt, by = q.parse_target(target), by_whom(who)
    typed_line(reason=reason, action=action, who=by)
    q.check_entry(reason, by, action)
    if inventory is not None:
        in_inventory(tgt, inventory)
    with database(url, default=default, create=True) as db:
        entry, added = q.add(db, tgt, reason=reason, who=by, action=action)
    echo(
        f"{tgt}: quarantined"
        if added
        else f"{tgt}: already quarantined since {entry.added_at:%Y-%m-%d %H:%M} by {entry.who}: {entry.reason}"
    )
    done = None
    if tgt.gpu is None and on_slurm(backend):
        from lab.hosts import slurm as slurmctl

        done = slurmctl.drain(tgt.host, slurmctl.reason_line("quarantine", entry.reason, entry.action))
        echo(f"{tgt}: Slurm node {done}")
    return Quarantined(str(tgt), added, done)


def in_inventory(tgt, inventory: str | Path) -> None:
    """ConfigError unless ``tgt``'s host is a host of ``inventory`` (the one sweeps plan from: a quarantine is kept
    by host name, and a name no inventory gives keeps nothing out) and its GPU index, if any, one the host has."""
    from lab.hosts import inventory as inv

    hosts = inv.load(inventory)
    if tgt.host not in hosts.names:
        shown = ", ".join(hosts.names[:8]) + (f" and {len(hosts.names) - 8} more" if len(hosts.names) > 8 else "")
        raise ConfigError(
            f"quarantine: {inventory}: no host {tgt.host} (hosts: {shown}); name the lab's inventory with "
            f"--inventory FILE or the setting gpulab.inventory"
        )
    (host,) = hosts.select(tgt.host)
    if tgt.gpu is not None and isinstance(host.gpu_count, int) and tgt.gpu >= host.gpu_count:
        raise ConfigError(
            f"quarantine: {tgt.host}:{tgt.gpu}: {inventory} gives {tgt.host} {host.gpu_count} GPU(s) "
            f"(gpulab_gpu_count), indices 0 to {host.gpu_count - 1}"
            if host.gpu_count
            else f"quarantine: {tgt.host}:{tgt.gpu}: {inventory} gives {tgt.host} no GPU (gpulab_gpu_count 0); "
            f"quarantine the host"
        )


def quarantine_release(
    url: str,
    target: str,
    *,
    default: bool,
    force: bool = False,
    note: str | None = None,
    who: str | None = None,
    backend: str | None = None,
    echo=print,
) -> Released:
    """Return a GPU or host to sweeps: needs a passing validate since it was quarantined, unless ``force``
    (CheckFailed otherwise); each line to ``echo`` as it happens. Bad input before the database is touched."""
    from lab.history import quarantine as q
    from lab.hosts import slurm as slurmctl

    tgt, by = q.parse_target(target), by_whom(who)
    typed_line(note=note, who=by)
    q.check_release(by, note)
    node = slurmctl.nodes().get(slurmctl.check_node(tgt.host)) if tgt.gpu is None and on_slurm(backend) else None
    with database(url, default=default) as db:
        if node is not None and node.ours and not q.active(db, {tgt.host}):  # drained on the node (its health
            if not force:  # check), not quarantined here
                ok, why = q.passed_since(db, tgt.host, slurmctl.reason_time(tgt.host))
                if not ok:
                    raise CheckFailed(
                        f"quarantine release: {tgt}: Slurm node drained by gpulab ({node.reason}); "
                        f"{why}; run `invoke validate --host {tgt.host}`, or release with --force"
                    )
            resumed = slurmctl.resume(tgt.host)
            echo(f"{tgt}: Slurm node {resumed}")
            return Released(str(tgt), None, resumed)
        entry = q.release(db, tgt, who=by, force=force, note=note)
    echo(f"{tgt}: released ({entry.release_note})")
    resumed = None
    if node is not None:
        resumed = slurmctl.resume(tgt.host)
        echo(f"{tgt}: Slurm node {resumed}")
    return Released(str(tgt), entry.release_note, resumed)
