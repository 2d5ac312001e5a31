"""build_report's contract with its callers (tasks.py): inputs, result object, outputs."""

from lab.report.build import build_report
from report_logs import T0, v05_run, write_lines


def test_overlapping_inputs_count_each_run_once(tmp_path):
    write_lines(tmp_path / "l" / "1xT4" / "a.log", v05_run("gnmt", epochs=1, epoch_s=60.0))
    write_lines(tmp_path / "l" / "1xT4" / "b.log", v05_run("gnmt", start=T0 + 1e4, epochs=1, epoch_s=120.0))
    res = build_report(
        [tmp_path / "l", tmp_path / "l" / "1xT4", tmp_path / "l" / "1xT4" / "a.log"],
        tmp_path / "out",
        formats=("json",),
    )
    (rec,) = res.summary
    assert (rec["runs"], rec["score_minutes"]) == (2, 1.5)


def test_result_lines_name_files_counts_and_skips(tmp_path):
    write_lines(tmp_path / "l" / "1xT4" / "a.log", v05_run("gnmt", epochs=1, epoch_s=60.0))
    write_lines(tmp_path / "l" / "1xT4" / "bad.log", v05_run("gnmt", epochs=1, epoch_s=60.0)[:2])
    write_lines(tmp_path / "o" / "1xT4" / "bad.log", ["junk :::MLPv0.5.0 gnmt"])
    res = build_report([tmp_path / "l"], tmp_path / "out", formats=("json", "csv"), compare=tmp_path / "o")
    assert res.skipped == [
        (str(tmp_path / "l" / "1xT4" / "bad.log"), "no run_stop: the log is truncated or the run did not finish"),
        (str(tmp_path / "o" / "1xT4" / "bad.log"), "(compared set) no run_start; last line (line 1) cut off"),
    ]
    assert res.lines() == [
        f"wrote {tmp_path / 'out' / 'summary.json'}",
        "1 benchmark x system record(s) from 1 run(s), 1 with too few runs; 2 input(s) skipped:",
        f"  skipped {tmp_path / 'l' / '1xT4' / 'bad.log'}: no run_stop: the log is truncated or the run did not finish",
        f"  skipped {tmp_path / 'o' / '1xT4' / 'bad.log'}: (compared set) no run_start; last line (line 1) cut off",
    ]
    assert (tmp_path / "out" / "tables" / "compare.csv").read_text().startswith("benchmark,device,gpus")
