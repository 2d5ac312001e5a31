"""Host-wide checks of `invoke validate`: the installed stack (driver, CUDA,
cuDNN, NCCL, framework) against the host's stack profile (lab.core.versions, the
one version rule `invoke audit` uses too) and the GPU count against the
inventory. The per-GPU checks are lab.validate.gpuchecks'.
"""

from __future__ import annotations

import re

from lab.core import versions
from lab.validate.verdict import FAIL, NO_GPU, PASS, WARN, host_field, check


def _mm(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


SYSTEM_SOURCES = ("package", "header", "library")  # the system's own installation, as the runner's probe names it


def installed_version(stack: dict, comp: str) -> str | None:
    """The cuDNN or NCCL of a probe as `invoke audit` reads it: the system's first, the environment's
    wheels (``python package nvidia-cudnn-cu13``) or the framework's view only where the system has none.

    A host may have both (a CUDA image with its own cuDNN, and a PyTorch from PyPI with another);
    the profile's packages are the system's. The runner's ``cudnn``/``nccl`` fields are the
    framework's view (what a run loaded) and stay in manifests as they are.
    """
    found = [f for f in stack.get(f"{comp}_found") or [] if isinstance(f, dict) and f.get("version")]
    for kinds in (SYSTEM_SOURCES, ("python package",), ("torch",)):
        for f in found:
            if str(f.get("source", "")).startswith(kinds):
                return str(f["version"])
    return stack.get(comp)


def stack_checks(probe: dict, expected: dict | None) -> list[dict]:
    stack = probe.get("stack") or {}
    fw = probe.get("frameworks") or {}
    out = []
    found = {
        "driver": stack.get("driver"),
        "cuda": stack.get("cuda_toolkit"),
        "cudnn": installed_version(stack, "cudnn"),
        "nccl": installed_version(stack, "nccl"),
        "torch": fw.get("torch"),
        "tensorflow": fw.get("tensorflow"),
    }
    if expected is None:
        out.append(
            check(
                "stack",
                WARN,
                {k: v for k, v in found.items() if v},
                "a stack profile",
                "no expected versions for this host's stack profile: versions not checked",
            )
        )
    else:
        for comp, want in expected.items():
            if want is None:
                continue
            have = found.get(comp, fw.get(comp))
            if have is None:
                out.append(
                    check(f"stack {comp}", FAIL, None, str(want), f"{comp} {want} expected, not found on the host")
                )
            elif versions.agrees(have, want):
                out.append(check(f"stack {comp}", PASS, have, str(want), f"{comp} {have} as the profile says"))
            else:
                out.append(check(f"stack {comp}", FAIL, have, str(want), f"{comp} is {have}, the profile says {want}"))
    # the driver must support the toolkit
    drv, tk = _mm(stack.get("cuda_driver")), _mm(stack.get("cuda_toolkit"))
    if drv and tk:
        if drv < tk:
            out.append(
                check(
                    "driver supports CUDA",
                    FAIL,
                    stack.get("cuda_driver"),
                    f">= {tk[0]}.{tk[1]}",
                    f"driver {stack.get('driver')} supports CUDA up to {stack.get('cuda_driver')}, "
                    f"the toolkit is {stack.get('cuda_toolkit')}",
                )
            )
        else:
            out.append(
                check(
                    "driver supports CUDA",
                    PASS,
                    stack.get("cuda_driver"),
                    f">= {tk[0]}.{tk[1]}",
                    f"driver supports CUDA {stack.get('cuda_driver')}, toolkit {stack.get('cuda_toolkit')}",
                )
            )
    return out


def count_checks(host, probe: dict, gpus: list[dict]) -> list[dict]:
    want = host_field(host, "gpu_count", "auto") if host is not None else "auto"
    have = probe.get("gpu_count", len(gpus))
    readable = sum(1 for g in gpus if "error" not in g)
    out = []
    if want in (None, "auto"):
        out.append(check("GPU count", PASS, have, "auto", f"{have} GPU(s) found (inventory says auto)"))
    elif have < int(want):
        out.append(
            check(
                "GPU count",
                FAIL,
                have,
                str(want),
                f"{have} GPU(s) found, the inventory says {want}: {int(want) - have} missing",
            )
        )
    elif have > int(want):
        out.append(check("GPU count", FAIL, have, str(want), f"{have} GPU(s) found, the inventory says {want}"))
    else:
        out.append(check("GPU count", PASS, have, str(want), f"{have} GPU(s) as the inventory says"))
    if readable < len(gpus):
        bad = [g for g in gpus if "error" in g]
        out.append(check("GPUs readable", FAIL, readable, str(len(gpus)), "; ".join(g["error"] for g in bad)))
    return out


def expects_gpus(host) -> bool:
    """Whether the inventory expects this host to have GPUs: a count of one or more, or a GPU model named
    (``auto`` for both, a count of 0 or the model CPU expects none: a CPU host). The sweep's health gate
    asks the same (lab.sweep.gate): one rule for both verdicts."""
    if host is None:
        return True
    count = host_field(host, "gpu_count", "auto")
    model = host_field(host, "gpu_model", "auto")
    if count not in (None, "auto"):
        try:
            return int(count) > 0
        except (TypeError, ValueError):
            return True
    return str(model).lower() not in ("", "auto", "none", "cpu")  # CPU: lab/data/devices.yml's CPU device


def no_gpu_checks(host, probe: dict) -> list[dict]:
    """A host whose probe found no GPU: a CPU host where the inventory expects none (PASS, saying so),
    else the FAIL "GPU present" with the probe's reason."""
    reason = probe.get("nvidia") or "no GPU reported"
    detail = reason.split(": ", 1)[1] if reason.startswith("no NVIDIA driver/GPU found: ") else reason
    if not expects_gpus(host):
        want = host_field(host, "gpu_count", "auto")
        return [
            check(
                "GPU count",
                PASS,
                0,
                str(want),
                f"no GPU ({detail}); the inventory expects none "
                f"(gpu_count {want}, gpu_model {host_field(host, 'gpu_model', 'auto')}): validated as a CPU host",
                cpu_host=True,
            )
        ]
    want = host_field(host, "gpu_count", ">= 1") if host is not None else ">= 1"
    return [check("GPU present", FAIL, 0, f"{want} GPU(s)", f"{NO_GPU}: {detail}")]
