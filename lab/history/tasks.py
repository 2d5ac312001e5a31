"""The lab's memory on the command line: `invoke history`, `history.import`, `history.page`, `quarantine`,
`quarantine.add`, `quarantine.release`.

Sub-collections of tasks.py's namespace, so that each action has its own options
and --help (Invoke cannot parse "history import" with a space). Thin as every
task is: parse, call lab.history, print, exit code (lab.core.cli.task_errors).
The database modules are imported when a task runs, not when `invoke` starts.

On a Slurm cluster (``gpulab.sweep.backend: slurm``, or ``auto`` where ``sinfo`` answers here),
quarantine and Slurm's drain are one state seen from two sides: quarantining a whole host drains its
node with a reason that starts ``gpulab:``, ``invoke quarantine`` lists the drained nodes too (gpulab's
and anyone's), and a release resumes a node gpulab drained (never one drained with another reason).
A quarantined GPU of a host that stays up drains nothing: Slurm cannot drain one GPU, and gpulab's own
Slurm sweeps leave that host out (lab.sweep.driver.slurm_held).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from invoke import Collection

from lab.core.cli import setting, task, task_errors

URL_HELP = "database URL (default: gpulab.history_url, else results/history.sqlite)"
TARGET_HELP = "HOST or HOST:GPU_INDEX (e.g. r740-03:2)"
WHO_HELP = "who (default: $USER)"


def url_for(c, url=None) -> str:
    """--url, else gpulab.history_url, else results/history.sqlite; a PostgreSQL URL with the waits of
    gpulab.history_lock_timeout_s and history_statement_timeout_s (lab.history.db.resolve_url)."""
    from lab.history import db as historydb

    return historydb.resolve_url(setting(c, "history_url", url), setting(c, "results"),
                               setting(c, "history_lock_timeout_s"), setting(c, "history_statement_timeout_s"))


@contextlib.contextmanager
def database(c, url=None, *, create: bool = False):
    """The history database of gpulab.history_url (or --url), else results/history.sqlite; closed when the block
    ends. Only ``create`` (a command that adds) makes a SQLite file and its results folder (as a sweep makes
    it); a command that reads, or refuses, leaves no file behind (lab.history.db.open_db)."""
    from lab.history import db as historydb

    found, default = url_for(c, url), not setting(c, "history_url", url)
    if create and default:
        historydb.sqlite_folder(found)
    db = historydb.open_db(found, create=create, default=default)
    try:
        yield db
    finally:
        db.close()


def by_whom(given=None) -> str:
    """--who, else the login name, else "unknown"."""
    import getpass

    if given:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@task(name="import", help={"path": "results folders, run directories or validate.json files (comma separated)",
                           "url": URL_HELP})
@task_errors
def history_import(c, path, url=None):
    """Load run directories and validate outputs into the history database (importing twice adds nothing)."""
    from lab.core.errors import ConfigError
    from lab.history import memory

    paths = [Path(p) for p in path.split(",") if p.strip()]
    if not paths:
        raise ConfigError("history.import: give a results folder, run directories or validate.json files")
    added, skipped = memory.import_paths(paths, url_for(c, url), make_folder=not setting(c, "history_url", url))
    from lab.history.values import printable

    for line in skipped:
        print(f"  skipped {printable(line)}")
    print(added.line())


@task(name="show", default=True,
      help={"host": "only this host", "gpu": "a GPU UUID, or a GPU index of --host", "metric": "check or "
            "benchmark name (a part of it)", "since": "from this time (2026-12-01 or ISO 8601)",
            "until": "up to this time", "limit": "at most this many rows (default 200)", "url": URL_HELP})
@task_errors
def history_show(c, host=None, gpu=None, metric=None, since=None, until=None, limit=200, url=None):
    """The history of checks and runs by GPU, host, metric and time, newest first."""
    from lab.history import query

    with database(c, url) as db:
        rows = query.history_rows(db, host=host, gpu=gpu, metric=metric, since=since, until=until, limit=limit)
    print("\n".join(query.table(rows)))


@task(name="page", help={"out": "the HTML file to write (e.g. results/history.html)", "host": "only this host",
                         "gpu": "a GPU UUID, or a GPU index of --host", "metric": "check name (a part of it)",
                         "since": "from this time (2026-12-01 or ISO 8601)", "until": "up to this time",
                         "url": URL_HELP})
@task_errors
def history_page(c, out, host=None, gpu=None, metric=None, since=None, until=None, url=None):
    """An HTML page of the history: one trend plot per GPU and metric (verdict colours, the GPU's median)."""
    from lab.history import page

    page.check_out(out)   # bad input before the database is touched
    with database(c, url) as db:
        path, drawn, found = page.write_page(db, out, host=host, gpu=gpu, metric=metric, since=since, until=until)
    print(f"wrote {path} ({drawn} plot(s)" + (f" of {found}: narrow it with --host, --gpu, --metric" if found > drawn
                                               else "") + ")")


def on_slurm(c) -> bool:
    """Whether this lab's hosts are Slurm nodes (gpulab.sweep.backend slurm, or auto with sinfo answering)."""
    from lab.hosts import slurm

    chosen = str(setting(c, "sweep.backend") or "ssh").strip().lower()
    return chosen == "slurm" or (chosen == "auto" and slurm.available())


def drained_lines(entries) -> list[str]:
    """Slurm nodes drained or down, gpulab's quarantine aside: one line each (an admin's reason as it is)."""
    from lab.hosts import slurm

    from lab.history.values import printable

    held = {e.host for e in entries if e.gpu_index is None}
    return [f"{printable(n.name):<24} Slurm {printable(n.state.lower())}: {printable(n.reason or 'no reason')}"
            + (" (gpulab's drain)" if n.ours else "") for n in slurm.nodes().values()
            if n.drained and n.name not in held]


@task(name="list", default=True, help={"url": URL_HELP})
@task_errors
def quarantine_list(c, url=None):
    """The GPUs and hosts in quarantine: who put them there, when and why (and, on Slurm, drained nodes)."""
    from lab.history import quarantine as q

    with database(c, url) as db:
        entries = q.active(db)
    lines = q.table(entries)
    if on_slurm(c):
        drained = drained_lines(entries)
        if drained and not entries:
            lines = []
        lines += drained
    print("\n".join(lines))


@task(name="add", help={"target": TARGET_HELP, "reason": "why (one line)",
                        "action": "what to do about it (e.g. reseat, RMA)", "who": WHO_HELP, "url": URL_HELP})
@task_errors
def quarantine_add(c, target, reason=None, action=None, who=None, url=None):
    """Keep a GPU or a host out of sweeps until released."""
    from lab.history import quarantine as q

    tgt, by = q.parse_target(target), by_whom(who)
    q.check_entry(reason, by, action)   # bad input before the database is touched
    with database(c, url, create=True) as db:
        entry, added = q.add(db, tgt, reason=reason, who=by, action=action)
    print(f"{tgt}: quarantined" if added else
          f"{tgt}: already quarantined since {entry.added_at:%Y-%m-%d %H:%M} by {entry.who}: {entry.reason}")
    if tgt.gpu is None and on_slurm(c):
        from lab.hosts import slurm

        done = slurm.drain(tgt.host, slurm.reason_line("quarantine", entry.reason, entry.action))
        print(f"{tgt}: Slurm node {done}")


@task(name="release", help={"target": TARGET_HELP, "force": "release without a passing validate",
                            "note": "why (default: the validate that passed)", "who": WHO_HELP, "url": URL_HELP})
@task_errors
def quarantine_release(c, target, force=False, note=None, who=None, url=None):
    """Return a GPU or host to sweeps: needs a passing validate since it was quarantined, unless --force."""
    from lab.history import quarantine as q

    tgt, by = q.parse_target(target), by_whom(who)
    q.check_release(by, note)   # bad input before the database is touched
    node = None
    if tgt.gpu is None and on_slurm(c):
        from lab.hosts import slurm

        node = slurm.nodes().get(slurm.check_node(tgt.host))
    with database(c, url) as db:
        if node is not None and node.ours and not q.active(db, {tgt.host}):   # drained on the node (its health
            if not force:                                                   # check), not quarantined here
                ok, why = q.passed_since(db, tgt.host, slurm.reason_time(tgt.host))
                if not ok:
                    from lab.core.errors import CheckFailed

                    raise CheckFailed(f"quarantine release: {tgt}: Slurm node drained by gpulab ({node.reason}); "
                                      f"{why}; run `invoke validate --host {tgt.host}`, or release with --force")
            print(f"{tgt}: Slurm node {slurm.resume(tgt.host)}")
            return
        entry = q.release(db, tgt, who=by, force=force, note=note)
    print(f"{tgt}: released ({entry.release_note})")
    if node is not None:
        print(f"{tgt}: Slurm node {slurm.resume(tgt.host)}")


def collections() -> list[Collection]:
    """The sub-collections tasks.py adds to its namespace."""
    return [Collection("history", history_import, history_show, history_page),
            Collection("quarantine", quarantine_list, quarantine_add, quarantine_release)]
