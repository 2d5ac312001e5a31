"""Speed settings of the compiled path: compile_mode and Inductor options from workloads.yml and the environment."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
inductor_config = pytest.importorskip("torch._inductor.config")

from runner.workloads import base  # noqa: E402
from runner_helpers import ROOT, cpu_context, env, script  # noqa: E402


def _ctx(compile_: bool = True):
    return cpu_context("resnet50", compile=compile_)


def test_environment_settings_override_the_catalogue_and_are_typed(monkeypatch):
    monkeypatch.setenv("GPULAB_INDUCTOR", "conv_1x1_as_mm=1,triton.cudagraphs=false,max_autotune_gemm_backends=ATEN")
    opts = base.inductor_options({"conv_1x1_as_mm": False, "epilogue_fusion": True})
    assert opts == {
        "conv_1x1_as_mm": True,
        "triton.cudagraphs": False,
        "epilogue_fusion": True,
        "max_autotune_gemm_backends": "ATEN",
    }


def test_malformed_environment_setting_names_itself(monkeypatch):
    monkeypatch.setenv("GPULAB_INDUCTOR", "conv_1x1_as_mm")
    with pytest.raises(base.WorkloadError, match="GPULAB_INDUCTOR: 'conv_1x1_as_mm' is not key=value"):
        base.inductor_options(None)


def test_compile_fn_sets_inductor_config_and_skips_settings_this_release_lacks(monkeypatch, capsys):
    monkeypatch.delenv("GPULAB_INDUCTOR", raising=False)
    with inductor_config.patch({"conv_1x1_as_mm": False, "triton.cudagraphs": False}):  # restored on exit
        fn = base.compile_fn(_ctx(), lambda x: x + 1, options={"conv_1x1_as_mm": True, "triton.cudagraphs": True})
        assert inductor_config.conv_1x1_as_mm is True and inductor_config.triton.cudagraphs is True
        assert fn is not None
    # a setting of another release (older or newer than this one): the run goes on without it, and says so
    capsys.readouterr()
    with inductor_config.patch({"conv_1x1_as_mm": False}):
        fn = base.compile_fn(
            _ctx(), lambda x: x * 2, options={"no_such_knob": 1, "triton.no_such_knob": 2, "conv_1x1_as_mm": True}
        )
        assert inductor_config.conv_1x1_as_mm is True and not hasattr(inductor_config, "no_such_knob")
        assert fn(torch.ones(2)).tolist() == [2.0, 2.0]
    err = capsys.readouterr().err
    assert f"note: inductor option 'no_such_knob' skipped: torch {torch.__version__} has no such setting" in err
    assert "note: inductor option 'triton.no_such_knob' skipped" in err
    # without compilation nothing is touched and the function comes back as it was
    f = lambda x: x  # noqa: E731
    assert base.compile_fn(_ctx(compile_=False), f, options={"no_such_knob": 1}) is f


def test_compiled_function_runs_with_the_catalogue_mode_and_a_bad_mode_is_named(monkeypatch):
    monkeypatch.delenv("GPULAB_INDUCTOR", raising=False)
    monkeypatch.delenv("GPULAB_COMPILE_MODE", raising=False)
    ctx = _ctx()
    ctx.cfg["compile_mode"] = "default"
    f = base.compile_fn(ctx, lambda x: x * 2 + 1)
    assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    monkeypatch.setenv("GPULAB_COMPILE_MODE", "fastest")
    with pytest.raises(base.WorkloadError, match="compile mode 'fastest' \\(GPULAB_COMPILE_MODE\\): use one of"):
        base.compile_fn(ctx, lambda x: x)


def test_cudnn_search_is_on_by_default_and_the_environment_turns_it_off_or_limits_it(monkeypatch):
    from runner.workloads.compiling import cuda_backends

    cudnn = torch.backends.cudnn
    saved = cudnn.benchmark, cudnn.benchmark_limit
    tf32 = torch.backends.cuda.matmul.allow_tf32, cudnn.allow_tf32
    try:
        for value, want in (
            (None, (True, saved[1])),
            ("off", (False, saved[1])),
            ("On", (True, saved[1])),
            ("3", (True, 3)),
        ):
            if value is None:
                monkeypatch.delenv("GPULAB_CUDNN_BENCHMARK", raising=False)
            else:
                monkeypatch.setenv("GPULAB_CUDNN_BENCHMARK", value)
            cuda_backends()
            assert (cudnn.benchmark, cudnn.benchmark_limit) == want, value
            assert torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32
        for bad in ("0", "fast", "-2"):
            monkeypatch.setenv("GPULAB_CUDNN_BENCHMARK", bad)
            with pytest.raises(base.WorkloadError, match=f"GPULAB_CUDNN_BENCHMARK='{bad}': use on, off or a count"):
                cuda_backends()
    finally:
        cudnn.benchmark, cudnn.benchmark_limit = saved
        torch.backends.cuda.matmul.allow_tf32, cudnn.allow_tf32 = tf32


def test_models_are_built_on_the_run_s_gpu_unless_told_otherwise(monkeypatch):
    """A non-CPU run's device is the default while the model is constructed (the meta device stands in for
    a GPU here), unset or GPULAB_BUILD_ON_DEVICE=1; 0, or a CPU run: the host; another value is named."""
    from types import SimpleNamespace

    from runner.workloads.compiling import build_device

    gpu_like, cpu = SimpleNamespace(device=torch.device("meta")), SimpleNamespace(device=torch.device("cpu"))
    for value, ctx, want in (
        (None, gpu_like, "meta"),
        ("0", gpu_like, "cpu"),
        (None, cpu, "cpu"),
        ("1", gpu_like, "meta"),
        ("1", cpu, "cpu"),
    ):
        if value is None:
            monkeypatch.delenv("GPULAB_BUILD_ON_DEVICE", raising=False)
        else:
            monkeypatch.setenv("GPULAB_BUILD_ON_DEVICE", value)
        with build_device(ctx):
            made = torch.nn.Linear(2, 2).weight
        assert made.device.type == want, value
    assert torch.empty(1).device.type == "cpu"  # the default device is back after the block
    monkeypatch.setenv("GPULAB_BUILD_ON_DEVICE", "yes")
    with pytest.raises(base.WorkloadError, match="GPULAB_BUILD_ON_DEVICE='yes': use 1"):
        build_device(gpu_like)


def tune_on_cpu(tmp_path, out, *variants: str):
    """benchmarks/tune.py at the tiny scale on the CPU, short measurements, its JSON in ``out``."""
    flags = [f for v in variants for f in ("--variant", v)]
    return script(
        "benchmarks/tune.py",
        *("--device", "cpu", "--scale", "tiny", "--measure-seconds", "0.2", "--warmup-steps", "1"),
        *("--out", str(out), "--cache", str(tmp_path / "cache"), *flags),
        timeout=600,
    )


def test_tune_runs_variants_in_order_and_records_each(tmp_path):
    out = tmp_path / "tune.json"
    r = tune_on_cpu(tmp_path, out, "ncf compiled batch=512", "ncf baseline")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())["variants"]
    assert [(v["workload"], v["baseline"]) for v in rows] == [("ncf", False), ("ncf", True)]
    assert [v["variant"] for v in rows] == ["compiled", "baseline"] and rows[0]["compiled"]  # plain torch.compile
    assert rows[0]["samples_per_step"] == 512 and rows[0]["samples_per_s"] > 0
    assert rows[1]["samples_per_step"] == 4096 and rows[1]["samples_per_s"] > 0  # tiny throughput batch


@pytest.mark.parametrize(
    "variant, named",
    [
        ("ncf batch=lots", "batch=lots"),
        ("ncf baseline compiled", "'compiled': a variant is the optimized"),
        ("ncf cudnn=fast", "cudnn=fast: use on, off or a count"),
    ],
)
def test_tune_bad_variant_is_one_line_exit_2(tmp_path, variant, named):
    r = script("benchmarks/tune.py", "--variant", variant, "--out", str(tmp_path / "t.json"), timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and named in r.stderr, r.stderr
    assert not (tmp_path / "t.json").exists()


def test_bench_step_overrides_replace_scale_settings_and_unknown_ones_are_named():
    step, _ = base.bench_step("ncf", "cpu", scale="tiny", precision="fp32", overrides={"mf_dim": 4})
    assert step.__self__.model.mf_user.embedding_dim == 4  # tiny's own mf_dim is 16
    with pytest.raises(base.WorkloadError, match="setting 'mf_size': the tiny scale of ncf has none of that name"):
        base.bench_step("ncf", "cpu", scale="tiny", precision="fp32", overrides={"mf_size": 4})


def test_tune_set_passes_settings_to_the_measurement(tmp_path):
    out = tmp_path / "tune.json"
    r = tune_on_cpu(tmp_path, out, "ncf set=mf_dim=8,lr=0.02", "ncf set=mf_size=8")
    assert r.returncode == 0, r.stdout + r.stderr
    good, bad = json.loads(out.read_text())["variants"]
    assert good["set"] == {"mf_dim": 8, "lr": 0.02} and good["samples_per_s"] > 0
    assert "samples_per_s" not in bad and "'mf_size'" in bad["error"], bad


def _trainer(name: str, compile_: bool, mode: str = "throughput", **settings):
    import importlib

    ctx = cpu_context(name, mode=mode, compile=compile_)
    ctx.cfg.update(settings)
    torch.manual_seed(0)
    return importlib.import_module(ctx.entry["module"]).build(ctx)


def test_gnmt_compiled_between_its_lstms_gives_the_eager_loss_and_gradients(monkeypatch):
    """compile: true traces everything but the cuDNN LSTMs (graph breaks there); the numbers stay."""
    monkeypatch.delenv("GPULAB_COMPILE_MODE", raising=False)
    eager = _trainer("gnmt", False, compile=True)
    comp = _trainer("gnmt", True, compile=True)
    assert comp.fwd is not comp._forward_loss  # compiled
    comp.model.load_state_dict(eager.model.state_dict())
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 60, (8, 10), generator=g)
    tgt = torch.randint(4, 60, (8, 10), generator=g)
    tin = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], 1)
    losses, grads = [], []
    for t in (eager, comp):
        loss, ntok = t.fwd(src, tin, tgt, False)
        loss.backward()
        losses.append(loss.item())
        grads.append(t.model.attn.q.weight.grad.clone())
        assert int(ntok) == 80
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert torch.allclose(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def test_ncf_compiles_through_the_shared_speed_path_in_throughput_mode_only(monkeypatch):
    """ncf's model compiles with the scale's compile_mode and inductor settings and GPULAB_COMPILE_MODE
    (compile_fn), in the modes its WorkloadSpec declares (throughput); a ttt run stays eager."""
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    monkeypatch.setenv("GPULAB_COMPILE_MODE", "max-autotune-no-cudagraphs")
    monkeypatch.delenv("GPULAB_INDUCTOR", raising=False)
    with inductor_config.patch({"conv_1x1_as_mm": False}):  # restored on exit
        t = _trainer("ncf", True, inductor={"conv_1x1_as_mm": True})
        assert inductor_config.conv_1x1_as_mm is True
    assert seen == [{"dynamic": None, "mode": "max-autotune-no-cudagraphs"}] and t.ctx.compile
    monkeypatch.delenv("GPULAB_COMPILE_MODE")
    t = _trainer("ncf", True, mode="ttt")
    assert len(seen) == 1 and not t.ctx.compile and t.step_fn is t.ddp


def test_maskrcnn_compiles_roi_align_in_throughput_mode_when_asked():
    from runner.workloads import detection as D

    t = _trainer("maskrcnn", True, compile_roi_align=True)
    assert t.det.roi_align is not D.multilevel_roi_align
    t.throughput_step()  # a compiled training step with compiled RoIAlign runs on the CPU too
    plain = _trainer("maskrcnn", True, compile_roi_align=False)
    assert plain.det.roi_align is D.multilevel_roi_align


_STEM_RUN = """
import json, types, torch, torch.nn as nn
from torch._dynamo.utils import counters
from runner.workloads import base, vision as V
torch.manual_seed(0)
stem = nn.Sequential(V.SpaceToDepthConv7(3, 8, pad_channels=16), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
step = base.compile_fn(types.SimpleNamespace(compile=True, cfg={}), stem)
step(torch.randn(2, 3, 32, 32)).square().sum().backward()
print(json.dumps({"aot": dict(counters["aot_autograd"]), "grad": stem[0].weight.grad.abs().sum().item()}))
"""


def test_later_runs_reuse_the_compiled_graph_of_the_fast_stem(tmp_path):
    """A sweep's second run of resnet50 (a fresh process, the same cache) loads the whole compiled
    training graph of the stem (space-to-depth convolution, plain max pool) instead of tracing it again;
    no custom autograd Function is left that would need AOTAutograd's cache opened to it."""
    e = {**env(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    e.pop("GPULAB_INDUCTOR", None)
    e.pop("GPULAB_COMPILE_MODE", None)
    runs = []
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", _STEM_RUN], cwd=ROOT, env=e, capture_output=True, text=True, timeout=600
        )
        assert r.returncode == 0, r.stdout + r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["aot"].get("autograd_cache_saved") == 1, first
    assert second["aot"].get("autograd_cache_hit") == 1 and not second["aot"].get("autograd_cache_bypass"), second
    assert second["grad"] == first["grad"]
