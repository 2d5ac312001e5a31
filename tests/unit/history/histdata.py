"""Inputs of the history tests, made by the project's own writers: run directories through the runner's
run-directory writers (runner.rundir, by tests/unit/rundirs.write_run), validate.json through lab.validate
from the validation tests' H200 burn-in document."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.unit import rundirs

ROOT = Path(__file__).resolve().parents[3]
H200 = ROOT / "tests" / "unit" / "validate" / "fixtures" / "h200-x8-standard.handmade.json"


def gpu_uuid(host: str, index: int) -> str:
    return f"GPU-{abs(hash(host)) % 10**8:08d}-0000-0000-0000-{index:012d}"


def write_run(
    root: Path,
    host: str,
    name: str,
    *,
    gpus=(0,),
    seed=1,
    outcome="success",
    samples_per_s=1000.0,
    start="2026-12-01T10:00:00.000Z",
    host_gpus=4,
) -> Path:
    """A throughput run directory of ``host`` under ``root`` (a sweep folder when it holds sweep.json), with
    the host's probe in its manifest (tests/unit/rundirs.write_run)."""
    probe = {
        "schema": 1,
        "host": {"hostname": host},
        "stack": {"profile": "current", "driver": "580.105.08", "cuda_toolkit": "12.8.1"},
        "frameworks": {"torch": "2.13.0"},
        "gpus": [
            {"index": i, "name": "NVIDIA H200", "uuid": gpu_uuid(host, i), "serial": f"16{i:011d}"}
            for i in range(host_gpus)
        ],
    }
    return rundirs.write_run(
        root / host / name,
        seed=seed,
        mode="throughput",
        outcome=outcome,
        reason="done" if outcome == "success" else "XID 79: GPU fell off the bus",
        result={"samples_per_s": samples_per_s, "sample_unit": "samples"},
        manifest={"schema": 1, "contract": 1, "gpus": list(gpus), "probe": probe},
        gpus=list(gpus),
        world_size=len(gpus),
        start=start,
        end=start.replace("10:00", "10:05"),
        exit_code=0 if outcome == "success" else 1,
    )


def write_sweep(
    root: Path, name: str, hosts: dict[str, int], *, runs_per_host=2, outcome="success", day: int = 1
) -> Path:
    """A sweep folder with sweep.json and ``runs_per_host`` run directories per host."""
    sweep = root / name
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": name,
                "hosts": {h: {"gpu_model": "H200", "gpu_count": n, "stack": "current"} for h, n in hosts.items()},
                "runs": [],
            }
        )
    )
    for h, n in hosts.items():
        for s in range(1, runs_per_host + 1):
            write_run(
                sweep,
                h,
                f"ncf-throughput-tiny-1gpu-s{s}",
                gpus=(s % n,),
                seed=s,
                outcome=outcome,
                samples_per_s=1000.0 + s,
                host_gpus=n,
                start=f"2026-12-{day:02d}T10:00:00.000Z",
            )
    return sweep


def burnin_doc() -> dict:
    return json.loads(H200.read_text())


def write_validation(
    out: Path, host: str = "h200-01", doc: dict | None = None, *, fail_gpu: int | None = None, when: str | None = None
) -> Path:
    """validate.json of one host as `invoke validate` writes it (lab.validate); ``fail_gpu``: that GPU has
    pending row remaps (a FAIL)."""
    from lab.validate import fleet as validate

    doc = copy.deepcopy(doc or burnin_doc())
    if fail_gpu is not None:
        doc["probe"]["gpus"][fail_gpu]["row_remap"]["pending"] = True
    if when:
        doc["probe"]["collected_at"] = when
    verdicts = validate.evaluate({host: doc}, [], validate.load_references(), None, level="standard")
    if when:
        verdicts.data["generated_at"] = when
    validate.write_outputs(verdicts, out)
    return out / "validate.json"
