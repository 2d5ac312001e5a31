"""Fixtures of the report tests: the synthetic mini-study and its report; the published
MLPerf sample trees (../shared/mlperf-samples.tar.xz, see test_report_mlperf_trees.py)."""

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


def _archive() -> Path | None:
    p = REPO.parent / "shared" / NAME
    return p if p.is_file() else None


@pytest.fixture(scope="session")
def trees(tmp_path_factory) -> Path:
    archive = _archive()
    if archive is None:
        pytest.skip(f"../shared/{NAME} not found: the published sample logs are in the folder "
                    "shared/ beside the checkout, which CI provides")
    root = tmp_path_factory.mktemp("mlperf")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root
