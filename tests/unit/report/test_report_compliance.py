"""The compliance verdict says which rule failed: mlperf-logging's real checker on real logs
(the published v0.6 samples, MLLOG written by mlperf-logging), its messages read back as
one short line per failing rule; gpulab's own logs judged by lab/data/compliance.yml."""

import pytest

from lab.results import checkmsg, compliance
from report_logs import write_mllog


def google_v06_log(trees):
    return (
        trees / "training_results_v0.6" / "Google" / "results" / "tpu-v3-32" / "resnet" / "result_0.txt"
    ).read_text()


def test_a_v06_fail_names_the_rule_the_2019_log_broke(trees):
    text = google_v06_log(trees)
    v = compliance.check(text, "v0.6", "resnet")
    assert v.status == "FAIL" and v.ruleset == "training 0.6.0"
    # Google's log writes cache_clear with a null value; the 0.6.0 rules want true. The line named is
    # the file's (the checker counts from 0 among its own lines).
    n = next(i for i, x in enumerate(text.splitlines(), 1) if " cache_clear: " in x)
    assert n == 6
    assert v.failures[0].startswith(f"cache_clear (common.yaml): line {n} logs null; fails ( v['value'] == True )")
    assert v.note.startswith(v.failures[0]) and f"(+{len(v.failures) - 1} more: " in v.note
    assert "submission_poc_name (common.yaml): not logged (exactly one required)" in v.failures
    assert "epoch_start (common.yaml): not logged (at least one required)" in v.failures
    assert all("\n" not in f and len(f) < 200 for f in v.failures)
    # The same log with cache_clear true: that rule no longer fails, the others still do.
    fixed = compliance.check(
        text.replace('cache_clear: {"value": null', 'cache_clear: {"value": true'), "v0.6", "resnet"
    )
    assert fixed.status == "FAIL" and not any(f.startswith("cache_clear") for f in fixed.failures)
    assert len(fixed.failures) == len(v.failures) - 1


def test_mllog_failures_each_in_one_line(tmp_path):
    good = write_mllog(tmp_path / "g.log").read_text().replace('"value": "gpulab"', '"value": "other"')
    assert compliance.check(good, "mllog", "gnmt").status == "PASS"
    lines = good.splitlines()
    no_samples = "\n".join(x for x in lines if '"train_samples"' not in x)
    v = compliance.check(no_samples, "mllog", "gnmt")
    assert v.status == "FAIL" and v.failures == ("train_samples (common.yaml): not logged (exactly one required)",)
    assert v.note == v.failures[0] and v.ruleset == "training 0.7.0"
    twice = "\n".join(lines + [x.replace('"value": 3003', '"value": 3004') for x in lines if '"eval_samples"' in x])
    (f,) = compliance.check(twice, "mllog", "gnmt").failures
    assert f.startswith("eval_samples (common.yaml): logged 2 times (exactly one required), values ")
    low = write_mllog(tmp_path / "low.log", values=[0.20, 0.21, 0.22]).read_text()
    other = low.replace('"value": "gpulab"', '"value": "other"')
    (f,) = compliance.check(other, "mllog", "gnmt").failures
    assert f == "eval_accuracy (closed_gnmt.yaml): no logged line meets v['value'] >= 0.240 and v['value'] < 1"


def test_gpulab_logs_are_judged_by_its_ruleset_and_name_the_exceptions_used(tmp_path):
    rules = compliance.gpulab_rules()
    assert rules.ruleset == "0.7.0" and rules.name == "training 0.7.0 + gpulab exceptions"
    # gnmt stopping at its v0.5 target (0.218) lies below the 0.7.0 floor (0.240): waived, and said.
    low = write_mllog(tmp_path / "low.log", values=[0.20, 0.21, 0.22]).read_text()
    v = compliance.check(low, "mllog", "gnmt")
    assert v.status == "PASS" and v.ruleset == rules.name and v.failures == ()
    (w,) = v.waived
    assert "0.218" in w and w.endswith("(waived: eval_accuracy (closed_gnmt.yaml))")
    # A log that needs no exception lists none; a failure no exception names still fails.
    assert compliance.check(write_mllog(tmp_path / "ok.log").read_text(), "rundir", "gnmt").waived == ()
    broken = "\n".join(x for x in low.splitlines() if '"train_samples"' not in x)
    v = compliance.check(broken, "rundir", "gnmt")
    assert v.status == "FAIL" and v.failures == ("train_samples (common.yaml): not logged (exactly one required)",)
    assert len(v.waived) == 1
    # NCF: no 0.7.0 rules of its own; its common rules are checked.
    ncf = write_mllog(tmp_path / "ncf.log", benchmark="ncf").read_text()
    v = compliance.check(ncf, "rundir", "ncf")
    assert v.status == "PASS" and v.waived[0].startswith("the 0.7.0 rules have no NCF")
    assert v.waived[0].endswith("(waived: submission_benchmark (closed_common.yaml), closed_ncf.yaml)")
    v = compliance.check("\n".join(x for x in ncf.splitlines() if '"run_start"' not in x), "rundir", "ncf")
    assert v.status == "FAIL" and any(f.startswith("run_start (common.yaml): not logged") for f in v.failures)
    # Not gpulab's: NCF has no rules, so it is not checked.
    assert compliance.check(ncf.replace('"value": "gpulab"', '"value": "other"'), "mllog", "ncf").status is None


@pytest.mark.parametrize(
    "message, file, line",
    [
        (
            "Required AT_LEAST(3) occurrence of 'x' but found 1",
            "a.yaml",
            "x (a.yaml): logged 1 times (at least 3 required)",
        ),
        (
            "Required AT_LEAST_ONE occurrence of 'epoch_start' or 'block_start'",
            "common.yaml",
            "epoch_start or block_start (common.yaml): none logged (one of them required)",
        ),
        (
            "Could not find config file: /x/training_0.7.0/open_ncf.yaml",
            "open_common.yaml",
            "open_ncf.yaml: no such rule file in the ruleset",
        ),
        ("failed test: s['ok']\ncurrent context[s]={}", "common.yaml", "common.yaml: end of log fails s['ok']"),
        ("something new\nwith detail", "", "whole log: something new"),
    ],
)
def test_message_forms(message, file, line):
    assert checkmsg.failure(message, file).line() == line


def test_a_records_runs_that_fail_for_one_reason_share_its_line():
    from lab.report.pages import by_reason

    lines = [
        "result_0.txt: x (a.yaml): not logged",
        "result_1.txt: y (a.yaml): not logged",
        "result_2.txt: x (a.yaml): not logged",
    ]
    assert by_reason(lines) == [
        "result_0.txt, result_2.txt: x (a.yaml): not logged",
        "result_1.txt: y (a.yaml): not logged",
    ]
