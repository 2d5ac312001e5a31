"""A host that answered but whose command was stopped for printing too much (lab.hosts.capped) is no
unreachable host: validate names the check and the advice of the cause, and a sweep names the host once."""

from __future__ import annotations

from snapshots import inventory_for, run

from lab.core.errors import HostError, about
from lab.hosts import capped


def stopped(where: str):
    return capped.refusal(where, "/usr/bin/nvidia-smi -q", capped.TooMuch("stdout", 1 << 20))


def test_a_stopped_command_is_no_unreachable_host(snap, refs):
    docs = {
        "h200-01": snap,
        "lab-b": stopped("lab-b (10.213.7.12)"),
        "lab-c": HostError("lab-c (10.213.7.13): unreachable: Connection refused"),
    }
    hosts = [inventory_for(snap, "h200-01"), {"name": "lab-b"}, {"name": "lab-c"}]
    v = run(docs, refs, hosts=hosts)
    b = v.hosts["lab-b"]
    assert b["verdict"] == "FAIL"
    assert b["reason"] == (
        "host command: lab-b (10.213.7.12): `nvidia-smi` printed more than 1 MiB on stdout "
        "(gpulab's limit on what one command prints, lab.core.limits.OUTPUT_BYTES) and was stopped"
    )
    said = str(b)
    assert "reachable over SSH" not in said and "printed without end" in said
    c = v.hosts["lab-c"]
    assert c["reason"].startswith("reachable: lab-c (10.213.7.13): unreachable")
    assert "reachable over SSH" in str(c)


def test_a_host_is_named_once_whatever_the_error_says():
    assert about("hostile", stopped("hostile").message).startswith("hostile: `nvidia-smi` printed more than 1 MiB")
    assert about("hostile", "hostile (10.0.0.1): unreachable: x") == "hostile (10.0.0.1): unreachable: x"
    assert about("hostile", "slurm: sbatch failed") == "hostile: slurm: sbatch failed"
    assert about("host", "hostile: x") == "host: hostile: x"  # another host's name is no prefix of its own


def test_a_sweep_names_the_failed_host_once(tmp_path):
    from lab.sweep import hostprep
    from tests.unit.localhost import local_host
    from lab.sweep import plan as pl
    from lab.sweep import state as sweepstate

    h = local_host("/var/lib/gpulab", "hostile", user="root", gpu_model=None)
    runs = pl.plan([h], ["ncf"], None, 1)
    s = sweepstate.Sweep(root=tmp_path / "s", name="s", runs=runs)
    errors = {"hostile": stopped("hostile").message}
    hostprep.record_hosts(s, [h], errors, {}, {}, None)
    assert s.runs[0].state == "failed"
    assert s.runs[0].reason.startswith("hostile: `nvidia-smi` printed more than 1 MiB on stdout ")
