"""A sweep's plan: hosts x workloads x GPU counts x seeds as PlannedRun records
(stable run ids, per-unit GPU sets from the probed topology), and the checks of
the options that make it. Plain data; lab.sweep.driver runs it.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Iterable

from lab.core import fields
from lab.core import limits
from lab.sweep import study
from lab.sweep import statefile
from lab.sweep import topology as topo
from lab.sweep import workloads as workload_catalogue
from lab.core.errors import ConfigError, excerpt
from lab.core.fields import RunState
from lab.hosts.inventory import Host


SCHEMA = statefile.SCHEMA
MODES, SCALES = fields.MODES, fields.SCALES
NAME_RE, WORKLOAD_RE = fields.NAME_RE, fields.WORKLOAD_RE
COMPLETE_OUTCOMES = ("success", "target_missed")
TOKEN_VAR = "GPULAB_RUN_TOKEN"


def utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --------------------------------------------------------------------------- the plan


@dataclass
class PlannedRun:
    host: str  # the host (node 0 of a multi-node run)
    workload: str
    gpus: int  # GPUs per node; 0 = CPU; -1 = all of a host whose count is not known yet
    seed: int
    mode: str = "ttt"
    scale: str = "tiny"
    state: RunState = RunState.PLANNED  # lab.core.fields.RunState: its value in sweep.json
    outcome: str | None = None  # the runner's outcome once fetched
    reason: str = ""
    started: str | None = None
    ended: str | None = None
    nodes: list[str] = field(default_factory=list)  # multi-node: every host, node 0 first
    gpu_ids: list[int] = field(default_factory=list)  # the GPUs chosen from the topology (per node)
    attempts: int = 0
    token: str | None = None
    limit_s: float | None = None  # this run's time limit; None: Settings.timeout_s
    settings: dict = field(default_factory=dict)  # a recipe's settings: `runner run --set` (lab.sweep.recipe)
    max_epochs: int | None = None  # ttt: the run's own epoch limit (`runner run --max-epochs`); None: the scale's
    slurm_job: str | None = None  # the Slurm backend: "<array job id>_<task id>" (lab.sweep.slurmworker)

    @property
    def run_id(self) -> str:
        g = "cpu" if self.gpus == 0 else ("allgpu" if self.gpus < 0 else f"{self.gpus}gpu")
        if len(self.nodes) > 1:
            g = f"{len(self.nodes)}node-{g}"
        return f"{self.workload}-{self.mode}-{self.scale}-{g}-s{self.seed}"

    @property
    def hosts(self) -> list[str]:
        return list(self.nodes) if self.nodes else [self.host]

    def to_json(self) -> dict:
        return dict(asdict(self), run_id=self.run_id)

    @classmethod
    def from_json(cls, doc: dict, where: str = "run") -> "PlannedRun":
        """A run entry of sweep.json, every field checked like its command-line option (lab.sweep.statefile)."""
        return cls(**statefile.conform_run(doc, where))


def parse_list(value: str | Iterable[str] | None, what: str) -> list[str]:
    """``--<what>`` as its items (lab.core.limits.items: an empty or repeated item is refused, never dropped)."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):  # `gpus: 2` in a YAML file
        value = str(value)
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"--{what}: {value!r} is not a comma list")
    return [str(i) for i in limits.items(value, f"--{what}")]


FROM_INVENTORY = "from_inventory"  # a topology plan_around made of the inventory's GPU count, not a probe


def host_gpu_count(host: Host, topology: dict | None = None) -> int | None:
    """GPUs of a host: what its probe found, else the inventory's count; None if unknown (auto)."""
    if topology is not None and "gpu_count" in topology:
        return int(topology["gpu_count"])
    return host.gpu_count if isinstance(host.gpu_count, int) else None


