"""How long a report over a few thousand runs takes.

Generates a synthetic sweep (gpulab run directories with mllog.log, status.json,
manifest.json, telemetry.csv and SHA256SUMS, plus plain v0.5 result files) and
times ``lab.report.build.build_report`` over it, all formats.

    python benchmarks/report_scale.py [--runs 3000] [--v05 500] [--telemetry-samples 120]
                                      [--keep DIR]

Prints the time of each stage and the total. Run it with `nice` on a shared machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.core.mlperf import default_rules
from lab.report.analysis import analyse
from lab.report.build import build_report
from lab.results.logreader import read_runs

BENCHES = {  # benchmark: (epochs on 1 GPU, minutes per epoch on 1 T4, samples per epoch)
    "resnet": (61, 10.0, 1_281_167),
    "ssd": (49, 6.6, 117_266),
    "maskrcnn": (13, 40.0, 118_287),
    "gnmt": (12, 60.0, 3_498_161),
    "transformer": (10, 30.0, 4_590_101),
    "ncf": (7, 2.0, 19_861_770),
}
DEVICES = {"T4": ("Tesla T4", 4, 1.0, 65.0), "V100": ("Tesla V100-PCIE-16GB", 3, 3.2, 240.0)}


def mllog_line(t_ms, event_type, key, value=None, metadata=None):
    md = {"file": "train.py", "lineno": 1}
    md.update(metadata or {})
    return (
        ":::MLLOG "
        + json.dumps(
            {"namespace": "", "time_ms": t_ms, "event_type": event_type, "key": key, "value": value, "metadata": md}
        )
        + "\n"
    )


def write_run(rundir: Path, bench, dev, n, seed, start, rnd, samples_per_gpu):
    base_epochs, minutes, spe = BENCHES[bench]
    gpu_name, _, speed, watts = DEVICES[dev]
    epochs = max(1, base_epochs + rnd.randint(-2, 2))
    per_epoch_s = minutes * 60.0 / speed / n * rnd.uniform(0.97, 1.03)
    ok = rnd.random() > 0.05
    rundir.mkdir(parents=True)
    t = int(start * 1000)
    lines = [
        mllog_line(t - 60000, "POINT_IN_TIME", "cache_clear", True),
        mllog_line(t - 60000, "INTERVAL_START", "init_start"),
        mllog_line(t - 60000, "POINT_IN_TIME", "submission_benchmark", bench),
        mllog_line(t - 60000, "POINT_IN_TIME", "submission_platform", f"{n}x{gpu_name}"),
        mllog_line(t - 60000, "POINT_IN_TIME", "seed", seed),
        mllog_line(t - 60000, "POINT_IN_TIME", "train_samples", spe),
        mllog_line(t, "INTERVAL_END", "init_stop"),
        mllog_line(t, "INTERVAL_START", "run_start"),
    ]
    for e in range(1, epochs + 1):
        lines.append(mllog_line(t, "INTERVAL_START", "epoch_start", None, {"epoch_num": e}))
        t += int(per_epoch_s * 900)
        lines.append(mllog_line(t, "INTERVAL_END", "epoch_stop", None, {"epoch_num": e}))
        lines.append(mllog_line(t, "INTERVAL_START", "eval_start", None, {"epoch_num": e}))
        t += int(per_epoch_s * 100)
        lines.append(mllog_line(t, "POINT_IN_TIME", "eval_accuracy", 0.5 + e / epochs / 3, {"epoch_num": e}))
        lines.append(mllog_line(t, "INTERVAL_END", "eval_stop", None, {"epoch_num": e}))
    lines.append(mllog_line(t, "INTERVAL_END", "run_stop", None, {"status": "success" if ok else "aborted"}))
    (rundir / "mllog.log").write_text("".join(lines))
    (rundir / "stdout.log").write_text("ok\n")
    dur = (t / 1000.0) - start
    rows = [
        "time_s,gpu,uuid,power_w,temp_c,sm_clock_mhz,mem_clock_mhz,util_gpu_pct,util_mem_pct,"
        "mem_used_mib,throttle_reasons,pcie_gen,pcie_width\n"
    ]
    for k in range(samples_per_gpu):
        ts = dur * k / max(1, samples_per_gpu - 1)
        for g in range(n):
            rows.append(f"{ts:.3f},{g},GPU-{g},{watts * rnd.uniform(0.9, 1.0):.1f},60,1500,5000,97,40,9000,0,3,16\n")
    (rundir / "telemetry.csv").write_text("".join(rows))
    (rundir / "manifest.json").write_text(
        json.dumps(
            {
                "host": {"hostname": rundir.parent.name},
                "gpus": [{"index": i, "name": gpu_name} for i in range(DEVICES[dev][1])],
                "stack": {"profile": "mlperf-v0.5", "driver": "410.72", "cuda": "10.0.130"},
            }
        )
    )
    (rundir / "status.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "workload": bench,
                "benchmark": bench,
                "mode": "ttt",
                "scale": "full",
                "seed": seed,
                "gpus": list(range(n)),
                "world_size": n,
                "nnodes": 1,
                "outcome": "success" if ok else "aborted",
                "reason": "synthetic",
                "exit_code": 0 if ok else 1,
            }
        )
    )
    sums = []
    for f in sorted(rundir.iterdir()):
        sums.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n")
    (rundir / "SHA256SUMS").write_text("".join(sums))


def write_v05(path: Path, bench, seed, start, rnd):
    base_epochs, minutes, spe = BENCHES[bench]
    epochs = max(1, base_epochs + rnd.randint(-2, 2))
    out = [
        f":::MLPv0.5.0 {bench} {start:.3f} (train.py:1) run_start\n",
        f":::MLPv0.5.0 {bench} {start:.3f} (train.py:2) run_set_random_seed: {seed}\n",
        f":::MLPv0.5.0 {bench} {start:.3f} (train.py:3) preproc_num_train_examples: {spe}\n",
    ]
    t = start
    for e in range(epochs):
        out.append(f":::MLPv0.5.0 {bench} {t:.3f} (train.py:4) train_epoch: {e}\n")
        t += minutes * 60.0
        out.append(f':::MLPv0.5.0 {bench} {t:.3f} (train.py:5) eval_start: {{"epoch": {e}}}\n')
        out.append(
            f":::MLPv0.5.0 {bench} {t:.3f} (train.py:6) eval_accuracy: "
            f'{{"epoch": {e}, "value": {0.1 + e / epochs:.3f}}}\n'
        )
    out.append(f':::MLPv0.5.0 {bench} {t:.3f} (train.py:7) run_stop: {{"success": true}}\n')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(out))


def generate(root: Path, runs: int, v05: int, samples_per_gpu: int) -> None:
    rnd = random.Random(1)
    configs = [(b, d, n) for b in BENCHES for d, (_, maxn, _, _) in DEVICES.items() for n in range(1, maxn + 1)]
    sweep = root / "sweep"
    start = 1_700_000_000.0
    for i in range(runs):
        bench, dev, n = configs[i % len(configs)]
        seed = i // len(configs)
        write_run(
            sweep / f"r740-{dev.lower()}" / f"{bench}-g{n}-s{seed}", bench, dev, n, seed, start, rnd, samples_per_gpu
        )
        start += 10_000
    for i in range(v05):
        bench = list(BENCHES)[i % len(BENCHES)]
        write_v05(root / "v05" / "results" / "1xT4" / bench / f"result_{i}.txt", bench, i, start, rnd)
        start += 10_000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3000, help="gpulab run directories to generate")
    ap.add_argument("--v05", type=int, default=500, help="plain v0.5 result files to generate")
    ap.add_argument("--telemetry-samples", type=int, default=120, help="telemetry samples per GPU per run")
    ap.add_argument("--keep", type=Path, help="generate here and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="report-scale-"))
    try:
        t = time.perf_counter()
        generate(root, args.runs, args.v05, args.telemetry_samples)
        gen = time.perf_counter() - t
        rules = default_rules()
        t, c = time.perf_counter(), time.process_time()
        coll = read_runs([root], rules)
        t_collect, c_collect = time.perf_counter() - t, time.process_time() - c
        t = time.perf_counter()
        an = analyse(coll.runs, rules)
        t_analyse = time.perf_counter() - t
        t, c = time.perf_counter(), time.process_time()
        res = build_report([root], root / "report", formats=("html", "md", "json", "csv"))
        t_total, c_total = time.perf_counter() - t, time.process_time() - c
        size = (root / "report" / "report.html").stat().st_size
        print(
            f"generated {args.runs} run directories + {args.v05} v0.5 files in {gen:.1f} s "
            f"({args.telemetry_samples} telemetry samples per GPU)"
        )
        print(f"runs read: {len(coll.runs)}, skipped: {len(coll.skipped)}, systems: {len(an.systems)}")
        print(
            f"collect (find, verify SHA256SUMS, parse logs and telemetry): {t_collect:.2f} s wall, "
            f"{c_collect:.2f} s CPU ({len(coll.runs) / t_collect:,.0f} runs/s)"
        )
        print(f"analyse (scores, ratios, scaling, seeds, energy): {t_analyse:.3f} s")
        print(
            f"build_report, all formats incl. figures: {t_total:.2f} s wall, {c_total:.2f} s CPU "
            f"({len(res.files)} files, report.html {size / 1e6:.1f} MB)"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
