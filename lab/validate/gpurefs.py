"""GPU references of `invoke validate` (inventory/references/gpus.yml): loading
and checking the file, the model a GPU is judged as (the device catalogue's
name, lab/data/devices.yml, the one reports print), and writing a baseline
file back: from hosts (lab.validate.fleet.build_references) or from the history
database's known-good GPUs (``baseline_from_history``, its figures handed in as
plain data by the entry point: lab.history.baseline).
"""

from __future__ import annotations

import copy
import statistics
from pathlib import Path

from lab.core import schema, writes
from lab.core.errors import CheckFailed, ConfigError
from lab.core.mlperf import default_rules
from lab.validate.verdict import GPU_METRICS, HOST_METRICS, UNITS

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "inventory" / "references" / "gpus.yml"


def load_references(path: Path | str = REFERENCES) -> dict:
    """The references file, checked against lab/schemas/gpu-references.schema.json (whose numbers are finite ones,
    lab.core.schema: every comparison with .nan is false, each figure and temperature would pass)."""
    data = schema.load_yaml(path, "gpu-references")
    for name, model in data["models"].items():
        if model_label(name) != name:
            raise ConfigError(
                f"{path}: models.{name}: not a device name of lab/data/devices.yml "
                f"(it calls this model {model_label(name)})"
            )
        for metric, ref in model["metrics"].items():
            where = f"{path}: models.{name}.metrics.{metric}"
            if ref.get("scope", "host" if metric in HOST_METRICS else "gpu") != (
                "host" if metric in HOST_METRICS else "gpu"
            ):
                raise ConfigError(f"{where}: scope {ref.get('scope')!r} does not fit this metric")
            for side in ("lower", "upper"):
                w, f = ref.get(f"warn_{side}"), ref.get(side)
                if w is not None and f is not None and w > f:
                    raise ConfigError(f"{where}: warn_{side} {w} is wider than {side} {f}")
    checks = data["checks"]
    if checks["temperature"]["idle_warn_c"] > checks["temperature"]["idle_fail_c"]:
        raise ConfigError(f"{path}: checks.temperature: idle_warn_c is above idle_fail_c")
    if checks["retired_pages"]["warn"] > checks["retired_pages"]["fail"]:
        raise ConfigError(f"{path}: checks.retired_pages: warn is above fail")
    checks["xid"]["names"] = {str(k): v for k, v in (checks["xid"].get("names") or {}).items()}
    return data


def model_label(name: str | None) -> str:
    """The device catalogue's name (lab/data/devices.yml, the one reports print):
    'Tesla V100-PCIE-16GB' -> 'V100-PCIe', 'NVIDIA H200' -> 'H200'; an unknown
    name is kept, minus the vendor words."""
    return default_rules().device(name or "") if (name or "").strip() else ""


def model_key(gpu_name: str | None, references: dict) -> str | None:
    """The references' model (a catalogue name) for an NVML name, or None."""
    label = model_label(gpu_name)
    for key, model in references["models"].items():
        if label in {model_label(x) for x in (key, *model.get("names", []))}:
            return key
    return None


def dump_references(data: dict) -> str:
    import yaml

    head = (
        "# GPU references made by `invoke validate --baseline` (lab/validate/fleet.py).\n"
        "# Checked against lab/schemas/gpu-references.schema.json when loaded.\n"
    )
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def history_sources() -> dict[str, list[str]]:
    """Reference metric -> the check names of validate.json that carry its figure (for lab.history.baseline):
    the figure's own check, its trend record (there even for a model with no references yet), and the
    power under load."""
    out = {m: [m, f"{m} trend"] for m in GPU_METRICS}
    out["load_power_w"] = ["power under load"]
    return out


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    cuts = statistics.quantiles(values, n=10, method="inclusive")
    return cuts[0], statistics.median(values), cuts[-1]


def from_history(stats: dict, references: dict, note: str | None = None) -> dict:
    """A references document whose figures are the medians of known-good GPUs in the history database
    (``stats``: lab.history.baseline.known_good, plain data); p10 and p90, the number of values, GPUs and
    validates and the time range in each metric's source. Models and metrics not in ``stats`` are kept."""
    out = copy.deepcopy(references)
    tol = references["baseline"]
    for label, metrics in sorted(stats.items()):
        key = model_key(label, references) or model_label(label)
        entry = out["models"].setdefault(key, {"names": [label], "metrics": {}})
        for metric, e in sorted(metrics.items()):
            values = [float(v) for v in e.get("values") or [] if isinstance(v, (int, float))]
            if metric not in history_sources() or not values:
                continue
            p10, p50, p90 = _percentiles(values)
            unit = UNITS.get(metric, "")
            m = {
                "value": round(p50, 3),
                "unit": unit,
                "lower": tol["lower"],
                "upper": tol["upper"],
                "source": f"history {str(e.get('first'))[:10]}..{str(e.get('last'))[:10]}: median of {len(values)} "
                f"value(s) of {e.get('gpus')} known-good GPU(s) in {e.get('validations')} validate(s) "
                f"(p10 {p10:.4g}, p90 {p90:.4g} {unit})".replace(" )", ")")
                + (f" ({note})" if note else ""),
            }
            if tol.get("warn_lower") is not None:
                m["warn_lower"] = tol["warn_lower"]
            entry["metrics"][metric] = m
    schema.conform(out, "gpu-references", "baseline references")
    return out


def baseline_from_history(stats: dict, references: Path | str, out_dir: Path | str, where: str) -> Path:
    """Write ``<out_dir>/<UTC stamp>/references-baseline.yml`` from ``stats`` (see from_history); the path.
    CheckFailed when the history holds no known-good figure (``where``: the database, for the message)."""
    import datetime as dt

    if not any(e.get("values") for metrics in stats.values() for e in metrics.values()):
        raise CheckFailed(
            f"baseline: the history database {where} holds no figure of a known-good GPU "
            "(passing validates of GPUs not in quarantine; `invoke history.import results` loads them)"
        )
    data = from_history(stats, load_references(references), note="invoke validate --baseline --from-history")
    out = Path(out_dir) / dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / "references-baseline.yml"
    writes.writable(out, files=[path.name], what="--out")
    writes.folder(out, "--out")
    writes.write_text(path, dump_references(data), "--out")
    return path
