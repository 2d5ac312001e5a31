"""The system a log of a published MLPerf result tree belongs to.

Layouts (as the rounds published them)
--------------------------------------
v0.5   <org>/<submission...>/results/<system>/<benchmark>/result_N.txt with
       results/<system>/entry.json (hardware, framework, nodes[]: num_nodes,
       accelerator, num_accelerators per node).
v0.6+  <org>/results/<system>/<benchmark>/result_N.txt with
       <org>/systems/<system>.json. Three dialects were published: the v0.6
       schema (submitter, accelerator_model_name, accelerators_per_node,
       number_of_nodes, framework), a v0.5 entry (nodes[]), and NVIDIA's
       ``key: {"value": ...}`` lines whose ``entry`` value is a Python literal
       holding ``nodes`` as another one.

A system is its results folder: its name is the folder's name, its identity
the folder's path under the input root, so that two folders are never one
system (Google's v0.5 ``tpu`` folders of five submissions stay five systems).
The submitter is the systems file's (submitter, org), else the organisation
folder: the first folder under the input root above ``results`` (version
folders such as ``v0.5.0`` skipped), else the folder above ``results`` (v0.6)
or above the submission (v0.5). Descriptions are read through lab.core.bounded (a
regular file inside the input root, at most MAX_DESC_BYTES), never above the root.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from lab.core import bounded
from lab.core import paths
from lab.core import plaindata
from lab.results.logfacts import integer
from lab.core.mlperf import Rules

MAX_DESC_BYTES = 1 << 20
_VERSION = re.compile(r"^v?\d+(\.\d+)+$", re.I)
_NO_ACCEL = {"", "na", "n/a", "none", "-", "cpu"}


@dataclass
class SystemFacts:
    submitter: str
    system: str  # the results folder's name
    key: str  # the results folder's path under the input root
    submission: str | None = None  # v0.5: the folders between the organisation and results/
    device: str | None = None
    accelerator: str | None = None  # as the description writes it
    accelerators: int | None = None
    nodes: int | None = None
    framework: str | None = None
    division: str | None = None
    described_by: str | None = None
    fields: frozenset = frozenset()  # the keys of its description
    notes: list[str] = field(default_factory=list)


def find_results_dir(log: Path, root: Path) -> Path | None:
    """The ``results`` folder above ``log`` with at least <system>/<benchmark>/ below it."""
    parents = list(log.parents)
    for i, p in enumerate(parents):
        if p.name.lower() == "results" and i >= 2:
            return p
    return None


class TreeReader:
    """System facts per results folder, each description read once."""

    def __init__(self, root: Path, rules: Rules):
        self.root = Path(root)
        self.rules = rules
        self._cache: dict[Path, SystemFacts | None] = {}

    def system_of(self, log: Path) -> SystemFacts | None:
        results = find_results_dir(log, self.root)
        if results is None:
            return None
        sysdir = results / log.relative_to(results).parts[0]
        if sysdir not in self._cache:
            self._cache[sysdir] = self._read(results, sysdir)
        return self._cache[sysdir]

    # ------------------------------------------------------------------
    def _inside(self, p: Path) -> bool:
        """Under the input root, also once links in its folders are resolved (a link as the
        file itself is refused by read_description)."""
        if not (p == self.root or self.root in p.parents):
            return False
        real, top = paths.real(p if p == self.root else p.parent), paths.real(self.root)
        return real == top or top in real.parents

    def _read(self, results: Path, sysdir: Path) -> SystemFacts:
        org_dir = results.parent
        try:
            between = [x for x in org_dir.relative_to(self.root).parts if not _VERSION.match(x)]
        except ValueError:
            between = []
        entry = sysdir / "entry.json"
        sysfile = org_dir / "systems" / f"{sysdir.name}.json"
        if between:
            submitter, submission = between[0], "/".join(between[1:]) or None
        elif self._inside(entry) and os.path.isfile(entry) and org_dir != self.root:
            submitter, submission = org_dir.parent.name, org_dir.name
        else:
            submitter, submission = org_dir.name, None
        key = str(sysdir.relative_to(self.root)) if self._inside(sysdir) else sysdir.name
        facts = SystemFacts(submitter=submitter or sysdir.name, system=sysdir.name, key=key, submission=submission)
        for desc in (sysfile, entry):
            if not self._inside(desc):
                continue  # never read above the input folder
            doc, why = read_description(desc, self.root)
            if doc is None:
                if why:
                    facts.notes.append(why)
                continue
            self._apply(facts, doc, desc)
            break
        if facts.device is None:
            facts.notes.append(
                f"no system description for {sysdir.name} inside the input folder "
                f"(systems/{sysdir.name}.json or entry.json): the folder name stands alone"
            )
        return facts

    def _apply(self, facts: SystemFacts, doc: dict, desc: Path):
        rel = desc.relative_to(self.root) if self._inside(desc) else desc.name
        facts.described_by = str(rel)
        facts.fields = frozenset(doc)
        sub = _first(doc, "submitter", "org", "sumitter")
        if sub:
            facts.submitter = str(sub)
        if doc.get("framework"):
            facts.framework = str(doc["framework"])
        if isinstance(doc.get("division"), str):
            facts.division = doc["division"]
        nodes = doc.get("nodes")
        if isinstance(nodes, dict):
            nodes = [nodes]
        if isinstance(nodes, list) and nodes:
            accel, count, n_nodes, unknown = None, 0, 0, False
            for node in nodes:
                if not isinstance(node, dict):
                    continue
                nn = _count(node.get("num_nodes"), NODES) or 1
                na = _count(node.get("num_accelerators"), ACCELERATORS)
                n_nodes += nn
                if na is not None:
                    count += nn * na
                elif node.get("num_accelerators") is not None:  # given, but not a count: not known
                    unknown = True
                accel = accel or node.get("accelerator")
            facts.nodes = n_nodes or None
            self._device(facts, accel, None if unknown else count)
        elif doc.get("accelerator_model_name") is not None or doc.get("accelerators_per_node") is not None:
            nn = _count(_first(doc, "number_of_nodes", "number of nodes"), NODES) or 1
            per = _count(doc.get("accelerators_per_node"), ACCELERATORS)
            facts.nodes = nn
            self._device(facts, doc.get("accelerator_model_name"), None if per is None else per * nn)

    def _device(self, facts: SystemFacts, accel, count):
        name = str(accel).strip() if accel is not None else ""
        if name.lower() in _NO_ACCEL or count == 0:
            facts.device, facts.accelerators = "CPU", 0
            facts.accelerator = name or None
            return
        facts.accelerator = name
        facts.device = self.rules.device(name, published=True)
        facts.accelerators = count


NODES = (1, 100_000)  # hosts of one system
ACCELERATORS = (0, 1_024)  # accelerators of one host


def _count(v, bounds: tuple[int, int]) -> int | None:
    """A count of a system description within ``bounds``; None (not given) for a negative, fractional or absurd
    one (-3, 1e308): such a count is not taken as it is."""
    n = integer(v)
    return n if n is not None and bounds[0] <= n <= bounds[1] else None


def read_description(path: Path, root: Path) -> tuple[dict | None, str | None]:
    """(document, None), or (None, why) for a file that cannot be used; (None, None) if absent.
    Read through lab.core.bounded: a regular file inside ``root``, at most MAX_DESC_BYTES."""
    try:
        text = bounded.read_text(path, root=root, limit=MAX_DESC_BYTES, errors="replace")
    except bounded.Missing:
        return None, None
    except bounded.Unreadable as exc:
        return None, f"{path.name} {exc.reason}"
    try:
        doc = plaindata.loads(text)
    except ValueError:
        doc = _key_value_lines(text)
        if doc is None:
            return None, f"{path.name} is neither JSON nor 'key: {{json}}' lines"
    if not isinstance(doc, dict):
        return None, f"{path.name} is not a JSON object"
    return doc, None


def _key_value_lines(text: str) -> dict | None:
    """NVIDIA's v0.6 systems files: ``key: {"value": ..., "metadata": ...}`` per line."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, rest = line.partition(":")
        if not sep:
            return None
        try:
            v = plaindata.loads(rest)
        except ValueError:
            return None
        out[key.strip()] = v.get("value") if isinstance(v, dict) else v
    entry = _literal(out.get("entry"))
    if isinstance(entry, dict):
        entry = {k: (_literal(v) if k in ("nodes", "libraries") else v) for k, v in entry.items()}
        out = {**entry, **{k: v for k, v in out.items() if k != "entry"}}
    return out or None


def _literal(v):
    if not isinstance(v, str):
        return v
    try:
        return plaindata.literal(v[:MAX_DESC_BYTES])
    except ValueError:
        return v


def _first(d: dict, *keys):
    for k in keys:
        v = d.get(k)
        if v not in (None, ""):
            return v
    return None
