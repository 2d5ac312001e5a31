"""What every workload shares: the two drivers and the benchmark hooks (the run context: runner.workloads.context).

Imported only in workload processes (it imports torch). A workload module
publishes ``SPEC``, a ``runner.workloads.trainer.WorkloadSpec`` naming its
trainer class, a subclass of ``runner.workloads.trainer.Trainer`` (the
contract: model, optimizer, scaler, the shared training step, the ttt calls
``hyperparameters``, ``train_epoch``, ``evaluate`` and the throughput calls
``throughput_batch``, ``throughput_step``; see that module).

``run(ctx, module)`` drives ttt or throughput mode and logs the MLPerf events.

Benchmark hook (benchmarks/throughput.py): ``bench_step(name, device, optimized)``
returns ``(step_fn, samples_per_step)`` for one workload: ``step_fn()`` runs one
training step on synthetic on-device data (asynchronously on CUDA: the caller
synchronizes before reading a clock). ``optimized=True`` is what throughput
mode runs (``ctx.optimized``: channels-last, torch.compile, fused optimizer,
the workload's own speed settings); ``optimized=False`` is the plain eager
baseline of the same model: fp32 weights, bf16 autocast, NCHW, no compile,
torch.optim defaults. The step is the trainer's ``throughput_step`` and
``throughput_batch``. ``bench_context`` builds the context both hooks use.

Gradient hook (benchmarks/gradcheck.py, tests/gpu/test_gradients_gpu.py):
``runner.workloads.gradients.gradient_step(name, device, optimized, ...)``
returns every parameter's gradient of one training step of either path, from
shared weights and the same batch, for a whole-model comparison.
"""

from __future__ import annotations

import math
import time

import torch
from mlperf_logging.mllog import constants as C

from runner import compilecache, phases
from runner.abort import Aborted
from runner.workloads.context import Context
from runner.workloads.compiling import compile_fn, inductor_options, key_values  # noqa: F401  (read as base.<name>)
from runner.workloads.errors import WorkloadError
from runner.workloads.trainer import spec_of


def reached(quality, target, higher_is_better: bool = True) -> bool:
    if isinstance(target, dict):
        return all(reached(quality[k], v, higher_is_better) for k, v in target.items())
    if quality is None or (isinstance(quality, float) and math.isnan(quality)):
        return False
    return quality >= target if higher_is_better else quality <= target


def _fmt(q) -> str:
    if isinstance(q, dict):
        return ", ".join(f"{k} {v:.4f}" for k, v in q.items())
    return f"{q:.4f}"


def run(ctx: Context, module) -> dict:
    """Drive the workload; returns ``{"outcome", "reason", "result"}``."""
    log = ctx.log
    ctx.artifacts = compilecache.for_context(ctx)
    if ctx.artifacts is not None and compilecache.load(ctx.artifacts):
        phases.mark("compiled artifacts loaded")
    trainer = spec_of(module).build(ctx)
    phases.mark("model built")
    if not ctx.compile:  # the workload does not compile in this mode (compiling.decide)
        ctx.artifacts = None
    log.event(C.SEED, ctx.seed)
    log.hyperparameters(trainer.hyperparameters())
    out = _throughput(ctx, trainer) if ctx.mode == "throughput" else _ttt(ctx, trainer)
    if ctx.compile and ctx.is_main:
        print(compilecache.summary(), flush=True)
    out["precision"] = ctx.precision  # the one used (a workload may have fallen back)
    if phases.marks():
        out["result"]["phases_s"] = phases.marks()
    if ctx.notes:
        out["result"].setdefault("notes", []).extend(ctx.notes)
    return out


def eval_epochs(cfg: dict, max_epochs: int) -> list[int]:
    """The epochs after which a ttt run evaluates: the scale's ``eval_epochs`` list, else every
    ``eval_every`` epochs; always the last epoch too."""
    if "eval_epochs" in cfg:
        points = [e for e in cfg["eval_epochs"] if e < max_epochs]
    else:
        points = list(range(cfg.get("eval_every", 1), max_epochs, cfg.get("eval_every", 1)))
    return points + [max_epochs]


