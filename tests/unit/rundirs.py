"""A run directory as the runner leaves it (status.json, mllog.log, SHA256SUMS), written by the runner's own
writers (runner.rundir), for the controller tests that read run directories back: collect, report, history,
sweep resume, the hostile-state, bounded-read and settings tests."""

from __future__ import annotations

import inspect
from pathlib import Path

from runner import rundir as writer


def write_run(
    d: Path,
    *,
    seed: int = 1,
    mode: str = "ttt",
    outcome: str = "success",
    reason: str = "reached",
    result: dict | None = None,
    telemetry: bool = False,
    manifest: dict | None = None,
    **status,
) -> Path:
    """ncf at tiny scale on the CPU, in folder ``d`` (made here); ``telemetry`` adds a header-only telemetry.csv,
    ``manifest`` writes that document as manifest.json; ``status``: other values of status.json's fields
    (gpus, world_size, start, end, exit_code, ...)."""
    unknown = status.keys() - inspect.signature(writer.status_document).parameters.keys()
    assert not unknown, f"not fields of status.json: {sorted(unknown)}"
    d.mkdir(parents=True)
    writer.write_json(
        d / "status.json",
        writer.status_document(
            runner_version="0",
            workload="ncf",
            benchmark="ncf",
            framework="pytorch",
            mode=mode,
            scale="tiny",
            seed=seed,
            precision="fp32",
            gpus=[],
            world_size=1,
            nnodes=1,
            node_rank=0,
            start="2026-01-01T00:00:00.000Z",
            end="2026-01-01T00:01:00.000Z",
            exit_code=0,
            outcome=outcome,
            reason=reason,
            result=result or {},
        )
        | status,
    )
    (d / "mllog.log").write_text(':::MLLOG {"key": "run_start"}\n')
    if telemetry:
        (d / "telemetry.csv").write_text("time_s,gpu,power_w\n")
    if manifest is not None:
        writer.write_json(d / "manifest.json", manifest)
    writer.write_sums(d)
    return d
