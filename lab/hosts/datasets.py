"""Datasets on the hosts: resolve names against the catalogue, then run playbooks/datasets.yml.

The catalogue (inventory/datasets.yml, schema lab/schemas/datasets.schema.json)
lists every artifact with its sha256, size and origin (where a publisher gives
no sha256, its md5), the data sets and the pretrained backbones (``kind:
weights``) alike. Here, before any host is
touched: the names are resolved (dataset or benchmark names), each selected
host's source of each artifact is worked out (``gpulab_mirror`` replaces every
origin; ``datasets_origins`` overrides origins per host or group; licensed data
without a lab path or mirror is refused), and the storage mode is checked.
The role then fetches (resuming, checksummed), prepares with the runner's own
``runner.datasets`` code and checks the result on every host.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lab.hosts import runnerdist
from lab.core import schema
from lab.core.errors import ConfigError, excerpt, shown

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CATALOGUE = REPO / "inventory" / "datasets.yml"
MAX_SIZE = 1 << 50  # bytes of one artifact (a PiB)
STORAGE_MODES = ("copy", "shared")
PLAYBOOK = "datasets.yml"


@dataclass
class Catalogue:
    path: Path
    version: str
    origins: dict
    benchmarks: dict
    datasets: dict

    def resolve(self, names: str | list[str] | None) -> list[str]:
        """Dataset names (in catalogue order, once each) for a comma list of dataset or benchmark names."""
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        names = [n for n in (names or []) if n]
        if not names:
            raise ConfigError(
                "--names: give datasets or benchmarks, comma separated "
                f"(datasets: {', '.join(self.datasets)}; benchmarks: {', '.join(self.benchmarks)})"
            )
        chosen = []
        for n in names:
            found = [n] if n in self.datasets else self.for_benchmark(n)
            if not found or any(ds not in self.datasets for ds in found):
                raise ConfigError(
                    f"{self.path}: unknown dataset or benchmark {shown(n)} (datasets: "
                    f"{', '.join(self.datasets)}; benchmarks: {', '.join(self.benchmarks)})"
                )
            chosen += [ds for ds in found if ds not in chosen]
        return [d for d in self.datasets if d in chosen]

    def for_benchmark(self, name: str) -> list[str]:
        """The catalogue entries a benchmark (workload) reads: its dataset and any further artifacts."""
        got = self.benchmarks.get(name)
        return [got] if isinstance(got, str) else list(got or [])

    def spec_digest(self, name: str) -> str:
        """The ``spec_sha256`` a dataset prepared from this catalogue entry records in its manifest.

        The runner computes it when it prepares (runner/datasets/common.py, spec_digest);
        tests/unit/test_study.py checks that both agree for every entry."""
        spec = self.spec(name)
        keep = {k: spec.get(k) for k in ("catalogue_version", "params", "expect")}
        keep["artifacts"] = sorted((a["file"], a["sha256"]) for a in spec["artifacts"])
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()

    def spec(self, name: str) -> dict:
        """What the role hands to ``runner prepare`` for one dataset."""
        e = self.datasets[name]
        return {
            "name": name,
            "catalogue_version": self.version,
            "title": e["title"],
            "kind": e.get("kind", "data"),
            "licensed": bool(e.get("licensed", False)),
            "artifacts": [artifact_sums(a) for a in e["artifacts"]],
            "params": e.get("params", {}),
            "expect": e.get("expect", {}),
        }


def artifact_sums(a: dict) -> dict:
    """What the host needs to verify an artifact: file, sha256 and size (null where unpublished), md5 if given."""
    out = {"file": a["file"], "sha256": a["sha256"], "size": a["size"]}
    if a.get("md5"):
        out["md5"] = a["md5"]
    return out


def load_catalogue(path: Path | str | None = None) -> Catalogue:
    """Read and check the catalogue; every problem is one ConfigError line naming the file and place."""
    path = Path(path) if path else DEFAULT_CATALOGUE
    doc = schema.load_yaml(path, "datasets")
    origins = doc["origins"]
    files: dict[str, tuple] = {}
    for name, entry in doc["datasets"].items():
        for i, a in enumerate(entry["artifacts"]):
            where = f"{path}: datasets.{name}.artifacts.{i}"
            if a["origin"] not in origins:
                raise ConfigError(f"{where}: origin {a['origin']!r} is not defined under origins")
            size = a["size"]  # JSON Schema's integer takes 1e3 (a float the fetch module refuses on the host)
            if size is not None and (not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_SIZE):
                raise ConfigError(f"{where}.size: {shown(size)} is not a whole number of bytes from 1 to {MAX_SIZE}")
            if a["sha256"] is None and not a.get("md5"):
                raise ConfigError(f"{where}: sha256 is null: give the sum the publisher does publish (md5)")
            if (
                entry.get("licensed")
                and isinstance(origins[a["origin"]], str)
                and origins[a["origin"]].startswith(("http://", "https://"))
            ):
                raise ConfigError(
                    f"{where}: {name} is licensed: its origin {a['origin']!r} must be null or a lab "
                    f"path, not a public URL (give a mirror per host instead)"
                )
            seen = files.get(a["file"])
            if seen and seen[1:] != (a["sha256"], a["size"], a.get("md5")):
                raise ConfigError(
                    f"{where}: {a['file']} is listed again with another sha256 or size (first under {seen[0]})"
                )
            files.setdefault(a["file"], (name, a["sha256"], a["size"], a.get("md5")))
        if name.startswith("wmt"):
            _check_wmt_params(path, name, entry)
    benchmarks = doc.get("benchmarks", {})
    for b, value in benchmarks.items():
        for ds in [value] if isinstance(value, str) else value:
            if ds not in doc["datasets"]:
                raise ConfigError(f"{path}: benchmarks.{b}: {ds!r} is not a dataset of this catalogue")
    return Catalogue(path, doc["version"], origins, benchmarks, doc["datasets"])


def _check_wmt_params(path: Path, name: str, entry: dict) -> None:
    """A WMT entry's params: vocab_size (a whole number from 1), train and eval (lists of sources, each with
    the archive, one of the entry's artifacts, it is read from); ConfigError naming the place otherwise."""
    params = entry.get("params", {})
    vocab = params.get("vocab_size")
    if not params.get("train") or not params.get("eval") or vocab is None:
        raise ConfigError(f"{path}: datasets.{name}.params: needs vocab_size, train and eval")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise ConfigError(f"{path}: datasets.{name}.params.vocab_size: {shown(vocab)} is not a whole number from 1")
    archives = {a["file"] for a in entry["artifacts"]}
    for split in ("train", "eval"):
        sources = params[split]
        if not isinstance(sources, list):
            raise ConfigError(f"{path}: datasets.{name}.params.{split}: {shown(sources)} is not a list of sources")
        for j, src in enumerate(sources):
            archive = src.get("archive") if isinstance(src, dict) else None
            if not isinstance(archive, str) or archive not in archives:
                what = shown(archive) if isinstance(src, dict) else f"missing ({shown(src)} is not a mapping)"
                raise ConfigError(
                    f"{path}: datasets.{name}.params.{split}.{j}: archive {what} is not one of {name}'s artifacts"
                )


