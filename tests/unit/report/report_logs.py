"""Writers of the logs the report tests read.

- v0.5 logs, one `:::MLPv0.5.0 <benchmark> <time> (<file>:<line>) <key>[: <json>]`
  line per event, as the mlperf_compliance package of 2018 printed them;
- MLLOG files written by the mlperf-logging package itself (mlperf_logging.mllog);
- gpulab run directories (runner/README.md) with SHA256SUMS (runner.rundir.write_sums);
- the synthetic mini-study: T4 1-4 GPUs and V100-PCIe 1-3 GPUs on four
  benchmarks, with the reference study's GNMT epochs 12, 7, 5, 4 / 16, 12, 9.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mlperf_logging.mllog import mllog as mllog_impl
from mlperf_logging.mllog import constants as C

from runner.rundir import write_sums  # SHA256SUMS as the runner writes it

T0 = 1_700_000_000.0  # run_start of the first run, unix seconds


# --------------------------------------------------------------------------
# v0.5
# --------------------------------------------------------------------------


def v05_line(bench: str, t: float, key: str, value=None, src="train.py:42") -> str:
    line = f":::MLPv0.5.0 {bench} {t:.9f} ({src}) {key}"
    if value is not None:
        line += ": " + json.dumps(value)
    return line


def v05_run(
    bench,
    *,
    start=T0,
    epochs=3,
    epoch_s=100.0,
    seed=1,
    target=21.8,
    values=None,
    samples=None,
    success_flag=True,
    stop_delay=0.0,
    eval_s=0.0,
    log_target=True,
):
    """Lines of one v0.5 run: epochs of epoch_s seconds (training epoch_s - eval_s,
    then eval_s of evaluation); eval_accuracy after each epoch."""
    if values is None:
        values = [target * (0.5 + 0.4 * (i + 1) / epochs) for i in range(epochs - 1)] + [target * 1.01]
    out = [
        v05_line(bench, start - 5.0, "run_clear_caches"),
        v05_line(bench, start, "run_start"),
        v05_line(bench, start + 0.001, "run_set_random_seed", seed),
    ]
    if samples:
        out.append(v05_line(bench, start + 0.002, "preproc_num_train_examples", samples))
    if log_target:
        out.append(v05_line(bench, start + 0.003, "eval_target", target))
    t = start
    for i in range(epochs):
        out.append(v05_line(bench, t, "train_epoch", i))
        out.append(v05_line(bench, t + epoch_s - eval_s, "eval_start", {"epoch": i}))
        t += epoch_s
        out.append(v05_line(bench, t, "eval_accuracy", {"epoch": i, "value": values[i]}))
        out.append(v05_line(bench, t, "eval_stop", {"epoch": i}))
    stop = t + stop_delay
    out.append(v05_line(bench, stop, "run_stop", {"success": success_flag} if success_flag is not None else None))
    out.append(v05_line(bench, stop + 1.0, "run_final"))
    return out


def write_lines(path: Path, lines, prefix="") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(prefix + line + "\n" for line in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# MLLOG through mlperf-logging
# --------------------------------------------------------------------------

GNMT_HPARAMS = {
    C.OPT_BASE_LR: 2.0e-3,
    C.OPT_LR_ALT_DECAY_FUNC: True,
    C.OPT_LR_DECAY_FACTOR: 0.5,
    C.OPT_LR_DECAY_INTERVAL: 809,
    C.OPT_LR_DECAY_STEPS: 4,
    C.OPT_LR_REMAIN_STEPS: 6453,
    C.MAX_SEQUENCE_LENGTH: 75,
    C.OPT_LR_ALT_WARMUP_FUNC: True,
    C.OPT_LR_WARMUP_STEPS: 200,
}


def write_mllog(
    path: Path,
    *,
    benchmark="gnmt",
    platform="1xNVIDIA T4",
    seed=7,
    start=T0,
    epochs=3,
    epoch_s=100.0,
    eval_s=10.0,
    values=None,
    status="success",
    train_samples=3_498_161,
    global_batch_size=128,
    submission_benchmark=True,
    blocks=False,
    truncate_after=None,
) -> Path:
    """A run logged through mlperf_logging.mllog into ``path`` (0.7.0 rules for gnmt)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.Logger(f"mllog:{path}")
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    ml = mllog_impl.MLLogger(logger=logger)
    if values is None:
        values = [0.20 + 0.01 * i for i in range(epochs - 1)] + [0.245]
    ms = lambda t: int(round(t * 1000))  # noqa: E731
    t = start - 60.0
    ml.event(key=C.CACHE_CLEAR, value=True, time_ms=ms(t))
    ml.start(key=C.INIT_START, time_ms=ms(t))
    ml.event(key=C.SUBMISSION_ORG, value="gpulab", time_ms=ms(t))
    ml.event(key=C.SUBMISSION_PLATFORM, value=platform, time_ms=ms(t))
    ml.event(key=C.SUBMISSION_DIVISION, value=C.CLOSED, time_ms=ms(t))
    ml.event(key=C.SUBMISSION_STATUS, value=C.ONPREM, time_ms=ms(t))
    if submission_benchmark:
        ml.event(key=C.SUBMISSION_BENCHMARK, value=benchmark, time_ms=ms(t))
    ml.event(key=C.SEED, value=seed, time_ms=ms(t))
    ml.event(key=C.GLOBAL_BATCH_SIZE, value=global_batch_size, time_ms=ms(t))
    ml.event(key=C.TRAIN_SAMPLES, value=train_samples, time_ms=ms(t))
    ml.event(key=C.EVAL_SAMPLES, value=3003, time_ms=ms(t))
    for k, v in GNMT_HPARAMS.items():
        ml.event(key=k, value=v, time_ms=ms(t))
    ml.end(key=C.INIT_STOP, time_ms=ms(start))
    ml.start(key=C.RUN_START, time_ms=ms(start))
    t = start
    lines = 0
    for e in range(1, epochs + 1):
        if truncate_after is not None and e > truncate_after:
            break
        if blocks:
            ml.start(key=C.BLOCK_START, time_ms=ms(t), metadata={C.FIRST_EPOCH_NUM: e, C.EPOCH_COUNT: 1})
            ml.end(key=C.BLOCK_STOP, time_ms=ms(t + epoch_s - eval_s), metadata={C.FIRST_EPOCH_NUM: e})
        else:
            ml.start(key=C.EPOCH_START, time_ms=ms(t), metadata={C.EPOCH_NUM: e})
            ml.end(key=C.EPOCH_STOP, time_ms=ms(t + epoch_s - eval_s), metadata={C.EPOCH_NUM: e})
        ml.start(key=C.EVAL_START, time_ms=ms(t + epoch_s - eval_s), metadata={C.EPOCH_NUM: e})
        t += epoch_s
        ml.event(key=C.EVAL_ACCURACY, value=values[e - 1], time_ms=ms(t), metadata={C.EPOCH_NUM: e})
        ml.end(key=C.EVAL_STOP, time_ms=ms(t), metadata={C.EPOCH_NUM: e})
        lines += 1
    if truncate_after is None:
        ml.end(key=C.RUN_STOP, time_ms=ms(t), metadata={C.STATUS: status})
    handler.close()
    return path


