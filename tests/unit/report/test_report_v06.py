"""v0.6 logs (`:::MLL <time> <key>: {json}`), written here line by line in the published syntax."""

import json

import pytest

from lab.results.logreader import parse_runs

T0 = 1_560_000_000.0


def mll(t, key, value=None, **md):
    return f":::MLL {t:.3f} {key}: " + json.dumps({"value": value, "metadata": {"file": "x.py", "lineno": 1, **md}})


def run(bench="ssd", start=T0, epochs=3, epoch_s=60.0, status="success"):
    lines = [
        mll(start - 30, "submission_benchmark", bench),
        mll(start - 30, "submission_org", "Lab"),
        mll(start - 20, "init_start"),
        mll(start - 1, "init_stop"),
        mll(start, "run_start"),
    ]
    t = start
    for i in range(1, epochs + 1):
        lines += [mll(t, "block_start", first_epoch_num=i, epoch_count=1)]
        t += epoch_s
        lines += [mll(t, "eval_accuracy", 0.2 + 0.01 * i, epoch_num=i), mll(t, "block_stop", first_epoch_num=i)]
    lines.append(mll(t + 1.0, "run_stop", status=status))
    return lines


def test_clock_runs_from_run_start_to_a_successful_run_stop():
    (f,) = parse_runs("\n".join(run()))
    assert f.fmt == "v0.6" and f.benchmark == "ssd" and f.submitter == "Lab"
    assert f.success and f.ttt_s == pytest.approx(181.0) and f.epochs == 3
    (g,) = parse_runs("\n".join(run(status="aborted")))
    assert not g.success and g.outcome == "aborted" and g.ttt_s is None


def test_echoed_lines_are_one_event_and_two_runs_are_two():
    lines = run()
    echoed = [y for x in lines for y in (x, "0: " + x)]
    (f,) = parse_runs("\n".join(echoed))
    assert f.ttt_s == pytest.approx(181.0)
    two = parse_runs("\n".join(run() + run(start=T0 + 10_000, epoch_s=30.0)[4:]))
    assert [r.ttt_s for r in two] == [pytest.approx(181.0), pytest.approx(91.0)]


def test_minigo_time_is_its_eval_result_timestamp():
    lines = [
        mll(T0 - 5, "submission_benchmark", "minigo"),
        mll(T0, "run_start"),
        mll(T0 + 100, "save_model", {"iteration": 1}),
        mll(T0 + 5000, "eval_accuracy", 0.51, epoch_num=19),
        mll(T0 + 5001, "eval_result", None, iteration=19, timestamp=1725.869),
    ]
    (f,) = parse_runs("\n".join(lines))  # no run_stop: v0.6 MiniGo logs have none
    assert f.success and f.ttt_s == pytest.approx(1725.869)
    assert "eval_result" in f.clock
    (g,) = parse_runs("\n".join(lines[:-1]))
    assert not g.success and g.reason == "no eval_result with a timestamp: no model met the target"


def test_v05_vocabulary_in_mlperf_colon_syntax():
    # One v0.6 submission's syntax: whole seconds, accuracy in percent, no success flag;
    # every rank logs run_start (the first one starts the clock). Target: v0.6's 75.9%.
    lines = ["MLPerf: resnet [06/13/19 00:30:56], run_start"] * 3 + [
        "MLPerf: resnet [06/13/19 00:30:57], preproc_num_train_examples: 1281167",
        "MLPerf: resnet [06/13/19 00:31:00], train_epoch:0",
        "MLPerf: resnet [06/13/19 00:31:01], run_start",
        'MLPerf: resnet [06/13/19 00:40:00], eval_accuracy: {"value": 75.80000%, "epoch": 0}',
        "MLPerf: resnet [06/13/19 00:45:00], train_epoch:1",
        'MLPerf: resnet [06/13/19 00:55:20], eval_accuracy: {"value": 75.98000%, "epoch": 1}',
        "MLPerf: resnet [06/13/19 00:55:21], run_stop",
    ]
    (f,) = parse_runs("\n".join(lines))
    assert f.fmt == "v0.6" and f.success and f.target == 0.759
    assert f.ttt_s == pytest.approx(24 * 60 + 25)  # 00:30:56 to 00:55:21
    assert f.reason == "eval_accuracy 0.7598 met target 0.759 at epoch 1"
    assert f.epochs == 2