MAX_ORIGIN = 2048
ORIGIN_TEXT = re.compile(rf"[^\s\x00-\x1f\x7f]{{1,{MAX_ORIGIN}}}")


def host_sources(catalogue: Catalogue, names: list[str], host: str, hostvars: dict) -> dict[str, str]:
    """file -> where this host takes it from (URL or host path); ConfigError when there is none."""
    mirror = hostvars.get("gpulab_mirror")
    origins = dict(catalogue.origins)
    override = hostvars.get("datasets_origins") or {}
    if not isinstance(override, dict):
        raise ConfigError(f"host {host}: datasets_origins must be a mapping of origin name to URL or path")
    for key, value in override.items():  # a misspelt origin would leave the host on the public one: refused
        if key not in catalogue.origins:
            raise ConfigError(
                f"host {host}: datasets_origins.{excerpt(key, 60)}: no such origin in {catalogue.path} "
                f"(origins: {', '.join(catalogue.origins)})"
            )
        if value is not None and (not isinstance(value, str) or not ORIGIN_TEXT.fullmatch(value)):
            raise ConfigError(
                f"host {host}: datasets_origins.{key}: {shown(value)} is not one URL or path (no space, at most "
                f"{MAX_ORIGIN} characters)"
            )
    origins.update(override)
    out = {}
    for name in names:
        entry = catalogue.datasets[name]
        for a in entry["artifacts"]:
            if mirror:
                out[a["file"]] = f"{str(mirror).rstrip('/')}/datasets/{name}/{a['file']}"
                continue
            base = origins.get(a["origin"])
            if not base:
                what = "licensed data: never taken from a public site; " if entry.get("licensed") else ""
                raise ConfigError(
                    f"host {host}: {name}: {what}no source for {a['file']} (set "
                    f"datasets_origins.{a['origin']} to a lab path or mirror URL, or gpulab_mirror)"
                )
            base = str(base)
            if not base.startswith(("http://", "https://", "file:///", "/", "controller:/")):
                raise ConfigError(
                    f"host {host}: datasets_origins.{a['origin']}: {shown(base)} is neither an http(s) "
                    f"URL, an absolute path on the host nor controller:/<path>"
                )
            if base.startswith("controller:") and not _is_dir(base[len("controller:") :]):
                raise ConfigError(
                    f"host {host}: datasets_origins.{a['origin']}: {excerpt(base[len('controller:') :], 120)} is "
                    f"not a folder on this controller"
                )
            out[a["file"]] = f"{base.rstrip('/')}/{a.get('path', a['file'])}"
    return out


