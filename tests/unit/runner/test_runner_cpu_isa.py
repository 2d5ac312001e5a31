"""The CPU-sensitive runner tests again under each instruction set this CPU can be held to.

CI runs on whatever x86 machine a session gets: AVX-512 with bf16 (AMD EPYC,
Sapphire Rapids with AMX), AVX-512 without bf16, AVX2 only. oneDNN and ATen
pick their kernels by the instruction set, so what bf16 can run at all
(an LSTM, a channels-last convolution gradient: runner/README "CPU runs and
oneDNN") and the numbers of a CPU training run differ between them.
``ONEDNN_MAX_CPU_ISA`` holds oneDNN lower (read once, at its first use: so one
pytest process per cap), ``ATEN_CPU_CAPABILITY=avx2`` holds ATen's own kernels
to AVX2. The suite's own run is the default (the CPU's best); each cap below
it that the CPU has runs here, a cap above what the CPU has, or equal to its
best, is a skip that says so.

The selection is small, for CI time: the bf16 channels-last training step (the
kernel of issue 42), the compiled bf16 gnmt step (oneDNN's bf16 LSTM, or its
absence below AVX-512: a skip with that reason) and, under AVX2, the
two-process maskrcnn run (a tiny detector trained from scratch: the test most
sensitive to rounding); test_runner_divergence.py holds the bf16 fallback.
"""

import os
import platform
import re
import subprocess
import sys

import pytest

from runner_helpers import ROOT, env

torch = pytest.importorskip("torch")

from runner.workloads import cpucaps  # noqa: E402

LAYOUT = "tests/unit/runner/test_runner_cpu_layout.py"
PROMOTE = "tests/unit/runner/test_runner_autocast_promote.py"
MASKRCNN = (
    "tests/unit/runner/test_runner_multiprocess.py::test_two_gloo_processes_train_to_target_and_measure_"
    "together[maskrcnn]"
)
NO_BF16_LSTM = "this CPU's oneDNN has no bf16 LSTM (needs AVX-512)"
# cap -> (the environment, the selection, what pytest's last line says, a line its output must have)
CAPS = {
    "AVX512_CORE_BF16": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, [LAYOUT, PROMOTE], "5 passed", None),
    "AVX512_CORE": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, [LAYOUT, PROMOTE], "5 passed", None),
    "AVX2": (
        {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
        [LAYOUT, PROMOTE, MASKRCNN],
        "5 passed, 1 skipped",
        NO_BF16_LSTM,
    ),
}


def outcome(line: str) -> dict[str, int]:
    """The counts of pytest's closing line (``5 passed, 1 skipped, 14 warnings in 6.2s``) but its warnings."""
    return {
        word: int(n)
        for n, word in re.findall(r"(\d+) (passed|skipped|failed|errors?|xfailed|xpassed|deselected)\b", line)
    }


def why_not(cap: str) -> str | None:
    """Why this CPU cannot, or need not, run under ``cap``; None when it runs."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"oneDNN's instruction sets are x86's; this is {platform.machine()}"
    best = cpucaps.onednn_isa()  # held by this process's own ONEDNN_MAX_CPU_ISA when the run exports one
    rank = cpucaps.ONEDNN_ISAS
    held = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    if rank[cap] > rank[best]:
        if held and best == held.strip().upper():
            return f"oneDNN is held to {best} for this whole run (ONEDNN_MAX_CPU_ISA={held}): no {cap} kernels"
        return f"this CPU's oneDNN runs {best} at best: no {cap} kernels to test here"
    aten = torch.backends.cpu.get_cpu_capability()  # ATen's own kernels: held only under the AVX2 cap
    if rank[cap] == rank[best] and (cap != "AVX2" or aten in ("AVX2", "DEFAULT")):
        return f"the suite's own run is {cap} (ATen {aten}) on this CPU already"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("cap", list(CAPS))
def test_cpu_sensitive_tests_pass_with_kernels_held_to_each_instruction_set(cap):
    why = why_not(cap)
    if why:
        pytest.skip(why)
    extra, selection, last, line = CAPS[cap]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *selection],
        cwd=ROOT,
        env={**env(), **extra},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = r.stdout[-6000:] + r.stderr[-3000:]
    assert r.returncode == 0, out
    assert outcome(r.stdout.strip().splitlines()[-1]) == outcome(last), out  # warnings may be counted too
    if line:
        assert line in r.stdout, out
    # the cap took: the layout rule sees AVX-512 kernels under the AVX512 caps and none under AVX2
    held = cap.startswith("AVX512")
    probe = subprocess.run(
        [sys.executable, "-c", "from runner.workloads import cpucaps; print(cpucaps.bf16_channels_last_crash() or '')"],
        cwd=ROOT,
        env={**env(), **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert bool(probe.stdout.strip()) is held, probe.stdout
