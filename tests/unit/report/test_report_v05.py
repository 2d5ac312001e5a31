"""v0.5 (`:::MLPv0.5.0`) logs written by the tests, read back with hand-checked numbers."""

import pytest

from lab.results.logreader import LogProblem, read_runs, parse_log, parse_runs
from report_logs import T0, v05_line, v05_run, write_lines


def text(lines, prefix=""):
    return "".join(prefix + x + "\n" for x in lines)


def test_success_flag_clock_runs_to_run_stop():
    # 3 epochs of 100 s, run_stop 30 s after the last eval: 330 s.
    f = parse_log(text(v05_run("gnmt", epochs=3, epoch_s=100.0, stop_delay=30.0, seed=5)))
    assert f.fmt == "v0.5" and f.benchmark == "gnmt"
    assert f.success and f.outcome == "success"
    assert f.ttt_s == pytest.approx(330.0)
    assert f.epochs == 3
    assert f.seed == 5


def test_without_flag_the_target_decides_and_the_clock_runs_to_run_stop():
    # Target 21.8 is met by the third eval (epoch 2, t = 300 s); the run goes on to 400 s.
    # v0.5 rules: "All official run results will be extracted from the log based on the
    # start and end tags": run_start to run_stop; epochs to converge stop at the eval.
    lines = v05_run("gnmt", epochs=4, epoch_s=100.0, values=[10.0, 20.0, 21.9, 23.0], success_flag=None, target=21.8)
    f = parse_log(text(lines))
    assert f.success
    assert f.ttt_s == pytest.approx(400.0)
    assert f.epochs == 3
    assert "21.9 met target 21.8 at epoch 2" in f.reason


def test_target_from_benchmarks_yml_when_the_log_has_none():
    # GNMT's v0.5 target 21.8 (lab/data/benchmarks.yml): 21.7 misses, 21.85 meets.
    lines = v05_run("gnmt", epochs=3, epoch_s=50.0, values=[15.0, 21.7, 21.85], success_flag=None, log_target=False)
    f = parse_log(text(lines))
    assert f.success and f.ttt_s == pytest.approx(150.0) and f.target == 21.8


def test_percent_and_fraction_scales_compare():
    lines = v05_run("gnmt", epochs=2, epoch_s=10.0, values=[0.20, 0.219], success_flag=None, target=21.8)
    assert parse_log(text(lines)).success


def test_missed_target():
    lines = v05_run("gnmt", epochs=3, epoch_s=10.0, values=[10.0, 15.0, 20.5], success_flag=None)
    f = parse_log(text(lines))
    assert not f.success and f.outcome == "target_missed" and f.ttt_s is None
    assert f.reason == "no eval_accuracy met target 21.8 (last 20.5)"
    assert f.epochs == 3


def test_success_false_flag():
    f = parse_log(text(v05_run("ssd", epochs=2, epoch_s=10.0, target=0.212, success_flag=False)))
    assert not f.success and f.outcome == "target_missed" and f.ttt_s is None


def test_maskrcnn_needs_both_metrics():
    vals = [{"BBOX": 0.30, "SEGM": 0.30}, {"BBOX": 0.38, "SEGM": 0.33}, {"BBOX": 0.38, "SEGM": 0.34}]
    lines = v05_run(
        "maskrcnn", epochs=3, epoch_s=60.0, values=vals, success_flag=None, target={"BBOX": 0.377, "SEGM": 0.339}
    )
    f = parse_log(text(lines))
    assert f.success and f.ttt_s == pytest.approx(180.0) and f.epochs == 3


def test_throughput_from_train_time_of_each_epoch():
    # 3.6M samples per epoch, 100 s epochs of which 10 s are evaluation: 3.6e6 / 90 = 40,000/s.
    lines = v05_run("gnmt", epochs=3, epoch_s=100.0, eval_s=10.0, samples=3_600_000)
    f = parse_log(text(lines))
    assert f.samples_per_s == pytest.approx(40_000.0)
    assert f.throughput_basis == (
        "3 epochs of 3,600,000 samples in 270 s from the first train_epoch, 30 s of evaluation excluded"
    )


def test_prefix_anywhere_in_the_line():
    f = parse_log(text(v05_run("ncf", epochs=2, epoch_s=10.0, target=0.635), prefix="0: [rank0] "))
    assert f.benchmark == "ncf" and f.success and f.ttt_s == pytest.approx(20.0)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda ls: [x for x in ls if " run_start" not in x], "no run_start"),
        (
            lambda ls: [x for x in ls if " run_stop" not in x and " run_final" not in x],
            "no run_stop: the log is truncated or the run did not finish",
        ),
        (lambda ls: ls + [v05_line("ssd", T0 + 999, "eval_start")], "mixed benchmarks in one file: gnmt, ssd"),
    ],
)
def test_bad_logs_say_why(mutate, reason):
    with pytest.raises(LogProblem) as exc:
        parse_log(text(mutate(v05_run("gnmt", epochs=2, epoch_s=10.0))))
    assert str(exc.value).startswith(reason)


def test_an_event_echoed_behind_a_logger_prefix_is_one_event():
    # NVIDIA's v0.5 MXNet logs print each event twice, once behind "INFO:mlperf_compliance::".
    lines = v05_run("gnmt", epochs=2, epoch_s=10.0)
    echoed = [y for x in lines for y in (x, "INFO:mlperf_compliance::" + x)]
    (f,) = parse_runs(text(echoed))
    assert f.success and f.ttt_s == pytest.approx(20.0) and f.epochs == 2


