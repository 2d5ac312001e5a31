"""What a sweep adds beyond the runs themselves, for 1, 2 and 4 test-lab hosts.

Starts an SSH test lab (tests/testlab; root, cached images), then for each host
count runs ``invoke sweep`` through the CLI (tiny CPU ncf, K seeds per host)
and compares:

* wall: the whole ``invoke sweep`` process, start-up, runner install, probe,
  every run, fetch and verification included;
* the runs' own durations: ``start`` to ``end`` of each status.json (what the
  runner measured on the host).

Per host: overhead per run = (the end of that host's last run - the sweep's
start + the exit - the sum of that host's run durations) / its runs, the mean
over hosts (a host that finished early does not count the wait for the
slowest one); "wall minus runs" is the same with the whole wall time. Also: the steady per-run cost
(controller's start-to-end of a run in sweep.json minus the runner's own
duration: launch, polling, fetch, verify, lock) and the fixed start-up (until
the first run started).

    sudo python benchmarks/sweep_overhead.py [--hosts 1,2,4] [--seeds 3] [--mode throughput]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.testlab.lab import Lab  # noqa: E402

LAB_VARS = {"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0, "gpulab_stack": "current"}


def ts(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


def measure(lab: Lab, hosts: list[str], seeds: int, mode: str, results: Path) -> dict:
    name = f"bench-{len(hosts)}h-{int(time.time())}"
    invoke = [sys.executable, "-m", "invoke"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(results))
    t0 = time.time()
    p = subprocess.run(
        invoke
        + [
            "sweep",
            "--inventory",
            str(lab.inventory),
            "--host",
            ",".join(hosts),
            "--seeds",
            str(seeds),
            "--mode",
            mode,
            "--name",
            name,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"sweep failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    doc = json.loads((results / name / "sweep.json").read_text())
    per_host, steady = {}, []
    first_start = min(ts(r["started"]) for r in doc["runs"])
    for r in doc["runs"]:
        st = json.loads((results / name / r["host"] / r["run_id"] / "status.json").read_text())
        own = ts(st["end"]) - ts(st["start"])
        per_host.setdefault(r["host"], []).append(own)
        steady.append((ts(r["ended"]) - ts(r["started"])) - own)
    done = {}
    for r in doc["runs"]:
        done[r["host"]] = max(done.get(r["host"], 0.0), ts(r["ended"]))
    tail = wall - (max(done.values()) - t0)  # saving, the final table, the process exit
    overhead = [(wall - sum(d)) / len(d) for d in per_host.values()]
    own_path = [(done[h] - t0 + tail - sum(d)) / len(d) for h, d in per_host.items()]
    return {
        "hosts": len(hosts),
        "runs": len(doc["runs"]),
        "wall_s": wall,
        "run_s_mean": statistics.mean(d for ds in per_host.values() for d in ds),
        "overhead_per_run_s": statistics.mean(own_path),
        "wall_minus_runs_per_run_s": statistics.mean(overhead),
        "steady_per_run_s": statistics.mean(steady),
        "steady_max_s": max(steady),
        "startup_s": first_start - t0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="1,2,4", help="host counts, comma separated")
    ap.add_argument("--seeds", type=int, default=3, help="runs per host")
    ap.add_argument("--mode", default="throughput", choices=("ttt", "throughput"))
    args = ap.parse_args()
    counts = [int(x) for x in args.hosts.split(",")]
    lab = Lab([f"bench-{i:02d}" for i in range(1, max(counts) + 1)], all_vars=LAB_VARS)
    rows = []
    try:
        lab.up()
        with tempfile.TemporaryDirectory(prefix="gpulab-bench-") as tmp:
            for n in counts:
                row = measure(lab, lab.names[:n], args.seeds, args.mode, Path(tmp))
                rows.append(row)
                print(
                    f"{row['hosts']} host(s), {row['runs']:2d} runs: wall {row['wall_s']:6.1f} s, "
                    f"run {row['run_s_mean']:5.1f} s mean; overhead per run {row['overhead_per_run_s']:4.2f} s "
                    f"(wall minus runs {row['wall_minus_runs_per_run_s']:4.2f} s) "
                    f"(steady {row['steady_per_run_s']:4.2f} s, max {row['steady_max_s']:4.2f} s; "
                    f"start-up {row['startup_s']:4.1f} s)",
                    flush=True,
                )
    finally:
        lab.down()
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
