"""GPU references of `invoke validate` (inventory/references/gpus.yml): loading
and checking the file, the model a GPU is judged as (the device catalogue's
name, lab/data/devices.yml, the one reports print), and writing a baseline
file back.
"""

from __future__ import annotations

from pathlib import Path

from lab.core import schema
from lab.core.errors import ConfigError
from lab.core.mlperf import default_rules
from lab.validate.verdict import HOST_METRICS

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "inventory" / "references" / "gpus.yml"


def load_references(path: Path | str = REFERENCES) -> dict:
    """The references file, checked against lab/schemas/gpu-references.schema.json."""
    data = schema.load_yaml(path, "gpu-references")
    for name, model in data["models"].items():
        if model_label(name) != name:
            raise ConfigError(f"{path}: models.{name}: not a device name of lab/data/devices.yml "
                              f"(it calls this model {model_label(name)})")
        for metric, ref in model["metrics"].items():
            where = f"{path}: models.{name}.metrics.{metric}"
            if ref.get("scope", "host" if metric in HOST_METRICS else "gpu") != ("host" if metric in HOST_METRICS else "gpu"):
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

    head = ("# GPU references made by `invoke validate --baseline` (lab/validate/fleet.py).\n"
            "# Checked against lab/schemas/gpu-references.schema.json when loaded.\n")
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)
