"""The compiled bf16 training steps against CUDA autocast's promoted ops, on a CPU.

On a GPU, gnmt's cuDNN LSTMs return float16 under bf16 autocast, and an op
that CUDA autocast promotes (scatter_add, index_put, ...) refuses a float16
input there; torch.compile traces the backward under autocast, so a gather of
an LSTM output (its backward: scatter_add) stopped the full-scale compile with
"Unexpected floating ScalarType in at::autocast::prioritize". CPU autocast
does not promote those ops, so these tests read the traced graphs instead
(runner.workloads.gradients.promote_capture_backend).
"""

import pytest

torch = pytest.importorskip("torch")

from runner.workloads import cpucaps  # noqa: E402
from runner.workloads import gradients as G  # noqa: E402
from runner.workloads import gnmt  # noqa: E402

TINY_FULL = {
    "hidden": 16,
    "vocab_size": 40,
    "throughput": {
        "batch_size": 2,
        "seq_len": 5,
        "warmup_steps": 1,
        "measure_s": 0.1,
        "min_steps": 1,
        "chunk_steps": 1,
    },
}


def test_the_capture_finds_a_bf16_gather_whose_backward_is_a_scatter_add():
    backend = G.promote_capture_backend()
    idx = torch.tensor([[2, 1, 0, 3]])

    def f(x):
        return x.to(torch.bfloat16).gather(1, idx.unsqueeze(-1).expand(1, 4, 3)).float().sum()

    x = torch.randn(1, 4, 3, requires_grad=True)
    torch.compile(f, backend=backend)(x).backward()
    assert [(w, op) for w, op, _ in backend.hazards] == [("backward", "aten.scatter_add.default")]
    assert "torch.bfloat16" in backend.hazards[0][2]


@pytest.mark.skipif(bool(cpucaps.bf16_lstm_missing()), reason=str(cpucaps.bf16_lstm_missing()))
def test_gnmt_full_scale_compiled_bf16_step_feeds_promoted_ops_fp32_only():
    # gnmt's LSTMs run eagerly (a graph break) in bf16: where oneDNN has no bf16 LSTM (below
    # AVX-512) the step cannot run on this CPU, and the runner falls back to fp32 there
    # (test_gnmt_bf16_on_a_cpu_without_bf16_lstm_falls_back_to_fp32)
    torch._dynamo.reset()
    backend = G.promote_capture_backend()
    res = G.gradient_step(
        "gnmt",
        "cpu",
        True,
        scale="full",
        precision="bf16",
        batch_size=2,
        compile=True,
        overrides=TINY_FULL,
        backend=backend,
    )
    assert backend.hazards == []
    grads = res["grads"]
    assert grads["enc0_bwd.weight_ih_l0"] is not None and bool(torch.isfinite(grads["enc0_bwd.weight_ih_l0"]).all())
    assert all(g is not None for g in grads.values())


def test_reverse_within_keeps_dtype_values_and_padding():
    x = torch.arange(12.0).reshape(2, 3, 2).to(torch.bfloat16)
    out = gnmt.reverse_within(x, torch.tensor([3, 2]))
    assert out.dtype == torch.bfloat16
    assert out[0].tolist() == x[0].flip(0).tolist()
    assert out[1].tolist() == [x[1, 1].tolist(), x[1, 0].tolist(), x[1, 2].tolist()]
