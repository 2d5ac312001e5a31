"""What Slurm's commands print is input too: scontrol, sbatch and scancel faked on PATH by small shell
scripts that print hostile records (free text that looks like keys, odd job and task ids, garbage on
stderr), and what gpulab then reads, decides and hands back to Slurm."""

from __future__ import annotations

import os
import shlex

import pytest

from lab.hosts import slurm


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """scontrol, sbatch and scancel on PATH: each prints ``<name>.out`` (and ``<name>.err``), exits with
    ``<name>.rc`` (0 when absent) and appends its arguments, one line per call, to ``calls``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "sbatch", "scancel", "sinfo"):
        d = shlex.quote(str(tmp_path))
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "{name} $*" >> {d}/calls\n'
            f"[ -f {d}/{name}.out ] && cat {d}/{name}.out\n"
            f"[ -f {d}/{name}.err ] && cat {d}/{name}.err >&2\n"
            f"exit $(cat {d}/{name}.rc 2>/dev/null || echo 0)\n"
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    class Fake:
        def say(self, name, out="", err="", rc=0):
            (tmp_path / f"{name}.out").write_text(out)
            (tmp_path / f"{name}.err").write_text(err)
            (tmp_path / f"{name}.rc").write_text(str(rc))

        @property
        def calls(self) -> list[str]:
            path = tmp_path / "calls"
            return path.read_text().splitlines() if path.exists() else []

    return Fake()


STAMP = " [root@2026-12-06T18:33:24]"


def test_a_reason_holding_key_like_text_stays_that_nodes_reason(fake):
    """An admin's reason ``x NodeName=sl-02 State=IDLE`` was read as a record of sl-02, idle (sl-01 vanished)."""
    fake.say(
        "scontrol",
        "NodeName=sl-01 Gres=gpu:2 State=IDLE+DRAIN Reason=x NodeName=sl-02 State=IDLE Gres=(null)" + STAMP + "\n"
        "NodeName=sl-02 Gres=gpu:2 State=MIXED Reason=(null)\n",
    )
    nodes = slurm.nodes()
    assert sorted(nodes) == ["sl-01", "sl-02"]
    assert nodes["sl-01"].drained and nodes["sl-01"].reason == "x NodeName=sl-02 State=IDLE Gres=(null)"
    assert nodes["sl-01"].gres == "gpu:2" and nodes["sl-01"].stamp == "2026-12-06T18:33:24"
    assert not nodes["sl-02"].drained and nodes["sl-02"].reason == ""


def test_an_admins_reason_that_holds_reason_gpulab_is_not_gpulabs(fake):
    """``maint Reason=gpulab: x`` was read as gpulab's reason: a release resumed, a drain overwrote an admin's."""
    fake.say("scontrol", "NodeName=sl-01 State=IDLE+DRAIN Reason=maint Reason=gpulab: x -> y" + STAMP + "\n")
    assert slurm.resume("sl-01") == "left: drained by someone else (maint Reason=gpulab: x -> y)"
    assert slurm.drain("sl-01", "gpulab: ECC: bad") == "left: drained by someone else (maint Reason=gpulab: x -> y)"
    assert not [c for c in fake.calls if "update" in c]  # nothing changed on any node