def _ttt(ctx: Context, trainer) -> dict:
    log, cfg, entry = ctx.log, ctx.cfg, ctx.entry
    target = cfg["target"]
    hib = entry.get("higher_is_better", True)
    max_epochs = int(ctx.spec.get("max_epochs") or cfg["max_epochs"])
    log.event(C.TRAIN_SAMPLES, trainer.train_samples)
    log.event(C.EVAL_SAMPLES, trainer.eval_samples)
    ctx.barrier()
    log.end(C.INIT_STOP)
    ctx.barrier()
    log.start(C.RUN_START)
    t0 = time.time()
    quality, epoch, history = None, 0, []
    try:
        block_first = 1
        for block_last in eval_epochs(cfg, max_epochs):
            count = block_last - block_first + 1
            log.start(C.BLOCK_START, metadata={C.FIRST_EPOCH_NUM: block_first, C.EPOCH_COUNT: count})
            for epoch in range(block_first, block_first + count):
                log.start(C.EPOCH_START, metadata={C.EPOCH_NUM: epoch})
                trainer.train_epoch(epoch)
                log.end(C.EPOCH_STOP, metadata={C.EPOCH_NUM: epoch})
                if ctx.loss_watch.diverged(ctx):  # NaN or inf: training cannot recover, stop now
                    log.end(C.BLOCK_STOP, metadata={C.FIRST_EPOCH_NUM: block_first})
                    log.end(C.RUN_STOP, metadata={"status": C.ABORTED})
                    return {
                        "outcome": "failed",
                        "reason": f"the training loss became NaN or infinite in epoch {epoch}: the run diverged",
                        "result": _ttt_result(ctx, trainer, epoch, None, target, time.time() - t0),
                    }
            log.start(C.EVAL_START, metadata={C.EPOCH_NUM: epoch})
            quality = trainer.evaluate(epoch)
            log.event(C.EVAL_ACCURACY, quality, metadata={C.EPOCH_NUM: epoch})
            log.end(C.EVAL_STOP, metadata={C.EPOCH_NUM: epoch})
            log.end(C.BLOCK_STOP, metadata={C.FIRST_EPOCH_NUM: block_first})
            history.append(quality)
            block_first = block_last + 1
            if reached(quality, target, hib):
                ctx.sync()
                ttt = time.time() - t0
                log.end(C.RUN_STOP, metadata={"status": C.SUCCESS})
                return {
                    "outcome": "success",
                    "reason": f"reached {entry['metric']} {_fmt(quality)} (target {_fmt_t(target)}) at epoch {epoch}",
                    "result": _ttt_result(ctx, trainer, epoch, quality, target, ttt),
                }
    except Aborted:
        log.end(C.RUN_STOP, metadata={"status": C.ABORTED})
        raise
    ttt = time.time() - t0
    log.end(C.RUN_STOP, metadata={"status": C.ABORTED})
    last = "no evaluation" if quality is None else f"{entry['metric']} {_fmt(quality)}"
    return {
        "outcome": "target_missed",
        "reason": f"{last} after {epoch} epochs (the limit) is below the target {_fmt_t(target)}",
        "result": _ttt_result(ctx, trainer, epoch, quality, target, ttt),
    }


def _fmt_t(t) -> str:
    return _fmt(t) if isinstance(t, dict) else f"{t}"


def _ttt_result(ctx, trainer, epochs, quality, target, ttt) -> dict:
    samples = trainer.train_samples * epochs
    res = {
        "epochs": epochs,
        "quality": quality,
        "target": target,
        "time_to_train_s": round(ttt, 3),
        "samples_per_s": round(samples / ttt, 3) if ttt > 0 else None,
    }
    if ctx.first_step_time is not None:
        res["time_to_first_step_s"] = round(ctx.first_step_time - ctx.t_launch, 3)
    return res


