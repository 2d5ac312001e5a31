"""``python -m runner probe``: one JSON document describing this host.

Host, OS, kernel, CPU, memory, Python, the NVIDIA stack (driver, CUDA,
cuDNN, NCCL), framework versions and, per GPU, the facts that hardware
validation needs (PCIe link, ECC, retired pages, row remaps, power limit,
temperature, clocks, throttle reasons, NUMA placement).

Rules this module keeps:
- It imports no deep-learning framework. Framework versions come from
  ``importlib.metadata``; torch's own view of cuDNN/NCCL is used only when
  torch is already imported by the caller.
- Where the CUDA toolkit, cuDNN and NCCL headers and libraries are, and how a
  version is read from each, are runner.stackread's rules (shared with the
  audit's Ansible module).

Split by concern: runner.probe_host reads the host and its stack from files and
package metadata (under a root, with a given package-version function),
runner.probe_gpu reads the GPUs through NVML; this module holds the root
(``ROOT``, ``GPULAB_PROBE_ROOT``), assembles the document and is the command.
- Every field is read on its own: a call that is not supported (old GPU,
  old driver, old nvidia-ml-py, missing file) gives ``null`` for that field
  and never stops the rest. The reason is kept in the GPU's ``unavailable``
  map unless it is a plain "not supported".
- Without a driver or a GPU the document still comes out, with ``gpus: []``
  and ``nvidia: "no NVIDIA driver/GPU found: <reason>"``. With GPUs,
  ``nvidia`` is ``null``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

from runner import probe_host
from runner.probe_gpu import FieldReader, NvmlUnavailable, gpu_facts, load_nvml, nvml_reason, parse_indices
from runner.probe_gpu import THROTTLE_BAD, THROTTLE_BITS, decode_throttle  # noqa: F401  (the probe's names, kept)
from runner.probe_host import cpu_info, dist_version, framework_versions, memory_info, os_release

SCHEMA = 1

# Roots the probe reads; tests point them at a temporary tree.
ROOT = Path(os.environ.get("GPULAB_PROBE_ROOT", "/"))


# --------------------------------------------------------------------------
# the stack readers of runner.probe_host, under ROOT and with this module's dist_version


def cudnn_versions() -> list[dict]:
    return probe_host.cudnn_versions(ROOT, dist_version)


def nccl_versions() -> list[dict]:
    return probe_host.nccl_versions(ROOT, dist_version)


def cuda_toolkit_version() -> dict | None:
    return probe_host.cuda_toolkit_version(ROOT, dist_version)


def proc_driver_version() -> str | None:
    return probe_host.proc_driver_version(ROOT)


# --------------------------------------------------------------------------
# the document


def _library_stack() -> dict:
    """The stack's libraries found on disk (CUDA toolkit, cuDNN, NCCL); the driver's fields still empty."""
    cudnn = cudnn_versions()
    nccl = nccl_versions()
    toolkit = cuda_toolkit_version()
    return {
        "driver": None,
        "driver_source": None,
        "cuda_driver": None,
        "cuda_toolkit": toolkit["version"] if toolkit else None,
        "cuda_toolkit_source": toolkit["source"] if toolkit else None,
        "cudnn": cudnn[0]["version"] if cudnn else None,
        "cudnn_found": cudnn,
        "nccl": nccl[0]["version"] if nccl else None,
        "nccl_found": nccl,
        "nvml": None,
    }


def gather(gpu_indices=None, nvml=None) -> dict:
    """The probe document. ``gpu_indices``: which GPUs (default all).

    ``nvml`` is an initialised NVML module; by default it is loaded here.
    """
    uname = platform.uname()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "collected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "host": {"hostname": socket.gethostname(), "fqdn": None},
        "os": os_release(ROOT),
        "kernel": uname.release,
        "cpu": cpu_info(ROOT),
        "memory": memory_info(ROOT),
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "stack": {},
        "frameworks": framework_versions(dist_version),
        "nvidia": None,
        "gpu_count": 0,
        "gpus": [],
    }
    try:
        doc["host"]["fqdn"] = socket.getfqdn()
    except Exception:
        pass

    stack = doc["stack"] = _library_stack()

    owned = nvml is None
    try:
        if nvml is None:
            nvml = load_nvml()
    except NvmlUnavailable as exc:
        stack["driver"] = proc_driver_version()
        stack["driver_source"] = "/proc/driver/nvidia/version" if stack["driver"] else None
        doc["nvidia"] = f"no NVIDIA driver/GPU found: {exc}"
        return doc
    try:
        r = FieldReader(nvml)
        stack["driver"] = r.get("driver", "nvmlSystemGetDriverVersion")
        if stack["driver"]:
            stack["driver_source"] = "NVML"
        else:
            stack["driver"] = proc_driver_version()
            stack["driver_source"] = "/proc/driver/nvidia/version" if stack["driver"] else None
        stack["cuda_driver"] = r.get(
            "cuda_driver",
            ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"),
            convert=lambda v: f"{int(v) // 1000}.{(int(v) % 1000) // 10}",
        )
        stack["nvml"] = r.get("nvml", "nvmlSystemGetNVMLVersion")
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            doc["nvidia"] = f"no NVIDIA driver/GPU found: NVML cannot count GPUs: {nvml_reason(exc)}"
            return doc
        doc["gpu_count"] = count
        if count == 0:
            doc["nvidia"] = "no NVIDIA driver/GPU found: the driver reports 0 GPUs"
            return doc
        for i in parse_indices(gpu_indices, count):
            try:
                doc["gpus"].append(gpu_facts(nvml, i, ROOT))
            except Exception as exc:  # the handle itself failed (GPU fell off the bus)
                doc["gpus"].append({"index": i, "error": f"GPU {i} cannot be read: {nvml_reason(exc)}"})
        return doc
    finally:
        if owned:
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass


# --------------------------------------------------------------------------
# command line (runner/cli.py)


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print compact JSON (default: indented JSON)")
    parser.add_argument("--gpus", default="all", help="all (default) or comma-separated GPU indices")


def parse_gpu_list(text: str) -> list[int] | None:
    from runner.cli import UsageError

    text = (text or "all").strip()
    if text == "all":
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise UsageError(f"runner probe: --gpus {text!r} is not 'all' or a list of indices such as 0,2") from None
    if not out or any(i < 0 for i in out):
        raise UsageError(f"runner probe: --gpus {text!r} is not 'all' or a list of indices such as 0,2")
    return out


def main(args) -> int:
    from runner.cli import UsageError

    indices = parse_gpu_list(getattr(args, "gpus", "all"))
    try:
        doc = gather(indices)
    except ValueError as exc:
        raise UsageError(f"runner probe: {exc}") from None
    if args.json:
        print(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    else:
        print(json.dumps(doc, sort_keys=True, indent=2))
    return 0