def parse_gpu_counts(value: str | None, host: Host, topology: dict | None = None) -> list[int]:
    """'1,2,3' -> those counts; 'all' (default) -> every count 1..N; a host without GPUs runs count 0."""
    count = host_gpu_count(host, topology)
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        if count is None:
            return [-1]
        return list(range(1, count + 1)) if count else [0]
    out = []
    for item in parse_list(value, "gpus"):
        if not (item.isascii() and item.isdigit() and len(item) <= 30) or int(item) < 1:  # not '٣', '+1', '1.0'
            raise ConfigError(f"--gpus: {excerpt(repr(item), 30)} is not a GPU count (use 1,2,... or all)")
        n = limits.number(item, "--gpus", limits.GPUS)
        inventory = host.gpu_count if isinstance(host.gpu_count, int) else None
        if topology is None and count is not None and n > count:
            raise ConfigError(f"--gpus: {n} GPUs asked but {host.name} has {count}")
        if topology is not None and topology.get(FROM_INVENTORY) and inventory is not None and n > inventory:
            # a topology plan_around made of the inventory's count (GPUs quarantined): the host has no more
            raise ConfigError(f"--gpus: {n} GPUs asked but {host.name} has {inventory}")
        if n in out:  # '1,01'
            raise ConfigError(f"--gpus: {excerpt(repr(value), 40)}: {item!r} is given twice")
        out.append(n)
    return out


def seed_count(seeds, workload: str, rules=None, mode: str = "ttt") -> int:
    """``--seeds K``, ``mlperf`` (the MLPerf run count of the workload's benchmark, lab/data/benchmarks.yml)
    or ``auto`` (that run count in ttt mode, one run per configuration in throughput mode)."""
    word = seeds.strip().lower() if isinstance(seeds, str) else None
    if word == "auto" and mode == "throughput":
        return 1
    if word in ("mlperf", "auto"):
        from lab.core.mlperf import default_rules

        rules = rules or default_rules()  # lab/data's rules, read once per process (the estimates read them too)
        bench = rules.benchmark(workload)
        if bench is None:
            raise ConfigError(
                f"--seeds {word}: workload {workload!r} is no MLPerf benchmark of "
                f"lab/data/benchmarks.yml; give a number of seeds"
            )
        return rules.benchmarks[bench].runs_required
    try:  # as every count: ASCII digits (not '٣' for 3), no fraction (not 2.5 for 2)
        return limits.number(seeds, "--seeds", limits.SEEDS)
    except ConfigError:
        raise ConfigError(
            f"--seeds: {excerpt(repr(seeds), 40)} is not a number of seeds, 'auto' or 'mlperf' "
            f"(a number: {limits.SEEDS.describe().removeprefix('a whole number ')})"
        ) from None


def units_of(hosts: list[Host], nodes: int) -> list[list[Host]]:
    """Hosts grouped into the units that run together: single hosts, or k hosts per multi-node run."""
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"--nodes: {nodes!r} must be a positive number")
    limits.number(nodes, "--nodes", limits.NODES)
    for h in hosts:
        fields.host_name(h.name, f"host {h.name!r}")
    if nodes == 1:
        return [[h] for h in hosts]
    if len(hosts) % nodes:
        raise ConfigError(
            f"--nodes {nodes}: {len(hosts)} hosts selected ({', '.join(h.name for h in hosts)}), "
            f"not a multiple of {nodes}"
        )
    if any(h.is_local for h in hosts):
        raise ConfigError(f"--nodes {nodes}: a multi-node run needs SSH hosts, not local ones")
    return [hosts[i : i + nodes] for i in range(0, len(hosts), nodes)]


