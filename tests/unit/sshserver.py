"""A small SSH server on 127.0.0.1 for the unit tests of lab.hosts.remote's SSH side (paramiko, which Fabric
already requires): any public key logs in; each exec request runs ``/bin/sh -c COMMAND`` in a session of its own
with its streams sent as they come; a channel the client closed ends the command (as sshd's closed pipes do).

``Sshd.drop``: commands containing one of these texts end without an exit status, as when the host's sshd is
killed under them: ``"connection"`` closes the whole connection, ``"channel"`` only the command's channel (sshd's
``exit-signal`` for a command killed by a signal, which paramiko reads as -1 too). Each entry is used once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import paramiko

from lab.hosts.inventory import Host
from tests.unit.localhost import local_host

_GONE = (OSError, EOFError, paramiko.SSHException)  # the client closed the channel or the connection


class Sshd(paramiko.ServerInterface):
    def __init__(self):
        self.ended: list[int] = []  # the pid of each command once it ended and was reaped
        self.drop: dict[str, str] = {}  # text in a command -> "connection" or "channel"

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=self._exec, args=(channel, command.decode()), daemon=True).start()
        return True

    def _exec(self, channel, command: str) -> None:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

        def pump(src, send):
            try:
                while chunk := os.read(src.fileno(), 1 << 16):
                    send(chunk)
            except _GONE:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        pumps = [
            threading.Thread(target=pump, args=(proc.stdout, channel.sendall), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, channel.sendall_stderr), daemon=True),
        ]
        for t in pumps:
            t.start()
        for t in pumps:
            t.join()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        self.ended.append(proc.pid)
        drop = next((self.drop.pop(text) for text in list(self.drop) if text in command), None)
        try:
            if drop == "connection":
                channel.get_transport().close()
                return
            if drop is None:
                channel.send_exit_status(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
            channel.close()
        except _GONE:
            pass


@contextlib.contextmanager
def serve(tmp_path: Path):
    """(Host, Sshd): a Host of the server (its key in a known_hosts file, a client key of its own) and the
    server, which keeps listening until the block ends: a client whose connection was dropped connects again."""
    host_key, client_key = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    client_key.write_private_key_file(str(tmp_path / "id_ecdsa"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    server, transports = Sshd(), []

    def accept():
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:  # the listener closed: the test is over
                return
            t = paramiko.Transport(sock)
            t.add_server_key(host_key)
            transports.append(t)
            t.start_server(server=server)

    threading.Thread(target=accept, daemon=True).start()
    host: Host = local_host(
        tmp_path,
        connection="ssh",
        address="127.0.0.1",
        port=port,
        user="tester",
        ssh_key=str(tmp_path / "id_ecdsa"),
        known_hosts=str(tmp_path / "known_hosts"),
    )
    try:
        yield host, server
    finally:
        listener.close()
        for t in transports:
            t.close()
