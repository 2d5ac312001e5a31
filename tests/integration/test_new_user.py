"""A new user's first command, on a bare host: the README's quick start (a) from a copy of the checkout.

The host is a fresh Debian bookworm (the lab's root filesystem alone: python3,
python3-venv, no gpulab, no PyTorch, no NVIDIA driver) whose pip reaches only the
lab's wheelhouse (PIP_INDEX_URL, as on an air-gapped machine with a mirror). The
command is read from the README, so that the README and this test cannot drift
apart; it must set up, run the demo sweep on the host and print the report's path.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HOME = "/root/gpulab"


def quick_start(label: str = "a") -> str:
    """The README's quick-start command ``(label)``: the line after its comment in the first sh block."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"# ({label})"):
            return lines[i + 1].strip()
    raise AssertionError(f"README's quick start has no command ({label})")


def checkout_files() -> list[str]:
    """What a fresh clone holds (tracked files, and new ones not ignored)."""
    res = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    return sorted(f for f in res.stdout.decode().split("\0") if f and (REPO / f).is_file())


def test_the_readme_quick_start_on_a_bare_debian_host(testlab):
    command = quick_start("a")
    assert command.startswith(".ci/setup") and "invoke demo" in command
    lab = testlab(names=["nu-01"], prefix="nu", bare=True, tmpfs_size="6g")
    host = "nu-01"
    assert lab.exec(host, "python3 -c 'import torch'", check=False).returncode != 0  # nothing there yet
    # a copy of the checkout, over SSH as a user would bring it
    files = checkout_files()
    tar = subprocess.Popen(
        ["tar", "-C", str(REPO), "-cf", "-", "--null", "-T", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    ssh = subprocess.Popen(
        ["ssh", *lab.ssh_options(), f"root@{lab.hosts[host].address}", f"mkdir -p {HOME} && tar -xf - -C {HOME}"],
        stdin=tar.stdout,
    )
    tar.stdin.write("\0".join(files).encode())
    tar.stdin.close()
    assert ssh.wait(timeout=300) == 0 and tar.wait(timeout=60) == 0
    # an air-gapped user's pip settings: the lab's index only; no cache and no byte-compiling
    # (tmpfs and CI time; Python compiles what it imports all the same)
    env = {
        "PIP_INDEX_URL": lab.index_url,
        "PIP_TRUSTED_HOST": lab.controller,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_NO_COMPILE": "1",
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    res = lab.ssh(host, f"cd {HOME} && export {exports} && {command}", check=False, timeout=1500)
    print(res.stdout[-4000:], res.stderr[-4000:])
    assert res.returncode == 0, res.stderr[-2000:]
    assert ".ci/setup: PyTorch torch==2.13.0+cpu (no NVIDIA driver found: the CPU build)" in res.stdout
    m = re.search(r"^report: (/\S+/report\.html)$", res.stdout, re.M)
    assert m, res.stdout[-2000:]
    report = m.group(1)
    assert report.startswith(f"{HOME}/results/demo-")
    shown = lab.exec(host, f"grep -c ncf {shlex.quote(report)}", check=False)
    assert shown.returncode == 0 and int(shown.stdout.strip()) > 0
    # everything came from the lab: the host's pip asked the lab's index only
    http_log = (lab.state_dir / "http.log").read_text()
    assert "/simple/torch/" in http_log
