"""A run whose training loss turns NaN or infinite stops at the end of that epoch, failed, with
the reason; ranks agree on it; bf16 on a CPU whose oneDNN has no bf16 LSTM falls back to fp32."""

import subprocess
import sys

import pytest

from runner_helpers import ROOT, env, status, two_gloo_workers

torch = pytest.importorskip("torch")

from runner.workloads import base  # noqa: E402

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def test_a_diverging_run_stops_failed_after_the_epoch_with_its_reason():
    # a learning rate far too high: maskrcnn's loss turns NaN within the first epoch
    ctx, module = base.bench_context(
        "maskrcnn",
        "cpu",
        scale="tiny",
        precision="fp32",
        seed=1,
        mode="ttt",
        overrides={"lr_per_image": 50.0, "max_lr": 400.0, "train_images": 48, "eval_images": 4},
    )
    ctx.spec["max_epochs"] = 6
    out = base.run(ctx, module)
    assert out["outcome"] == "failed", out
    assert out["reason"] == "the training loss became NaN or infinite in epoch 1: the run diverged"
    assert out["result"]["epochs"] == 1 and out["result"]["quality"] is None
    assert out["precision"] == "fp32"


def test_a_finite_run_is_not_stopped():
    ctx, module = base.bench_context(
        "maskrcnn",
        "cpu",
        scale="tiny",
        precision="fp32",
        seed=1,
        mode="ttt",
        overrides={"train_images": 48, "eval_images": 4},
    )
    ctx.spec["max_epochs"] = 1
    out = base.run(ctx, module)
    assert out["outcome"] == "target_missed", out  # one epoch of 48 images: trained, evaluated, below target
    assert out["result"]["epochs"] == 1


@pytest.mark.slow
def test_every_rank_stops_when_one_rank_sees_a_nan_loss(tmp_path):
    res = two_gloo_workers("loss_watch_worker.py", tmp_path, "watch-{rank}.json")
    assert [x["answers"] for x in res] == [[True, False], [True, False]]
    assert [x["grad_finite"] for x in res] == [True, False]  # rank 0's own losses were finite


def _bf16_lstm_missing_under(extra: dict) -> str:
    code = "from runner.workloads import cpucaps; print(cpucaps.bf16_lstm_missing() or '')"
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env(), **extra},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return r.stdout.strip()


def test_gnmt_bf16_on_a_cpu_without_bf16_lstm_falls_back_to_fp32(tmp_path):
    missing = _bf16_lstm_missing_under(AVX2)
    if not missing:
        pytest.skip("this CPU runs bf16 LSTMs even with oneDNN held to AVX2")
    assert missing.startswith("this CPU's oneDNN has no bf16 LSTM (needs AVX-512): ")
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner",
            "run",
            "gnmt",
            "--scale",
            "tiny",
            "--mode",
            "throughput",
            "--precision",
            "bf16",
            "--gpus",
            "0",
            "--seed",
            "1",
            "--measure-seconds",
            "0.2",
            "--warmup-steps",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env={**env(), **AVX2},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()[-4000:]
    st = status(out)
    assert (st["outcome"], st["precision"]) == ("success", "fp32")
    assert st["result"]["notes"] == [f"--precision bf16: {missing}; the run uses fp32"]
    assert f"[workload] --precision bf16: {missing}; the run uses fp32" in (out / "stdout.log").read_text()
