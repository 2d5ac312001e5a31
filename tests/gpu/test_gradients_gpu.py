"""Every workload's optimized path against its plain model on a CUDA GPU: whole-model gradients.

For each workload and scale, ``benchmarks/gradcheck.py`` (one child process
per workload and scale) builds the plain model (eager, fp32, NCHW, no
compile, no TF32) and the optimized one (what the runner runs on a GPU:
compiled with the scale's settings, channels-last, its replacement layers
and custom autograd Functions, fused optimizer) from the same weights, runs
one training step of each on the same batch (dropout off, no optimizer step)
and judges the gradients (``runner.workloads.gradjudge``): in bf16 against
the plain model's own bf16 noise (a third pass), in fp32 with TF32 off as the
strict structural check. Three more cases plant a fault in the optimized
resnet50 (``benchmarks/gradplant.py``: the removed offset max pool whose
compiled backward sent no gradient upstream, one parameter's gradient
doubled, one parameter cut from the graph); each must fail by its rule.
All selected cases run in one gradcheck.py call (``--jobs`` at a time: the
compilation is CPU work); each test then checks its own case. The cases
that deselection (``-m "not long"``) leaves out are not computed.

Marked ``long``: resnet50 at full scale (its full-size compilation in two
precisions, with the plain passes, is the longest group).

Environment: ``GPULAB_GRADCHECK_WORKLOADS`` (default: all six),
``GPULAB_GRADCHECK_SCALES`` (default: small,full), ``GPULAB_GRADCHECK_MODES``
(default: throughput; ttt adds the first batch of the generated data at tiny
and small scale), ``GPULAB_GRADCHECK_PRECISIONS`` (default: bf16,fp32),
``GPULAB_GRADCHECK_PLANTS`` (default: resnet50:small: maxpool, scaled and
detached; "" for none), ``GPULAB_GRADCHECK_JOBS`` (default 4),
``GPULAB_GRADCHECK_DEADLINE`` (seconds for all cases; a case not started by
then fails as such), ``GPULAB_GRADCHECK_OUT`` (write every case and the table
as JSON there), ``-n N --dist loadgroup`` (pytest-xdist: the cases stay on
one worker), ``GPULAB_CACHE_DIR`` (compiled-kernel cache to reuse, the
runner's layout).
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


KNOWN = tuple(gradcheck.catalogue(pytest.UsageError))  # the runner's catalogue, as gradcheck.py reads it
WORKLOADS = _env_list("GPULAB_GRADCHECK_WORKLOADS", ",".join(KNOWN), KNOWN)
SCALES = _env_list("GPULAB_GRADCHECK_SCALES", "small,full", gradcheck.SCALES)
MODES = _env_list("GPULAB_GRADCHECK_MODES", "throughput", gradcheck.MODES)
PRECISIONS = _env_list("GPULAB_GRADCHECK_PRECISIONS", "bf16,fp32", gradcheck.PRECISIONS)
try:
    PLANTS = gradcheck._pairs(
        os.environ.get("GPULAB_GRADCHECK_PLANTS", ",".join(f"resnet50:small:{p}" for p in gradcheck.EXPECT)),
        "GPULAB_GRADCHECK_PLANTS",
        3,
        KNOWN,
    )
except ValueError as exc:
    raise pytest.UsageError(str(exc)) from None
#: workload:scale groups marked long
LONG = {("resnet50", "full")}


def _param(*values):
    return pytest.param(*values, marks=[pytest.mark.long] if tuple(values[:2]) in LONG else [])


CASES = [
    _param(w, s, m, p)
    for w in WORKLOADS
    for s in SCALES
    for m in MODES
    for p in PRECISIONS
    if not (m == "ttt" and s == "full")
]


def _selected(session) -> tuple[list, list]:
    """The (workload, scale, mode, precision) cases and (workload, scale, plant) plants of this
    module that the session runs (after -m and -k deselection)."""
    cases, plants = [], []
    for item in session.items:
        spec = getattr(item, "callspec", None)
        if item.module.__name__ != __name__ or spec is None:
            continue
        p = spec.params
        if "precision" in p:
            cases.append((p["name"], p["scale"], p["mode"], p["precision"]))
        else:
            plants.append((p["name"], p["scale"], p["plant"]))
    return cases, plants


@pytest.fixture(scope="module")
def checked(request, tmp_path_factory):
    """Every selected case through one benchmarks/gradcheck.py call: {(workload, scale, mode,
    precision, plant): case}."""
    cases, plants = _selected(request.session)
    target = os.environ.get("GPULAB_GRADCHECK_OUT")
    # gradcheck.py rewrites its JSON after every group: a call cut short still leaves what was checked
    out = Path(target).resolve() if target else tmp_path_factory.mktemp("gradcheck") / "gradcheck.json"
    pick = sorted({(w, s) for w, s, _, _ in cases})
    skip = [f"{w}:{s}" for w in WORKLOADS for s in SCALES if (w, s) not in pick]
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "gradcheck.py"),
        "--device",
        "cuda",
        "--workloads",
        ",".join(WORKLOADS),
        "--scales",
        ",".join(SCALES),
        "--modes",
        ",".join(MODES),
        "--precisions",
        ",".join(sorted({c[3] for c in cases}, key=PRECISIONS.index)),
        "--skip",
        ",".join(skip),
        "--plants",
        ",".join(":".join(p) for p in plants),
        "--jobs",
        os.environ.get("GPULAB_GRADCHECK_JOBS", "4"),
        "--timeout",
        "840",
        "--out",
        str(out),
    ]
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
    return {(c["workload"], c["scale"], c["mode"], c["precision"], c.get("plant")): c for c in doc["cases"]}


@pytest.mark.parametrize("name, scale, mode, precision", CASES)
def test_optimized_gradients_match_the_plain_model(checked, name, scale, mode, precision):
    case = checked.get((name, scale, mode, precision, None))
    assert case is not None, "gradcheck.py did not report this case"
    assert not case.get("error"), case.get("log_tail") or case["error"]
    assert case["passed"], "\n".join(gradcheck.table([case]))


@pytest.mark.parametrize("name, scale, plant", PLANTS)
def test_a_planted_fault_fails_by_its_rule(checked, name, scale, plant):
    case = checked.get((name, scale, "throughput", "bf16", plant))
    assert case is not None, "gradcheck.py did not report this case"
    assert not case.get("error"), case.get("log_tail") or case["error"]
    assert not case["passed"] and case["caught"], "\n".join(gradcheck.table([case]))
