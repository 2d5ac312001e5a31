"""gnmt compiled under DistributedDataParallel gives the gradients of eager DDP (two gloo ranks on the CPU).

At full scale gnmt compiles everything between its LSTMs, which Dynamo
leaves as graph breaks; under DDP its graph is also split at the gradient
buckets. This runs both paths in two processes (ddp_compile_worker.py) with
the aot_eager backend and checks that the compiled step's gradients are the
eager ones, are the mean of the ranks' own gradients (DDP reduced them) and
are the same on both ranks. Inductor's kernels on a GPU are left to the GPU
gradient check and benchmarks/multigpu.py.
"""

import json
import subprocess
import sys

import pytest

from runner_helpers import ROOT, env

pytest.importorskip("torch")


@pytest.mark.slow
def test_gnmt_compiled_under_ddp_has_the_eager_ddp_gradients(tmp_path):
    worker = ROOT / "tests" / "unit" / "runner" / "ddp_compile_worker.py"
    e = env()
    e["OMP_NUM_THREADS"] = "1"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        str(worker)], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    res = [json.loads((tmp_path / f"result-{rank}.json").read_text()) for rank in (0, 1)]
    assert sorted(x["rank"] for x in res) == [0, 1], r.stdout
    for x in res:
        assert x["grad_norm"] > 0 and x["params"] > 30
        assert x["graphs"] >= 2, x  # compiled, in pieces (graph breaks at the LSTMs)
        assert x["ranks_equal"], x
        assert x["local_vs_mean"] > 1e-3, x  # the ranks' batches differ: averaging is visible
        assert x["eager_vs_mean_of_ranks"] < 1e-5, x
        assert x["compiled_vs_mean_of_ranks"] < 1e-5, x
        assert x["compiled_vs_eager"] < 1e-5, x
