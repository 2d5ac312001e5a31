"""One rank of test_runner_divergence.py (started by torch.distributed.run, gloo on the CPU).

Rank 1 alone scales a NaN loss through the trainer's GradScaler; every rank
then asks ``ctx.loss_watch.diverged`` twice (the first answer covers the losses so far,
the second nothing new) and writes ``watch-<rank>.json`` into the working
directory.
"""

import json
import os

import torch
import torch.distributed as dist


def main():
    from runner import workloads
    from runner.mllog import MLLog
    from runner.workloads import base

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    entry = workloads.load()["ncf"]
    spec = {"workload": "ncf", "entry": entry, "scale": "tiny", "mode": "ttt", "seed": 1}
    ctx = base.Context(
        spec=spec,
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=rank,
        world_size=world,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        precision="fp32",
    )
    scaler = ctx.grad_scaler()
    w = torch.ones(3, requires_grad=True)
    for step in range(3):
        loss = (w * (float("nan") if (rank == 1 and step == 1) else 1.0)).sum()
        scaler.scale(loss).backward()
    answers = [ctx.loss_watch.diverged(ctx), ctx.loss_watch.diverged(ctx)]
    with open(f"watch-{rank}.json", "w") as f:
        json.dump({"rank": rank, "answers": answers, "grad_finite": bool(torch.isfinite(w.grad).all())}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
