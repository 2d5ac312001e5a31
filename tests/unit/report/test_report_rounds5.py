"""Published MLPerf Training rounds v5.0 and v5.1 (and the older samples) scored by the report and
by mlperf-logging's result_summarizer, row by row and column by column: with the round named,
found from the folder name, and found from the logs in a folder named neutrally.

The v5.0/v5.1 trees are whole, unmodified published benchmark folders
(shared/mlperf-rounds5-samples.tar.xz; its README names the repository and commit of each).
Every expected figure is the summarizer's, computed here at test time on the same files
(the ``summarized`` fixture: benchmarks/rounds_compare.py runs it in this process, once per
tree and session).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core.errors import ConfigError
from lab.core.mlperf import default_rules
from lab.report.analysis import analyse
from lab.report.build import build_report
from lab.results import rounddetect
from lab.results.logreader import read_runs

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "benchmarks"))

import rounds_compare  # noqa: E402

ROUNDS5 = ("v5.0", "v5.1")
OLDER = ("v0.7", "v1.0", "v2.0", "v3.0", "v4.0")


def ruleset(rnd: str) -> str:
    return default_rules().rounds[rnd]["ruleset"]


@pytest.fixture(scope="session")
def trees_of(rounds5_trees, round_trees):
    def tree(rnd: str) -> Path:
        return (rounds5_trees if rnd in ROUNDS5 else round_trees) / f"training_results_{rnd}"

    return tree


def neutral(tree: Path, dest: Path) -> Path:
    """``tree`` as hard links in a folder whose name says no round."""
    return rounds_compare.scratch_copy(tree, dest / "exported" / "logs")


def assert_same(s, g):
    c = rounds_compare.compare(s, g)
    assert (c.differ, c.summarizer_only, c.gpulab_only) == ([], [], [])
    assert c.matched == c.equal == c.summarizer_rows > 0
    d = rounds_compare.compare_detail(s, g)
    assert (d.differ, d.one_side) == ([], [])
    return d


@pytest.mark.parametrize("rnd", ROUNDS5)
def test_every_summarizer_row_and_column_equals_the_report(trees_of, summarized, rnd, tmp_path):
    """Named, from the folder name, and from the logs alone: the same rows, and the detailed
    columns (batch size, samples to converge, the scaling factor) equal the summarizer's."""
    s = summarized(rnd)
    assert s.rows and not s.aborted
    named = rounds_compare.gpulab_side(trees_of(rnd), rnd)
    d = assert_same(s, named)
    assert d.compared["GBS"] == d.compared["samples_to_converge"] == d.compared["rcp_scaling_factor"] == 1
    assert assert_same(s, rounds_compare.gpulab_side(trees_of(rnd), None)).compared == d.compared
    found = rounds_compare.gpulab_side(neutral(trees_of(rnd), tmp_path), None)
    assert assert_same(s, found).compared == d.compared
    (line,) = found.found
    assert line.startswith(f"round {rnd} (training {ruleset(rnd)} ruleset) detected from the logs")
    assert "time_ms" in line and "benchmark folders" in line


@pytest.mark.parametrize("rnd", OLDER)
def test_older_rounds_are_found_from_their_logs(trees_of, rnd, tmp_path):
    found = rounddetect.detect(neutral(trees_of(rnd), tmp_path), default_rules())
    assert found.round == rnd and found.line.startswith(f"round {rnd} (training {ruleset(rnd)} ruleset)")


# v2.0's 40 unet3d runs are scored row by row in test_report_rounds.py (named); found above.
@pytest.mark.parametrize("rnd", [r for r in OLDER if r != "v2.0"])
def test_older_rounds_in_a_neutral_folder_score_as_named(trees_of, summarized, rnd, tmp_path):
    s = summarized(rnd)
    found = rounds_compare.gpulab_side(neutral(trees_of(rnd), tmp_path), None)
    assert_same(s, found)
    assert found.found and found.found[0].startswith(f"round {rnd} ")


def test_the_summarizers_published_scores(trees_of, summarized):
    """The scores the archive's README gives, as a check that the oracle itself ran."""
    assert round(summarized("v5.0").rows[("Dell", "9xXE9712x4GB200", "llama2_70b_lora")], 4) == 2.9991
    assert round(summarized("v5.1").rows[("Cisco", "hpf_n8", "dlrm_dcnv2")], 6) == 1.559187


def test_a_tree_of_two_rounds_is_refused(trees_of, tmp_path):
    """v0.7's gnmt and v5.1's dlrm_dcnv2 were never benchmarks of one round."""
    mixed = tmp_path / "mixed"
    shutil.copytree(trees_of("v0.7"), mixed, dirs_exist_ok=True)
    shutil.copytree(trees_of("v5.1"), mixed, dirs_exist_ok=True)
    with pytest.raises(
        ConfigError,
        match=r"several MLPerf rounds .*dlrm_dcnv2 \(v3\.0 to v6\.0\).*"
        r"gnmt \(v0\.7\).*--round",
    ) as exc:
        read_runs([mixed])
    assert "\n" not in str(exc.value)
    named = read_runs([mixed], round="v5.1")  # named: no guess
    assert {r.round for r in named.runs} == {"v5.1"} and not named.notes


def test_the_report_says_what_it_detected(trees_of, tmp_path):
    tree = neutral(trees_of("v5.1"), tmp_path)
    res = build_report([tree], tmp_path / "out", formats=("json",))
    assert any(line.startswith("round v5.1 (training 5.1.0 ruleset) detected") for line in res.lines())
    doc = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert doc["rounds"] == [{"round": "v5.1", "ruleset": "training 5.1.0"}]
    assert doc["round_detected"] == res.notes and len(res.notes) == 1
    (rec,) = doc["records"]
    assert rec["batch_size"] > 0 and rec["samples_to_converge"] > 0