# --------------------------------------------------------------------------
# gpulab run directories
# --------------------------------------------------------------------------


STACK_2019 = {
    "driver": "410.72",
    "driver_source": "NVML",
    "cuda_driver": "10.0",
    "cuda_toolkit": "10.0.130",
    "cuda_toolkit_source": "/usr/local/cuda/version.txt",
    "cudnn": "7.4.1",
    "nccl": "2.3.7",
    "nvml": "10.410.72",
}


def write_rundir(
    rundir: Path,
    *,
    benchmark="gnmt",
    gpu_name="Tesla T4",
    gpus=(0,),
    seed=7,
    outcome="success",
    mode="ttt",
    scale="full",
    stack=None,
    host="r740-01",
    telemetry=None,
    result=None,
    mllog_kwargs=None,
    manifest=True,
    sums=True,
    host_gpus=4,
    driver="410.72",
    torch="1.0.0",
    node_rank=0,
    nnodes=1,
) -> Path:
    """A complete run directory as the runner leaves it (runner/README.md, contract 1).

    ``stack`` adds a stack profile name to the probe's stack facts."""
    rundir.mkdir(parents=True, exist_ok=True)
    kw = dict(
        benchmark=benchmark,
        platform=f"{len(gpus)}x{gpu_name}",
        seed=seed,
        status="success" if outcome == "success" else "aborted",
    )
    kw.update(mllog_kwargs or {})
    if kw.pop("skip_log", False) is False:
        write_mllog(rundir / "mllog.log", **kw)
    (rundir / "stdout.log").write_text("training...\n", encoding="utf-8")
    status = {
        "schema": 1,
        "runner_version": "0.1.0",
        "workload": benchmark,
        "benchmark": benchmark,
        "framework": "pytorch",
        "mode": mode,
        "scale": scale,
        "seed": seed,
        "precision": "fp16",
        "gpus": list(gpus),
        "world_size": len(gpus) * nnodes,
        "nnodes": nnodes,
        "node_rank": node_rank,
        "start": "2026-12-02T18:00:00.000Z",
        "end": "2026-12-02T18:05:00.000Z",
        "exit_code": 0 if outcome == "success" else 1,
        "outcome": outcome,
        "reason": "reached target" if outcome == "success" else "stopped early",
    }
    if result is not None:
        status["result"] = result
    if manifest:
        stack_facts = dict(STACK_2019, driver=driver)
        if stack:
            stack_facts["profile"] = stack
        probe = {
            "schema": 1,
            "host": {"hostname": host, "fqdn": f"{host}.lab"},
            "frameworks": {"torch": torch, "tensorflow": None, "mlperf_logging": "0.0.1"},
            "stack": stack_facts,
            "nvidia": None,
            "gpu_count": host_gpus,
            "gpus": [{"index": i, "name": gpu_name, "uuid": f"GPU-{i:04d}"} for i in range(host_gpus)],
        }
        doc = {
            "schema": 1,
            "contract": 1,
            "runner_version": "0.1.0",
            "command": f"python -m runner run {benchmark} --out {rundir}",
            "seed": seed,
            "gpus": list(gpus),
            "world_size": len(gpus) * nnodes,
            "probe": probe,
        }
        (rundir / "manifest.json").write_text(json.dumps(doc), encoding="utf-8")
    header = (
        "time_s,gpu,uuid,power_w,temp_c,sm_clock_mhz,mem_clock_mhz,util_gpu_pct,"
        "util_mem_pct,mem_used_mib,throttle_reasons,pcie_gen,pcie_width\n"
    )
    rows = []
    for t, g, p in telemetry or []:
        rows.append(f"{t},{g},GPU-{g:04d},{p},60,1590,5000,98,40,9000,0,3,16\n")
    (rundir / "telemetry.csv").write_text(header + "".join(rows), encoding="utf-8")
    (rundir / "status.json").write_text(json.dumps(status), encoding="utf-8")
    if sums:
        write_sums(rundir)
    return rundir


