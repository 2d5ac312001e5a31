"""Entry of a workload process: ``python -m runner.worker --spec FILE``.

Started by the supervisor (runner/supervisor.py), alone or under
``torch.distributed.run`` (one process per GPU; RANK, WORLD_SIZE, LOCAL_RANK
come from the environment). The spec file is JSON written by the supervisor.
Rank 0 writes ``mllog.log`` and a result file the supervisor turns into
``status.json``. Exit status: 0 success, 1 target missed or failed, 3 aborted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

from runner import abort, phases, rundir

T_STARTED = time.time()  # this process is up (its interpreter and the runner's first modules)


def _write_result(path: str | None, doc: dict) -> None:
    if not path:
        return
    rundir.write_new(path, json.dumps(doc).encode("utf-8"), sync=False)


def _drop_caches() -> bool:
    """Drop the page cache before the run (MLPerf's cache_clear); needs root."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def _resolve_precision(requested: str, torch, device) -> str:
    if requested != "auto":
        return requested
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp32"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="runner.worker")
    ap.add_argument("--spec", required=True)
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    abort.install()
    phases.start(float(spec.get("t_launch", T_STARTED)), loud=rank == 0)
    if spec.get("t_spawn"):  # written by the supervisor just before it starts this process
        phases.mark("supervisor ready (plan, probe, manifest, telemetry)", at=spec["t_spawn"])
    phases.mark("workload process started", at=T_STARTED)

    from mlperf_logging.mllog import constants as C

    from runner.mllog import MLLog, platform_name

    log = MLLog(Path(spec["run_dir"]) / "mllog.log", enabled=(rank == 0))
    result_path = spec.get("result_path") if rank == 0 else None
    entry = spec["entry"]
    doc = {"outcome": "failed", "reason": "", "precision": spec.get("precision", "auto"), "result": {}}
    code = 1
    try:
        log.start(C.INIT_START)
        log.event(C.CACHE_CLEAR, _drop_caches() if spec.get("drop_caches") else False)
        if spec.get("framework", "pytorch") == "tensorflow":
            module = importlib.import_module(entry["tf_module"])
            out = module.run_tf(spec, log, rank=rank, world_size=world)
            doc.update(out)
        else:
            out = _run_torch(spec, entry, log, rank, world, local_rank, doc, C, platform_name)
            doc.update(out)
        code = 0 if doc["outcome"] == "success" else 1
    except abort.Aborted as exc:
        abort.ignore()
        doc.update(outcome="aborted", reason=str(exc))
        code = 3
    except Exception as exc:  # the reason goes to status.json, the traceback to stdout.log
        abort.ignore()
        traceback.print_exc()
        name = type(exc).__name__
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if name == "WorkloadError":
            doc.update(outcome="failed", reason=msg)
        else:
            doc.update(outcome="failed", reason=f"{name}: {msg}" if msg else name)
        code = 1
    finally:
        log.close()
    doc["rank"] = rank
    _write_result(result_path, doc)
    if world > 1:  # which rank ended how: the launcher only reports the first failure
        print(f"[runner] rank {rank} ended: {doc['outcome']} (exit {code})", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    if world > 1:
        # end now: the interpreter's exit would run the destructors of torch.distributed
        # objects (threads, connections to peers), which can abort the process once a
        # peer has gone (seen as SIGABRT after a successful run)
        os._exit(code)
    return code


def _run_torch(spec, entry, log, rank, world, local_rank, doc, C, platform_name) -> dict:
    import numpy as np
    import torch

    phases.mark("torch imported")
    gpus = spec.get("gpus") or []
    if gpus:
        if not torch.cuda.is_available():
            from runner.workloads.base import WorkloadError

            raise WorkloadError(f"GPUs {gpus} were selected but torch {torch.__version__} cannot use CUDA here")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        from runner.workloads.compiling import cuda_backends

        cuda_backends()
        dev_name = torch.cuda.get_device_name(device)
    else:
        device = torch.device("cpu")
        dev_name = None
        threads = spec.get("cpu_threads")
        if threads:
            torch.set_num_threads(int(threads))
    if world > 1:
        import torch.distributed as dist

        backend = "nccl" if device.type == "cuda" else "gloo"
        kw = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, **kw)
    precision = _resolve_precision(spec.get("precision", "auto"), torch, device)
    doc["precision"] = precision
    seed = int(spec["seed"])
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))
    log.submission(entry["benchmark"], platform_name(world, dev_name), spec["scale"], spec["mode"])

    from runner.workloads import base

    module = importlib.import_module(entry["module"])
    phases.mark("device ready, workload imported")
    ctx = base.Context(
        spec=spec,
        entry=entry,
        log=log,
        device=device,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        precision=precision,
    )
    out = base.run(ctx, module)
    if world > 1:  # only after a normal end: with a peer gone it could hang
        import torch.distributed as dist

        finish_distributed(dist, world)
    return out


def _store_barrier(store, key: str, world: int, timeout_s: float) -> bool:
    """Wait until ``world`` processes have arrived at ``key``; False on timeout.

    Goes through the rendezvous store (hosted by the launcher), not through the
    process group's own connections, so that it stays safe while those close.
    """
    store.add(key, 1)
    end = time.monotonic() + timeout_s
    delay = 0.005
    while store.add(key, 0) < world:
        if time.monotonic() > end:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


def finish_distributed(dist, world: int, timeout_s: float = 120.0) -> None:
    """Tear torch.distributed down without racing a peer.

    A rank that closes its connections (or exits) while a peer is still inside
    its last collective, or still tearing its own group down, makes that peer
    fail or abort (gloo: 'Connection closed by peer', or std::terminate at
    exit). So: every rank first waits until all ranks are done with their
    collectives, then destroys the group, then waits until all have destroyed
    it; the process then ends through ``os._exit`` (see main) so that no
    late destructor touches a connection a peer already closed.
    """
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # no store to meet at: the group's own barrier is the next best
        store = None
    if store is not None:
        _store_barrier(store, "gpulab/teardown/collectives_done", world, timeout_s)
    else:
        dist.barrier()
    dist.destroy_process_group()
    if store is not None:
        _store_barrier(store, "gpulab/teardown/group_destroyed", world, timeout_s)


if __name__ == "__main__":
    sys.exit(main())
