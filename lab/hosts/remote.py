"""Talking to hosts: Fabric over SSH with strict host keys, or this machine.

Every remote command is built from argument lists quoted with ``shlex`` (see
``cmd``), so inventory values and command-line values reach remote shells as
data, never as shell syntax. Host keys are checked against the known_hosts file
named by the inventory (``-o UserKnownHostsFile=`` in ansible_ssh_common_args)
or ~/.ssh/known_hosts; unknown and changed keys are refused (paramiko's
RejectPolicy), as Ansible refuses them with StrictHostKeyChecking=yes. What a command prints is read up to
``limits.OUTPUT_BYTES`` a stream (lab.hosts.capped): past it the command is stopped, one line of HostError.

``connect(host)`` gives a ``Remote`` with ``run``, ``put``, ``get`` and
``listdir``; one function run on many hosts at once: lab.hosts.fleet.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import stat
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from lab.hosts import capped, inventory, runnerdist
from lab.core import paths, writes
from lab.core.errors import GpulabError, HostError, RunError, excerpt, shown
from lab.hosts.inventory import Host

CONNECT_TIMEOUT_S = 10


def cmd(*parts: Sequence[str] | str) -> str:
    """Join argument lists (quoted) and shell operators (given as plain str) into one command.

    >>> cmd(["mkdir", "-p", "a b"], "&&", ["touch", "a b/$x"])
    "mkdir -p 'a b' && touch 'a b/$x'"
    """
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(shlex.join(str(p) for p in part))
    return " ".join(out)


@dataclass
class Result:
    command: str
    code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0


class Remote:
    """One host. Subclasses implement ``_run``, ``put``, ``get``, ``listdir``."""

    def __init__(self, host: Host):
        self.host = host
        self.name = host.name
        self._home: str | None = None

    def run(self, command: str | Sequence[str], *, timeout: float | None = None, check: bool = True) -> Result:
        """Run a command (an argv list, or a string built with ``cmd``) through /bin/sh."""
        text = command if isinstance(command, str) else shlex.join(map(str, command))
        result = self._run(text, timeout)
        if check and not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
            raise RunError(
                f"{self.name}: `{excerpt(text, 120)}` exited {result.code}"
                + (f": {excerpt(detail[-1], 300)}" if detail else "")
            )
        return result

    def expand(self, path: str) -> str:
        """Resolve a leading ``~/`` against the remote user's home directory."""
        if path == "~" or path.startswith("~/"):
            if self._home is None:
                self._home = paths.host_home(self.name, self._run('printf %s "$HOME"', 30))  # never "": not /
            return self._home + path[1:]
        return path

    def _run(self, text: str, timeout: float | None) -> Result:  # pragma: no cover - abstract
        raise NotImplementedError

    def put(self, local: str | Path | io.BytesIO, remote: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def get(self, remote: str, local: str | Path, limit: int | None = None) -> None:  # pragma: no cover
        raise NotImplementedError

    def listdir(self, remote: str) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SSHRemote(Remote):
    """A host reached over SSH through Fabric, host keys checked strictly."""

    def __init__(self, host: Host, *, timeout: float = CONNECT_TIMEOUT_S):
        super().__init__(host)
        import paramiko
        from fabric import Config, Connection

        self._paramiko = paramiko
        connect_kwargs: dict[str, Any] = {"allow_agent": False, "banner_timeout": timeout, "auth_timeout": timeout}
        if host.ssh_key:
            connect_kwargs["key_filename"] = os.path.expanduser(host.ssh_key)
            connect_kwargs["look_for_keys"] = False
        config = Config(overrides={"load_ssh_configs": False, "runners": {"remote": capped.fabric_runner()}})
        self.conn = Connection(
            host=host.address,
            user=host.user or "root",
            port=host.port,
            connect_timeout=int(timeout),
            connect_kwargs=connect_kwargs,
            config=config,
        )
        client = self.conn.client
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if os.path.exists(host.known_hosts):
            client.load_system_host_keys(host.known_hosts)
        self._sftp = None
        self._open()

    def _where(self) -> str:
        port = "" if self.host.port == 22 else f":{self.host.port}"
        return f"{self.name} ({self.host.address}{port})"

    def _open(self) -> None:
        p = self._paramiko
        try:
            self.conn.open()
        except p.BadHostKeyException:
            raise HostError(
                f"{self._where()}: host key verification failed: the key it offers differs from "
                f"{self.host.known_hosts}; refusing to connect"
            ) from None
        except p.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise HostError(
                    f"{self._where()}: host key verification failed: host unknown to "
                    f"{self.host.known_hosts}; refusing to connect"
                ) from None
            if isinstance(exc, p.AuthenticationException):
                raise HostError(
                    f"{self._where()}: SSH authentication failed for user {self.host.user or 'root'}"
                ) from None
            raise HostError(f"{self._where()}: unreachable: {exc}") from None
        except (OSError, socket.timeout, EOFError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise HostError(f"{self._where()}: unreachable: {reason}") from None

    def _run(self, text: str, timeout: float | None) -> Result:
        from invoke.exceptions import CommandTimedOut, ThreadException

        try:
            r = self.conn.run(text, hide=True, warn=True, timeout=timeout, in_stream=False, encoding="utf-8")
        except CommandTimedOut:
            return Result(text, 124, "", f"timed out after {timeout} s")
        except ThreadException as exc:  # a stream past the cap closed the command: HostError (lab.hosts.capped)
            capped.refuse(self._where(), text, exc)
            raise
        except (self._paramiko.SSHException, OSError, EOFError) as exc:
            raise HostError(f"{self._where()}: connection lost: {exc or type(exc).__name__}") from None
        if r.exited == -1 and not self._live():  # paramiko's -1: the channel closed without an exit status
            raise HostError(f"{self._where()}: connection lost while `{capped.program(text)}` ran")
        return Result(text, r.exited, r.stdout, r.stderr)

    def _live(self) -> bool:
        """Whether the connection still runs ``true``. A channel closed without an exit status is a connection that
        died under its command (sshd killed; the command may have done its work: never its answer), or on a live
        one a command ended by a signal (sshd's exit-signal, which paramiko reads as -1)."""
        from invoke.exceptions import CommandTimedOut, ThreadException

        transport = self.conn.transport  # not reopened: Fabric's run would connect anew to a host back since
        if transport is None or not transport.is_active():
            return False
        try:
            return self.conn.run("true", hide=True, warn=True, timeout=10, in_stream=False).exited == 0
        except (self._paramiko.SSHException, OSError, EOFError, CommandTimedOut, ThreadException):
            return False

    def _refused(self, what: str, exc: BaseException) -> GpulabError:
        """An SFTP failure: a RunError where the host answered and refused (a full disk, permissions, a path that
        is no folder; as a RunError it is no lost host, and no reconnect is tried); HostError where it did not."""
        said = f"{self._where()}: {what}: {exc or type(exc).__name__}"
        answered = isinstance(exc, OSError) and not isinstance(exc, (ConnectionError, TimeoutError))
        return RunError(said) if answered and self.conn.is_connected else HostError(said)

    @property
    def sftp(self):
        if self._sftp is None:
            try:
                self._sftp = self.conn.sftp()
            except (self._paramiko.SSHException, OSError, EOFError) as exc:
                raise HostError(f"{self._where()}: connection lost: {exc or type(exc).__name__}") from None
        return self._sftp

    def put(self, local, remote: str) -> None:
        try:
            if hasattr(local, "read"):  # io.BytesIO, or a file opened without following a link
                self.sftp.putfo(local, remote)
            else:
                self.sftp.put(str(local), remote)
        except (self._paramiko.SSHException, OSError, EOFError) as exc:
            raise self._refused(f"cannot write {remote}", exc) from None

    def get(self, remote: str, local, limit: int | None = None) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a planted link; past ``limit`` bytes (an endless file of the host's) writes.TooBig
            with writes.new_file(local, f"copy of {self.name}:{remote}", limit) as fh:
                self.sftp.getfo(remote, fh)
        except FileNotFoundError:
            raise RunError(f"{self.name}: {remote} does not exist") from None
        except (self._paramiko.SSHException, OSError, EOFError) as exc:
            raise self._refused(f"cannot fetch {remote}", exc) from None

    def listdir(self, remote: str) -> list[str]:
        try:
            return sorted(self.sftp.listdir(remote))
        except FileNotFoundError:
            return []
        except (self._paramiko.SSHException, OSError, EOFError) as exc:
            raise self._refused(f"cannot list {remote}", exc) from None

    def close(self) -> None:
        try:
            if self._sftp is not None:
                self._sftp.close()
            self.conn.close()
        except Exception:  # closing a dead connection is not an error
            pass


class LocalRemote(Remote):
    """This machine (ansible_connection=local): same interface, no SSH."""

    def _run(self, text: str, timeout: float | None) -> Result:
        try:  # streams capped, what it started killed with it when stopped; UTF-8 and line ends as over SSH
            p = capped.run(["/bin/sh", "-c", text], timeout=timeout)
        except subprocess.TimeoutExpired:
            return Result(text, 124, "", f"timed out after {timeout} s")
        except capped.TooMuch as exc:
            raise capped.refusal(self.name, text, exc) from None
        return Result(text, p.returncode, *(b.decode("utf-8", "replace") for b in (p.stdout, p.stderr)))

    def put(self, local, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(local, io.BytesIO):
            Path(remote).write_bytes(local.getvalue())
        elif hasattr(local, "read"):
            with open(remote, "wb") as out:
                shutil.copyfileobj(local, out)
        else:
            shutil.copyfile(local, remote)

    def get(self, remote: str, local, limit: int | None = None) -> None:
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        try:  # opened without blocking and copied only when a regular file: a FIFO is refused, not waited on
            fd = os.open(remote, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise RunError(f"{self.name}: {remote} does not exist") from None
        with open(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise RunError(f"{self.name}: {remote} is not a regular file")
            with writes.new_file(local, f"copy of {self.name}:{remote}", limit) as fh:
                shutil.copyfileobj(src, fh)

    def listdir(self, remote: str) -> list[str]:
        try:
            return sorted(os.listdir(remote))
        except FileNotFoundError:
            return []


def connect(host: Host, *, timeout: float = CONNECT_TIMEOUT_S) -> Remote:
    """Open a connection to ``host``; HostError (one line) if that is impossible, ConfigError for a host of the
    documentation address ranges (the example inventory: never contacted)."""
    inventory.refuse_examples([host])
    if host.is_local:
        return LocalRemote(host)
    return SSHRemote(host, timeout=timeout)


# --------------------------------------------------------------------------- runner on hosts


@dataclass(frozen=True)
class RunnerInstall:
    python: str
    pythonpath: str
    version: str
    installed_now: bool
    inherited: str = ""  # on this machine (a local host): the controller's own PYTHONPATH, after the runner's

    def argv(self, *args: str) -> list[str]:
        """argv that runs ``python -m runner ARGS`` with this install (and, on a local host, the Python
        path the controller was started with: what the runner's workloads import is found as it was)."""
        path = self.pythonpath + (os.pathsep + self.inherited if self.inherited else "")
        return ["env", f"PYTHONPATH={path}", self.python, "-m", "runner", *args]


def runner_python(host: Host) -> str:
    return host.python or (sys.executable if host.is_local else "python3")


def ensure_runner(remote: Remote) -> RunnerInstall:
    """Make the host's runner the same as this checkout's; install it when it differs.

    The runner lives in ``<workdir>/runner/<src digest>/runner`` and runs with
    the host's runner interpreter (gpulab_python, else python3).
    """
    host = remote.host
    want = runnerdist.local_version()
    digest = want.rsplit("src=", 1)[-1]
    base = remote.expand(host.workdir.rstrip("/")) + "/runner"
    inherited = os.environ.get("PYTHONPATH", "") if host.is_local else ""
    install = RunnerInstall(runner_python(host), f"{base}/{digest}", want, False, inherited)
    got = remote.run(install.argv("--version"), check=False, timeout=60)
    if got.ok and got.stdout.strip() == want:
        return install
    tarball = f"{base}/{digest}.tar.gz"
    remote.run(["mkdir", "-p", base], timeout=60)
    remote.put(io.BytesIO(runnerdist.tarball()), tarball)
    tmp = f"{base}/{digest}.tmp"
    unpack = [["rm", "-rf", tmp], ["mkdir", "-p", tmp], ["tar", "-xzf", tarball, "-C", tmp]]
    swap = [["rm", "-rf", install.pythonpath], ["mv", tmp, install.pythonpath], ["rm", "-f", tarball]]
    remote.run(" && ".join(cmd(step) for step in unpack + swap), timeout=120)
    got = remote.run(install.argv("--version"), check=False, timeout=60)
    if not got.ok:
        reason = (got.stderr.strip() or got.stdout.strip() or f"exit {got.code}").splitlines()[-1]
        raise RunError(f"{host.name}: the runner does not start with {install.python}: {excerpt(reason, 200)}")
    if (said := got.stdout.strip()) != want:  # the host's words: a short excerpt
        raise RunError(f"{host.name}: runner version is {shown(said, 80)} after install, expected {want!r}")
    return RunnerInstall(install.python, install.pythonpath, want, True, inherited)
