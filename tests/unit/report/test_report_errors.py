"""Bad input to build_report: one clear line naming what is wrong (ConfigError, exit 2)."""

import shutil

import pytest

from lab.core.errors import ConfigError
from lab.core.mlperf import DATA_DIR, Rules
from lab.report.build import build_report
from report_logs import v05_run, write_lines


def test_missing_path(tmp_path):
    with pytest.raises(ConfigError) as exc:
        build_report([tmp_path / "nope"], tmp_path / "out")
    assert str(exc.value) == f"{tmp_path / 'nope'}: no such file or directory"
    assert exc.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_path_without_logs(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "README.txt").write_text("hello\n")
    with pytest.raises(ConfigError) as exc:
        build_report([tmp_path / "empty"], tmp_path / "out")
    assert str(exc.value) == f"{tmp_path / 'empty'}: no run directories or MLPerf log files found"


def test_explicit_file_that_is_not_a_log_is_reported_not_fatal(tmp_path):
    write_lines(tmp_path / "l" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    f = tmp_path / "notes.txt"
    f.write_text("nothing here\n")
    res = build_report([tmp_path / "l" / "a.log", f], tmp_path / "out", formats=("json",))
    assert res.skipped == [(str(f), "no :::MLLOG, :::MLL or :::MLPv0.5.0 lines")]
    assert [s["benchmark"] for s in res.summary] == ["gnmt"]


def test_inputs_that_are_all_skipped_write_no_report(tmp_path):
    """Nothing readable in any input: exit 2 and no folder, not an empty report beside a stray file (a
    report of /etc/passwd would otherwise land in /etc/report)."""
    f, g = tmp_path / "notes.txt", tmp_path / "empty.log"
    f.write_text("nothing here\n")
    g.write_text("")
    with pytest.raises(ConfigError) as exc:
        build_report([f, g], tmp_path / "out")
    assert str(exc.value) == (
        f"report: nothing to report: {f}: no :::MLLOG, :::MLL or :::MLPv0.5.0 lines (and 1 more skipped)"
    )
    assert exc.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_unknown_format(tmp_path):
    write_lines(tmp_path / "l" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    with pytest.raises(ConfigError) as exc:
        build_report([tmp_path / "l"], tmp_path / "out", formats=("html", "pdf"))
    assert str(exc.value) == "report format pdf: choose from html, md, json, csv"


def test_out_dir_is_a_file(tmp_path):
    write_lines(tmp_path / "l" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    (tmp_path / "out").write_text("x")
    with pytest.raises(ConfigError) as exc:
        build_report([tmp_path / "l"], tmp_path / "out")
    assert str(exc.value) == f"report: {tmp_path / 'out'} exists and is not a folder"


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "runs_required: 5\n    sample_unit: images\n    train_samples",
            "runs_required: 0\n    sample_unit: images\n    train_samples",
            "benchmarks.yml: benchmarks.resnet.runs_required: 0 is less than the minimum of 1",
        ),
        (
            "target: 21.8",
            "target: high",
            "benchmarks.yml: benchmarks.gnmt.target: 'high' is not valid here "
            "(a positive number, or a mapping of metric name to positive number)",
        ),
        (
            "aliases: [rnn_translator",
            "aliases: [resnet50, rnn_translator",
            "benchmarks.yml: alias 'resnet50' names both resnet and gnmt",
        ),
    ],
)
def test_rules_are_validated(tmp_path, old, new, message):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    text = (data / "benchmarks.yml").read_text()
    assert old in text
    (data / "benchmarks.yml").write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError) as exc:
        Rules(data)
    assert str(exc.value) == f"{data}/{message}"


def test_report_settings_are_validated(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    (data / "report.yml").write_text((data / "report.yml").read_text().replace("alpha: 0.05", "alpha: 2"))
    with pytest.raises(ConfigError) as exc:
        Rules(data)
    assert str(exc.value) == f"{data}/report.yml: compare.alpha: 2 is greater than or equal to the maximum of 1"


def test_formats_subset_writes_only_those(tmp_path):
    write_lines(tmp_path / "l" / "1xT4" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    res = build_report([tmp_path / "l"], tmp_path / "out", formats=("json",))
    assert res.files == [tmp_path / "out" / "summary.json"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json"]