def _throughput(ctx: Context, trainer) -> dict:
    log, cfg = ctx.log, ctx.cfg
    tp = cfg.get("throughput", {})
    warmup = int(ctx.spec.get("warmup_steps") or tp.get("warmup_steps", 5))
    measure_s = float(ctx.spec.get("measure_s") or tp.get("measure_s", 10.0))
    min_steps = int(tp.get("min_steps", 5))
    chunk = int(tp.get("chunk_steps", 5))
    batch = trainer.throughput_batch()
    ctx.barrier()
    log.end(C.INIT_STOP)
    log.start(C.RUN_START)
    try:
        for i in range(warmup):
            trainer.throughput_step()
            if i == 0:
                ctx.mark_step()
        ctx.sync()
        ctx.barrier()
        t0 = time.time()
        steps = 0
        while True:
            for _ in range(chunk):
                trainer.throughput_step()
            steps += chunk
            if ctx.first_step_time is None:
                ctx.mark_step()
            ctx.sync()
            go = steps < min_steps or (time.time() - t0) < measure_s
            if not ctx.broadcast(go):
                break
        ctx.barrier()
        elapsed = time.time() - t0
    except Aborted:
        log.end(C.RUN_STOP, metadata={"status": C.ABORTED})
        raise
    sps = steps * batch * ctx.world_size / elapsed
    log.event(
        "throughput",
        sps,
        metadata={"unit": f"{ctx.entry['sample_unit']}/s", "steps": steps, "elapsed_s": round(elapsed, 3)},
    )
    log.end(C.RUN_STOP, metadata={"status": C.SUCCESS})
    res = {
        "samples_per_s": round(sps, 3),
        "sample_unit": ctx.entry["sample_unit"],
        "steps": steps,
        "warmup_steps": warmup,
        "measured_s": round(elapsed, 3),
        "batch_per_process": batch,
        "world_size": ctx.world_size,
    }
    if ctx.first_step_time is not None:
        res["time_to_first_step_s"] = round(ctx.first_step_time - ctx.t_launch, 3)
    return {
        "outcome": "success",
        "reason": f"measured {sps:,.1f} {ctx.entry['sample_unit']}/s over {steps} steps ({elapsed:.1f} s)",
        "result": res,
    }


def bench_context(
    name: str,
    device,
    optimized: bool = True,
    *,
    scale: str = "full",
    precision: str = "bf16",
    batch_size: int | None = None,
    seed: int = 0,
    overrides: dict | None = None,
    mode: str = "throughput",
    compile: bool | None = None,
    channels_last: bool | None = None,
):
    """``(ctx, module)`` of workload ``name`` in one process, as the benchmark hooks build it.

    ``compile`` and ``channels_last`` default to ``optimized`` on CUDA (what
    the runner does); a test may ask for either on the CPU. ``overrides``
    replaces settings of the scale (keys workloads.yml names for it, else
    WorkloadError). ``mode`` "ttt" builds the trainer with its data (generated
    at tiny and small scale).
    """
    import importlib

    from runner import workloads
    from runner.mllog import MLLog

    entry = workloads.load()[name]
    device = torch.device(device)
    if device.type == "cpu" and precision == "fp16":
        precision = "fp32"
    default = bool(optimized and device.type == "cuda")
    spec = {
        "workload": name,
        "scale": scale,
        "mode": mode,
        "seed": seed,
        "entry": entry,
        "compile": default if compile is None else bool(compile),
        "optimized": bool(optimized),
    }
    if batch_size is not None:
        spec["throughput_batch_size"] = int(batch_size)
    ctx = Context(
        spec=spec, entry=entry, log=MLLog(None), device=device, rank=0, world_size=1, local_rank=0, precision=precision
    )
    ctx.channels_last = default if channels_last is None else bool(channels_last)
    for key, value in (overrides or {}).items():
        if key not in ctx.cfg:
            raise WorkloadError(
                f"setting {key!r}: the {scale} scale of {name} has none of that name "
                f"(it has {', '.join(sorted(ctx.cfg))})"
            )
        ctx.cfg[key] = value  # checked against its declaration (WorkloadError)
    return ctx, importlib.import_module(entry["module"])


def bench_step(
    name: str,
    device,
    optimized: bool = True,
    *,
    scale: str = "full",
    precision: str = "bf16",
    batch_size: int | None = None,
    seed: int = 0,
    overrides: dict | None = None,
):
    """``(step_fn, samples_per_step)`` of workload ``name`` for the throughput benchmark.

    ``optimized`` picks the runner's throughput path or the plain eager
    baseline (fp32 weights, bf16 autocast, NCHW, no compile); ``batch_size``
    overrides the per-process throughput batch; ``overrides`` replaces
    settings of the scale (keys workloads.yml names for it, else WorkloadError).
    See the module docstring.
    """
    ctx, module = bench_context(
        name, device, optimized, scale=scale, precision=precision, batch_size=batch_size, seed=seed, overrides=overrides
    )
    trainer = spec_of(module).build(ctx)
    return trainer.throughput_step, trainer.throughput_batch()
