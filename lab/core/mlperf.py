"""MLPerf rules and names as data: benchmarks, devices and the report's statistics.

The numbers the reports depend on (targets, required run counts, device names,
test thresholds) live in YAML under ``lab/data/`` and are validated against the
JSON schemas in ``lab/schemas/`` when loaded. A bad file is a ``ConfigError``
naming the file and the place in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lab.core.errors import ConfigError
from lab.core.schema import load_yaml

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def _norm(name: str) -> str:
    """Compare names without case, vendor words or separators."""
    s = str(name).lower()
    s = re.sub(r"nvidia|tesla", " ", s)
    return re.sub(r"[^a-z0-9]", "", s)


def _add_alias(table: dict[str, str], alias: str, name: str, source: Path) -> None:
    """Record that ``alias`` names ``name``; ConfigError when it already names another entry."""
    key = _norm(alias)
    other = table.get(key)
    if other and other != name:
        raise ConfigError(f"{source}: alias {alias!r} names both {other} and {name}")
    table[key] = name


@dataclass(frozen=True)
class Benchmark:
    """One benchmark of lab/data/benchmarks.yml (its header says what each field means)."""

    name: str
    title: str
    aliases: tuple[str, ...]
    metric: str
    target: float | dict
    """the quality target as v0.5 logs write it; a mapping (Mask R-CNN: bbox, segm) must be met in every metric"""
    runs_required: int
    converged_required: int | None
    sample_unit: str
    train_samples: int | None


class Rules:
    """Benchmarks, devices and report settings, loaded from one data folder."""

    def __init__(self, data_dir: Path | None = None):
        data_dir = Path(data_dir) if data_dir else DATA_DIR
        bdoc = load_yaml(data_dir / "benchmarks.yml", "benchmarks")
        ddoc = load_yaml(data_dir / "devices.yml", "devices")
        self.settings = load_yaml(data_dir / "report.yml", "report")
        # Per MLPerf round: how its logs' runs are scored (lab.report.scoring).
        self.rounds: dict[str, dict] = load_yaml(data_dir / "rounds.yml", "rounds")["rounds"]
        self.ruleset = bdoc["ruleset"]
        self.benchmarks: dict[str, Benchmark] = {}
        self._bench_alias: dict[str, str] = {}
        for name, b in bdoc["benchmarks"].items():
            self.benchmarks[name] = Benchmark(
                name=name,
                title=b["title"],
                aliases=tuple(b["aliases"]),
                metric=b["metric"],
                target=b["target"],
                runs_required=b["runs_required"],
                converged_required=b.get("converged_required"),
                sample_unit=b["sample_unit"],
                train_samples=b.get("train_samples"),
            )
            for alias in (name, *b["aliases"]):
                _add_alias(self._bench_alias, alias, name, data_dir / "benchmarks.yml")
        self.device_power: dict[str, float | None] = {}
        self._dev_alias: dict[str, str] = {}
        self._lab_alias: set[str] = set()  # keys that only this lab's own hosts use
        patterns = []
        for name, d in ddoc["devices"].items():
            self.device_power[name] = d.get("power_w")
            self._lab_alias.update(_norm(a) for a in d.get("lab_aliases", []))
            for alias in (name, *d["aliases"], *d.get("lab_aliases", [])):
                _add_alias(self._dev_alias, alias, name, data_dir / "devices.yml")
                parts = re.findall(r"[a-z0-9]+", re.sub(r"nvidia|tesla", " ", alias.lower()))
                if parts:
                    patterns.append((len("".join(parts)), "[-_ ]*".join(map(re.escape, parts))))
        # Longest names first, so that "V100-PCIE-16GB" wins over "V100".
        patterns.sort(key=lambda p: -p[0])
        # A device name may follow "4x" and be followed by "x4", "-4gpu", "_16gb"...
        self._dev_re = re.compile(
            r"(?:(?<![a-z0-9])|(?<=[0-9]x)|(?<=[-_ ]x))(" + "|".join(p for _, p in patterns) + r")(?![a-wyz0-9])"
        )

    # -- names -------------------------------------------------------------
    def benchmark(self, name) -> str | None:
        """The canonical benchmark name for a logged or folder name, or None."""
        if name is None:
            return None
        return self._bench_alias.get(_norm(name))

    def device(self, name, published: bool = False) -> str:
        """The canonical device name; an unknown name is kept, minus vendor words.

        ``published``: the name comes from a published system description, where this
        lab's own shorthands (devices.yml lab_aliases, a bare "V100") do not apply.
        """
        s = str(name).strip()
        key = _norm(s)
        canon = None if (published and key in self._lab_alias) else self._dev_alias.get(key)
        if canon:
            return canon
        cleaned = re.sub(r"(?i)\b(nvidia|tesla)\b", " ", s)
        return " ".join(cleaned.split()) or s

    def find_system(self, text: str) -> tuple[str | None, int | None]:
        """Device and GPU count named in a folder name or a platform string.

        Understood: ``4xT4``, ``4x Tesla T4``, ``T4x4``, ``t4_x4``, ``v100-pcie-3gpu``,
        ``3gpus`` (count only), ``T4`` (device only). Returns (device, count),
        either possibly None.
        """
        s = str(text).lower()
        s = re.sub(r"(nvidia|tesla)[-_ ]*", "", s)
        device = count = None
        m = self._dev_re.search(s)
        if m:
            device = self._dev_alias.get(_norm(m.group(1)))
            before, after = s[: m.start()], s[m.end() :]
            c = re.search(r"(?<![a-z0-9.])(\d+)[-_ ]*x[-_ ]*$", before)
            if not c:
                c = re.match(r"^[-_ ]*x[-_ ]*(\d+)(?![0-9])", after)
            if not c:
                c = re.match(r"^[-_ ]*(\d+)[-_ ]*gpus?(?![a-z])", after)
            if c:
                count = int(c.group(1))
        if count is None:
            c = re.search(r"(?<![a-z0-9.])(\d+)[-_ ]*gpus?(?![a-z])", s)
            if c:
                count = int(c.group(1))
        return device, count

    # -- quality -----------------------------------------------------------
    @staticmethod
    def meets(value, target) -> bool | None:
        """Whether a logged quality value meets a target; None when not comparable.

        A mapping target (Mask R-CNN: bbox and segm) needs every metric met; names
        compare without case. A numeric target in 0..1 against values logged in
        percent (or the other way round) is compared on the value's scale.
        """
        if isinstance(target, dict):
            if not isinstance(value, dict):
                return None
            vals = {str(k).lower(): v for k, v in value.items()}
            results = []
            for k, t in target.items():
                v = vals.get(str(k).lower())
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    return None
                results.append(Rules.meets(v, t))
            return all(results)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        if not isinstance(target, (int, float)) or isinstance(target, bool):
            return None
        if target <= 1 < value <= 100:
            target = target * 100
        elif value <= 1 < target <= 100:
            value = value * 100
        return value >= target - 1e-12


@lru_cache(maxsize=4)
def default_rules() -> Rules:
    return Rules()


def bench_order(rules: Rules, labels) -> list[str]:
    """Benchmark labels (``gnmt``, ``gnmt [v0.6]``) in the rules' benchmark order, once each."""
    order = {name: i for i, name in enumerate(rules.benchmarks)}

    def key(label):
        base = label.split(" [")[0]
        return (order.get(base, len(order)), base, label)

    return sorted(set(labels), key=key)
