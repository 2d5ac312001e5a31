"""Multi-GPU checks on one host with two GPUs or more, in as few calls as fit.

    python benchmarks/multigpu.py --out DIR [--parts scaling,ttt,validate,sweep]
        [--workloads resnet50,ssd,...] [--gpus 2] [--deadline S] [--run-minutes M] [--cache-dir DIR]
        [--measure-seconds S] [--inductor K=V,...] [--seed N] [--wheels DIR] [--device cuda|cpu]

Parts, in this order (each run's figures come from its run directory):

* ``scaling``: per workload ``python -m runner run W --mode throughput --scale
  full`` on 1 GPU, then on ``--gpus`` GPUs, one compiled-kernel cache for
  both; speedup and scaling efficiency (speedup / GPUs). Below 1.8x on two
  GPUs is flagged.
* ``ttt``: per workload ``runner run W --scale small --mode ttt --gpus N``:
  outcome; the MLLOG file written once (one of each run-level event, one
  epoch_start per epoch: a second writer would double them); every rank's end
  line in stdout.log; no process left carrying the run's GPULAB_RUN_TOKEN
  once the runner has exited.
* ``validate``: ``invoke validate -i inventory/local.yml --level standard``:
  the burn-in's NCCL all-reduce bus bandwidth and its verdict against
  inventory/references/gpus.yml. Without the controller packages:
  ``runner burnin --level standard`` for the figure alone, and says so.
* ``sweep``: ``invoke sweep -i inventory/local.yml --workloads ncf,resnet50
  --gpus all --mode throughput --seeds 1``, then ``invoke report`` of it: the
  report's scaling rows. Skipped with one line when the controller packages
  are missing; ``--wheels DIR`` installs them first from a folder of wheels
  (into a virtual environment that sees this interpreter's packages).

Writes ``DIR/multigpu.json`` after every run (``DIR/runs/`` holds the run
directories, ``DIR/results/`` the sweep and its report, ``DIR/validate/`` the
verdicts; benchmarks/multigpu_runs.py runs each ``runner run``). The default
compiled-kernel cache is the local inventory's (``~/.local/share/gpulab/cache``),
so the sweep reuses what the scaling runs compiled. ``--deadline``
bounds the call: a run gets ``--max-minutes`` from the time left, none starts
with less than 45 s left, and the JSON lists what was not started.

NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1
and NVSHMEM_DISABLE_NVLS=1 are set for every child process, whatever the
caller's environment says. With fewer than two GPUs (NVML's count) the script
refuses in one line (exit 2) and runs nothing. ``--device cpu`` is for tests:
gloo processes on the CPU (``--cpu-procs``) at tiny scale, parts scaling and ttt.

Exit 0 when everything run succeeded, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchcommon import name_list, recorded_platform, workload_names
from multigpu_runs import GRACE_S, MIN_START_S, NO_MULTICAST, ROOT, _tail, mllog_check, run_env, run_one

# read as multigpu.<name> by tests/unit/runner/test_multigpu_script.py (one line: its noqa stays put under ruff format)
from multigpu_runs import child_env, tagged_pids  # noqa: F401

PARTS = ("scaling", "ttt", "validate", "sweep")
SWEEP_WORKLOADS = "ncf,resnet50"
# the controller's packages (pyproject.toml, extra "controller"), by import name
CONTROLLER = ("invoke", "fabric", "ansible", "ansible_runner", "jinja2", "jsonschema", "matplotlib", "yaml", "rich")
CONTROLLER_REQS = (
    "ansible-core>=2.16,<2.17",
    "ansible-runner>=2.3",
    "fabric>=3.2",
    "invoke>=2.2",
    "jinja2>=3.1",
    "jsonschema>=4.18",
    "matplotlib>=3.7",
    "pyyaml>=6",
    "rich>=13",
)


class Refused(Exception):
    """Bad input or a machine this script cannot use: one line, exit 2."""


def gpu_count() -> int:
    sys.path.insert(0, str(ROOT))
    from runner import launch

    return launch.host_gpu_count()


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise Refused(message)


def parse(argv) -> argparse.Namespace:
    ap = _Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for multigpu.json, runs/ and results/ (new or empty)")
    ap.add_argument(
        "--parts",
        default=None,
        help=f"comma-separated, of {', '.join(PARTS)} (default: all; scaling,ttt with --device cpu)",
    )
    ap.add_argument(
        "--workloads", default=None, help="for scaling and ttt (default: every workload of the runner's catalogue)"
    )
    ap.add_argument("--gpus", type=int, default=2, help="GPUs of the multi-GPU runs (default 2)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds for the whole call")
    ap.add_argument(
        "--cache-dir",
        default=None,
        help="compiled-kernel cache (default: the local inventory's workdir cache, shared with the sweep)",
    )
    ap.add_argument("--measure-seconds", type=float, default=None, help="timed seconds of each throughput run")
    ap.add_argument("--run-minutes", type=float, default=None, help="limit of each runner run (--max-minutes)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--inductor",
        default=None,
        metavar="K=V,...",
        help="GPULAB_INDUCTOR for every run (coordinate_descent_tuning=0 shortens resnet50's compile)",
    )
    ap.add_argument("--wheels", default=None, help="folder of controller wheels to install when they are missing")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: gloo processes (tests)")
    args = ap.parse_args(argv)
    args.parts = _list(args.parts or ("scaling,ttt" if args.device == "cpu" else ",".join(PARTS)), PARTS, "--parts")
    known = workload_names(Refused)
    args.workloads = _list(args.workloads or ",".join(known), known, "--workloads")
    if args.gpus < 2:
        raise Refused(f"--gpus {args.gpus}: the multi-GPU runs need at least 2")
    for opt in ("deadline", "measure_seconds", "run_minutes"):
        v = getattr(args, opt)
        if v is not None and not v > 0:
            raise Refused(f"--{opt.replace('_', '-')} {v:g}: must be positive")
    if args.device == "cpu" and set(args.parts) - {"scaling", "ttt"}:
        raise Refused("--device cpu: only the parts scaling and ttt run on the CPU")
    if args.inductor is not None and not all("=" in kv for kv in args.inductor.split(",")):
        raise Refused(f"--inductor {args.inductor!r}: expected KEY=VALUE,...")
    if args.wheels is not None and not Path(args.wheels).is_dir():
        raise Refused(f"--wheels {args.wheels!r}: no such folder")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise Refused(f"--out {args.out!r} exists and is not an empty folder")
    return args


def _list(text: str, known: tuple, what: str) -> list[str]:
    return name_list(text, known, what, Refused)


# --------------------------------------------------------------------------- the parts


def scaling_row(one: dict, many: dict, gpus: int) -> dict:
    row = {"workload": one["workload"], "gpus": gpus, "one_gpu": one, "multi_gpu": many}
    a, b = one.get("samples_per_s"), many.get("samples_per_s")
    if one.get("outcome") == many.get("outcome") == "success" and a and b:
        row["speedup"] = round(b / a, 3)
        row["efficiency"] = round(b / a / gpus, 3)
        row["below_0.9_efficiency"] = row["efficiency"] < 0.9  # under 1.8x on two GPUs
    return row


def part_scaling(args, doc, end, save) -> None:
    scale = "tiny" if args.device == "cpu" else "full"
    for name in args.workloads:
        one = run_one(args, name, "throughput", scale, 1, end, "1gpu")
        many = run_one(args, name, "throughput", scale, args.gpus, end, f"{args.gpus}gpu")
        row = scaling_row(one, many, args.gpus)
        doc["scaling"].append(row)
        print(
            f"[multigpu] scaling {name}: 1 GPU {one.get('samples_per_s')} ({one.get('outcome')}), "
            f"{args.gpus} GPUs {many.get('samples_per_s')} ({many.get('outcome')})"
            + (f", speedup {row['speedup']}, efficiency {row['efficiency']}" if "speedup" in row else ""),
            flush=True,
        )
        save()


def part_ttt(args, doc, end, save) -> None:
    scale = "tiny" if args.device == "cpu" else "small"
    for name in args.workloads:
        row = run_one(args, name, "ttt", scale, args.gpus, end, f"{args.gpus}gpu")
        if row["outcome"] != "not_started":
            row["mllog"] = mllog_check(args.out / row.get("run_dir", "-"), row.get("epochs"))
            row["ok"] = (
                row["outcome"] == "success"
                and row["mllog"]["ok"]
                and not row["leftover_pids"]
                and row.get("ranks_ended") == list(range(args.gpus))
            )
        doc["ttt"].append(row)
        print(
            f"[multigpu] ttt {name}: {row['outcome']}: {row.get('reason')}; MLLOG once: "
            f"{row.get('mllog', {}).get('ok')}; ranks ended: {row.get('ranks_ended')}; "
            f"left over: {row.get('leftover_pids')}",
            flush=True,
        )
        save()


def controller_python(args, doc) -> str | None:
    """An interpreter with the controller packages, installing them from --wheels when given; None if none."""
    if not hasattr(args, "_controller"):
        args._controller = _controller_python(args, doc)
    return args._controller


def _controller_python(args, doc) -> str | None:
    missing = [m for m in CONTROLLER if importlib.util.find_spec(m) is None]
    if not missing:
        return sys.executable
    venv = args.out / "controller-venv"
    if args.wheels:
        py = venv / "bin" / "python"
        steps = [
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
            [
                str(py),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--find-links",
                str(Path(args.wheels).resolve()),
                *CONTROLLER_REQS,
            ],
        ]
        for step in steps:
            p = subprocess.run(step, capture_output=True, text=True)
            if p.returncode != 0:
                doc["controller"] = {
                    "missing": missing,
                    "install": " ".join(step),
                    "error": (p.stderr.strip() or p.stdout.strip())[-2000:],
                }
                return None
        doc["controller"] = {"installed_from": str(args.wheels), "python": str(py)}
        return str(py)
    doc["controller"] = {"missing": missing}
    return None


def _invoke(py: str, args, *task: str, timeout: float | None) -> dict:
    cmd = [py, "-m", "invoke", *task]
    env = run_env(
        args,
        {"INVOKE_GPULAB_RESULTS": str(args.out / "results"), "INVOKE_GPULAB_ARTIFACTS": str(args.out / "artifacts")},
    )
    rec = {"command": " ".join(["invoke", *task])}
    t0 = time.time()
    log = args.out / f"invoke-{task[0]}.log"
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rec["exit_code"] = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # Ctrl-C: the sweep stops its runs and records them
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            rec.update(exit_code=None, stopped=f"did not end within {timeout:.0f} s: interrupted")
    rec["wall_s"] = round(time.time() - t0, 1)
    rec["output_tail"] = _tail(log, 40)
    rec["log"] = log.name
    return rec


def part_validate(args, doc, end, save) -> None:
    py = controller_python(args, doc)
    timeout = None if end is None else max(end - time.time(), 1)
    if py is not None:
        rec = _invoke(
            py,
            args,
            "validate",
            "-i",
            "inventory/local.yml",
            "--level",
            "standard",
            "--out",
            str(args.out / "validate"),
            timeout=timeout,
        )
        found = sorted(args.out.glob("validate/*/validate.json"))
        burn = sorted(args.out.glob("validate/*/*/burnin.json"))
        if found:
            vdoc = json.loads(found[-1].read_text())
            checks = [
                c
                for h in vdoc.get("hosts", {}).values()
                for c in h.get("checks", [])
                if c.get("check") == "nccl_allreduce_busbw_gbs"
            ]
            rec["nccl_check"] = checks[0] if checks else None
            rec["verdict"] = vdoc.get("verdict")
    else:
        rec = {"note": "controller packages missing: runner burnin alone, no verdict"}
        cmd = [sys.executable, "-m", "runner", "burnin", "--level", "standard", "--out", str(args.out / "burnin")]
        rec["command"] = " ".join(["python"] + cmd[1:])
        try:
            p = subprocess.run(cmd, cwd=ROOT, env=run_env(args), capture_output=True, text=True, timeout=timeout)
            rec["exit_code"] = p.returncode
        except subprocess.TimeoutExpired:
            rec["exit_code"] = None
        burn = [args.out / "burnin" / "burnin.json"]
    for b in burn[-1:]:
        try:
            bdoc = json.loads(b.read_text())
        except (OSError, ValueError):
            continue
        rec["nccl_allreduce_busbw_gbs"] = (bdoc.get("host_metrics") or {}).get("nccl_allreduce_busbw_gbs")
        rec["nccl"] = [r for r in bdoc.get("results", []) if r.get("test") == "nccl"]
        rec["burnin_outcome"] = bdoc.get("outcome")
    doc["validate"] = rec
    print(
        f"[multigpu] validate: NCCL all-reduce bus bandwidth {rec.get('nccl_allreduce_busbw_gbs')} GB/s; "
        f"check {(rec.get('nccl_check') or {}).get('verdict', rec.get('note'))}",
        flush=True,
    )
    save()


def part_sweep(args, doc, end, save) -> None:
    py = controller_python(args, doc)
    if py is None:
        why = doc["controller"].get("error") or f"missing {', '.join(doc['controller']['missing'])}"
        doc["sweep"] = {"skipped": f"controller packages not installed ({why}); carry their wheels and give --wheels"}
        print(f"[multigpu] sweep: skipped: {doc['sweep']['skipped']}", flush=True)
        save()
        return
    name = f"multigpu-{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%S}"
    timeout = None if end is None else max(end - time.time(), 1)
    rec = _invoke(
        py,
        args,
        "sweep",
        "-i",
        "inventory/local.yml",
        "--workloads",
        SWEEP_WORKLOADS,
        "--gpus",
        "all",
        "--mode",
        "throughput",
        "--seeds",
        "1",
        "--name",
        name,
        timeout=timeout,
    )
    sweep_dir = args.out / "results" / name
    rep = _invoke(py, args, "report", str(sweep_dir), timeout=300)
    summary = sweep_dir / "report" / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        rep["scaling"] = s.get("scaling")
    doc["sweep"] = {"sweep": rec, "report": rep, "dir": str(sweep_dir.relative_to(args.out))}
    print(f"[multigpu] sweep {name}: exit {rec.get('exit_code')}; report exit {rep.get('exit_code')}", flush=True)
    save()


def ok(doc: dict) -> bool:
    rows = [r for s in doc["scaling"] for r in (s["one_gpu"], s["multi_gpu"])]
    good = all(r.get("outcome") == "success" for r in rows) and all(r.get("ok") for r in doc["ttt"])
    if "validate" in doc:
        good &= doc["validate"].get("nccl_allreduce_busbw_gbs") is not None
    if "sweep" in doc:
        good &= "skipped" not in doc["sweep"] and doc["sweep"]["sweep"].get("exit_code") == 0
    return good


def main(argv=None) -> int:
    t_start = time.time()
    try:
        args = parse(argv)
        seen = gpu_count() if args.device == "cuda" else None
        if seen is not None and seen < 2:
            raise Refused(f"needs a machine with 2 or more GPUs; NVML sees {seen} here (nothing run)")
        if seen is not None and args.gpus > seen:
            raise Refused(f"--gpus {args.gpus}: NVML sees only {seen} GPUs here (nothing run)")
    except Refused as exc:
        print(f"multigpu.py: {exc}", file=sys.stderr)
        return 2
    os.environ.update(NO_MULTICAST)  # also for what this process starts through invoke
    end = t_start + args.deadline if args.deadline else None
    args.out = Path(args.out).resolve()
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    args.cache_dir = Path(args.cache_dir or os.path.expanduser("~/.local/share/gpulab/cache")).resolve()
    was_empty = not (args.cache_dir.is_dir() and any(args.cache_dir.iterdir()))
    doc = {
        "_meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "benchmarks/multigpu.py"] + sys.argv[1:]),
            "device": args.device,
            "gpus_seen": seen,
            "gpus": args.gpus,
            "seed": args.seed,
            "parts": args.parts,
            "workloads": args.workloads,
            "env": dict(NO_MULTICAST),
            "inductor": args.inductor,
            "cache_dir": str(args.cache_dir),
            "cache_was_empty": was_empty,
            "deadline_s": args.deadline,
        },
        "scaling": [],
        "ttt": [],
    }
    path = args.out / "multigpu.json"

    def save():
        doc["_meta"]["elapsed_s"] = round(time.time() - t_start, 1)
        doc["_meta"].update(_platform(args.out / "runs"))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(path)

    save()
    parts = {"scaling": part_scaling, "ttt": part_ttt, "validate": part_validate, "sweep": part_sweep}
    for part in args.parts:
        if end is not None and end - time.time() < MIN_START_S:
            doc.setdefault("not_started", []).append(part)
            save()
            continue
        parts[part](args, doc, end, save)
    print(f"[multigpu] wrote {path}", flush=True)
    return 0 if ok(doc) and not doc.get("not_started") else 1


def _platform(runs: Path) -> dict:
    return recorded_platform(runs, ("driver", "nccl"))


if __name__ == "__main__":
    sys.exit(main())
