"""What a host's commands print is input too: a command of a host (over SSH, or this machine's) or one of Slurm's
client commands that prints more than ``limits.OUTPUT_BYTES`` on a stream is stopped, with what it started, and
is one line of HostError; output under the cap comes back as printed, whole characters across reads, and a
quick large output comes back quickly (Invoke joined everything read so far on every read of 1000 bytes).

Real processes: this machine's, and over SSH a small paramiko server on 127.0.0.1 that runs each command
with /bin/sh and, as sshd, ends it when the client closes the channel. The cap is made small for the tests."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from lab.core import limits
from lab.core.errors import HostError
from lab.hosts import capped, slurm
from lab.hosts import remote as rmt
from tests.unit import sshserver
from tests.unit.localhost import local_host

CAP = 64 << 10


def ended(pid: int, within: float = 10.0) -> bool:
    """Process ``pid`` is gone (or a zombie no one reaped yet) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def flood_script(tmp_path: Path, name: str, body: str) -> Path:
    """An executable ``name`` that starts a sleeper (its pid in ``<name>.pids``, with its own), then runs ``body``."""
    pids = tmp_path / f"{name}.pids"
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho $$ > {shlex.quote(str(pids))}\nsleep 20 &\necho $! >> {pids}\n{body}\nwait\n")
    script.chmod(0o755)
    return script


def pids_of(script: Path) -> list[int]:
    return [int(p) for p in Path(f"{script}.pids").read_text().split()]


# --------------------------------------------------------------------------- this machine (inventory/local.yml)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_local_command_past_the_cap_is_one_line_and_leaves_no_process(tmp_path, monkeypatch, stream):
    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    redirect = "" if stream == "stdout" else " >&2"
    script = flood_script(tmp_path, "flood.sh", f"head -c 5000000 /dev/zero{redirect}")
    started = time.monotonic()
    with pytest.raises(HostError) as err, rmt.connect(local_host(tmp_path)) as r:
        r.run([str(script)], timeout=60)
    assert time.monotonic() - started < 15  # not the sleeper's 20 s
    assert err.value.exit_code == 2 and "\n" not in err.value.message
    assert err.value.message.startswith(f"here: `flood.sh` printed more than 64 KiB on {stream} ")
    assert "limits.OUTPUT_BYTES" in err.value.message and err.value.message.endswith("was stopped")
    assert all(ended(pid) for pid in pids_of(script)), "the command or what it started is still running"


def test_local_output_up_to_the_cap_is_as_printed_and_one_byte_more_is_refused(tmp_path, monkeypatch):
    """Line ends, a byte that is not UTF-8 (U+FFFD) and multi-byte characters come back as printed, as over SSH
    (text=True made "\\r" a line end, and a byte that is not UTF-8 a UnicodeDecodeError)."""
    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    with rmt.connect(local_host(tmp_path)) as r:
        res = r.run(r"printf 'a\r\nb\rc\377d \303\251\342\202\254\360\237\230\200\n'; printf 'e\r\n' >&2")
        assert (res.stdout, res.stderr, res.code) == ("a\r\nb\rc\ufffdd é€😀\n", "e\r\n", 0)
        full = r.run(f"head -c {CAP} /dev/zero | tr '\\0' x; head -c {CAP} /dev/zero | tr '\\0' y >&2")
        assert full.stdout == "x" * CAP and full.stderr == "y" * CAP
        with pytest.raises(HostError, match=r"^here: `head` printed more than 64 KiB on stdout"):
            r.run(f"head -c {CAP + 1} /dev/zero")


# --------------------------------------------------------------------------- over SSH (Fabric)


@pytest.fixture
def sshd(tmp_path):
    """A Host of the paramiko server on 127.0.0.1 (tests/unit/sshserver.py) and the server (which commands ended)."""
    with sshserver.serve(tmp_path) as (host, server):
        yield host, server


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_an_ssh_command_past_the_cap_is_one_line_and_is_closed(sshd, monkeypatch, stream):
    host, server = sshd
    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    redirect = "" if stream == "stdout" else " >&2"
    with rmt.connect(host) as r:
        with pytest.raises(HostError) as err:
            r.run(f"head -c 5000000 /dev/zero{redirect}", timeout=60)
        assert err.value.exit_code == 2 and "\n" not in err.value.message
        port = host.port
        assert err.value.message.startswith(f"here (127.0.0.1:{port}): `head` printed more than 64 KiB on {stream} ")
        deadline = time.monotonic() + 10
        while not server.ended and time.monotonic() < deadline:  # the channel closed: the host ended the command
            time.sleep(0.05)
        assert len(server.ended) == 1
        assert r.run("echo still here").stdout == "still here\n"  # the connection itself is kept


def test_ssh_output_under_the_cap_is_byte_exact_across_reads(sshd, monkeypatch):
    """A character split between two reads stays that character (Invoke decoded each read alone: two U+FFFD)."""
    host, _ = sshd
    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    split = r"printf 'a\303'; sleep 0.3; printf '\251b\360\237'; sleep 0.3; printf '\230\200 \377\r\n'"
    with rmt.connect(host) as r:
        res = r.run(f"{split}; {{ {split}; }} >&2; exit 3", check=False)
        assert (res.stdout, res.stderr, res.code) == ("aéb😀 \ufffd\r\n", "aéb😀 \ufffd\r\n", 3)
        full = r.run(f"head -c {CAP} /dev/zero | tr '\\0' x")
        assert full.stdout == "x" * CAP


