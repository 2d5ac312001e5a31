"""MLLOG files written by mlperf-logging itself, read back with hand-checked numbers."""

import subprocess
import sys

import pytest

from lab.results.logreader import read_runs, parse_log
from report_logs import T0, write_mllog


def test_written_file_passes_the_compliance_checker(tmp_path):
    path = write_mllog(tmp_path / "gnmt.log", epochs=3)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            "0.7.0",
            "--log_output",
            str(tmp_path / "checker.log"),
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_time_to_train_epochs_throughput_seed_platform(tmp_path):
    # 3 epochs of 100 s (90 s training + 10 s eval), 3,498,161 samples per epoch.
    f = parse_log(
        write_mllog(
            tmp_path / "a.log", epochs=3, epoch_s=100.0, eval_s=10.0, seed=11, platform="2xNVIDIA T4"
        ).read_text()
    )
    assert f.fmt == "mllog" and f.benchmark == "gnmt"
    assert f.success and f.outcome == "success"
    assert f.ttt_s == pytest.approx(300.0)
    assert f.epochs == 3
    assert f.samples_per_s == pytest.approx(3_498_161 / 90.0)
    assert f.seed == 11 and f.platform == "2xNVIDIA T4"
    assert f.quality == pytest.approx(0.245)


def test_block_logging_counts_epochs(tmp_path):
    f = parse_log(write_mllog(tmp_path / "b.log", epochs=4, epoch_s=50.0, eval_s=5.0, blocks=True).read_text())
    assert f.epochs == 4 and f.ttt_s == pytest.approx(200.0)
    assert f.samples_per_s == pytest.approx(3_498_161 / 45.0)


def test_aborted_run_is_not_a_success(tmp_path):
    f = parse_log(write_mllog(tmp_path / "c.log", status="aborted").read_text())
    assert not f.success and f.outcome == "aborted" and f.ttt_s is None
    assert f.reason == "run_stop status aborted"


def test_collect_reads_the_system_from_submission_platform(tmp_path):
    write_mllog(tmp_path / "x" / "gnmt.log", platform="3xTesla V100-PCIE-16GB")
    (run,) = read_runs([tmp_path]).runs
    assert (run.benchmark, run.device, run.gpus) == ("gnmt", "V100-PCIe", 3)
    assert run.facts_from == "device: log submission_platform, GPUs: log submission_platform"


def test_benchmark_from_folder_when_the_log_does_not_name_it(tmp_path):
    write_mllog(tmp_path / "rnn_translator" / "1xT4" / "run.log", submission_benchmark=False, platform="lab machine")
    (run,) = read_runs([tmp_path]).runs
    assert (run.benchmark, run.device, run.gpus) == ("gnmt", "T4", 1)


def test_bad_mllog_files_are_skipped_with_reasons(tmp_path):
    write_mllog(tmp_path / "truncated.log", epochs=3, truncate_after=2)
    a = write_mllog(tmp_path / "a.log", benchmark="gnmt").read_text()
    b = write_mllog(tmp_path / "b.log", benchmark="ssd", start=T0 + 1000).read_text()
    (tmp_path / "a.log").unlink()
    (tmp_path / "b.log").unlink()
    (tmp_path / "mixed.log").write_text(a + b)
    cut = write_mllog(tmp_path / "cut.log").read_text().splitlines()
    (tmp_path / "cut.log").write_text("\n".join(cut[:-1] + [cut[-1][:40]]) + "\n")
    no_start = [x for x in a.splitlines() if '"run_start"' not in x]
    (tmp_path / "nostart.log").write_text("\n".join(no_start) + "\n")
    coll = read_runs([tmp_path])
    assert coll.runs == []
    reasons = {s.source.rsplit("/", 1)[1]: s.reason for s in coll.skipped}
    assert reasons == {
        "truncated.log": "no run_stop: the log is truncated or the run did not finish",
        "mixed.log": "mixed benchmarks in one file: gnmt, ssd",
        "cut.log": f"no run_stop: the log is truncated or the run did not finish; last line (line {len(cut)}) cut off",
        "nostart.log": "no run_start",
    }
