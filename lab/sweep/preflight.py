"""Prepared data a sweep needs, checked on its hosts before any host is changed.

A full-scale time-to-train run reads prepared data (``invoke datasets``): the
data root ``<gpulab_workdir>/data`` given to the runner as ``--data``, with one
folder per catalogue entry, each holding the ``gpulab-dataset.json`` that
preparation writes last. Before a sweep starts anything, each host that has
such runs gets one read-only SSH command (``PROBE``: it tests for and prints
those manifests, nothing else) and the controller checks each manifest against
the dataset catalogue: present, of the right dataset, and prepared from the
catalogue entry as it is now (its ``spec_sha256``). A missing or stale entry is
bad input naming the host and the entry (``ConfigError``, exit 2); the dry run
shows the same per host. The runner's own check of every file (sizes, counts)
still runs when a workload starts: this one reads manifests only, so that it
costs one command per host however large the data.

A host that cannot be reached here is left to the sweep, which records it as
a failed host as it does for every other step.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from lab.core import advice
from lab.hosts import fleet
from lab.hosts import remote as rmt
from lab.hosts.inventory import refuse_examples
from lab.hosts.datasets import Catalogue, load_catalogue
from lab.core import plaindata
from lab.core.errors import ConfigError, shown

MANIFEST = "gpulab-dataset.json"
MANIFEST_MAX_BYTES = 1 << 20
MARK = "@@gpulab-dataset"

# $1 the data root (a leading ~ is the login's home), then dataset names: print each manifest
# after a marker line, or say it is absent. Reads only.
PROBE = (
    r"""
