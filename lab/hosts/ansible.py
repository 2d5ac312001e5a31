"""The one place gpulab runs Ansible: ``run_playbook`` through ansible-runner.

* Strict host key checking, always: ``ANSIBLE_HOST_KEY_CHECKING=True`` and
  ``StrictHostKeyChecking=yes`` placed first among the ssh options (ssh keeps
  the first value of an option, so no inventory can turn it off). The
  known_hosts file is the inventory's (``-o UserKnownHostsFile=...`` in
  ``ansible_ssh_common_args``), else ssh's default. An unknown or changed host
  key makes the host unreachable with a reason that says so.
* Every run keeps ansible-runner's artifacts (events, stdout, command line,
  status) in ``<artifacts_root>/<UTC yyyymmdd-HHMMSS>-<playbook stem>/``,
  named by ``PlaybookResult.artifacts``; the private data directory itself is
  a temporary directory (private to this user, a fresh random name). The
  artifacts root is made with lab.core.writes (a link or a file there is bad
  input, exit 2) and each run's folder with an exclusive ``mkdir`` (a name
  already taken, by a folder or a planted link, is passed over), so
  ansible-runner writes only into a folder this run made.
* Live progress: one line per host and task from the runner's events
  (``on_event`` receives each line's data, or the line is printed).
* ``PlaybookResult.hosts`` is a per-host summary (ok / changed / failed /
  unreachable / skipped counts, the failing task and its message), and
  ``PlaybookResult.results`` keeps each host's task results by task name for
  callers that read data back (facts modules, drift reports).

Settings travel in the runner's environment (roles and module paths of this
checkout), so a playbook runs the same from any working directory.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.core import writes
from lab.core.errors import ConfigError, RunError, printable
from lab.hosts.hostkeys import host_key_reason

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"

# ssh keeps the first value it sees for an option: these come before the
# inventory's ansible_ssh_common_args / ansible_ssh_extra_args.
SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s -o StrictHostKeyChecking=yes"

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class TaskFailure:
    task: str
    message: str


@dataclass
class HostSummary:
    """What one playbook run did on one host."""

    name: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    failures: list[TaskFailure] = field(default_factory=list)

    @property
    def state(self) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"

    @property
    def reason(self) -> str:
        """The first failure as 'task: message' (empty when the host is fine)."""
        if not self.failures:
            return ""
        f = self.failures[0]
        return f"{f.task}: {f.message}" if f.task else f.message

    def line(self) -> str:
        text = (
            f"{self.name}: {self.state}  ok={self.ok} changed={self.changed} failed={self.failed} "
            f"unreachable={self.unreachable} skipped={self.skipped}"
        )
        return text + (f"  ({self.reason})" if self.reason else "")


@dataclass
class PlaybookResult:
    playbook: str
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    artifacts: Path
    hosts: dict[str, HostSummary]
    results: dict[str, dict[str, dict]] = field(default_factory=dict)  # host -> task name -> module result
    check: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "successful" and all(h.state in ("ok", "changed") for h in self.hosts.values())

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    def result(self, host: str, task: str) -> dict | None:
        """The module result of task ``task`` on ``host`` (None when it did not run there)."""
        return self.results.get(host, {}).get(task)


def short_line(text: Any, limit: int = 400) -> str:
    """``text`` (a host's message among them) as one printable line of at most ``limit`` characters: its
    whitespace runs one space, an escape sequence's ESC shown as \\x1b (lab.core.errors.printable)."""
    text = printable(" ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def result_message(res: dict) -> str:
    """The useful part of a failed module result (the first failed item of a loop)."""
    items = res.get("results")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("failed"):
            label = item.get("_ansible_item_label", item.get("item"))
            return (f"{short_line(label, 60)}: " if isinstance(label, str) else "") + result_message(item)
    for key in ("msg", "stderr", "module_stderr", "reason"):
        value = res.get(key)
        if value:
            msg = short_line(value)
            if key == "msg" and msg == "non-zero return code":
                msg = f"exit code {res.get('rc')}"
                if res.get("stderr"):
                    msg += f": {short_line(res['stderr'])}"
            return msg
    return "failed (no message)"


def runner_env(extra: dict | None) -> dict:
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": SSH_ARGS,
        "ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles"),
        "ANSIBLE_LIBRARY": str(PLAYBOOKS / "library"),
        "ANSIBLE_MODULE_UTILS": str(PLAYBOOKS / "module_utils"),
        "ANSIBLE_FILTER_PLUGINS": str(PLAYBOOKS / "filter_plugins"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_PIPELINING": "True",
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
    }
    env.update(extra or {})
    env["ANSIBLE_HOST_KEY_CHECKING"] = "True"  # not negotiable
    return env


def artifacts_folder(root: Path | str, playbook: Path | str, now: _dt.datetime | None = None) -> Path:
    """``<root>/<UTC yyyymmdd-HHMMSS>-<stem>`` (with -2, -3... when that exists already)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    base = Path(root) / f"{now.strftime('%Y%m%d-%H%M%S')}-{Path(playbook).stem}"
    path, n = base, 1
    while os.path.lexists(path):
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def make_artifacts_folder(root: Path | str, playbook: Path | str) -> Path:
    """Make ``root`` (lab.core.writes: no link, no file there) and a new folder of ``artifacts_folder``'s name
    in it; ``mkdir`` never follows a link, and a name taken meanwhile gives the next one."""
    root = writes.folder(root, "artifacts folder")
    for _ in range(100):
        path = artifacts_folder(root, playbook)
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"artifacts folder: {path} cannot be made ({exc.strerror or exc})") from None
    raise ConfigError(f"artifacts folder: {root}: no free name for this run's artifacts")


def default_progress(line: dict) -> None:
    """Print one progress line: '  [host] status  task (message)'; skipped tasks are only counted."""
    if line["status"] == "skipped":
        return
    text = f"  [{line['host']}] {line['status']:<11} {line['task']}"
    if line.get("message"):
        text += f": {line['message']}"
    print(text, flush=True)


class _Collector:
    def __init__(self, known_hosts: dict[str, str], on_event: Callable[[dict], None] | None):
        self.hosts: dict[str, HostSummary] = {}
        self.results: dict[str, dict[str, dict]] = {}
        self.known_hosts = known_hosts
        self.on_event = on_event
        self.stats: dict | None = None

    def summary(self, host: str) -> HostSummary:
        return self.hosts.setdefault(host, HostSummary(host))

    def __call__(self, event: dict) -> bool:
        name = event.get("event", "")
        data = event.get("event_data", {}) or {}
        if name == "playbook_on_stats":
            self.stats = data
            return True
        status = _RESULT_EVENTS.get(name)
        host = data.get("host")
        if not status or not host:
            return True
        res = data.get("res") or {}
        task = data.get("task", "")
        summary = self.summary(host)
        message = ""
        if status == "ok" and res.get("changed"):
            status = "changed"
        if status == "failed" and data.get("ignore_errors"):
            status = "ignored"
        if status in ("failed", "unreachable"):
            message = result_message(res)
            if status == "unreachable":
                message = host_key_reason(message, host, self.known_hosts.get(host)) or message
            summary.failures.append(TaskFailure(task, message))
        if status in ("ok", "changed"):
            self.results.setdefault(host, {})[task] = res
        if self.on_event is not None:
            role = data.get("role")
            self.on_event(
                {"host": host, "status": status, "task": f"{role} : {task}" if role else task, "message": message}
            )
        return True

    def finish(self) -> None:
        """Counts from the play recap (authoritative), failures from the events."""
        if not self.stats:
            return
        keys = {
            "ok": "ok",
            "changed": "changed",
            "failed": "failures",
            "unreachable": "dark",
            "skipped": "skipped",
            "rescued": "rescued",
            "ignored": "ignored",
        }
        names = set()
        for key in keys.values():
            names.update((self.stats.get(key) or {}).keys())
        for host in names:
            s = self.summary(host)
            for attr, key in keys.items():
                setattr(s, attr, int((self.stats.get(key) or {}).get(host, 0)))


def run_playbook(
    playbook: Path | str,
    inventory: Path | str,
    hosts: list[str] | None = None,
    *,
    extravars: dict | None = None,
    check: bool = False,
    diff: bool = False,
    artifacts_root: Path | str = "artifacts",
    tags: list[str] | str | None = None,
    on_event: Callable[[dict], None] | None = None,
    quiet: bool = False,
    known_hosts: dict[str, str] | None = None,
    envvars: dict | None = None,
    timeout: int | None = None,
) -> PlaybookResult:
    """Run ``playbook`` (a path, or a name under playbooks/) on ``hosts`` of ``inventory``.

    ``hosts`` are inventory names joined into ``--limit`` (None: the playbook's own hosts).
    ``on_event`` gets ``{"host", "status", "task", "message"}`` for every task result;
    without it the line is printed unless ``quiet``. ``known_hosts`` maps host names to
    their known_hosts file, only to name it in a host key refusal.
    """
    import ansible_runner

    playbook, inventory = _checked_inputs(playbook, inventory, hosts)
    folder = make_artifacts_folder(artifacts_root, playbook)
    cmdline = (["--check"] if check else []) + (["--diff"] if diff else [])
    if tags:
        cmdline += ["--tags", tags if isinstance(tags, str) else ",".join(tags)]
    if on_event is None and not quiet:
        on_event = default_progress
    collector = _Collector(known_hosts or {}, on_event)
    with tempfile.TemporaryDirectory(prefix="gpulab-runner-") as pdd:
        try:
            r = ansible_runner.run(
                private_data_dir=pdd,
                project_dir=str(playbook.parent),
                playbook=str(playbook),
                inventory=str(inventory),
                limit=",".join(hosts) if hosts else None,
                extravars=extravars or {},
                cmdline=" ".join(cmdline) or None,
                envvars=runner_env(envvars),
                artifact_dir=str(folder.parent),
                ident=folder.name,
                event_handler=collector,
                quiet=True,
                timeout=timeout,
                suppress_env_files=True,
            )
        except Exception as exc:  # the runner could not start ansible-playbook at all
            raise RunError(f"{playbook.name}: ansible-runner failed to start: {short_line(exc)}") from None
    collector.finish()
    if hosts:
        for name in hosts:  # a host the play never reached still gets a line
            collector.summary(name)
    return PlaybookResult(
        playbook=str(playbook),
        status=r.status,
        rc=r.rc if r.rc is not None else -1,
        artifacts=folder,
        hosts=collector.hosts,
        results=collector.results,
        check=check,
    )


def _checked_inputs(playbook: Path | str, inventory: Path | str, hosts: list[str] | None) -> tuple[Path, Path]:
    """(the playbook's path, a name under playbooks/ resolved; the inventory's): ConfigError for a playbook or
    inventory not found, an empty host list, or a host name unusable in ``--limit``."""
    playbook = Path(playbook)
    if not playbook.is_absolute() and not playbook.exists():
        playbook = PLAYBOOKS / playbook
    playbook = playbook.resolve()
    if not playbook.is_file():
        raise ConfigError(f"{playbook}: playbook not found")
    inventory = Path(inventory).resolve()
    if not inventory.exists():
        raise ConfigError(f"{inventory}: inventory not found")
    if hosts is not None and not hosts:
        raise ConfigError("no hosts to run the playbook on")
    for name in hosts or []:
        if not re.fullmatch(r"[A-Za-z0-9_.:\[\]-]+", name):
            raise ConfigError(f"host name {name!r} is not usable in a --limit pattern")
    return playbook, inventory


def summary_lines(result: PlaybookResult) -> list[str]:
    """The per-host summary, then where the artifacts are."""
    lines = [result.hosts[h].line() for h in sorted(result.hosts)]
    if result.status not in ("successful", "failed"):
        lines.append(f"ansible-runner status: {result.status} (rc {result.rc})")
    elif result.status == "failed" and all(h.state in ("ok", "changed") for h in result.hosts.values()):
        lines.append(f"ansible-playbook failed (rc {result.rc}); see {result.artifacts / 'stdout'}")
    lines.append(f"artifacts: {result.artifacts or 'none (no host could be reached; nothing written)'}")
    return lines
