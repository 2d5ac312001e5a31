"""The README followed literally by a newcomer, on a machine without a GPU: every command, in order.

A copy of the checkout (what a fresh clone holds: tracked files and new ones git does not ignore) is walked
from the README's first code block to its last: every line of an ``sh`` block and every ``$ `` line of a
``console`` block, as a newcomer types them, in a shell per command with the README's own environment
(``. .venv/bin/activate`` puts the checkout's invoke on PATH). Three kinds of command are not run here, and say so:
``.ci/setup`` (the checkout's .venv stands in: tests/integration/test_new_user.py runs the quick start's
``.ci/setup`` on a bare Debian host), ``.venv/bin/python -m pytest`` (the suite this test is part of) and
Slurm's ``sinfo`` (no Slurm here: tests/integration/test_slurm_lab.py runs it on its cluster).
Commands written for a lab (the R740 study, the lab's memory) run too, on this machine's default inventory,
where they must end as bad input (one line) or run (test_study_walkthrough.py and test_history_readme.py run
them against hosts named as the README's).

It fails on any traceback, on any file written into the copy outside results/ (Python's own __pycache__
and the files the README itself has the newcomer write with a shell redirection aside), and on any packet to an address other than loopback: the walk runs in a network namespace of its own
whose only way out is a veth pair that counts what it sends.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SKIPPED = {
    ".ci/setup": "the checkout's .venv stands in; tests/integration/test_new_user.py runs .ci/setup",
    ".venv/bin/python -m pytest": "the test suite itself",
    "sinfo ": "Slurm's own command: needs a Slurm cluster (tests/integration/test_slurm_lab.py has one)",
}


def commands(readme: str) -> list[str]:
    """Every command of the README's sh and console blocks, in the order they appear."""
    out = []
    for kind, body in re.findall(r"^```(sh|console)\n(.*?)^```$", readme, re.S | re.M):
        lines = body.splitlines()
        while lines:
            line = lines.pop(0)
            if kind == "console":
                line = line[2:] if line.startswith("$ ") else ""
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            heredoc = re.search(r"<<-?\s*'?([A-Za-z_]+)'?\s*$", line) if kind == "sh" else None
            if heredoc:  # the lines up to its end word belong to this command
                end = lines.index(heredoc.group(1))
                line, lines = "\n".join([line, *lines[: end + 1]]), lines[end + 1 :]
            out.append(line.strip())
    return out


def own_files(readme: str) -> set[str]:
    """Files the README has the newcomer write with a shell redirection (``cat > poor-ncf.yml``): theirs."""
    return {m for c in commands(readme) for m in re.findall(r"(?<![<>])>\s*([^\s<>&|;]+)", c.split("\n")[0])}


def steps(command: str) -> list[tuple[str, str | None]]:
    """(part, why it is not run or None) for each `&&` part of a command line."""
    out = []
    for part in (p.strip() for p in command.split("&&")):
        why = next((w for k, w in SKIPPED.items() if part.startswith(k)), None)
        out.append((part, why))
    return out


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime) of every file under ``root`` but results/, .venv and __pycache__."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = [
            d for d in dirnames if d != "__pycache__" and not (rel == Path(".") and d in ("results", ".venv"))
        ]
        for f in filenames:
            p = Path(dirpath) / f
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def sent() -> int:
    """Packets sent out of the namespace (its veth end), from /proc/net/dev."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        if line.strip().startswith("wv0:"):
            return int(line.split(":", 1)[1].split()[9])
    raise AssertionError("the walk's namespace has no wv0")


def walk(clone: Path, report: Path) -> None:
    """Inside the namespace: run the README's commands in ``clone``; write what happened to ``report``."""
    for _ in range(30):  # link-up chatter settles within seconds; after it, nothing leaves on its own
        before = sent()
        time.sleep(1)
        if sent() == before:
            break
    home = clone.parent / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "GPULAB_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PYTHONPATH=str(clone), OMP_NUM_THREADS="2")  # the venv's gpulab: this copy
    files = snapshot(clone)
    base = sent()
    done = []
    for command in commands((clone / "README.md").read_text()):
        for part, why in steps(command):
            if why:
                done.append({"command": part, "skipped": why})
                continue
            if part == ". .venv/bin/activate":
                env["PATH"] = f"{clone / '.venv' / 'bin'}:{env['PATH']}"
                env["VIRTUAL_ENV"] = str(clone / ".venv")
            started = time.monotonic()
            p = subprocess.run(["bash", "-c", part], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
            done.append(
                {
                    "command": part,
                    "rc": p.returncode,
                    "seconds": round(time.monotonic() - started, 1),
                    "stdout": p.stdout[-3000:],
                    "stderr": p.stderr[-3000:],
                    "packets": sent() - base,
                }
            )
    after = snapshot(clone)
    mine = own_files((clone / "README.md").read_text())
    written = sorted(k for k in after.keys() | files.keys() if after.get(k) != files.get(k) and k not in mine)
    report.write_text(json.dumps({"steps": done, "written": written, "packets": sent() - base}))


NETNS = """set -e
ip link set lo up
ip link add wv0 type veth peer name wv1
ip link set wv0 addrgenmode none; ip link set wv1 addrgenmode none
ip addr add 10.254.254.1/24 dev wv0
ip link set wv1 up; ip link set wv0 up
ip route add default dev wv0
ip -6 addr add fd54:40::1/64 dev wv0 nodad; ip -6 route add default dev wv0
exec "$@"
"""


def checkout_copy(dest: Path) -> None:
    res = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    )
    for f in res.stdout.decode().split("\0"):
        src = REPO / f
        if f and src.is_file() and not src.is_symlink():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
        elif f and src.is_symlink():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            (dest / f).symlink_to(os.readlink(src))
    (dest / ".venv").symlink_to(REPO / ".venv")


