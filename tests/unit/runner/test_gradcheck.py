"""The whole-model gradient check on the CPU: the hook, the planted faults and benchmarks/gradcheck.py.

The GPU test (tests/gpu/test_gradients_gpu.py) runs the same check with
Inductor and bf16 at the scales the runner compiles. Here the optimized path is
compiled with ``aot_eager`` (Dynamo and AOTAutograd, custom autograd Functions
traced into the graph, no code generation: Inductor's C++ compile takes
minutes on a CPU) and runs in fp32, channels-last, with the replacement layers.
The verdict's rules are tested on fabricated gradients in test_gradjudge.py.
"""

import json

import pytest

torch = pytest.importorskip("torch")

from runner_helpers import ROOT, script  # noqa: E402

from runner import workloads  # noqa: E402
from runner.workloads import gradients as G  # noqa: E402
from runner.workloads import gradjudge as J  # noqa: E402

GRADCHECK = ROOT / "benchmarks" / "gradcheck.py"


# --- the hook ----------------------------------------------------------------------------


def _flip_sign(gm, example_inputs):
    """A compile backend whose outputs keep their values but send the negated gradient back."""

    def run(*args):
        return [2 * o.detach() - o if isinstance(o, torch.Tensor) and o.requires_grad else o for o in gm(*args)]

    return run


def _cut_gradient(gm, example_inputs):
    def run(*args):
        return [o - o + o.detach() if isinstance(o, torch.Tensor) and o.requires_grad else o for o in gm(*args)]

    return run


def test_the_hook_shares_weights_and_batch_and_the_check_fails_when_the_compiled_path_is_wrong():
    common = {"scale": "tiny", "seed": 3, "batch_size": 256}
    ref = G.gradient_step("ncf", "cpu", False, **common)
    # constant-initialized parameters (the zero biases) were moved off their constant
    assert "final.bias" in ref["perturbed"] and "mf_user.weight" not in ref["perturbed"]
    assert float(ref["weights"]["final.bias"].abs().sum()) > 0
    assert set(ref["grads"]) == {n for n, _ in _ncf_params()} and ref["loss"] > 0
    fast = dict(weights=ref["weights"], precision="fp32", compile=True, channels_last=True, **common)
    good = G.gradient_step("ncf", "cpu", True, backend="aot_eager", **fast)
    assert good["loss"] == pytest.approx(ref["loss"], rel=1e-5)  # same weights, same batch
    assert all(torch.equal(good["weights"][k], v) for k, v in ref["weights"].items())
    res = J.judge(ref["grads"], good["grads"], "fp32")
    assert res["passed"] and res["compared"] == 12, res["failures"]
    flipped = J.judge(ref["grads"], G.gradient_step("ncf", "cpu", True, backend=_flip_sign, **fast)["grads"], "fp32")
    assert not flipped["passed"] and {f["rule"] for f in flipped["failures"]} == {"scaled"}
    assert len(flipped["failures"]) == 12 and flipped["lowest"]["cosine"] == pytest.approx(-1.0)
    cut = J.judge(ref["grads"], G.gradient_step("ncf", "cpu", True, backend=_cut_gradient, **fast)["grads"], "fp32")
    assert not cut["passed"] and {f["rule"] for f in cut["failures"]} == {"zero"}


def _ncf_params():
    from runner.workloads.ncf import NeuMF

    return NeuMF(4, 4, 16, [64, 32, 16, 8]).named_parameters()  # the tiny scale's layers


def test_ttt_mode_takes_the_first_batch_of_the_generated_data():
    a = G.gradient_step("ncf", "cpu", False, scale="tiny", mode="ttt", seed=2)
    b = G.gradient_step(
        "ncf",
        "cpu",
        True,
        scale="tiny",
        mode="ttt",
        seed=2,
        precision="fp32",
        weights=a["weights"],
        compile=True,
        backend="aot_eager",
    )
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert J.judge(a["grads"], b["grads"], "fp32")["passed"]
    with pytest.raises(G.WorkloadError, match="mode 'eval'"):
        G.gradient_step("ncf", "cpu", False, scale="tiny", mode="eval")


# --- benchmarks/gradcheck.py -------------------------------------------------------------


def gradcheck(*args, timeout=600):
    return script(GRADCHECK, *args, timeout=timeout)


