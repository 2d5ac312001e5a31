"""Fixtures of the report tests: the synthetic mini-study and its report."""

from pathlib import Path

import pytest

import report_logs


@pytest.fixture(scope="session")
def mini_study(tmp_path_factory) -> Path:
    return report_logs.write_mini_study(tmp_path_factory.mktemp("ministudy") / "study")


@pytest.fixture(scope="session")
def study_report(mini_study, tmp_path_factory):
    from lab.report import build_report
    out = tmp_path_factory.mktemp("ministudy-report") / "report"
    return build_report([mini_study], out), out