def test_several_runs_in_one_file_are_read_one_by_one():
    first = v05_run("gnmt", epochs=2, epoch_s=10.0, seed=1)
    second = v05_run("gnmt", start=T0 + 1000.0, epochs=3, epoch_s=10.0, seed=2, success_flag=False)
    runs = parse_runs(text(first + second))
    assert [(r.run_in_file, r.runs_in_file, r.seed, r.success) for r in runs] == [(1, 2, 1, True), (2, 2, 2, False)]
    assert runs[0].ttt_s == pytest.approx(20.0) and runs[1].ttt_s is None


def test_truncated_last_line_is_named():
    lines = v05_run("gnmt", epochs=3, epoch_s=10.0)
    cut = [x for x in lines if " run_stop" not in x and " run_final" not in x]
    cut[-1] = cut[-1][: cut[-1].index('{"epoch"') + 5]  # eval_stop line cut mid-JSON
    with pytest.raises(LogProblem) as exc:
        parse_log(text(cut))
    assert str(exc.value) == (
        f"no run_stop: the log is truncated or the run did not finish; last line (line {len(cut)}) cut off"
    )


def test_collect_lists_bad_files_as_skipped(tmp_path):
    good = write_lines(tmp_path / "4xT4" / "gnmt" / "result_0.txt", v05_run("gnmt", epochs=2, epoch_s=10.0))
    write_lines(
        tmp_path / "4xT4" / "gnmt" / "result_1.txt",
        [x for x in v05_run("gnmt", epochs=2, epoch_s=10.0) if " run_stop" not in x],
    )
    write_lines(
        tmp_path / "4xT4" / "mixed.log", v05_run("gnmt", epochs=2, epoch_s=10.0) + [v05_line("ssd", T0, "eval_start")]
    )
    (tmp_path / "4xT4" / "gnmt" / "result_2.txt").write_bytes(b"")
    (tmp_path / "4xT4" / "binary.log").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "notes.txt").write_text("not a log\n")  # ignored: not named like a log
    # logger sources of a published tree (their strings hold the markers): not logs
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "mlperf_log.py").write_text('PREFIX = ":::MLPv0.5.0"\nprint(PREFIX + " gnmt run_start")\n')
    (tmp_path / "code" / "NcfLogger.scala").write_text('val tag = ":::MLPv0.5.0 ncf"\n')
    coll = read_runs([tmp_path])
    assert [r.source for r in coll.runs] == [str(good)]
    reasons = {s.source.replace(str(tmp_path) + "/", ""): s.reason for s in coll.skipped}
    assert reasons == {
        "4xT4/gnmt/result_1.txt": "no run_stop: the log is truncated or the run did not finish",
        "4xT4/mixed.log": "mixed benchmarks in one file: gnmt, ssd",
        "4xT4/gnmt/result_2.txt": "empty file",
        "4xT4/binary.log": "no :::MLLOG, :::MLL or :::MLPv0.5.0 lines",
    }
    run = coll.runs[0]
    assert (run.device, run.gpus, run.stack) == ("T4", 4, "unknown")
    assert "folder name '4xT4'" in run.facts_from


@pytest.mark.parametrize(
    "folders, device, gpus",
    [
        (("results", "4xT4", "gnmt"), "T4", 4),
        (("V100-PCIe_x3",), "V100-PCIe", 3),
        (("t4", "2gpus"), "T4", 2),
        (("r740", "tesla-v100-pcie-16gb-1gpu"), "V100-PCIe", 1),
    ],
)
def test_system_from_folder_names(tmp_path, folders, device, gpus):
    write_lines(tmp_path.joinpath(*folders) / "run.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    (run,) = read_runs([tmp_path]).runs
    assert (run.device, run.gpus) == (device, gpus)


def test_mlperf_systems_file_gives_the_system(tmp_path):
    import json

    sub = tmp_path / "submission"
    (sub / "systems").mkdir(parents=True)
    (sub / "systems" / "r740_t4.json").write_text(
        json.dumps(
            {
                "accelerator_model_name": "Tesla T4",
                "accelerators_per_node": "3",
                "number_of_nodes": "2",
                "framework": "PyTorch NGC 18.11",
            }
        )
    )
    write_lines(sub / "results" / "r740_t4" / "gnmt" / "result_0.txt", v05_run("gnmt", epochs=1, epoch_s=1.0))
    (run,) = read_runs([sub]).runs
    assert (run.device, run.gpus, run.stack, run.nodes) == ("T4", 6, "PyTorch NGC 18.11", 2)
    assert (run.submitter, run.system) == ("submission", "r740_t4")
    assert run.facts_from == (
        "device: systems/r740_t4.json, accelerators: systems/r740_t4.json, framework: systems/r740_t4.json"
    )
    # Given results/ alone, the description above it is not read: the folder name stands alone.
    (run,) = read_runs([sub / "results"]).runs
    assert (run.system, run.device, run.gpus) == ("r740_t4", "T4", None)  # device from the folder name
    assert any("no system description for r740_t4 inside the input folder" in n for n in run.notes)


def test_a_description_that_is_a_link_is_not_read(tmp_path):
    import json

    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"nodes": [{"num_nodes": 1, "accelerator": "Tesla T4", "num_accelerators": 4}]}))
    tree = tmp_path / "tree"
    write_lines(
        tree / "org" / "sub" / "results" / "sys1" / "gnmt" / "result_0.txt", v05_run("gnmt", epochs=1, epoch_s=1.0)
    )
    (tree / "org" / "sub" / "results" / "sys1" / "entry.json").symlink_to(outside)
    (run,) = read_runs([tree]).runs
    assert (run.system, run.device, run.gpus) == ("sys1", "unknown", None)
    assert any(n.startswith("entry.json leads outside") and n.endswith("not read") for n in run.notes)