# --------------------------------------------------------------------------
# The mini-study
# --------------------------------------------------------------------------

# Minutes per epoch by device and GPU count, and epochs to converge. One run
# per configuration, as in the reference study.
STUDY = {
    "resnet": {
        "samples": 1_281_167,
        "target": 0.749,
        "epochs": {("T4", n): 61 for n in (1, 2, 3, 4)} | {("V100", n): 61 for n in (1, 2, 3)},
        "minutes": {
            ("T4", 1): 10.0,
            ("T4", 2): 5.2,
            ("T4", 3): 3.5,
            ("T4", 4): 2.7,
            ("V100", 1): 10.0 / 3.6,
            ("V100", 2): 5.2 / 3.6,
            ("V100", 3): 3.5 / 3.6,
        },
    },
    "ssd": {
        "samples": 117_266,
        "target": 0.212,
        "epochs": {("T4", n): 10 for n in (1, 2, 3, 4)} | {("V100", n): 10 for n in (1, 2, 3)},
        "minutes": {
            ("T4", 1): 6.6,
            ("T4", 2): 3.4,
            ("T4", 3): 2.38,
            ("T4", 4): 1.8,
            ("V100", 1): 2.0,
            ("V100", 2): 1.0,
            ("V100", 3): 0.7,
        },
    },
    "gnmt": {
        "samples": 3_600_000,
        "target": 21.8,
        "epochs": {
            ("T4", 1): 12,
            ("T4", 2): 7,
            ("T4", 3): 5,
            ("T4", 4): 4,
            ("V100", 1): 16,
            ("V100", 2): 12,
            ("V100", 3): 9,
        },
        "minutes": {
            ("T4", 1): 60.0,
            ("T4", 2): 33.0,
            ("T4", 3): 24.0,
            ("T4", 4): 18.0,
            ("V100", 1): 20.0,
            ("V100", 2): 11.0,
            ("V100", 3): 8.0,
        },
    },
    "transformer": {
        "samples": 4_500_000,
        "target": 25.0,
        "epochs": {
            ("T4", 1): 12,
            ("T4", 2): 4,
            ("T4", 3): 4,
            ("T4", 4): 4,
            ("V100", 1): 8,
            ("V100", 2): 4,
            ("V100", 3): 4,
        },
        "minutes": {
            ("T4", 1): 30.0,
            ("T4", 2): 16.0,
            ("T4", 3): 11.0,
            ("T4", 4): 8.5,
            ("V100", 1): 30.0 / 2.7,
            ("V100", 2): 16.0 / 2.7,
            ("V100", 3): 11.0 / 2.7,
        },
    },
}


def study_path(root: Path, bench: str, dev: str, n: int, seed: int) -> Path:
    """Two folder conventions: MLPerf's results/<system>/<benchmark>/result_N.txt
    for T4, and <device>_x<N>/<benchmark>_seed<S>.log for V100."""
    if dev == "T4":
        return root / "results" / f"{n}xT4" / bench / "result_0.txt"
    return root / f"V100-PCIe_x{n}" / f"{bench}_seed{seed}.log"


def write_mini_study(root: Path) -> Path:
    """The mini-study as v0.5 logs under ``root``; returns root."""
    seed = 100
    start = T0
    for bench, spec in STUDY.items():
        for (dev, n), epochs in spec["epochs"].items():
            seed += 1
            lines = v05_run(
                bench,
                start=start,
                epochs=epochs,
                epoch_s=spec["minutes"][(dev, n)] * 60.0,
                seed=seed,
                target=spec["target"],
                samples=spec["samples"],
                success_flag=True if dev == "T4" else None,
            )
            write_lines(study_path(root, bench, dev, n, seed), lines)
            start += 100_000.0
    return root
