"""A workload process's run context: what the runner asked (workload, scale, mode, seed, precision,
the scale's declared settings), the device and the process group, and the helpers every trainer uses
(autocast, the gradient scaler, memory-sized batches, seeded generators, wrapping for DDP, collectives).
``runner.workloads.base`` builds one per run (``bench_context`` per benchmark)."""

from __future__ import annotations

import contextlib
import sys
import time

import torch
import torch.distributed as dist

from runner import compilecache, phases
from runner.workloads.divergence import LossWatch, WatchedScaler
from runner.workloads.settings import Settings, declarations


class Context:
    def __init__(
        self,
        *,
        spec: dict,
        entry: dict,
        log,
        device: torch.device,
        rank: int,
        world_size: int,
        local_rank: int,
        precision: str,
    ):
        self.spec = spec
        self.entry = entry
        self.name = spec["workload"]
        self.scale = spec["scale"]
        self.mode = spec["mode"]
        self.seed = int(spec["seed"])
        self.data = spec.get("data")
        # the scale's settings, as declared in workloads.yml (a read of an undeclared name fails)
        self.cfg = Settings(
            entry["scales"][self.scale], declarations(entry.get("settings", {})), f"{self.name} ({self.scale} scale)"
        )
        self.cfg.update(spec.get("settings") or {})  # runner run --set (each checked against its declaration)
        self.log = log
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.precision = precision
        self.is_main = rank == 0
        self.distributed = world_size > 1
        self.cuda = device.type == "cuda"
        self.t_launch = float(spec.get("t_launch", time.time()))
        self.first_step_time = None
        self.artifacts = None  # compiled artifacts file (runner.compilecache), set by run()
        # options of the speed path; a workload may ignore what does not apply
        self.compile = bool(spec.get("compile", self.cuda))
        self.channels_last = self.cuda
        # False only for the benchmark's plain eager baseline (see bench_step)
        self.optimized = bool(spec.get("optimized", True))
        # settled with compile when the trainer is built (runner.workloads.compiling.decide)
        self.fast_layers = False
        self.loss_watch = LossWatch()  # runner/workloads/divergence.py
        self.notes: list[str] = []  # for status.json's result.notes

    # --- numerics ---------------------------------------------------------------
    @property
    def amp_dtype(self):
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def fall_back(self, precision: str, why: str) -> None:
        """Run in ``precision`` instead of the one asked, saying ``why`` (stderr and status.json)."""
        note = f"--precision {self.precision}: {why}; the run uses {precision}"
        self.precision = precision
        self.notes.append(note)
        print(f"[workload] {note}", file=sys.stderr, flush=True)

    def grad_scaler(self):
        """The trainer's GradScaler (scaling only with fp16); its ``scale(loss)`` also notes the loss
        for ``loss_watch`` (every workload's backward pass goes through it)."""
        return WatchedScaler(self.loss_watch, self.device.type, enabled=self.precision == "fp16")

    def throughput_batch_size(self, default: int) -> int:
        """Per-process batch of throughput mode.

        The benchmark's override, else the scale's ``throughput.batch_size``,
        else ``throughput.batch_by_memory`` for this GPU's memory, else ``default``.
        """
        tp = self.cfg.get("throughput", {})
        return int(
            self.spec.get("throughput_batch_size")
            or tp.get("batch_size")
            or self.by_memory(tp.get("batch_by_memory"), default)
        )

    def gpu_memory_gib(self) -> float | None:
        if not self.cuda:
            return None
        return torch.cuda.get_device_properties(self.device).total_memory / 2**30

    def by_memory(self, table, default):
        """The value of ``table`` ({GiB: value}) for the largest size this GPU has; ``default`` on CPU."""
        mem = self.gpu_memory_gib()
        if mem is None or not table:
            return default
        best = None
        for gib, value in sorted(((float(k), v) for k, v in table.items())):
            if mem >= gib * 0.95:
                best = value
        return default if best is None else best

    def generator(self, offset: int = 0) -> torch.Generator:
        """A CPU generator seeded from the run seed (and ``offset``)."""
        g = torch.Generator()
        g.manual_seed((self.seed * 1000003 + offset) % (2**63))
        return g

    def fused(self) -> dict:
        """Keyword for torch.optim constructors: the fused kernel on CUDA (not in the baseline)."""
        return {"fused": True} if self.cuda and self.optimized else {}

    # --- distributed helpers ---------------------------------------------------
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel as DDP

        if self.cuda:
            return DDP(model, device_ids=[self.device.index], gradient_as_bucket_view=True)
        return DDP(model)

    def all_sum(self, values) -> list[float]:
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device if self.cuda else "cpu")
        if self.distributed:
            dist.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def gather(self, obj) -> list | None:
        """All ranks' ``obj`` on rank 0 (None elsewhere)."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj):
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self):
        if self.distributed:
            dist.barrier()

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def shard(self, n: int) -> slice:
        """This rank's contiguous share of ``n`` items."""
        per = n // self.world_size
        return slice(self.rank * per, (self.rank + 1) * per)

    def mark_step(self):
        if self.first_step_time is None:
            self.sync()
            self.first_step_time = time.time()
            phases.first_step(at=self.first_step_time)
            if self.artifacts is not None and self.is_main:
                compilecache.save(self.artifacts)
