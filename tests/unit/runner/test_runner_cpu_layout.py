"""Channels-last in CPU bf16 training: on where oneDNN's kernels survive it, off (with one note) where
they kill the process (runner.workloads.compiling.cpu_layout, cpucaps.bf16_channels_last_crash;
runner/README "CPU runs and oneDNN")."""

import platform

import pytest

torch = pytest.importorskip("torch")

from runner.workloads import base as B  # noqa: E402
from runner.workloads import cpucaps  # noqa: E402
from runner.workloads.trainer import spec_of  # noqa: E402

X86 = platform.machine() in ("x86_64", "AMD64")


def test_bf16_channels_last_steps_train_here_or_the_layout_is_held_off_with_one_note(capsys):
    # the reduced case of the crash: ssd at tiny scale has a 1x1 stride-2 convolution 8 -> 16 channels
    ctx, module = B.bench_context("ssd", "cpu", True, scale="tiny", precision="bf16", batch_size=2, channels_last=True)
    trainer = spec_of(module).build(ctx)
    trainer.throughput_step()
    trainer.throughput_step()
    why = cpucaps.bf16_channels_last_crash()
    err = capsys.readouterr().err
    if why:
        assert ctx.channels_last is False
        assert ctx.notes == [f"channels-last off: {why}; the run uses the NCHW layout"]
        assert err.count("[workload] channels-last off: ") == 1
    else:
        assert ctx.channels_last is True and ctx.notes == [] and "channels-last off" not in err
    # a compiled run: Inductor's layout optimization (channels-last on a CPU) goes off with it
    import torch._inductor.config as inductor_config

    saved = inductor_config.layout_optimization
    try:
        inductor_config.layout_optimization = True
        ctxc, _ = B.bench_context("ssd", "cpu", True, scale="tiny", precision="bf16", compile=True)
        spec_of(module).build(ctxc)  # torch.compile is lazy: nothing compiles here
        assert ctxc.compile is True and inductor_config.layout_optimization is (why is None)
    finally:
        inductor_config.layout_optimization = saved
    # fp32 keeps channels-last everywhere (its kernels are fine)
    ctx32, _ = B.bench_context("ssd", "cpu", True, scale="tiny", precision="fp32", channels_last=True)
    spec_of(module).build(ctx32)
    assert ctx32.channels_last is True and ctx32.notes == []


@pytest.mark.skipif(not X86, reason="oneDNN's instruction sets are x86's")
def test_the_instruction_set_is_the_cpu_s_held_to_onednn_max_cpu_isa(monkeypatch):
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    best = cpucaps.onednn_isa()
    assert best in cpucaps.ONEDNN_ISAS
    assert (cpucaps.bf16_channels_last_crash() is None) == (cpucaps.ONEDNN_ISAS[best] < cpucaps.AVX512_CORE)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # oneDNN reads the name in any case
    assert cpucaps.onednn_isa() == ("AVX2" if cpucaps.ONEDNN_ISAS[best] >= 3 else best)
    assert cpucaps.bf16_channels_last_crash() is None
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    if cpucaps.ONEDNN_ISAS[best] >= cpucaps.AVX512_CORE:
        assert cpucaps.onednn_isa() == "AVX512_CORE"
        assert "(AVX512_CORE)" in cpucaps.bf16_channels_last_crash()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "NOT_AN_ISA")  # oneDNN ignores it: the CPU's best
    assert cpucaps.onednn_isa() == best
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "SSE41")  # the old name
    assert cpucaps.onednn_isa() == "SSE41" and cpucaps.bf16_channels_last_crash() is None