def _is_dir(path: str) -> bool:
    """Whether ``path`` is a folder of this controller; False where it cannot be (a name of more than 255 bytes)."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


@dataclass
class DatasetsResult:
    names: list[str]
    playbook: object | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.playbook is not None and self.playbook.ok

    @property
    def changed(self) -> int:
        return self.playbook.changed if self.playbook is not None else 0


@dataclass
class Plan:
    """What a datasets run will do, checked before any host is touched."""

    catalogue: Catalogue
    names: list[str]
    sources: dict[str, dict[str, str]]  # host -> file -> URL or host path
    storage: str | None


def plan(hosts, names, *, inventory, catalogue=None, storage: str | None = None) -> Plan:
    """Resolve names and every host's sources; ConfigError (exit 2) for anything wrong."""
    from lab.hosts import inventory as inv

    cat = catalogue if isinstance(catalogue, Catalogue) else load_catalogue(catalogue)
    chosen = cat.resolve(names)
    if storage is not None and storage not in STORAGE_MODES:
        raise ConfigError(f"--storage {shown(storage)}: use one of {', '.join(STORAGE_MODES)}")
    loaded = inv.load(inventory)
    sources = {}
    for h in hosts:
        raw = loaded.raw_vars(h.name)
        mode = storage or raw.get("datasets_storage", "copy")
        if not isinstance(mode, str) or mode not in STORAGE_MODES:
            raise ConfigError(
                f"{inventory}: host {h.name}: datasets_storage {shown(mode)}: use one of {', '.join(STORAGE_MODES)}"
            )
        try:
            sources[h.name] = host_sources(cat, chosen, h.name, raw)
        except ConfigError as exc:  # the variables are the inventory's: its file named
            raise ConfigError(f"{inventory}: {exc.message}") from None
    return Plan(cat, chosen, sources, storage)


def check_root(root: str | None) -> str | None:
    """``--root``: an absolute path on the hosts (or ~/...), one plain path; ConfigError otherwise."""
    if root is None:
        return None
    if (
        not isinstance(root, str)
        or not root.startswith(("/", "~/"))
        or len(root) > 4096
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in root)
        or ".." in root.split("/")
    ):
        raise ConfigError(
            f"--root {shown(root)}: give an absolute path on the hosts (/... or ~/...), without '..' or control characters"
        )
    return root.rstrip("/") or "/"


def prepare(
    hosts,
    names,
    *,
    inventory,
    catalogue=None,
    storage: str | None = None,
    root: str | None = None,
    check: bool = False,
    artifacts: str | Path | None = "artifacts",
    on_event: Callable[[dict], None] | None = None,
    quiet: bool = False,
    envvars: dict | None = None,
    planned: Plan | None = None,
) -> DatasetsResult:
    """Fetch, verify and prepare ``names`` on ``hosts`` (lab.hosts.inventory Host records)."""
    from lab.hosts import ansible

    root = check_root(root)
    p = planned or plan(hosts, names, inventory=inventory, catalogue=catalogue, storage=storage)
    cat, chosen = p.catalogue, p.names
    fetch = []
    seen = set()
    for name in chosen:
        for a in cat.datasets[name]["artifacts"]:
            if a["file"] not in seen:
                seen.add(a["file"])
                fetch.append(artifact_sums(a))
    from lab.hosts import reach

    up, down = reach.split(hosts, inventory)  # an unreachable host fails; the others go on
    if not up:
        result = reach.none_reached(PLAYBOOK, down, check)
        return DatasetsResult(chosen, result, ansible.summary_lines(result))
    with tempfile.TemporaryDirectory(prefix="gpulab-datasets-") as tmp:
        extravars = {
            "datasets_specs": [cat.spec(n) for n in chosen],
            "datasets_fetch": fetch,
            "datasets_sources": p.sources,
            "datasets_runner_src": str(runnerdist.stage(Path(tmp))),
        }
        if p.storage:
            extravars["datasets_storage"] = p.storage
        if root:
            extravars["datasets_root"] = root
        result = ansible.run_playbook(
            PLAYBOOK,
            inventory,
            [h.name for h in up],
            extravars=extravars,
            check=check,
            artifacts_root=artifacts or "artifacts",
            on_event=on_event,
            quiet=quiet,
            envvars=envvars,
            known_hosts={h.name: h.known_hosts for h in up},
        )
    reach.merged(result, down)
    return DatasetsResult(chosen, result, ansible.summary_lines(result))