def test_the_readme_followed_literally(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        if os.environ.get("GPULAB_REQUIRE_LAB") == "1":
            pytest.fail("the README walk needs root, unshare and ip (a network namespace of its own)")
        pytest.skip("the README walk needs root, unshare and ip (a network namespace of its own)")
    if not (REPO / ".venv" / "bin" / "invoke").exists():
        pytest.skip("no .venv in the checkout (.ci/setup makes it)")
    clone = tmp_path / "gpulab"
    clone.mkdir()
    checkout_copy(clone)
    report = tmp_path / "walk.json"
    p = subprocess.run(
        ["unshare", "--net", "--", "sh", "-c", NETNS, "walk", sys.executable, __file__, str(clone), str(report)],
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert p.returncode == 0 and report.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    got = json.loads(report.read_text())
    ran = [s for s in got["steps"] if "rc" in s]
    for s in got["steps"]:
        print(f"$ {s['command']} -> {s.get('rc', 'not run: ' + s.get('skipped', ''))} ({s.get('seconds', 0)} s)")
    # not a curated subset: every command of the README was taken, in order
    assert [s["command"] for s in got["steps"]] == [
        part for c in commands((REPO / "README.md").read_text()) for part, _ in steps(c)
    ]
    for s in ran:
        assert "Traceback" not in s["stdout"] + s["stderr"], s
        assert s["rc"] in (0, 1, 2), s
        if s["rc"] == 2:  # bad input: one line, gpulab's
            lines = [ln for ln in s["stderr"].splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("gpulab: "), s
        assert s["packets"] == 0, f"a packet left for a non-loopback address by: {s['command']}"
    assert got["packets"] == 0 and got["written"] == [], got["written"]
    by = {s["command"]: s for s in ran}
    # the quick start: the demo's small sweep, its two seeds and the report's path
    demo = by[".venv/bin/invoke demo"]
    assert demo["rc"] == 0, demo
    last = demo["stdout"].strip().splitlines()[-1]
    assert re.fullmatch(rf"report: {re.escape(str(clone))}/results/demo-[0-9-]+/report/report\.html", last), last
    sweeps = sorted((clone / "results").glob("demo-*/sweep.json"))
    first = json.loads(sweeps[0].read_text())
    assert sorted(r["run_id"] for r in first["runs"]) == ["ncf-ttt-tiny-cpu-s1", "ncf-ttt-tiny-cpu-s2"]
    # this machine validated (no GPU: a CPU host), then the demo still runs (nothing quarantined)
    assert by["invoke validate"]["rc"] == 0, by["invoke validate"]
    assert by["invoke demo --seeds 1"]["rc"] == 0, by["invoke demo --seeds 1"]
    # the study's provisioning never provisions the machine it was typed on
    assert by["invoke provision"]["rc"] == 2 and "no inventory was named" in by["invoke provision"]["stderr"]


if __name__ == "__main__":
    walk(Path(sys.argv[1]), Path(sys.argv[2]))