def plan_around(
    hosts: list[Host], quarantine: dict[str, dict] | None, topologies: dict[str, dict] | None = None
) -> tuple[list[Host], dict[str, dict], list[str]]:
    """Hosts and GPU sets left once quarantined parts are taken out (lab.history.quarantine.for_sweep's data).

    A host quarantined whole, or with every GPU quarantined, is left out; a host with some GPUs
    quarantined keeps the others: its topology (probed, else one made of the inventory's GPU count)
    lists only those, so that GPU counts and subsets are planned from them. Returns (hosts left,
    topologies, one line per host affected for the plan and the summary).
    """
    topologies = dict(topologies or {})
    left, lines = [], []
    for h in hosts:
        q = (quarantine or {}).get(h.name)
        if not q:
            left.append(h)
            continue
        if q.get("gpus") is None:
            lines.append(f"{h.name}: skipped: quarantined ({q['reason']})")
            continue
        out = set(q["gpus"])
        doc = topologies.get(h.name)
        count = host_gpu_count(h, doc)
        if doc is not None:
            gpus = [g for g in doc.get("gpus", []) if g.get("index") not in out]
        elif count is not None:
            gpus = [
                asdict(topo.Gpu(index=i, bus_id=None, numa=None, root=None, name=None))
                for i in range(count)
                if i not in out
            ]
        else:
            lines.append(f"{h.name}: GPU(s) {_ids(out)} quarantined ({q['reason']}): left out once probed")
            left.append(h)
            continue
        if not gpus and count:
            lines.append(f"{h.name}: skipped: every GPU quarantined ({q['reason']})")
            continue
        topologies[h.name] = dict(doc or {FROM_INVENTORY: True}, gpu_count=len(gpus), gpus=gpus)
        lines.append(
            f"{h.name}: GPU(s) {_ids(out)} quarantined ({q['reason']}): runs use GPU(s) "
            f"{_ids(g['index'] for g in gpus)}"
        )
        left.append(h)
    return left, topologies, lines


def _ids(indices) -> str:
    return ",".join(str(i) for i in sorted(indices)) or "none"


def plan(
    hosts: list[Host],
    workloads: list[str],
    gpus: str | None,
    seeds,
    mode: str = "ttt",
    scale: str = "tiny",
    *,
    nodes: int = 1,
    topologies: dict[str, dict] | None = None,
    recipes: dict[str, dict] | None = None,
    spread: bool = False,
    max_epochs: int | None = None,
) -> list[PlannedRun]:
    """Every unit x workload x GPU count x seed (seeds are 1..K); GPU subsets from the topologies.

    ``recipes``: workload -> a recipe's settings for its runs; ``spread``: each workload x GPU count x seed
    runs on one unit only (round robin over the units: a tune trial's seeds over the fleet), not on every one;
    ``max_epochs``: every run's epoch limit."""
    mode, scale = fields.choice(mode, MODES, "--mode"), fields.choice(scale, SCALES, "--scale")  # any case: lowercase
    if not workloads:
        raise ConfigError("--workloads: empty list")
    workloads = study.expand_workloads(workloads)
    for w in workloads:
        fields.workload(w)
    counts = {w: seed_count(seeds, w, mode=mode) for w in workloads}
    workload_catalogue.known(workloads)
    topologies = topologies or {}
    units = units_of(hosts, nodes)
    per_unit = []
    for unit in units:  # the plan's size is known before a run of it is built
        per_node = [parse_gpu_counts(gpus, h, topologies.get(h.name)) for h in unit]
        per_unit.append([n for n in per_node[0] if all(n in other for other in per_node[1:])])
    limits.plan_size(sum(len(c) * sum(counts.values()) for c in per_unit))
    runs = []
    for u, (unit, gpu_counts) in enumerate(zip(units, per_unit)):
        head = unit[0]
        for w in workloads:
            for n in gpu_counts:
                for s in range(1, counts[w] + 1):
                    if spread and (s - 1) % len(units) != u:
                        continue
                    run = PlannedRun(
                        head.name,
                        w,
                        n,
                        s,
                        mode,
                        scale,
                        nodes=[h.name for h in unit] if len(unit) > 1 else [],
                        settings=dict((recipes or {}).get(w) or {}),
                        max_epochs=max_epochs,
                    )
                    topo_doc = topologies.get(head.name)
                    if n > 0 and topo_doc is not None:
                        try:
                            run.gpu_ids = topo.choose(topo.gpus_of(topo_doc), n)
                        except ConfigError as exc:
                            run.state, run.reason = RunState.FAILED, f"{head.name}: {exc.message} (probe)"
                    runs.append(run)
    return runs
