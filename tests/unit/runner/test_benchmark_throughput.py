"""benchmarks/throughput.py on the CPU: the smoke path of one workload (no timing assertions)."""

import json
import sys

import pytest

pytest.importorskip("torch")

from runner_helpers import ROOT, script


def test_smoke_run_on_cpu_writes_the_document(tmp_path):
    out = tmp_path / "bench.json"
    r = script(
        "benchmarks/throughput.py",
        "--device",
        "cpu",
        "--workloads",
        "transformer",
        "--measure-seconds",
        "0.3",
        "--out",
        str(out),
        "--workdir",
        str(tmp_path / "work"),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    row = doc["transformer"]
    assert "errors" not in row, row
    # transformer has no speed settings: the runner's path is the plain compile, measured once under that name
    assert row["speed_settings"] == {} and row["runner_path"] == "compiled"
    assert row["unit"] == "tokens/s" and row["baseline"] > 0 and row["compiled"] > 0
    assert not {"optimized", "ratio", "ratio_to_compiled"} & set(row), row
    assert row["compiled_ratio"] == pytest.approx(row["compiled"] / row["baseline"], rel=1e-2)
    assert "transformer: the runner's throughput path is plain torch.compile" in r.stdout
    assert row["batch"] == 32 * 10  # tiny throughput: 32 sentences of 10 target tokens
    for which in ("cold", "warm"):
        assert row["time_to_first_step_s"][which] > 0
        assert row["runner_samples_per_s"][which] > 0
    assert doc["_meta"]["device"] == "cpu" and doc["_meta"]["scale"] == "tiny"
    assert doc["_meta"]["variants"] == ["optimized", "compiled", "baseline"] and doc["_meta"]["torch"]


def test_the_plain_compiled_variant_drops_the_workload_speed_settings():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import throughput

    r50 = throughput.plain_compile_overrides("resnet50", "full")
    assert r50["space_to_depth_stem"] is False and r50.get("inductor", {}) == {} and r50["compile_mode"] == "default"
    assert set(r50) <= set(throughput.PLAIN_COMPILE) and set(r50) <= set(_scale("resnet50", "full"))
    assert throughput.plain_compile_overrides("maskrcnn", "full")["compile_roi_align"] is False
    assert throughput.plain_compile_overrides("gnmt", "small") == {"compile": True}  # compiled like the others
    assert throughput.plain_compile_overrides("ncf", "full") == {}
    # what the optimized path has beyond plain torch.compile, recorded in each row
    assert throughput.speed_settings("resnet50", "full") == {"space_to_depth_stem": True, "stem_pad_channels": 16}
    assert throughput.speed_settings("maskrcnn", "full") == {"compile_roi_align": True}
    for name in ("ssd", "gnmt", "transformer", "ncf"):
        assert throughput.speed_settings(name, "full") == {}, name
        # no speed option under a name that claims speed: the runner's path is "compiled", measured once
        assert throughput.runner_variant(name, "full") == "compiled", name
        assert throughput.variants_for(name, "full", throughput.VARIANTS) == ["compiled", "baseline"]
        assert throughput.variants_for(name, "full", ["optimized"]) == ["compiled"]
    for name in ("resnet50", "maskrcnn"):
        assert throughput.runner_variant(name, "full") == "optimized", name
        assert throughput.variants_for(name, "full", throughput.VARIANTS) == list(throughput.VARIANTS)


def test_a_compile_override_makes_the_optimized_path_its_own(monkeypatch):
    """GPULAB_COMPILE_MODE reaches the optimized path only: then it is no longer the plain compile."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import throughput

    monkeypatch.setenv("GPULAB_COMPILE_MODE", "reduce-overhead")
    assert throughput.runner_variant("ncf", "full") == "optimized"
    assert throughput.variants_for("ncf", "full", throughput.VARIANTS) == list(throughput.VARIANTS)


def _scale(name, scale):
    from runner import workloads

    return workloads.load()[name]["scales"][scale]


def test_selection_and_the_deadline_still_write_the_document(tmp_path):
    out = tmp_path / "bench.json"
    r = script(
        "benchmarks/throughput.py",
        "--device",
        "cpu",
        "--workloads",
        "ncf",
        "--variants",
        "compiled,baseline",
        "--runner-runs",
        "gnmt",
        "--deadline",
        "1",
        "--out",
        str(out),
        "--workdir",
        str(tmp_path / "work"),
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["ncf"]["errors"] == {"compiled": "not started: deadline", "baseline": "not started: deadline"}
    assert "optimized" not in doc["ncf"] and "time_to_first_step_s" not in doc["ncf"]
    assert doc["gnmt"]["errors"] == {"runner_cold": "not started: deadline", "runner_warm": "not started: deadline"}
    assert doc["_meta"]["deadline_s"] == 1 and doc["_meta"]["runner_runs"] == ["gnmt"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--workloads", "bert"], "--workloads: unknown bert"),
        (["--variants", "fast"], "--variants: unknown fast"),
        (["--runner-runs", "bert"], "--runner-runs: unknown bert"),
        (["--deadline", "-5"], "--deadline -5.0: must be positive"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, argv, says):
    r = script("benchmarks/throughput.py", "--device", "cpu", *argv, "--out", str(tmp_path / "x.json"), timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_profile_step_splits_the_step_time_into_kernel_categories(tmp_path):
    out = tmp_path / "profile.json"
    r = script(
        "benchmarks/profile_step.py",
        "resnet50",
        "--device",
        "cpu",
        "--steps",
        "2",
        "--profile-steps",
        "2",
        "--set",
        "space_to_depth_stem=false",
        "--out",
        str(out),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["workload"] == "resnet50" and doc["variant"] == "optimized" and doc["samples_per_s"] > 0
    cats = doc["categories"]
    # a ResNet step on a CPU: convolutions (forward and both gradients) are the largest share
    assert max(cats, key=lambda c: cats[c]["ms_per_step"]) == "convolution", cats
    assert sum(v["share"] for v in cats.values()) == pytest.approx(1.0, abs=0.01)
    assert doc["kernel_ms_per_step"] == pytest.approx(sum(v["ms_per_step"] for v in cats.values()), rel=0.01)
    assert any("convolution" in k["name"] for k in doc["top_kernels"])
    assert "[profile]   convolution" in r.stdout
    assert doc["settings"]["set"] == {"space_to_depth_stem": False}


def test_profile_categories_and_table_of_gpu_kernel_names():
    """The categories of real H100 kernel names, and the table's GPU idle row (step time less kernel time)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import profile_step

    names = {
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_cublas": "matmul",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NNT": "matmul",
        "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64": "convolution",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>": "elementwise (eager)",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>": "attention",
        "void RNN_blockPersist_fp_LSTM<__nv_bfloat16, float, 128>": "recurrent",
        "void elemWiseRNNcell<__nv_bfloat16, float, float, (cudnnRNNMode_t)2>": "recurrent",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>": "optimizer",
        "triton_red_fused__to_copy_add_native_layer_norm_0": "fused (triton)",
        "void at::native::embedding_backward_feature_kernel<c10::BFloat16, float, long>": "gather / embedding",
        "void cub::DeviceRadixSortOnesweepKernel<Policy900, false, long, long>": "gather / embedding",
        "Memcpy DtoD (Device -> Device)": "copy",
        "void at::native::reduce_kernel<512, 1, ReduceOp<float, NormTwoOps>>": "elementwise (eager)",
        "some_vendor_kernel": "other",
    }
    for name, cat in names.items():
        assert profile_step.category(name) == cat, name
    events = [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NNT", 6000.0, 20),
        ("triton_poi_fused_add_0", 2000.0, 40),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 1000.0, 2),
    ]
    doc = profile_step.summarize(events, steps=2, top=5)
    assert doc["kernel_ms_per_step"] == 4.5 and doc["categories"]["matmul"]["share"] == pytest.approx(2 / 3, abs=1e-3)
    doc.update(
        workload="ncf",
        variant="compiled",
        samples_per_step=1024,
        samples_per_s=170_000.0,
        step_ms=6.0,
        build_and_first_step_s=20.0,
        timed_steps=30,
        profiled_steps=2,
        gpu_idle_ms_per_step=1.5,
        settings={"scale": "full", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0"},
    )
    text = profile_step.table(doc)
    assert "| GEMM / convolution / attention / RNN | 3.000 | 50.0 % |" in text
    assert "| elementwise and normalization (Triton, eager) | 1.000 | 16.7 % |" in text
    assert "| optimizer | 0.500 | 8.3 % |" in text
    assert "| GPU idle (host work, launches, data) | 1.500 | 25.0 % |" in text
    assert text.startswith("# ncf (compiled), scale full, NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize(
    "argv, says",
    [
        (["bert"], "workload 'bert' is not registered"),
        (["ncf", "--batch", "0"], "--batch 0: must be at least 1"),
        (["ncf", "--set", "bogus=1"], "setting 'bogus': the tiny scale of ncf"),
        (["ncf", "--set", "nokey"], "--set: 'nokey' is not key=value"),
        (["ncf", "--table", "/nonexistent/t.md"], "--table /nonexistent/t.md: its folder does not exist"),
    ],
)
def test_profile_step_bad_input_is_one_line_exit_2(tmp_path, argv, says):
    r = script("benchmarks/profile_step.py", *argv, "--device", "cpu", "--out", str(tmp_path / "p.json"), timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
    assert not (tmp_path / "p.json").exists()
