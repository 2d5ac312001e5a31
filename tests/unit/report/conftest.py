"""Fixtures of the report tests: the synthetic mini-study and its report; the published
MLPerf sample trees (../shared/mlperf-samples.tar.xz, see test_report_mlperf_trees.py; the
rounds v0.7 to v4.0 in ../shared/mlperf-rounds-samples.tar.xz, see test_report_rounds.py; v5.0 and
v5.1 in ../shared/mlperf-rounds5-samples.tar.xz, see test_report_rounds5.py); a sweep
of real runner runs like `invoke demo`'s."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import report_logs


@pytest.fixture(scope="session")
def mini_study(tmp_path_factory) -> Path:
    return report_logs.write_mini_study(tmp_path_factory.mktemp("ministudy") / "study")


@pytest.fixture(scope="session")
def study_report(mini_study, tmp_path_factory):
    from lab.report.build import build_report

    out = tmp_path_factory.mktemp("ministudy-report") / "report"
    return build_report([mini_study], out), out


REPO = Path(__file__).resolve().parents[3]
NAME = "mlperf-samples.tar.xz"
ROUNDS_NAME = "mlperf-rounds-samples.tar.xz"
ROUNDS5_NAME = "mlperf-rounds5-samples.tar.xz"


def _archive(name: str = NAME) -> Path | None:
    p = REPO.parent / "shared" / name
    return p if p.is_file() else None


def _extract(tmp_path_factory, name: str) -> Path:
    archive = _archive(name)
    if archive is None:
        pytest.skip(
            f"../shared/{name} not found: the published sample logs are in the folder "
            "shared/ beside the checkout, which CI provides"
        )
    root = tmp_path_factory.mktemp("mlperf")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.fixture(scope="session")
def trees(tmp_path_factory) -> Path:
    return _extract(tmp_path_factory, NAME)


@pytest.fixture(scope="session")
def round_trees(tmp_path_factory) -> Path:
    """training_results_v0.7 ... _v4.0 samples (their README says which files)."""
    return _extract(tmp_path_factory, ROUNDS_NAME)


@pytest.fixture(scope="session")
def rounds5_trees(tmp_path_factory) -> Path:
    """training_results_v5.0 and _v5.1 samples (their README says which files)."""
    return _extract(tmp_path_factory, ROUNDS5_NAME)


@pytest.fixture(scope="session")
def summarized(round_trees, rounds5_trees):
    """mlperf-logging's result_summarizer on each sample round's tree (benchmarks/rounds_compare.py,
    in this process), computed once per test session and round."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import rounds_compare
    from functools import lru_cache
    from lab.core.mlperf import default_rules

    @lru_cache(maxsize=None)
    def side(rnd: str):
        trees = rounds5_trees if rnd in ("v5.0", "v5.1") else round_trees
        return rounds_compare.summarizer_side(trees / f"training_results_{rnd}", default_rules().rounds[rnd]["ruleset"])

    return side


@pytest.fixture(scope="session")
def runner_sweep(tmp_path_factory):
    """A sweep like `invoke demo`'s: two real tiny NCF runs of the runner on the CPU, and a third
    planned run that never ran (the runs cost some seconds each, made once per session)."""
    from lab.sweep import plan as pl
    from lab.sweep import state as sweepstate

    root = tmp_path_factory.mktemp("e2e") / "results" / "demo"
    planned = [pl.PlannedRun("localhost", "ncf", 0, seed, "ttt", "tiny") for seed in (1, 2)]
    env = dict(
        os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="2", GPULAB_CACHE_DIR=str(tmp_path_factory.mktemp("cache"))
    )
    for run in planned:
        out = root / run.host / run.run_id
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "runner",
                "run",
                "ncf",
                "--scale",
                "tiny",
                "--seed",
                str(run.seed),
                "--gpus",
                "0",
                "--out",
                str(out),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        status = json.loads((out / "status.json").read_text())
        run.state, run.outcome, run.reason = "complete", status["outcome"], status["reason"]
    # A third planned run that never ran.
    planned.append(pl.PlannedRun("localhost", "ncf", 0, 3, "ttt", "tiny", state="failed", reason="interrupted"))
    sweep = sweepstate.Sweep(
        root=root,
        name="demo",
        runs=planned,
        hosts={"localhost": {"address": "localhost", "gpu_model": "auto", "gpu_count": "auto", "stack": "current"}},
    )
    sweep.save()
    return root