def test_a_large_ssh_output_is_read_without_joining_the_buffer_on_every_read(sshd, monkeypatch):
    """24 MB under the cap comes back whole, and Invoke's ``respond`` (which joins everything read so far on every
    read of 1000 bytes: quadratic, 67 s for 24 MB over SSH) never runs without a watcher. Checked by what runs,
    not by a clock: speed is measured in benchmarks, never asserted by a timed test."""
    import invoke.runners

    joined = []
    monkeypatch.setattr(invoke.runners.Runner, "respond", lambda self, buffer_: joined.append(len(buffer_)))
    host, _ = sshd
    size = 24_000_000
    assert size < limits.OUTPUT_BYTES
    with rmt.connect(host) as r:
        res = r.run(f"head -c {size} /dev/zero | tr '\\0' x; echo done >&2", timeout=300)
    assert len(res.stdout) == size and res.stdout.count("x") == size and res.stderr == "done\n"
    assert joined == []


# --------------------------------------------------------------------------- Slurm's client commands


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A folder put first on PATH, for fake commands (Slurm's, ssh), and the small cap."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    return bin_dir


def test_a_slurm_command_past_the_cap_is_one_line_and_leaves_no_process(fake_bin):
    script = flood_script(fake_bin, "scontrol", "head -c 5000000 /dev/zero | tr '\\0' x")
    started = time.monotonic()
    with pytest.raises(HostError) as err:
        slurm.nodes()
    assert time.monotonic() - started < 15  # not the sleeper's 20 s
    assert err.value.exit_code == 2 and "\n" not in err.value.message
    assert err.value.message.startswith("slurm: `scontrol` printed more than 64 KiB on stdout ")
    assert all(ended(pid) for pid in pids_of(script)), "the command or what it started is still running"


def test_sbatch_reads_its_script_and_a_flood_on_stderr_is_refused(fake_bin, tmp_path):
    """The job script (larger than a pipe holds) reaches sbatch whole; an answer up to the cap is read as
    printed, one byte more on stderr is refused."""
    got = tmp_path / "script.got"
    sbatch = fake_bin / "sbatch"
    sbatch.write_text(f"#!/bin/sh\ncat > {got}\nprintf '12345'\nhead -c \"$(cat {tmp_path}/n)\" /dev/zero >&2\n")
    sbatch.chmod(0o755)
    script = "#!/bin/sh\n" + "".join(f"echo line {i}\n" for i in range(40000))
    (tmp_path / "n").write_text(str(CAP))
    assert slurm.submit(script, []) == "12345"
    assert got.read_text() == script
    (tmp_path / "n").write_text(str(CAP + 1))
    with pytest.raises(HostError, match=r"^slurm: `sbatch` printed more than 64 KiB on stderr "):
        slurm.submit(script, [])


# --------------------------------------------------------------------------- the ssh host key probe, the node's health


def test_the_host_key_probe_reads_a_hosts_flood_up_to_the_cap(fake_bin):
    """``ssh HOST true`` prints what the host's side says (its banner, its shell's start-up files): a flood is
    stopped at the cap, with what it started, and is no key reason; a byte that is not UTF-8 is no traceback."""
    from lab.hosts import hostkeys

    ssh = flood_script(fake_bin, "ssh", "head -c 5000000 /dev/zero\necho 'Host key verification failed.' >&2\nexit 255")
    started = time.monotonic()
    assert hostkeys.probe_host_key("h1", "127.0.0.1", timeout=10) is None
    assert time.monotonic() - started < 10  # not the sleeper's 20 s, nor the probe's 15
    assert all(ended(pid) for pid in pids_of(ssh)), "the probe or what it started is still running"
    ssh.write_text("#!/bin/sh\nprintf 'banner \\377\\n' >&2\necho 'Host key verification failed.' >&2\nexit 255\n")
    assert "is UNKNOWN" in hostkeys.probe_host_key("h1", "127.0.0.1", timeout=10)


def test_a_nodes_runner_health_past_the_cap_is_its_one_error_line(tmp_path, monkeypatch):
    from lab.validate import nodehealth

    monkeypatch.setattr(limits, "OUTPUT_BYTES", CAP)
    python = flood_script(tmp_path, "python", "head -c 5000000 /dev/zero | tr '\\0' x")
    started = time.monotonic()
    doc = nodehealth.gather(str(python), None)
    assert doc == {"_error": "runner health printed more than 64 KiB on stdout and was stopped"}
    assert time.monotonic() - started < 15  # not the sleeper's 20 s
    assert all(ended(pid) for pid in pids_of(python)), "runner health or what it started is still running"


def test_the_program_an_error_names():
    assert capped.program(shlex.join(["env", "PYTHONPATH=/x y", "/usr/bin/python3", "-m", "runner"])) == "python3"
    assert capped.program("setsid nohup dcgmi diag -r 3 -j") == "dcgmi"
    assert capped.program("command -v dcgmi && { dcgmi --version || true; }") == "command"
    assert capped.program("'unbalanced") == "'unbalanced"
    assert capped.program("printf '\\033[2J'") == "printf"
    assert capped.size(32 << 20) == "32 MiB" and capped.size(1000) == "1000 bytes"
