"""Every workload's optimized path against its plain model on a CUDA GPU: whole-model gradients.

For each workload and scale, ``benchmarks/gradcheck.py`` (one child process
per case) builds the plain model (eager, fp32, NCHW, no compile, no TF32) and
the optimized one (what the runner runs on a GPU: compiled with the scale's
settings, channels-last, its replacement layers and custom autograd
Functions, fused optimizer, bf16 autocast) from the same weights, runs one
training step of each on the same batch (dropout off, no optimizer step) and
compares every parameter's gradient: cosine >= 0.99 and norm ratio within
[0.9, 1/0.9] (``runner.workloads.gradients.THRESHOLDS`` gives the reasons),
or, for a parameter that misses them, no further from fp32 than the plain
eager model under the same bf16 autocast (the noise floor: a third pass, run
only for a case that needs it; ``gradients.FLOOR_MARGIN``). ssd's early
gradients are that ill-conditioned in bf16 (runner/README "ssd under bf16"),
so ssd is also checked with its optimized path in fp32 (compiled,
channels-last: the strict 0.999 check).
All selected cases run in one gradcheck.py call (``--jobs`` at a time: the
compilation is CPU work); each test then checks its own case.

Environment: ``GPULAB_GRADCHECK_WORKLOADS`` (default: all six),
``GPULAB_GRADCHECK_SCALES`` (default: small,full: the runner compiles every
scale on a GPU), ``GPULAB_GRADCHECK_MODES`` (default: throughput; ttt adds
the first batch of the generated data at tiny and small scale),
``GPULAB_GRADCHECK_FP32`` (default: ssd:small,ssd:full, those of the
selected workloads and scales; workload:scale pairs, throughput mode, "" for
none), ``GPULAB_GRADCHECK_JOBS`` (default 3), ``GPULAB_GRADCHECK_DEADLINE`` (seconds
for all cases; a case not started by then fails as such),
``GPULAB_GRADCHECK_OUT`` (write every case and the table as JSON there),
``-n N --dist loadgroup`` (pytest-xdist: the cases stay on one worker),
``GPULAB_CACHE_DIR`` (compiled-kernel cache to reuse, the runner's layout).
"""

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_helpers import ROOT, needs_cuda

# The first test also waits for the whole gradcheck.py call (its module fixture); under
# pytest-xdist, `--dist loadgroup` keeps every case on one worker, so that the call runs once.
pytestmark = needs_cuda() + [pytest.mark.timeout(3600), pytest.mark.xdist_group("gradients")]

_spec = importlib.util.spec_from_file_location("gpulab_gradcheck", ROOT / "benchmarks" / "gradcheck.py")
gradcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gradcheck)


def _env_list(key: str, default: str, known: tuple) -> list[str]:
    items = [x.strip() for x in os.environ.get(key, default).split(",") if x.strip()]
    bad = [x for x in items if x not in known]
    if bad:
        raise pytest.UsageError(f"{key}: unknown {', '.join(bad)} (known: {', '.join(known)})")
    return items


WORKLOADS = _env_list("GPULAB_GRADCHECK_WORKLOADS", ",".join(gradcheck.ALL), gradcheck.ALL)
SCALES = _env_list("GPULAB_GRADCHECK_SCALES", "small,full", gradcheck.SCALES)
MODES = _env_list("GPULAB_GRADCHECK_MODES", "throughput", gradcheck.MODES)
if "GPULAB_GRADCHECK_FP32" in os.environ:
    FP32 = list(dict.fromkeys(tuple(x.strip().split(":", 1))
                              for x in os.environ["GPULAB_GRADCHECK_FP32"].split(",") if x.strip()))
    _bad = [":".join(x) for x in FP32 if len(x) != 2 or x[0] not in gradcheck.ALL or x[1] not in gradcheck.SCALES]
    if _bad:
        raise pytest.UsageError(f"GPULAB_GRADCHECK_FP32: {', '.join(_bad)} is not workload:scale")
else:
    FP32 = [("ssd", s) for s in ("small", "full") if "ssd" in WORKLOADS and s in SCALES]
CASES = [(w, s, m, "bf16") for w in WORKLOADS for s in SCALES for m in MODES if not (m == "ttt" and s == "full")]
CASES += [(w, s, "throughput", "fp32") for w, s in FP32]


@pytest.fixture(scope="module")
def checked(request, tmp_path_factory):
    """Every selected case through one benchmarks/gradcheck.py call: {(workload, scale, mode): case}."""
    target = os.environ.get("GPULAB_GRADCHECK_OUT")
    # gradcheck.py rewrites its JSON after every case: a call cut short still leaves what was checked
    out = Path(target).resolve() if target else tmp_path_factory.mktemp("gradcheck") / "gradcheck.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gradcheck.py"), "--device", "cuda",
           "--workloads", ",".join(WORKLOADS), "--scales", ",".join(SCALES), "--modes", ",".join(MODES),
           "--fp32-cases", ",".join(f"{w}:{s}" for w, s in FP32),
           "--jobs", os.environ.get("GPULAB_GRADCHECK_JOBS", "3"), "--timeout", "840", "--out", str(out)]
    if os.environ.get("GPULAB_GRADCHECK_DEADLINE"):
        cmd += ["--deadline", os.environ["GPULAB_GRADCHECK_DEADLINE"]]
    if os.environ.get("GPULAB_CACHE_DIR"):
        cmd += ["--cache-dir", os.environ["GPULAB_CACHE_DIR"]]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert out.is_file(), r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    lines = gradcheck.table(doc["cases"])
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print("\n\nwhole-model gradients, optimized path against the plain model:\n" + "\n".join(lines), flush=True)
    if target:
        doc["_meta"]["command"] = "python -m pytest " + " ".join(request.config.invocation_params.args)
        doc["_meta"]["gradcheck_command"] = " ".join(["python"] + cmd[1:])
        doc["table"] = lines
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return {(c["workload"], c["scale"], c["mode"], c["precision"]): c for c in doc["cases"]}


@pytest.mark.parametrize("name, scale, mode, precision", CASES)
def test_optimized_gradients_match_the_plain_model(checked, name, scale, mode, precision):
    case = checked.get((name, scale, mode, precision))
    assert case is not None, "gradcheck.py did not report this case"
    assert not case.get("error"), case.get("log_tail") or case["error"]
    assert case["passed"], "\n".join(gradcheck.table([case]))
