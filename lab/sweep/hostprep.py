"""A sweep's hosts made ready: each connected (strict host keys), its runner installed or upgraded to this
checkout's, its GPU topology probed and, where the health gate asks, its health read (lab.sweep.gate); the
gate's quarantine planned around; the hosts and the runs of hosts that could not be prepared recorded in
sweep.json. A GPU the probe could not read is said as it is left out of the plan, a GPU host whose probe
found no usable GPU (lab.sweep.topology.NoGpuFound) as it is failed. lab.sweep.driver calls it between the
checks and the runs.
"""

from __future__ import annotations

from pathlib import Path

from lab.core.errors import about
from lab.core.fields import RunState
from lab.hosts import fleet
from lab.hosts import remote as rmt
from lab.hosts.inventory import Host
from lab.sweep import gate
from lab.sweep import study
from lab.sweep import topology as topo
from lab.sweep.hostrun import Settings
from lab.sweep.plan import plan_around, utcnow
from lab.sweep.state import Sweep


def prepare_host(
    host: Host, health: bool = False, cpu_without_gpus: bool = False
) -> tuple[rmt.Remote, rmt.RunnerInstall, dict, dict | None]:
    """Connect, make the runner match this checkout, probe the GPU topology (``cpu_without_gpus``: a GPU host
    whose probe finds none runs on the CPU, gpulab.sweep.cpu_without_gpus); with ``health``, read the host's
    health document for the gate (lab.sweep.gate)."""
    remote = rmt.connect(host)
    try:
        install = rmt.ensure_runner(remote)
        topology = topo.discover(remote, install, cpu_without_gpus)
        return remote, install, topology, gate.read(remote, install) if health else None
    except BaseException:
        remote.close()
        raise


def prepare_hosts(
    hosts: list[Host],
    workloads: list[str],
    planner,
    quarantine: dict | None,
    memory,
    settings: Settings,
    name: str,
    echo,
    results_dir: Path,
) -> tuple:
    """Prepare every host (and read its health for the gate), apply the gate's quarantine and plan around it:
    (the prepared hosts, their topologies, the quarantine, the lines of what was planned around, the runs, each
    with its time limit from its estimate unless the settings give one)."""
    gated = gate.needed(hosts, memory, settings.health_valid_hours, echo)
    cpu = bool(settings.cpu_without_gpus)
    prepared = fleet.on_hosts(hosts, lambda h: prepare_host(h, h.name in gated, cpu))
    topologies = {n: got[2] for n, got in prepared.succeeded.items()}
    for h in hosts:  # a GPU NVML answered with an error for is planned around, never silently
        for line in topo.left_out(h.name, topologies.get(h.name) or {}):
            echo(f"sweep {name}: {line}")
        if isinstance(prepared.failed.get(h.name), topo.NoGpuFound):
            echo(f"sweep {name}: {prepared.failed[h.name].message}")
    quarantine = gate.apply(
        hosts, {n: got[3] for n, got in prepared.succeeded.items() if got[3]}, memory, quarantine, echo
    )
    left, planned_topologies, held = plan_around(hosts, quarantine, topologies)
    for line in held:
        echo(f"sweep {name}: quarantine: {line}")
    runs = planner(left, workloads, topologies=planned_topologies)
    if settings.timeout_s is None:  # each run's limit from its estimate (the probed GPUs name the device)
        past = study.history(results_dir)
        for run in runs:
            run.limit_s = 60 * study.time_limit_minutes(run, study.unit_device(hosts, run, topologies), past)
    return prepared, topologies, quarantine, held, runs


def record_hosts(sweep: Sweep, hosts: list[Host], errors: dict, topologies: dict, prepared, quarantine) -> None:
    """sweep.json's hosts (address, GPUs, stack, topology, runner, quarantine) and the runs of hosts that could not
    be prepared failed with the reason; saved."""
    for h in hosts:
        entry = sweep.hosts.setdefault(h.name, {})
        entry.update(
            address=h.address,
            gpu_model=h.gpu_model,
            gpu_count=h.gpu_count,
            stack=h.stack,
            groups=list(h.groups),
            error=errors.get(h.name),
        )
        if h.name in topologies:
            entry.update(topology=topologies[h.name], runner=prepared[h.name][1].version)
        if (quarantine or {}).get(h.name):
            entry["quarantined"] = quarantine[h.name]
    for run in sweep.runs:
        bad = [about(n, errors[n]) for n in run.hosts if n in errors]  # a host's own error names it already
        if bad and run.state != RunState.COMPLETE:
            run.state, run.reason, run.ended = RunState.FAILED, "; ".join(bad), utcnow()
    sweep.save()
