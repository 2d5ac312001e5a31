"""gnmt compiled under DistributedDataParallel gives the gradients of eager DDP (two gloo ranks on the CPU).

At full scale gnmt compiles everything between its LSTMs, which Dynamo
leaves as graph breaks; under DDP its graph is also split at the gradient
buckets. This runs both paths in two processes (ddp_compile_worker.py) with
the aot_eager backend and checks that the compiled step's gradients are the
eager ones, are the mean of the ranks' own gradients (DDP reduced them) and
are the same on both ranks. Inductor's kernels on a GPU are left to the GPU
gradient check and benchmarks/multigpu.py.
"""

import pytest

from runner_helpers import two_gloo_workers

pytest.importorskip("torch")


@pytest.mark.slow
def test_gnmt_compiled_under_ddp_has_the_eager_ddp_gradients(tmp_path):
    res = two_gloo_workers("ddp_compile_worker.py", tmp_path, "result-{rank}.json", timeout=600)
    assert sorted(x["rank"] for x in res) == [0, 1], res
    for x in res:
        assert x["grad_norm"] > 0 and x["params"] > 30
        assert x["graphs"] >= 2, x  # compiled, in pieces (graph breaks at the LSTMs)
        assert x["ranks_equal"], x
        assert x["local_vs_mean"] > 1e-3, x  # the ranks' batches differ: averaging is visible
        assert x["eager_vs_mean_of_ranks"] < 1e-5, x
        assert x["compiled_vs_mean_of_ranks"] < 1e-5, x
        assert x["compiled_vs_eager"] < 1e-5, x
