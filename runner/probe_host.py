"""The probe's host and stack facts read from files and package metadata: OS release, CPU,
memory, framework versions, and the NVIDIA stack (driver from /proc, CUDA toolkit, cuDNN, NCCL;
where and how: runner.stackread). Every reader takes the root it reads under (``/`` on a host)
and, where it asks for installed Python packages, the function that tells their versions;
runner.probe passes both."""

from __future__ import annotations

import os
import platform
import re
import sys
from pathlib import Path
from typing import Callable

from runner import stackread


def dist_version(name: str) -> str | None:
    """Installed version of a distribution, without importing it."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken dist-info must not stop the probe
        return None


def os_release(root: Path) -> dict:
    text = stackread.read(root / "etc/os-release") or stackread.read(root / "usr/lib/os-release")
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            fields[key.strip()] = value.strip().strip('"').strip("'")
    return {
        "id": fields.get("ID"),
        "version_id": fields.get("VERSION_ID"),
        "pretty_name": fields.get("PRETTY_NAME"),
        "id_like": fields.get("ID_LIKE"),
    }


def cpu_info(root: Path) -> dict:
    model = None
    sockets: set[str] = set()
    for line in (stackread.read(root / "proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "physical id":
            sockets.add(value.strip())
    return {
        "model": model or platform.processor() or None,
        "logical_cpus": os.cpu_count(),
        "sockets": len(sockets) or None,
        "arch": platform.machine() or None,
    }


def memory_info(root: Path) -> dict:
    info: dict[str, int] = {}
    for line in (stackread.read(root / "proc/meminfo") or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            info[m.group(1)] = int(m.group(2))
    total = info.get("MemTotal")
    avail = info.get("MemAvailable")
    return {
        "total_mib": total // 1024 if total is not None else None,
        "available_mib": avail // 1024 if avail is not None else None,
    }


def framework_versions(dist_version: Callable[[str], str | None] = dist_version) -> dict:
    tf = None
    for dist in ("tensorflow", "tensorflow-gpu", "tensorflow-cpu", "tf-nightly"):
        tf = dist_version(dist)
        if tf:
            break
    return {
        "torch": dist_version("torch"),
        "tensorflow": tf,
        "mlperf_logging": dist_version("mlperf-logging") or dist_version("mlperf_logging"),
        "nvidia_ml_py": dist_version("nvidia-ml-py"),
        "numpy": dist_version("numpy"),
    }


# --------------------------------------------------------------------------
# stack: driver, CUDA, cuDNN, NCCL


def _header_versions(root: Path, patterns, defines) -> list[dict]:
    return [{"version": v, "source": f"header {path}"} for path, v in stackread.headers(root, patterns, defines)]


def _lib_versions(root: Path, prefix: str) -> list[dict]:
    """``libX.so.A.B.C`` files -> versions (in the order of stackread.LIB_DIRS)."""
    return [{"version": v, "source": f"library {path}"} for path, v in stackread.libraries(root, prefix)]


def _packages_headers_libraries(root: Path, dist_version, component: str, headers, defines, lib: str) -> list[dict]:
    """What NVIDIA's Python packages, the headers and the libraries under ``root`` say of ``component``."""
    found = [
        {"version": v, "source": f"python package {dist}"}
        for dist in stackread.DISTS[component]
        if (v := dist_version(dist))
    ]
    return found + _header_versions(root, headers, defines) + _lib_versions(root, lib)


def cudnn_versions(root: Path, dist_version: Callable[[str], str | None] = dist_version) -> list[dict]:
    found = []
    torch_mod = sys.modules.get("torch")  # only if the caller imported it
    if torch_mod is not None:
        try:
            v = torch_mod.backends.cudnn.version()
            if v:
                major, minor, patch = (
                    (v // 10000, (v % 10000) // 100, v % 100) if v >= 90000 else (v // 1000, (v % 1000) // 100, v % 100)
                )
                found.append({"version": f"{major}.{minor}.{patch}", "source": "torch.backends.cudnn"})
        except Exception:
            pass
    return found + _packages_headers_libraries(
        root, dist_version, "cudnn", stackread.CUDNN_HEADERS, stackread.CUDNN_DEFINES, "libcudnn"
    )


def nccl_versions(root: Path, dist_version: Callable[[str], str | None] = dist_version) -> list[dict]:
    found = []
    torch_mod = sys.modules.get("torch")
    if torch_mod is not None:
        try:
            v = torch_mod.cuda.nccl.version()
            if isinstance(v, tuple):
                found.append({"version": ".".join(map(str, v)), "source": "torch.cuda.nccl"})
            elif v:
                found.append({"version": f"{v // 1000}.{(v % 1000) // 100}.{v % 100}", "source": "torch.cuda.nccl"})
        except Exception:
            pass
    return found + _packages_headers_libraries(
        root, dist_version, "nccl", stackread.NCCL_HEADERS, stackread.NCCL_DEFINES, "libnccl"
    )


def cuda_toolkit_version(root: Path, dist_version: Callable[[str], str | None] = dist_version) -> dict | None:
    version, source = stackread.cuda_version(root / stackread.CUDA_HOME)
    if version:
        return {"version": version, "source": source}
    # no system toolkit: the CUDA a pip-installed framework brings (PyTorch's build, the runtime wheel)
    torch_mod = sys.modules.get("torch")
    try:
        v = torch_mod.version.cuda if torch_mod is not None else None
    except Exception:
        v = None
    if v:
        return {"version": str(v), "source": "torch.version.cuda"}
    for dist in stackread.DISTS["cuda"]:
        v = dist_version(dist)
        if v:
            return {"version": v, "source": f"python package {dist}"}
    return None


def proc_driver_version(root: Path) -> str | None:
    text = stackread.read(root / "proc/driver/nvidia/version")
    if not text:
        return None
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+([\d.]+)", text) or re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
    return m.group(1) if m else None
