"""Published MLPerf Training rounds v0.7 to v4.0 scored by the report and by mlperf-logging's
result_summarizer, row by row.

The trees are whole, unmodified published files (shared/mlperf-rounds-samples.tar.xz; its
README says which: a gnmt run that fails the v0.7 checker, a 40-run unet3d, two RCP
scaling.json, a nested copy of another benchmark's logs). Every expected score is the
summarizer's, computed here at test time on the same files (benchmarks/rounds_compare.py
runs it, once per round and test session); no score is typed by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.report.analysis import analyse
from lab.core.errors import ConfigError
from lab.core.mlperf import default_rules
from lab.report.build import build_report
from lab.results.logreader import read_runs

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import rounds_compare  # noqa: E402

ROUNDS = ("v0.7", "v1.0", "v2.0", "v3.0", "v4.0")


def ruleset(rnd: str) -> str:
    return default_rules().rounds[rnd]["ruleset"]


def records(tree: Path, **kw) -> dict:
    return {
        (Path(r["system_key"]).parts[0], Path(r["system_key"]).parts[-1], r["benchmark"]): r
        for r in analyse(read_runs([tree], **kw).runs).systems
    }


def copy_round(round_trees: Path, rnd: str, dest: Path) -> Path:
    return Path(shutil.copytree(round_trees / f"training_results_{rnd}", dest / f"training_results_{rnd}"))


# --------------------------------------------------------------------------
# The rules as data agree with the real tool
# --------------------------------------------------------------------------


def test_round_table_agrees_with_mlperf_loggings_benchmark_meta():
    from mlperf_logging.benchmark_meta import get_allowed_benchmarks, get_result_file_counts
    from mlperf_logging.compliance_checker.mlp_compliance import rule_choices

    counts = get_result_file_counts("training")
    scored = {n: t for n, t in default_rules().rounds.items() if t["failed_runs"] == "slowest"}
    assert sorted(scored) == [
        "v0.7",
        "v1.0",
        "v1.1",
        "v2.0",
        "v2.1",
        "v3.0",
        "v3.1",
        "v4.0",
        "v4.1",
        "v5.0",
        "v5.1",
        "v6.0",
    ]
    for name, t in scored.items():
        assert t["ruleset"] in rule_choices(), name
        assert sorted(t["benchmarks"]) == sorted(set(get_allowed_benchmarks("training", t["ruleset"]))), name
        assert t["runs_required"] == {b: counts[b] for b in t["benchmarks"]}, name


# --------------------------------------------------------------------------
# Row by row
# --------------------------------------------------------------------------


@pytest.mark.parametrize("rnd", ROUNDS)
def test_every_summarizer_row_equals_the_report(round_trees, summarized, rnd):
    s = summarized(rnd)
    assert s.rows and not s.aborted, (s.rows, s.aborted)
    g = rounds_compare.gpulab_side(round_trees / f"training_results_{rnd}", rnd)
    c = rounds_compare.compare(s, g)
    assert (c.differ, c.summarizer_only) == ([], [])
    assert c.matched == c.equal == c.summarizer_rows
    assert c.gpulab_only == []


def test_round_is_found_from_the_folder_name(round_trees, summarized):
    """No round named: training_results_v0.7 says it."""
    ((key, theirs),) = summarized("v0.7").rows.items()
    mine = records(round_trees / "training_results_v0.7")[key]
    assert mine["round"] == "v0.7" and mine["compliance_ruleset"] == "training 0.7.0"
    assert rounds_compare.equal(mine["score_minutes"], theirs)


def test_a_run_failing_the_checker_is_one_of_the_dropped_slowest(round_trees, summarized):
    """v0.7 gnmt: 10 runs, one fails the 0.7.0 checker; it is dropped as the slowest, so one
    fastest and no other slowest go (dropping it first and then both ends scores otherwise)."""
    tree = round_trees / "training_results_v0.7"
    runs = [r for r in read_runs([tree]).runs if r.benchmark == "gnmt"]
    assert len(runs) == 10
    failing = [r for r in runs if r.compliance == "FAIL"]
    assert len(failing) == 1 and failing[0].compliance_ruleset == "training 0.7.0"
    ((key, theirs),) = summarized("v0.7").rows.items()
    mine = records(tree)[key]
    assert rounds_compare.equal(mine["score_minutes"], theirs)
    assert mine["compliance_runs_failed"] == 1 and "dropped" in mine["mark"]
    valid = sorted(r.elapsed_s / 60 for r in runs if r.compliance == "PASS")
    drop_first = sum(valid[1:-1]) / len(valid[1:-1])
    assert not rounds_compare.equal(drop_first, theirs)


def test_only_result_files_of_a_benchmark_folder_are_runs(round_trees):
    """v1.0 Habana: resnet/bert/ holds a copy of the bert logs; it is no run of resnet."""
    tree = round_trees / "training_results_v1.0"
    system = tree / "Habana" / "results" / "SYS-420GH-TNGR"
    coll = read_runs([tree])
    by_bench = {}
    for r in coll.runs:
        by_bench.setdefault(r.benchmark, []).append(r)
    assert len(by_bench["resnet"]) == len(list((system / "resnet").glob("result_*.txt")))
    assert len(by_bench["bert"]) == len(list((system / "bert").glob("result_*.txt")))
    assert not any("/resnet/bert/" in r.source for r in coll.runs)
    assert any(s.source.endswith("resnet/bert") and "result_*.txt" in s.reason for s in coll.skipped)


def test_unet3d_drops_four_at_each_end(round_trees):
    tree = round_trees / "training_results_v2.0"
    (rec,) = records(tree).values()
    assert rec["benchmark"] == "unet3d" and rec["runs"] == 40
    assert "4 fastest and 4 slowest" in rec["score_basis"]


@pytest.mark.parametrize("rnd", ["v3.0", "v4.0"])
def test_scaling_json_multiplies_the_score(round_trees, rnd):
    tree = round_trees / f"training_results_{rnd}"
    (scaling,) = tree.glob("*/results/*/*/scaling.json")
    factor = json.loads(scaling.read_text())["scaling_factor"]
    (rec,) = records(tree).values()
    assert rec["scaling_factor"] == factor and "scaling.json" in rec["mark"]
    unscaled = records(tree, round=rnd)  # the same again: the file is read, not changed
    assert next(iter(unscaled.values()))["score_minutes"] == rec["score_minutes"]


def test_summary_names_the_round_and_its_ruleset(round_trees, tmp_path):
    res = build_report([round_trees / "training_results_v4.0"], tmp_path / "out", formats=("json", "md"))
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["rounds"] == [{"round": "v4.0", "ruleset": "training 4.0.0"}]
    assert "MLPerf Training v4.0" in doc["ruleset"] and "v0.5" not in doc["ruleset"]
    (rec,) = doc["records"]
    assert (rec["round"], rec["compliance_ruleset"]) == ("v4.0", "training 4.0.0")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "v4.0" in md and "training 4.0.0" in md
    assert res.summary[0]["round"] == "v4.0"


# --------------------------------------------------------------------------
# Where the summarizer gives no score, or gives up
# --------------------------------------------------------------------------


def _truncate_run_stop(path: Path):
    lines = path.read_text(encoding="latin-1").splitlines(keepends=True)
    path.write_text("".join(line for line in lines if '"run_stop"' not in line), encoding="latin-1")


def test_too_many_failing_runs_is_no_score(round_trees, tmp_path):
    """A second failing gnmt run: more than the one a result may drop. Neither side scores it;
    the report marks why and still counts the broken file as a run."""
    tree = copy_round(round_trees, "v0.7", tmp_path)
    passing = [r for r in read_runs([tree]).runs if r.compliance == "PASS"]
    _truncate_run_stop(Path(passing[0].source))
    s = rounds_compare.summarizer_side(tree, "0.7.0")
    assert s.rows == {} and not s.aborted
    (rec,) = records(tree).values()
    assert rec["score_minutes"] is None and rec["too_few_runs"] and rec["runs"] == 10
    assert "2 runs fail" in rec["mark"]


def test_systems_the_summarizer_aborts_on_are_still_scored(round_trees, summarized, tmp_path):
    """A systems JSON without number_of_nodes stops the summarizer for the whole submitter;
    the report scores the system as the summarizer does the untouched tree, and says what is missing."""
    tree = copy_round(round_trees, "v0.7", tmp_path)
    (desc,) = tree.glob("*/systems/*.json")
    doc = json.loads(desc.read_text())
    del doc["number_of_nodes"]
    desc.write_text(json.dumps(doc))
    s = rounds_compare.summarizer_side(tree, "0.7.0")
    assert s.rows == {} and "Google" in s.aborted
    ((key, theirs),) = summarized("v0.7").rows.items()
    mine = records(tree)[key]
    assert rounds_compare.equal(mine["score_minutes"], theirs)
    assert "number_of_nodes" in mine["mark"]


def test_a_system_without_its_description_is_still_scored(round_trees, summarized, tmp_path):
    tree = copy_round(round_trees, "v0.7", tmp_path)
    (desc,) = tree.glob("*/systems/*.json")
    desc.unlink()
    s = rounds_compare.summarizer_side(tree, "0.7.0")
    assert s.rows == {} and s.skipped
    ((key, theirs),) = summarized("v0.7").rows.items()
    mine = records(tree)[key]
    assert rounds_compare.equal(mine["score_minutes"], theirs)
    assert "no system description" in mine["mark"]


@pytest.mark.parametrize("content", ["not json", '{"scaling_factor": -1}', '{"factor": 2}'])
def test_a_scaling_file_that_cannot_be_used_is_not_applied(round_trees, tmp_path, content):
    tree = copy_round(round_trees, "v3.0", tmp_path)
    (scaling,) = tree.glob("*/results/*/*/scaling.json")
    scaling.write_text(content)
    (rec,) = records(tree).values()
    assert rec["scaling_factor"] == 1.0 and "scaling.json" in rec["mark"] and "not applied" in rec["mark"]


def test_a_round_named_on_the_command_line(round_trees, summarized, tmp_path):
    """The tree under another folder name: its logs say the round (one line says how), and it
    scores as with the round named."""
    tree = Path(shutil.copytree(round_trees / "training_results_v0.7", tmp_path / "somewhere"))
    ((key, theirs),) = summarized("v0.7").rows.items()
    coll = read_runs([tree])
    (line,) = coll.notes
    assert line.startswith("round v0.7 (training 0.7.0 ruleset) detected from the logs") and "gnmt" in line
    found = {
        (Path(r["system_key"]).parts[0], Path(r["system_key"]).parts[-1], r["benchmark"]): r
        for r in analyse(coll.runs).systems
    }[key]
    named = records(tree, round="v0.7")[key]
    assert found["round"] == named["round"] == "v0.7"
    assert found["score_minutes"] == named["score_minutes"]
    assert rounds_compare.equal(named["score_minutes"], theirs)
    with pytest.raises(ConfigError, match="v9.9: not a round"):
        read_runs([tree], round="v9.9")


def test_the_comparison_script_prints_the_counts(round_trees, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "rounds_compare.py"),
            str(round_trees / "training_results_v0.7"),
            "--round",
            "v0.7",
            "--json",
            str(tmp_path / "c.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    m = re.search(r"matched (\d+) of (\d+), equal (\d+) of (\d+)", out.stdout)
    assert m and len(set(m.groups())) == 1 and m.group(1) != "0", out.stdout
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["matched"] == doc["equal"] == doc["summarizer_rows"] and doc["differ"] == []
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "rounds_compare.py"), str(tmp_path), "--round", "v0.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "not a round that result_summarizer scores" in bad.stderr
