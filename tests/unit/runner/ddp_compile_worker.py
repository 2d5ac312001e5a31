"""One rank of test_runner_ddp_compile.py (started by torch.distributed.run, gloo on the CPU).

Builds gnmt's trainer as the runner does, with DistributedDataParallel, once
eager and once compiled (``torch.compile`` with the aot_eager backend: the
graphs Dynamo and AOTAutograd make under DDP, without Inductor's C++ build),
takes one training step's gradients on this rank's own batch, and writes
``result-<rank>.json`` into the working directory: the number of graphs
compiled, the largest gradient difference of the two paths relative to the
gradient norm, the largest difference from the mean of the ranks' local
(unreduced) gradients, and whether every rank holds the same gradients.
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def grads(world, rank, compiled: bool, distributed: bool):
    from runner import workloads
    from runner.mllog import MLLog
    from runner.workloads import base, gnmt, gradients

    entry = workloads.load()["gnmt"]
    spec = {
        "workload": "gnmt",
        "entry": entry,
        "scale": "tiny",
        "mode": "throughput",
        "seed": 1,
        "compile": compiled,
        "gpus": [],
        "run_dir": "/tmp",
        "precision": "fp32",
    }
    ctx = base.Context(
        spec=spec,
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=rank if distributed else 0,
        world_size=world if distributed else 1,
        local_rank=0,
        precision="fp32",
    )
    ctx.cfg.update(compile=True, dropout=0.0)  # full scale compiles gnmt; dropout off for equal steps
    with gradients._compile_backend("aot_eager" if compiled else None):
        tr = gnmt.build(ctx)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    src = torch.randint(4, tr.vocab_size, (8, 10), generator=g)
    tgt = torch.randint(4, tr.vocab_size, (8, 10), generator=g)
    tin = torch.cat([torch.full_like(tgt[:, :1], 2), tgt[:, :-1]], 1)
    tr.model.train()
    loss, ntok = tr.fwd(src, tin, tgt, False)
    (loss / ntok).backward()
    return {n: p.grad.detach().clone() for n, p in tr.model.named_parameters()}


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    local = grads(world, rank, compiled=False, distributed=False)
    eager = grads(world, rank, compiled=False, distributed=True)
    from torch._dynamo.utils import counters

    comp = grads(world, rank, compiled=True, distributed=True)
    graphs = int(counters["stats"]["unique_graphs"])
    norm = sum(float(v.square().sum()) for v in eager.values()) ** 0.5
    mean = {}
    for n, v in local.items():
        t = v.clone()
        dist.all_reduce(t)
        mean[n] = t / world
    same = True
    for v in comp.values():
        others = [torch.empty_like(v) for _ in range(world)]
        dist.all_gather(others, v.contiguous())
        same &= all(torch.equal(o, v) for o in others)
    out = {
        "rank": rank,
        "graphs": graphs,
        "grad_norm": norm,
        "params": len(comp),
        "compiled_vs_eager": max(float((comp[n] - eager[n]).abs().max()) for n in eager) / norm,
        "eager_vs_mean_of_ranks": max(float((eager[n] - mean[n]).abs().max()) for n in eager) / norm,
        "compiled_vs_mean_of_ranks": max(float((comp[n] - mean[n]).abs().max()) for n in eager) / norm,
        "local_vs_mean": max(float((local[n] - mean[n]).abs().max()) for n in eager) / norm,
        "ranks_equal": same,
    }
    with open(f"result-{rank}.json", "w") as f:  # in the working directory the test gives
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
