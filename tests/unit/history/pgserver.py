"""A real PostgreSQL server for the tests: Debian's postgresql (.ci/setup --test installs it), started on
loopback with its own data folder, by a non-root user (initdb refuses root), one per test session.

``PgServer.start()`` runs initdb into a fresh folder, then ``pg_ctl start`` on a free port of 127.0.0.1
with its socket inside that folder; ``new_database()`` gives each test a database of its own;
``stop()`` stops the server (``pg_ctl stop -m fast``) and removes the folder.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "gpulab"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="gpulab-pg-"))
        self.data = self.folder / "data"
        self.port = 0
        self.user = None if os.geteuid() != 0 else pwd.getpwnam("nobody")

    def _run(self, *argv, timeout=120):
        kw = {}
        if self.user is not None:
            kw = dict(user=self.user.pw_uid, group=self.user.pw_gid, extra_groups=[])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "HOME": str(self.folder)}
        return subprocess.run(
            [str(self.bindir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.folder,
            **kw,
        )

    def start(self) -> "PgServer":
        os.chmod(self.folder, 0o755)
        if self.user is not None:
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
        res = self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync")
        if res.returncode != 0:
            raise RuntimeError(f"initdb failed: {res.stderr.strip()[-500:]}")
        for _attempt in range(3):
            self.port = free_port()
            opts = (
                f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c shared_buffers=16MB -c max_connections=40"
            )
            res = self._run(
                "pg_ctl",
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.data),
                "-l",
                str(self.folder / "server.log"),
                "-o",
                opts,
            )
            if res.returncode == 0:
                return self
        raise RuntimeError(
            f"pg_ctl start failed: {res.stderr.strip()[-300:]} "
            f"{(self.folder / 'server.log').read_text(errors='replace')[-500:]}"
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname=postgres", autocommit=True, connect_timeout=10
        ) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            if self.port:
                self._run("pg_ctl", "stop", "-m", "fast", "-w", "-t", "60", "-D", str(self.data))
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