root=$1; shift
case $root in "~") root=$HOME;; "~/"*) root=$HOME/${root#??};; esac
for ds in "$@"; do
  f=$root/$ds/"""
    + MANIFEST
    + r'''
  if [ -f "$f" ] && [ -r "$f" ]; then
    echo "'''
    + MARK
    + r""" $ds present"
    head -c """
    + str(MANIFEST_MAX_BYTES)
    + r''' "$f"; echo
  else
    echo "'''
    + MARK
    + r''' $ds absent"
  fi
done
echo "'''
    + MARK
    + r""" end"
"""
)


def needs_data(run) -> bool:
    """Whether a planned run trains on prepared data: full scale, time to train."""
    return run.scale == "full" and run.mode == "ttt"


def data_root(workdir: str) -> str:
    """The data root of a host's workdir, as the sweep gives it to the runner (``--data``)."""
    return f"{workdir.rstrip('/')}/data"


@dataclass
class HostData:
    """What one host has of the data its runs need."""

    host: str
    root: str
    needed: dict[str, list[str]]  # catalogue entry -> workloads that read it
    ready: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # entry -> why it cannot be used
    error: str | None = None  # the host could not be checked

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems

    def lines(self) -> list[str]:
        """What the dry run shows: one line for the host, one per entry that cannot be used."""
        if self.error:
            return [f"data in {self.root}: not checked: {self.error}"]
        if not self.problems:
            return [f"data in {self.root}: ready ({', '.join(self.ready)})"]
        return [f"data in {self.root}: {len(self.ready)} of {len(self.needed)} ready"] + [
            f"  {d} ({', '.join(self.needed[d])}): {why}" for d, why in self.problems.items()
        ]


def needed(runs, catalogue: Catalogue) -> dict[str, dict[str, list[str]]]:
    """host -> catalogue entry -> workloads (in the plan's order), for the runs that read prepared data
    (every node of a run)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for r in runs:
        if not needs_data(r):
            continue
        for name in catalogue.for_benchmark(r.workload):
            for h in r.hosts:
                ws = out[h].setdefault(name, [])
                if r.workload not in ws:
                    ws.append(r.workload)
    return dict(out)  # entries in the order of the plan's workloads


def judge(catalogue: Catalogue, name: str, text: str | None) -> str | None:
    """Why a manifest does not do for catalogue entry ``name`` (None: it does)."""
    if text is None:
        return "not prepared"
    try:
        doc = plaindata.loads(text)  # a host's manifest: depth and integers bounded
    except ValueError:
        return f"unreadable {MANIFEST}"
    if not isinstance(doc, dict) or doc.get("kind") != "gpulab-dataset" or doc.get("dataset") != name:
        return f"{MANIFEST} is not the manifest of {name}"
    if name not in catalogue.datasets:
        return f"{name} is not in the catalogue {catalogue.path}"
    if doc.get("spec_sha256") != catalogue.spec_digest(name):
        return (
            f"prepared from catalogue {shown(doc.get('catalogue_version'), 40)}, not from the entry of catalogue "
            f"{shown(catalogue.version, 40)} (prepare it again)"  # the host's words: a short excerpt
        )
    return None


def parse_probe(stdout: str) -> dict[str, str | None]:
    """Dataset -> manifest text (None: absent), from the probe's output; ConfigError if it did not finish."""
    out: dict[str, str | None] = {}
    current, buf, ended = None, [], False
    for line in stdout.splitlines():
        if line.startswith(MARK + " "):
            if current is not None:
                out[current] = "\n".join(buf)
            parts = line.split()
            current, buf = None, []
            if parts[1:] == ["end"]:
                ended = True
            elif len(parts) == 3 and parts[2] == "absent":
                out[parts[1]] = None
            elif len(parts) == 3 and parts[2] == "present":
                current = parts[1]
        elif current is not None:
            buf.append(line)
    if not ended:
        raise ConfigError("the data probe ended early")
    return out


def probe_host(host, entries: dict[str, list[str]], catalogue: Catalogue) -> HostData:
    """One read-only command on ``host``: which of ``entries`` are prepared and current."""
    root = data_root(host.workdir)
    result = HostData(host.name, root, entries)
    with rmt.connect(host) as remote:
        out = remote.run(rmt.cmd(["sh", "-c", PROBE, "gpulab-data-probe", root, *entries]), timeout=120)
    try:
        found = parse_probe(out.stdout)
    except ConfigError as exc:
        raise ConfigError(f"{host.name}: {exc.message}") from None
    for name in entries:
        why = judge(catalogue, name, found.get(name))
        if why:
            result.problems[name] = why
        else:
            result.ready.append(name)
    return result


def gather(hosts, runs, catalogue: Catalogue | str | None = None) -> dict[str, HostData]:
    """Probe every host with runs that read prepared data, in parallel; host -> what it has."""
    runs = [r for r in runs if needs_data(r)]
    if not runs:
        return {}
    cat = catalogue if isinstance(catalogue, Catalogue) else load_catalogue(catalogue)
    need = needed(runs, cat)
    todo = [h for h in hosts if need.get(h.name)]
    if not todo:
        return {}
    refuse_examples(todo)  # the example lab: one line, nothing contacted
    got = fleet.on_hosts(todo, lambda h: probe_host(h, need[h.name], cat))
    failed = got.reasons()
    return {
        h.name: got.succeeded[h.name]
        if h.name in got.succeeded
        else HostData(h.name, data_root(h.workdir), need[h.name], error=failed[h.name])
        for h in todo
    }


def refusal(results: dict[str, HostData]) -> str | None:
    """The one line that refuses a sweep whose hosts lack data, or None when none lacks any."""
    bad = [r for r in results.values() if r.error is None and r.problems]
    if not bad:
        return None
    per_host = "; ".join(
        f"{r.host}: "
        + ", ".join(f"{d} ({', '.join(r.needed[d])}) {why}" for d, why in r.problems.items())
        + f" in {r.root}"
        for r in bad
    )
    workloads = list(dict.fromkeys(w for r in bad for d in r.problems for w in r.needed[d]))
    return advice.carry(
        f"prepared data missing for full-scale time-to-train runs: {per_host}; prepare it with "
        f"`invoke datasets --host {','.join(r.host for r in bad)} --names {','.join(workloads)}` "
        f"(nothing was started)"
    )
