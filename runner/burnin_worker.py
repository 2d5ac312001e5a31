"""GPU load tests of ``runner burnin``, run in a child process.

    python -m runner.burnin_worker '{"gpu": 0, "tests": [{...}, ...], "start_at": 1764698400.0}'

The parent (runner/burnin.py, through runner/burnin_procs.py) imports no framework; this process imports
torch, runs the listed tests on one GPU (the parent sets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``CUDA_VISIBLE_DEVICES`` so that the
GPU is ``cuda:0`` here and its number is NVML's), and prints one JSON object
per finished test on stdout, as soon as it finishes:

    {"test": "matmul", "dtype": "bf16", "gpu": 0, "ok": true, "value": 712.3,
     "unit": "TFLOP/s", "start": ..., "end": ..., "detail": {...}, "error": null}

``start_at`` (Unix seconds): wait until then after warming up, so that the
workers of the all-GPUs phase load their GPUs at the same time.

Test kinds: ``matmul`` (dtype fp32|tf32|bf16|fp16, seconds; checks a block of
the product against a float64 reference), ``membw`` (device copy, GB/s, read
plus write), ``h2d``/``d2h`` (pinned host memory, GB/s), ``resnet50``
(the resnet50 workload's model and training step on synthetic images, images/s), ``nccl`` (all-reduce bus
bandwidth over the visible GPUs, GB/s; run by a single worker for all GPUs).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from runner.burnin_device import Device

# largest relative error of a product block against float64, per precision
MATMUL_TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "bf16": 3e-2, "fp16": 5e-3}


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def _timed_chunks(dev: Device, step, seconds: float, work_per_step: float, min_chunks: int = 3):
    """Run ``step`` in chunks of about 0.25 s until ``seconds`` passed.

    Returns rates (work units per second) of each chunk, measured with CUDA
    events on a GPU, so host overhead between chunks does not count.
    """
    # size a chunk: time a few steps
    dev.sync()
    t = time.perf_counter()
    n = 0
    while n < 3 or time.perf_counter() - t < 0.05:
        step()
        n += 1
        dev.sync()
    per_step = (time.perf_counter() - t) / n
    k = max(1, int(0.25 / max(per_step, 1e-6)))
    rates = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(rates) < min_chunks:
        a = dev.mark()
        for _ in range(k):
            step()
        b = dev.mark()
        ms = dev.elapsed_ms(a, b)
        if ms > 0:
            rates.append(work_per_step * k / (ms / 1000.0))
    return rates


def _stats(rates):
    rs = sorted(rates)
    mid = rs[len(rs) // 2] if len(rs) % 2 else (rs[len(rs) // 2 - 1] + rs[len(rs) // 2]) / 2
    return {"median": mid, "min": rs[0], "max": rs[-1], "chunks": len(rs)}


def bench_matmul(dev: Device, spec):
    torch = dev.torch
    dtype_name = spec["dtype"]
    n = int(spec.get("n", 8192))
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    # "highest": true fp32; "high": fp32 matmuls may use TF32 tensor cores
    torch.set_float32_matmul_precision("high" if dtype_name == "tf32" else "highest")
    g = torch.Generator(device=dev.name).manual_seed(1234)
    a = torch.randn(n, n, device=dev.name, dtype=torch.float32, generator=g).to(dtype)
    b = torch.randn(n, n, device=dev.name, dtype=torch.float32, generator=g).to(dtype)
    c = torch.empty(n, n, device=dev.name, dtype=dtype)

    def step():
        torch.matmul(a, b, out=c)

    rates = _timed_chunks(dev, step, float(spec["seconds"]), 2.0 * n**3 / 1e12)
    # correctness of the last product (after the GPU ran hot): a block against float64
    blk = min(256, n)
    ref = a[:blk].double() @ b[:, :blk].double()
    err = (c[:blk, :blk].double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
    tol = MATMUL_TOLERANCE[dtype_name]
    s = _stats(rates)
    detail = {"n": n, "max_rel_error": err, "tolerance": tol, **{k: v for k, v in s.items() if k != "median"}}
    if not err <= tol:
        return s["median"], detail, f"wrong results: max relative error {err:.3g} > {tol:g} for {dtype_name}"
    return s["median"], detail, None


def bench_membw(dev: Device, spec):
    torch = dev.torch
    nbytes = int(spec.get("bytes") or min(4 << 30, dev.total_memory() // 8))
    n = nbytes // 4
    src = torch.ones(n, device=dev.name, dtype=torch.float32)
    dst = torch.empty_like(src)

    def step():
        dst.copy_(src)

    rates = _timed_chunks(dev, step, float(spec["seconds"]), 2.0 * n * 4 / 1e9)
    s = _stats(rates)
    return s["median"], {"bytes": n * 4, "counted": "read+write", **{k: v for k, v in s.items() if k != "median"}}, None


def bench_transfer(dev: Device, spec, to_device: bool):
    torch = dev.torch
    nbytes = int(spec.get("bytes") or (512 << 20))
    n = nbytes // 4
    host = torch.empty(n, dtype=torch.float32, pin_memory=dev.cuda)
    host.fill_(1.0)
    buf = torch.empty(n, device=dev.name, dtype=torch.float32)

    if to_device:

        def step():
            buf.copy_(host, non_blocking=True)
    else:

        def step():
            host.copy_(buf, non_blocking=True)

    rates = _timed_chunks(dev, step, float(spec["seconds"]), n * 4 / 1e9)
    s = _stats(rates)
    return s["median"], {"bytes": n * 4, "pinned": dev.cuda, **{k: v for k, v in s.items() if k != "median"}}, None


# ---------------------------------------------------------------- ResNet-50 v1.5


def bench_resnet50(dev: Device, spec):
    """images/s of the resnet50 workload's own model and training step (runner.workloads.resnet50: the
    trainer ``runner run resnet50`` builds, its ``train_step``) on synthetic on-device images of the
    scale asked (``scale``: full = ResNet-50 v1.5 at 224 px), eager (no torch.compile: the warm-up stays
    seconds), channels-last on the GPU."""
    torch = dev.torch
    from runner.workloads import base
    from runner.workloads.trainer import spec_of

    total_gib = dev.total_memory() / 2**30
    batch = int(spec.get("batch") or (256 if total_gib >= 40 else 128 if total_gib >= 20 else 64))
    torch.backends.cudnn.benchmark = True
    # native bf16 (Ampere and later), not emulated; fp16 with loss scaling before; fp32 on the CPU
    use_bf16 = not dev.cuda or torch.cuda.get_device_capability(0) >= (8, 0)
    precision = ("bf16" if use_bf16 else "fp16") if dev.cuda else "fp32"
    scale = spec.get("scale", "full")
    ctx, module = base.bench_context(
        "resnet50",
        dev.name,
        True,
        scale=scale,
        precision=precision,
        batch_size=batch,
        compile=False,
        channels_last=dev.cuda,
    )
    trainer = spec_of(module).build(ctx)
    g = torch.Generator(device=ctx.device)
    g.manual_seed(ctx.seed)
    batches = trainer.synthetic_batches(g)
    trainer.model.train()

    def step():
        return trainer.train_step(*batches[0])

    for _ in range(int(spec.get("warmup_steps", 15))):
        step()
    per_step = float(trainer.throughput_batch())
    rates = _timed_chunks(dev, step, float(spec["seconds"]), per_step)
    s = _stats(rates)
    loss = float(step().item())
    detail = {
        "batch": int(per_step),
        "image": trainer.image_size,
        "precision": ctx.precision,
        "data": "synthetic",
        "source": "builtin",
        "model": "runner.workloads.resnet50",
        "scale": scale,
        "final_loss": loss,
        **{k: v for k, v in s.items() if k != "median"},
    }
    if loss != loss:  # NaN
        return s["median"], detail, "the loss became NaN"
    return s["median"], detail, None


# ---------------------------------------------------------------- NCCL


def _nccl_rank(rank, world, kind, init_file, sizes, iters, out_path):
    import torch.distributed as dist

    dev = Device(kind)
    torch = dev.torch
    if dev.cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if dev.cuda else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    results = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, device=f"cuda:{rank}" if dev.cuda else "cpu", dtype=torch.float32)
        for _ in range(5):
            dist.all_reduce(t)
        dev.sync()
        dist.barrier()
        a = dev.mark()
        for _ in range(iters):
            dist.all_reduce(t)
        dev.sync()
        b = dev.mark()
        sec = dev.elapsed_ms(a, b) / 1000.0 / iters
        algbw = nbytes / sec / 1e9
        results.append(
            {"bytes": nbytes, "time_us": sec * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (world - 1) / world}
        )
        del t
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def bench_nccl(dev: Device, spec):
    import tempfile

    import torch.multiprocessing as mp

    world = dev.torch.cuda.device_count() if dev.cuda else int(spec.get("world", 2))
    if world < 2:
        raise RuntimeError(f"NCCL all-reduce needs 2 or more GPUs, {world} visible")
    sizes = [int(s) for s in spec.get("sizes", [64 << 20, 256 << 20, 1 << 30])]
    iters = int(spec.get("iters", 20))
    with tempfile.TemporaryDirectory(prefix="gpulab-nccl-") as tmp:
        out = os.path.join(tmp, "result.json")
        mp.spawn(
            _nccl_rank, args=(world, dev.kind, os.path.join(tmp, "init"), sizes, iters, out), nprocs=world, join=True
        )
        with open(out) as f:
            results = json.load(f)
    best = max(r["busbw_gbs"] for r in results)
    return (
        best,
        {
            "world_size": world,
            "sizes": results,
            "dtype": "fp32",
            "op": "sum",
            "backend": "nccl" if dev.cuda else "gloo",
        },
        None,
    )


TESTS = {
    "matmul": (bench_matmul, "TFLOP/s"),
    "membw": (bench_membw, "GB/s"),
    "h2d": (lambda t, s: bench_transfer(t, s, True), "GB/s"),
    "d2h": (lambda t, s: bench_transfer(t, s, False), "GB/s"),
    "resnet50": (bench_resnet50, "images/s"),
    "nccl": (bench_nccl, "GB/s"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(argv[0])
    gpu = job.get("gpu")
    failed = 0
    try:
        dev = Device(job.get("device", "cuda"))
        emit(
            {
                "test": "device",
                "gpu": gpu,
                "ok": True,
                "detail": dev.info(),
                "start": time.time(),
                "end": time.time(),
                "value": None,
                "unit": None,
                "error": None,
            }
        )
        # warm the context and clocks a little, then wait for the common start
        dev.torch.ones(1, device=dev.name).add_(1)
        dev.sync()
        start_at = job.get("start_at")
        if start_at:
            delay = float(start_at) - time.time()
            if delay > 0:
                time.sleep(delay)
    except Exception as exc:
        emit(
            {
                "test": "device",
                "gpu": gpu,
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "start": time.time(),
                "end": time.time(),
                "value": None,
                "unit": None,
                "detail": {},
            }
        )
        return 1
    for spec in job["tests"]:
        fn, unit = TESTS[spec["test"]]
        rec = {"test": spec["test"], "gpu": gpu, "unit": unit, "dtype": spec.get("dtype"), "start": time.time()}
        try:
            value, detail, error = fn(dev, spec)
            rec.update(value=value, detail=detail, error=error, ok=error is None)
        except Exception as exc:
            tail = traceback.format_exc(limit=3).strip().splitlines()[-1]
            rec.update(value=None, detail={}, ok=False, error=f"{type(exc).__name__}: {exc}"[:500] or tail)
        rec["end"] = time.time()
        if not rec["ok"]:
            failed += 1
        emit(rec)
        if dev.cuda:
            try:
                dev.torch.cuda.empty_cache()
            except Exception:
                pass
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
