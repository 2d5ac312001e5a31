"""A fetched run's status.json is input: `invoke collect` must not copy its outcome or reason into sweep.json
unchecked. A host that served ``"reason": {...}`` or an outcome of its own left a sweep.json that every later
command (collect, report, a resumed sweep) refused as hostile state: the sweep could not be read again.
"""

from __future__ import annotations

import json
import os

import pytest

from rundirs import write_run
from test_hostile_state import RID, invoke, lab, put_sweep, sweep_doc  # noqa: F401 (lab: the fixture)


@pytest.mark.parametrize(
    "status, state, reason",
    [
        ({"reason": {"why": ["a", 1]}}, "complete", ""),
        ({"reason": "x" * 100_000}, "complete", "x" * 200),
        ({"reason": "two\nlines\x1b[31m"}, "complete", "two lines\\x1b[31m"),
        ({"outcome": "success", "exit_code": 0}, "complete", "reached"),
    ],
    ids=["reason object", "reason of 100 kB", "reason of two lines", "sound"],
)
def test_a_fetched_status_json_leaves_a_sweep_state_that_reads_back(lab, status, state, reason):  # noqa: F811
    root = put_sweep(lab, sweep_doc(state="failed", outcome=None))
    write_run(lab["work"] / "sweeps" / "S" / RID, **{"reason": "reached", **status})
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((root / "sweep.json").read_text())["runs"][0]
    assert (run["state"], run["outcome"]) == (state, "success")
    assert run["reason"].startswith(reason[:200]) and len(run["reason"]) <= 300, run["reason"][:400]
    again = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    assert again.returncode == 0 and "0 run(s) fetched, 1 verified" in again.stdout, again.stdout + again.stderr


def test_an_outcome_of_the_hosts_own_is_no_outcome_in_the_sweep_state(lab):  # noqa: F811
    root = put_sweep(lab, sweep_doc(state="failed", outcome=None))
    rundir = write_run(lab["work"] / "sweeps" / "S" / RID)
    doc = json.loads((rundir / "status.json").read_text())
    (rundir / "status.json").write_text(json.dumps(dict(doc, outcome=["success"])))
    (rundir / "SHA256SUMS").unlink()
    from runner.rundir import write_sums

    write_sums(rundir)
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    run = json.loads((root / "sweep.json").read_text())["runs"][0]
    assert (run["state"], run["outcome"]) == ("failed", None), run
    again = invoke("report", root, "--format", "json", results=lab["results"])
    assert "sweep.json" not in again.stderr, again.stderr


@pytest.mark.parametrize("planted", ["fifo", "file", "fifo at the partial copy"])
def test_what_sits_where_the_fetched_run_goes_is_replaced_never_opened(lab, planted):  # noqa: F811
    """A FIFO where collect puts its copy of a run (results/S/here/<run>, or its .partial) hung collect for
    good (shutil.rmtree opens its path first); a file there ended it in a raw NotADirectoryError with the
    .partial copy left behind. Now either is replaced by the verified run directory."""
    root = put_sweep(lab, sweep_doc(state="failed", outcome=None))
    write_run(lab["work"] / "sweeps" / "S" / RID)
    (root / "here").mkdir()
    at = root / "here" / (f".{RID}.partial" if "partial" in planted else RID)
    os.mkfifo(at) if "fifo" in planted else at.write_text("x\n")
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"], timeout=60)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    assert p.returncode == 0 and "1 run(s) fetched, 1 verified, 0 problem(s)" in p.stdout, p.stdout + p.stderr
    assert sorted(os.listdir(root / "here")) == [RID] and (root / "here" / RID / "SHA256SUMS").is_file()