def test_the_script_checks_a_workload_in_both_precisions_and_catches_the_planted_faults(tmp_path):
    out = tmp_path / "g.json"
    r = gradcheck(
        "--device",
        "cpu",
        "--workloads",
        "ncf",
        "--backend",
        "aot_eager",
        "--precisions",
        "bf16,fp32",
        "--plants",
        "resnet50:tiny:scaled,resnet50:tiny:detached",
        "--jobs",
        2,
        "--out",
        out,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    real = [c for c in doc["cases"] if not c["plant"]]
    assert [c["precision"] for c in real] == ["bf16", "fp32"]  # one group: the plain passes shared
    for case in real:
        assert case["workload"] == "ncf" and case["scale"] == "tiny" and case["passed"] and case["compared"] == 12
        assert case["batch"] == 1024 and case["loss"]["plain"] > 0 and case["expect"] == "pass"
    assert real[0]["distance"]["noise"] is not None and real[0]["loss"]["noise"] > 0  # bf16: the noise pass ran
    # fp32: the plain fp32 pass in channels-last is its noise pass; the fixed bound is the floor
    assert real[1]["distance"]["noise"] is not None and real[1]["loss"]["noise"] > 0
    assert real[1]["distance"]["limit"] == max(
        J.FP32_DISTANCE, J.NOISE_FACTOR * real[1]["distance"]["noise"] + J.NOISE_ABS
    )
    planted = {c["plant"]: c for c in doc["cases"] if c["plant"]}
    assert planted["scaled"]["caught"] and planted["scaled"]["planted"]["parameters"] == ["fc.weight"]
    assert [f["rule"] for f in planted["scaled"]["failures"]] == ["scaled"]
    assert planted["detached"]["caught"] and [f["rule"] for f in planted["detached"]["failures"]] == ["missing"]
    assert doc["_meta"]["device"] == "cpu" and doc["_meta"]["torch"] == torch.__version__ and doc["_meta"]["passed"]
    assert "gradcheck.py --device cpu" in doc["_meta"]["command"]
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith(("ncf ", "resnet50 "))]
    assert rows[-3].endswith("pass") and rows[-1].endswith("caught") and " scaled " in r.stdout


def test_a_plant_the_check_does_not_catch_fails_the_script(tmp_path):
    """The offset max pool's backward is right under aot_eager on a CPU (the fault was Inductor's, on
    CUDA): planted there it is not caught, and the script says so and exits 1."""
    out = tmp_path / "g.json"
    r = gradcheck(
        "--device",
        "cpu",
        "--precisions",
        "",
        "--backend",
        "aot_eager",
        "--plants",
        "resnet50:tiny:maxpool",
        "--out",
        out,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    (case,) = json.loads(out.read_text())["cases"]
    assert case["passed"] and not case["caught"] and case["planted"]["modules"] == ["trunk.maxpool"]
    assert r.stdout.rstrip().splitlines()[-2].endswith("NOT CAUGHT")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--workloads", "bert"], "--workloads: unknown bert"),
        (["--scales", "huge"], "--scales: unknown huge"),
        (["--modes", "eval"], "--modes: unknown eval"),
        (["--batch", "-1"], "--batch -1: must be 0"),
        (["--jobs", "0"], "--jobs 0: must be at least 1"),
        (["--precisions", "int8"], "--precisions: unknown int8"),
        (["--skip", "ssd"], "--skip: 'ssd' is not workload:scale"),
        (["--plants", "ssd:huge:scaled"], "--plants: 'ssd:huge:scaled' is not workload:scale:plant"),
        (["--plants", "resnet50:tiny:flipped"], "plants: maxpool, scaled, detached"),
        (["--precisions", "", "--workloads", "ncf"], "nothing to check"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, argv, says):
    out = tmp_path / "g.json"
    r = gradcheck("--device", "cpu", *argv, "--out", out, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.slow
def test_every_workload_at_tiny_scale_passes_in_fp32(tmp_path):
    """All six, each in its own process, two at a time, within a deadline (about 1.5 min of CPU time)."""
    out = tmp_path / "g.json"
    r = gradcheck(
        "--device", "cpu", "--backend", "aot_eager", "--jobs", 2, "--deadline", 840, "--out", out, timeout=900
    )
    doc = json.loads(out.read_text())
    assert r.returncode == 0, r.stdout + r.stderr
    cases = {c["workload"]: c for c in doc["cases"]}
    # in plan order: the catalogue's, where no entry gives a group's seconds at tiny scale (bench.gradcheck_s)
    assert list(cases) == list(workloads.load())
    for name, c in cases.items():
        assert c["passed"] and c["compared"] >= c["parameters"] // 2, (name, c.get("failures"), c.get("error"))
        assert c["loss"]["optimized"] == pytest.approx(c["loss"]["plain"], rel=1e-4), name
    # the optimized resnet50 is another model than the plain one (its stem's replacement layers)
    assert cases["resnet50"]["replacement_modules"], cases["resnet50"]
