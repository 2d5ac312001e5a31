"""The lab's memory on the command line: `invoke history`, `history.import`, `history.page`, `quarantine`,
`quarantine.add`, `quarantine.release`.

Sub-collections of tasks.py's namespace, so that each action has its own options
and --help (Invoke cannot parse "history import" with a space). Thin as every
task is: parse, call lab.commands.history, print, exit code (lab.core.cli.task_errors).
The database modules are imported when a task runs, not when `invoke` starts.
"""

from __future__ import annotations

from invoke import Collection

from lab.core.cli import fresh_tasks, setting, task_errors, task_options

URL_HELP = "database URL (default: gpulab.history_url, else results/history.sqlite)"
TARGET_HELP = "HOST or HOST:GPU_INDEX (e.g. r740-03:2)"
WHO_HELP = "who (default: $USER)"


def url_for(c, url=None) -> str:
    """--url, else gpulab.history_url, else results/history.sqlite; a PostgreSQL URL with the waits of
    gpulab.history_lock_timeout_s and history_statement_timeout_s (lab.history.db.resolve_url)."""
    from lab.core.errors import ConfigError
    from lab.history import db as historydb

    if url is not None and not url.strip():  # --url '': a typo, never the default database
        raise ConfigError(f"--url: {url!r} is not a database URL")
    return historydb.resolve_url(
        setting(c, "history_url", url),
        setting(c, "results"),
        setting(c, "history_lock_timeout_s"),
        setting(c, "history_statement_timeout_s"),
    )


def where(c, url=None) -> dict:
    """The database arguments of lab.commands.history: its URL and whether it is the default one."""
    return {"default": not setting(c, "history_url", url)}


@task_options(
    name="import",
    help={"path": "results folders, run directories or validate.json files (comma separated)", "url": URL_HELP},
)
@task_errors
def history_import(c, path, url=None):
    """Load run directories and validate outputs into the history database (importing twice adds nothing)."""
    from lab.commands import history as cmd

    done = cmd.import_files(path.split(","), url_for(c, url), make_folder=not setting(c, "history_url", url))
    for line in done.skipped:
        print(f"  skipped {line}")
    print(done.added)


@task_options(
    name="show",
    default=True,
    help={
        "host": "only this host",
        "gpu": "a GPU UUID, or a GPU index of --host",
        "metric": "check or benchmark name (a part of it)",
        "since": "from this time (2026-12-01 or ISO 8601)",
        "until": "up to this time",
        "limit": "at most this many rows (default 200)",
        "url": URL_HELP,
    },
)
@task_errors
def history_show(c, host=None, gpu=None, metric=None, since=None, until=None, limit=None, url=None):
    """The history of checks and runs by GPU, host, metric and time, newest first."""
    from lab.commands import history as cmd

    print(
        "\n".join(
            cmd.show(
                url_for(c, url),
                **where(c, url),
                host=host,
                gpu=gpu,
                metric=metric,
                since=since,
                until=until,
                limit=200 if limit is None else limit,  # text: checked as every count is (Invoke's int takes '٣')
            )
        )
    )


@task_options(
    name="page",
    help={
        "out": "the HTML file to write (e.g. results/history.html)",
        "host": "only this host",
        "gpu": "a GPU UUID, or a GPU index of --host",
        "metric": "check name (a part of it)",
        "since": "from this time (2026-12-01 or ISO 8601)",
        "until": "up to this time",
        "url": URL_HELP,
    },
)
@task_errors
def history_page(c, out, host=None, gpu=None, metric=None, since=None, until=None, url=None):
    """An HTML page of the history: one trend plot per GPU and metric (verdict colours, the GPU's median)."""
    from lab.commands import history as cmd
    from lab.history import page

    page.check_out(out)  # bad input before the database's URL is read
    print(
        cmd.page(
            url_for(c, url), out, **where(c, url), host=host, gpu=gpu, metric=metric, since=since, until=until
        ).line()
    )


@task_options(name="list", default=True, help={"url": URL_HELP})
@task_errors
def quarantine_list(c, url=None):
    """The GPUs and hosts in quarantine: who put them there, when and why (and, on Slurm, drained nodes)."""
    from lab.commands import history as cmd

    print("\n".join(cmd.quarantine_list(url_for(c, url), **where(c, url), backend=setting(c, "sweep.backend"))))


@task_options(
    name="add",
    help={
        "target": TARGET_HELP,
        "reason": "why (one line)",
        "action": "what to do about it (e.g. reseat, RMA)",
        "who": WHO_HELP,
        "url": URL_HELP,
        "inventory": "Ansible inventory HOST must be a host of (default: gpulab.inventory, which sweeps use)",
    },
)
@task_errors
def quarantine_add(c, target, reason=None, action=None, who=None, url=None, inventory=None):
    """Keep a GPU or a host out of sweeps until released."""
    from lab.commands import history as cmd

    cmd.quarantine_add(
        url_for(c, url),
        target,
        **where(c, url),
        reason=reason,
        action=action,
        who=who,
        backend=setting(c, "sweep.backend"),
        inventory=setting(c, "inventory", inventory),
    )


@task_options(
    name="release",
    help={
        "target": TARGET_HELP,
        "force": "release without a passing validate",
        "note": "why (default: the validate that passed)",
        "who": WHO_HELP,
        "url": URL_HELP,
    },
)
@task_errors
def quarantine_release(c, target, force=False, note=None, who=None, url=None):
    """Return a GPU or host to sweeps: needs a passing validate since it was quarantined, unless --force."""
    from lab.commands import history as cmd

    cmd.quarantine_release(
        url_for(c, url), target, **where(c, url), force=force, note=note, who=who, backend=setting(c, "sweep.backend")
    )


def collections() -> list[Collection]:
    """The sub-collections tasks.py adds to its namespace, with new Task objects each time it loads."""
    return [
        Collection("history", *fresh_tasks(history_import, history_show, history_page)),
        Collection("quarantine", *fresh_tasks(quarantine_list, quarantine_add, quarantine_release)),
    ]