# --------------------------------------------------------------------------
# Energy to train from power logs, against the summarizer
# --------------------------------------------------------------------------


def _mllog(t: int, key: str, value, **md) -> str:
    return (
        ":::MLLOG "
        + json.dumps(
            {"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key, "value": value, "metadata": md}
        )
        + "\n"
    )


def _write_power(bench: Path):
    """power/result_N/node_0.txt (+ node_1 and a switch for some runs) beside each result file:
    readings that differ per run, unevenly spaced, one file without power_measurement_stop."""
    for i, result in enumerate(sorted(bench.glob("result_*.txt"))):
        folder = bench / "power" / result.stem
        folder.mkdir(parents=True)
        for node in range(1 + i % 2):
            t0 = 1_700_000_000_000 + 1000 * i
            lines = [_mllog(t0, "power_measurement_start", 0), _mllog(t0, "conversion_eff", 0.97 + 0.01 * node)]
            t = t0
            for k in range(40):
                t += 500 + 37 * ((k * (i + 3)) % 11)
                lines.append(_mllog(t, "power_reading", 900.0 + 13 * ((k + i) % 7) + node))
            if i != 4:
                lines.append(_mllog(t + 100, "power_measurement_stop", 0))
            (folder / f"node_{node}.txt").write_text("".join(lines))
        if i % 3 == 0:
            (folder / "sw_0.txt").write_text(
                _mllog(0, "conversion_eff", 0.9) + _mllog(1, "interconnect_power_est", 1200.0 + i)
            )


@pytest.mark.parametrize("rnd", ROUNDS5)
def test_energy_to_train_equals_the_summarizers(trees_of, rnd, tmp_path):
    """A failing run (dropped as the slowest) and scaling.json included: the Energy column."""
    tree = Path(shutil.copytree(trees_of(rnd), tmp_path / f"training_results_{rnd}"))
    (bench,) = {p.parent for p in tree.glob("*/results/*/*/result_*.txt")}
    _write_power(bench)
    s = rounds_compare.summarizer_side(tree, ruleset(rnd))
    d = assert_same(s, rounds_compare.gpulab_side(tree, None))
    assert d.compared["Energy"] == 1 and d.equal["Energy"] == 1


def test_power_logs_that_cannot_be_used_give_no_energy(trees_of, tmp_path):
    tree = Path(shutil.copytree(trees_of("v5.0"), tmp_path / "training_results_v5.0"))
    (bench,) = {p.parent for p in tree.glob("*/results/*/*/result_*.txt")}
    _write_power(bench)
    (bench / "power" / "result_3" / "node_0.txt").write_text(_mllog(1, "power_reading", 5.0))
    (rec,) = analyse(read_runs([tree]).runs).systems
    assert rec["energy_j"] is None and "no power_measurement_start" in rec["mark"]
    assert rec["score_minutes"] is not None
    target = tmp_path / "outside.txt"
    target.write_text(_mllog(1, "power_measurement_start", 0))
    link = bench / "power" / "result_3" / "node_0.txt"
    link.unlink()
    link.symlink_to(target)
    (rec,) = analyse(read_runs([tree]).runs).systems
    assert rec["energy_j"] is None and "outside" in rec["mark"]


def test_invoke_report_refuses_a_tree_of_two_rounds_in_one_line(trees_of, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(trees_of("v0.7"), mixed, dirs_exist_ok=True)
    shutil.copytree(trees_of("v5.1"), mixed, dirs_exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), INVOKE_GPULAB_RESULTS=str(tmp_path / "results"))
    p = subprocess.run(
        [sys.executable, "-m", "invoke", "report", str(mixed), "--format", "json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr + p.stdout, p.stderr
    assert "several MLPerf rounds" in lines[0] and "--round" in lines[0]
    assert not (mixed / "report").exists()


def test_result_files_that_cannot_be_dated_do_not_stop_the_detection(trees_of, tmp_path):
    """A FIFO, a link out of the tree, a time_ms of no time: those files are not dated; the others
    still say the round, and nothing outside the tree is read."""
    tree = neutral(trees_of("v5.1"), tmp_path)
    (bench,) = {p.parent for p in tree.glob("*/results/*/*/result_*.txt")}
    files = sorted(bench.glob("result_*.txt"))
    files[0].unlink()
    os.mkfifo(files[0])
    outside = tmp_path / "outside.txt"
    outside.write_text(_mllog(10**12, "cache_clear", True))  # 2001: would move the median
    files[1].unlink()
    files[1].symlink_to(outside)
    files[2].write_text(_mllog(10**16, "cache_clear", True) + files[2].read_text())
    found = rounddetect.detect(tree, default_rules())
    assert found.round == "v5.1" and "median first time_ms of 2 result file(s)" in found.line


def test_rounds_are_published_in_order_and_new_benchmarks_name_their_round(trees_of, tmp_path):
    """The publication days date the logs: each round's after the one before. A benchmark of one
    round alone (v6.0's gpt_oss_20b) names it whatever the logs' dates."""
    rounds = default_rules().rounds
    days = [rounddetect.published_day(t["published"]) for t in rounds.values()]
    assert days == sorted(days) and len(set(days)) == len(days)
    tree = neutral(trees_of("v5.1"), tmp_path)
    (bench,) = {p.parent for p in tree.glob("*/results/*/*/result_*.txt")}
    bench.rename(bench.parent / "gpt_oss_20b")
    found = rounddetect.detect(tree, default_rules())
    assert found.round == "v6.0" and found.line.endswith("benchmark folders gpt_oss_20b, of v6.0 alone")
