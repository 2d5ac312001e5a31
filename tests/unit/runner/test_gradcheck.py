"""The whole-model gradient check on the CPU: the comparison, the hook, and benchmarks/gradcheck.py.

The GPU test (tests/gpu/test_gradients_gpu.py) runs the same check with
Inductor and bf16 at the scales the runner compiles. Here the optimized path is
compiled with ``aot_eager`` (Dynamo and AOTAutograd, custom autograd Functions
traced into the graph, no code generation: Inductor's C++ compile takes
minutes on a CPU) and runs in fp32, channels-last, with the replacement layers.
"""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from runner_helpers import ROOT, env  # noqa: E402

from runner.workloads import gradients as G  # noqa: E402

GRADCHECK = ROOT / "benchmarks" / "gradcheck.py"


def grads(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"conv.weight": torch.randn(8, 3, 3, 3, generator=g), "bn.weight": torch.randn(8, generator=g),
            "fc.bias": torch.randn(10, generator=g)}


def noisy(ref, share, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {k: v + share * v.norm() / v.numel() ** 0.5 * torch.randn(v.shape, generator=g) for k, v in ref.items()}


# --- compare -----------------------------------------------------------------------------

def test_identical_and_bf16_sized_errors_pass_but_fp32_is_held_tighter():
    ref = grads()
    same = G.compare(ref, {k: v.clone() for k, v in ref.items()}, "bf16")
    assert same["passed"] and same["compared"] == 3 and same["lowest"]["cosine"] == pytest.approx(1.0)
    five = noisy(ref, 0.05)  # 5% relative error: cosine ~0.9988
    assert G.compare(ref, five, "bf16")["passed"]
    strict = G.compare(ref, five, "fp32")
    assert not strict["passed"] and any("cosine" in f["why"] for f in strict["failures"])
    assert G.compare(ref, noisy(ref, 0.005), "fp32")["passed"]


@pytest.mark.parametrize("break_it, says", [
    (lambda g: torch.zeros_like(g), "zero gradient in the optimized path"),
    (lambda g: -g, "cosine -1.0000"),
    (lambda g: None, "no gradient in the optimized path"),
    (lambda g: 2 * g, "norm ratio 2.0000"),
    (lambda g: g.roll(1), "cosine"),
    (lambda g: g.clone().fill_(float("nan")), "not finite"),
])
def test_a_broken_gradient_of_one_parameter_fails_naming_it(break_it, says):
    ref = grads()
    got = {k: v.clone() for k, v in ref.items()}
    got["conv.weight"] = break_it(got["conv.weight"])
    res = G.compare(ref, got, "bf16")
    assert not res["passed"]
    assert [f["name"] for f in res["failures"]] == ["conv.weight"]
    assert says in res["failures"][0]["why"], res["failures"]


def test_zero_in_both_is_reported_not_compared_and_names_must_match():
    ref = grads()
    ref["unused.weight"] = torch.zeros(4)
    got = {k: v.clone() for k, v in ref.items()}
    got["unused.weight"] = None
    res = G.compare(ref, got)
    assert res["passed"] and res["zero_in_both"] == ["unused.weight"] and res["compared"] == 3
    got.pop("fc.bias")
    got["extra.weight"] = torch.ones(2)
    whys = {f["name"]: f["why"] for f in G.compare(ref, got)["failures"]}
    assert whys == {"fc.bias": "no such parameter in the optimized model",
                    "extra.weight": "parameter only in the optimized model"}
    bad_ref = grads()
    bad_ref["bn.weight"] = bad_ref["bn.weight"].clone().fill_(float("inf"))  # the plain path broke: said so
    assert [f["name"] for f in G.compare(bad_ref, grads())["failures"]] == ["bn.weight"]
    flat = {k: torch.zeros_like(v) for k, v in grads().items()}
    assert not G.compare(flat, flat)["passed"]  # a step without any gradient proves nothing


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
    res = G.compare(ref["grads"], good["grads"], "fp32")
    assert res["passed"] and res["compared"] == 12, res["failures"]
    flipped = G.compare(ref["grads"], G.gradient_step("ncf", "cpu", True, backend=_flip_sign, **fast)["grads"], "fp32")
    assert not flipped["passed"] and len(flipped["failures"]) == 12
    assert flipped["lowest"]["cosine"] == pytest.approx(-1.0)
    cut = G.compare(ref["grads"], G.gradient_step("ncf", "cpu", True, backend=_cut_gradient, **fast)["grads"], "fp32")
    assert not cut["passed"] and all("zero gradient" in f["why"] for f in cut["failures"])


def _ncf_params():
    from runner.workloads.ncf import NeuMF

    return NeuMF(4, 4, 16, [64, 32, 16, 8]).named_parameters()  # the tiny scale's layers


def test_ttt_mode_takes_the_first_batch_of_the_generated_data():
    a = G.gradient_step("ncf", "cpu", False, scale="tiny", mode="ttt", seed=2)
    b = G.gradient_step("ncf", "cpu", True, scale="tiny", mode="ttt", seed=2, precision="fp32",
                        weights=a["weights"], compile=True, backend="aot_eager")
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert G.compare(a["grads"], b["grads"], "fp32")["passed"]
    with pytest.raises(G.WorkloadError, match="mode 'eval'"):
        G.gradient_step("ncf", "cpu", False, scale="tiny", mode="eval")


# --- benchmarks/gradcheck.py -------------------------------------------------------------

def gradcheck(*args, timeout=600):
    return subprocess.run([sys.executable, str(GRADCHECK), *map(str, args)], cwd=ROOT, env=env(),
                          capture_output=True, text=True, timeout=timeout)


def test_the_script_checks_a_workload_prints_the_table_and_writes_the_json(tmp_path):
    out = tmp_path / "g.json"
    r = gradcheck("--device", "cpu", "--workloads", "ncf", "--backend", "aot_eager", "--precision", "bf16",
                  "--fp32-cases", "ncf:tiny", "--jobs", 2, "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert [c["precision"] for c in doc["cases"]] == ["bf16", "fp32"]  # the extra fp32 case after the others
    for case in doc["cases"]:
        assert case["workload"] == "ncf" and case["scale"] == "tiny" and case["passed"] and case["compared"] == 12
        assert case["batch"] == 1024 and case["loss"]["plain"] > 0 and case["floor"] is None
    assert doc["_meta"]["device"] == "cpu" and doc["_meta"]["torch"] == torch.__version__ and doc["_meta"]["passed"]
    assert "gradcheck.py --device cpu" in doc["_meta"]["command"]
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("ncf ")][-1]
    assert "tiny" in row and row.endswith("pass")


@pytest.mark.parametrize("argv, says", [
    (["--workloads", "bert"], "--workloads: unknown bert"),
    (["--scales", "huge"], "--scales: unknown huge"),
    (["--modes", "eval"], "--modes: unknown eval"),
    (["--batch", "-1"], "--batch -1: must be 0"),
    (["--jobs", "0"], "--jobs 0: must be at least 1"),
    (["--fp32-cases", "ssd"], "--fp32-cases: 'ssd' is not workload:scale"),
    (["--fp32-cases", "ssd:huge"], "--fp32-cases: 'ssd:huge' is not workload:scale"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, argv, says):
    out = tmp_path / "g.json"
    r = gradcheck("--device", "cpu", *argv, "--out", out, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.slow
def test_every_workload_at_tiny_scale_passes_in_fp32(tmp_path):
    """All six, each in its own process, two at a time, within a deadline (about 1.5 min of CPU time)."""
    out = tmp_path / "g.json"
    r = gradcheck("--device", "cpu", "--backend", "aot_eager", "--jobs", 2, "--deadline", 840, "--out", out,
                  timeout=900)
    doc = json.loads(out.read_text())
    assert r.returncode == 0, r.stdout + r.stderr
    cases = {c["workload"]: c for c in doc["cases"]}
    assert list(cases) == ["resnet50", "ssd", "maskrcnn", "gnmt", "transformer", "ncf"]  # in plan order
    for name, c in cases.items():
        assert c["passed"] and c["compared"] >= c["parameters"] // 2, (name, c.get("failures"), c.get("error"))
        assert c["loss"]["optimized"] == pytest.approx(c["loss"]["plain"], rel=1e-4), name
    # the optimized resnet50 is another model than the plain one (its stem's replacement layers)
    assert cases["resnet50"]["replacement_modules"], cases["resnet50"]


# --- the noise floor ---------------------------------------------------------------------

def test_bf16_level_noise_below_the_fixed_thresholds_passes_by_the_floor_and_says_so():
    ref = grads()
    plain_bf16, got = noisy(ref, 0.4, seed=5), noisy(ref, 0.4, seed=6)  # two passes, errors ~40%: cosine ~0.93
    alone = G.compare(ref, got, "bf16")
    assert not alone["passed"] and G.floor_may_help(alone) and alone["floor"] is None
    res = G.compare(ref, got, "bf16", floor=plain_bf16)
    assert res["passed"], res["failures"]
    assert res["floor"]["passed_by_floor"] == list(ref) and res["floor"]["margin"] == G.FLOOR_MARGIN
    for row in res["rows"]:
        assert row["cosine"] < 0.99 and row["rule"] == "floor" and 0.8 < row["floor_cosine"] < 0.99, row
        assert row["floor_norm_ratio"] > 0
    assert res["lowest"]["rule"] == "floor" and res["lowest"]["floor_cosine"] is not None
    # a parameter that meets the fixed thresholds is passed by them, and needs no floor value
    got["fc.bias"] = ref["fc.bias"].clone()
    mixed = G.compare(ref, got, "bf16", floor=plain_bf16)
    rules = {r["name"]: r["rule"] for r in mixed["rows"]}
    assert mixed["passed"] and rules == {"conv.weight": "floor", "bn.weight": "floor", "fc.bias": "fixed"}
    assert "floor_cosine" not in [r for r in mixed["rows"] if r["name"] == "fc.bias"][0]
    # a floor that is exact (fp32 against fp32) holds the noisy gradient to the fixed thresholds
    exact = G.compare(ref, got, "bf16", floor={k: v.clone() for k, v in ref.items()})
    assert {f["name"] for f in exact["failures"]} == {"conv.weight", "bn.weight"}
    assert all("floor: plain bf16 pass cosine 1.0000" in f["why"] for f in exact["failures"])


@pytest.mark.parametrize("break_it, says", [
    (lambda g, f: torch.zeros_like(g), "zero gradient in the optimized path"),
    (lambda g, f: -f, "cosine -"),
    (lambda g, f: 2 * f, "ratio / "),  # the floor's direction, twice its norm: a loss scale not undone
    (lambda g, f: aimed(g, 0.3), "needs cosine > 0.5 and >= 0."),  # far below the floor (~0.7)
])
def test_a_broken_gradient_fails_even_with_a_noisy_floor(break_it, says):
    ref = grads()
    plain_bf16 = noisy(ref, 1.0, seed=5)  # as noisy as bf16 gets (ssd's stem: cosine ~0.7)
    got = noisy(ref, 0.4, seed=6)
    got["conv.weight"] = break_it(ref["conv.weight"], plain_bf16["conv.weight"])
    res = G.compare(ref, got, "bf16", floor=plain_bf16)
    assert not res["passed"] and [f["name"] for f in res["failures"]] == ["conv.weight"], res["failures"]
    assert says in res["failures"][0]["why"], res["failures"]
    assert [r["rule"] for r in res["rows"] if r["name"] == "conv.weight"] == [None]


def aimed(ref, cosine, seed=11):
    """A tensor of ref's norm at exactly ``cosine`` to it."""
    u = ref.double().flatten() / ref.double().norm()
    w = torch.randn(u.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    w = w - (w @ u) * u
    v = cosine * u + (1 - cosine ** 2) ** 0.5 * w / w.norm()
    return (v * ref.double().norm()).reshape(ref.shape).float()


def test_a_cosine_at_or_below_one_half_fails_whatever_the_floor():
    ref = grads()
    floor = {k: aimed(v, 0.45) for k, v in ref.items()}
    got = {k: aimed(v, 0.48, seed=12) for k, v in ref.items()}  # above the floor, same norm
    res = G.compare(ref, got, "bf16", floor=floor)
    assert not res["passed"] and len(res["failures"]) == 3
    assert all(r["rule"] is None and r["floor_cosine"] == pytest.approx(0.45) for r in res["rows"])
    got = {k: aimed(v, 0.55, seed=12) for k, v in ref.items()}
    assert G.compare(ref, got, "bf16", floor=floor)["passed"]  # above 0.5 and above the floor: passes


def _zero_one(real, pname):
    def step(name, device, optimized, **kw):
        out = real(name, device, optimized, **kw)
        if optimized:
            out["grads"][pname] = torch.zeros_like(out["grads"][pname])
        return out
    return step


def test_the_floor_pass_runs_only_when_needed_and_a_zeroed_gradient_fails_anyway(monkeypatch):
    """Real ncf (tiny) on the CPU, optimized path compiled (aot_eager) in bf16 autocast."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpulab_gradcheck", GRADCHECK)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    calls = []
    real = G.gradient_step

    def counted(name, device, optimized, **kw):
        calls.append((optimized, kw.get("precision"), kw.get("tf32")))
        return real(name, device, optimized, **kw)

    monkeypatch.setattr(G, "gradient_step", counted)
    run = dict(name="ncf", scale="tiny", mode="throughput", device="cpu", precision="bf16", batch=256, seed=4,
               backend="aot_eager")
    ok = script.check_case(**run)
    assert ok["passed"] and ok["floor"] is None and len(calls) == 2, ok["failures"]  # bf16 meets 0.99 here
    assert all(r["rule"] == "fixed" for r in ok["rows"])
    # held to an impossible fixed cosine, every parameter needs the floor: the third pass runs
    monkeypatch.setitem(G.THRESHOLDS, "bf16", {"cosine": 1.5, "norm_ratio": (0.9, 1 / 0.9)})
    calls.clear()
    res = script.check_case(**run)
    assert calls[-1] == (False, "bf16", True) and len(calls) == 3
    assert res["passed"], res["failures"]
    assert res["floor"]["passed_by_floor"] == [r["name"] for r in res["rows"]] and len(res["rows"]) == 12
    assert all(r["rule"] == "floor" and r["floor_cosine"] > 0.99 for r in res["rows"])
    lines = script.table([{"workload": "ncf", "scale": "tiny", "mode": "throughput", **res}])
    assert "12 of 12 parameters below the fixed thresholds passed by it" in "\n".join(lines)
    assert any("rule floor, cosine" in ln and "(floor 0.9" in ln for ln in lines), lines
    # one parameter's optimized gradient zeroed: fails whatever the floor, and no third pass is spent on it
    monkeypatch.setattr(G, "gradient_step", _zero_one(counted, "final.weight"))
    calls.clear()
    bad = script.check_case(**run)
    assert not bad["passed"] and len(calls) == 2
    assert [f["name"] for f in bad["failures"] if "zero gradient" in f["why"]] == ["final.weight"]
