"""State read back from files is input: sweep.json and run directories against collect, resume and report.

Driven through the command line (`python -m invoke`), with a local host
(ansible_connection=local) whose workdir serves the runs: the same code path
as over SSH. What is checked is what a user notices: the exit code, one line
naming the file and field, and nothing outside its place written or read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rundirs import write_run

ROOT = Path(__file__).resolve().parents[2]
RID = "ncf-ttt-tiny-cpu-s1"


def invoke(*args, results: Path, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_RESULTS=str(results))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(p) -> str:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.fixture
def lab(tmp_path):
    """A local host with a workdir, its inventory, a results folder and a victim folder outside it."""
    work = tmp_path / "host-workdir"
    inv = tmp_path / "inventory.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "here": {
                            "ansible_connection": "local",
                            "gpulab_gpu_model": "cpu",
                            "gpulab_gpu_count": 0,
                            "gpulab_stack": "current",
                            "gpulab_workdir": str(work),
                        }
                    }
                }
            }
        )
    )
    victim = tmp_path / "outside" / "victim"
    victim.mkdir(parents=True)
    (victim / "precious").write_text("keep me\n")
    results = tmp_path / "results"
    return {"work": work, "inventory": inv, "results": results, "victim": victim, "tmp": tmp_path}


def sweep_doc(name="S", **run):
    entry = {
        "host": "here",
        "workload": "ncf",
        "gpus": 0,
        "seed": 1,
        "mode": "ttt",
        "scale": "tiny",
        "state": "complete",
        "outcome": "success",
        "reason": "",
        "run_id": RID,
    }
    entry.update(run)
    return {"schema": 1, "name": name, "hosts": {"here": {}}, "runs": [entry]}


def put_sweep(lab, doc, name="S") -> Path:
    root = lab["results"] / name
    root.mkdir(parents=True, exist_ok=True)
    if isinstance(doc, bytes):
        (root / "sweep.json").write_bytes(doc)
    else:
        (root / "sweep.json").write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return root


def served_by_host(lab, rel: str) -> Path:
    """What the host serves at <workdir>/sweeps/<rel>: a complete run directory."""
    return write_run(lab["work"] / "sweeps" / rel)


def untouched(lab):
    assert sorted(p.name for p in lab["victim"].iterdir()) == ["precious"]
    assert (lab["victim"] / "precious").read_text() == "keep me\n"


# --------------------------------------------------------------------------- class 1: traversal

HOSTILE_DOCS = {
    # field -> (sweep.json, what the one line must name)
    "seed": (sweep_doc(seed="1/../../../outside/victim"), "runs[0].seed: '1/../../../outside/victim'"),
    "name": (sweep_doc(name="S/../../outside/victim"), "name: 'S/../../outside/victim' is not a sweep name"),
    "host": (sweep_doc(host="../outside"), "runs[0].host: '../outside'"),
    "workload": (sweep_doc(workload="../../outside/victim"), "runs[0].workload: '../../outside/victim'"),
    "nodes": (sweep_doc(nodes=["here", "../x"]), "runs[0].nodes[1]: '../x'"),
    "runs mapping": (dict(sweep_doc(), runs={"a": {}}), "runs: {'a': {}} is not a list"),
    "gpus text": (sweep_doc(gpus="abc"), "runs[0].gpus: 'abc' is not a GPU count"),
    "binary": (b"\x00\xff\xfe garbage", "unreadable sweep state (is not UTF-8 text"),
    "not json": ('{"runs": [', "unreadable sweep state (is not JSON"),
    "hosts list": (dict(sweep_doc(), hosts=["here"]), "hosts: list is not a mapping"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DOCS))
def test_collect_refuses_a_hostile_sweep_state_and_writes_nothing(lab, case):
    doc, message = HOSTILE_DOCS[case]
    root = put_sweep(lab, doc)
    served_by_host(lab, f"S/{RID}")
    served_by_host(lab, "outside/victim")  # what the host served for the escaping path
    before = sorted(str(p) for p in lab["tmp"].rglob("*"))
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    line = one_line(p)
    assert p.returncode == 2, p.stdout + p.stderr
    assert line.startswith(f"gpulab: {root / 'sweep.json'}: ") and message in line, line
    untouched(lab)
    assert sorted(str(p) for p in lab["tmp"].rglob("*")) == before  # nothing created or removed anywhere


@pytest.mark.parametrize("case", ["seed", "host", "runs mapping", "gpus text", "binary"])
def test_resume_refuses_a_hostile_sweep_state_before_touching_the_host(lab, case):
    doc, message = HOSTILE_DOCS[case]
    root = put_sweep(lab, doc)
    p = invoke(
        "sweep",
        "--inventory",
        lab["inventory"],
        "--name",
        "S",
        "--seeds",
        "1",
        "--workloads",
        "ncf",
        results=lab["results"],
    )
    line = one_line(p)
    assert p.returncode == 2 and message in line and str(root / "sweep.json") in line, line
    assert not lab["work"].exists()  # the host was not touched: no runner installed, no lock
    untouched(lab)


def test_report_refuses_run_folders_that_leave_the_sweep(lab):
    root = put_sweep(lab, sweep_doc(host="..", run_id="outside"))
    write_run(root / "here" / RID)
    p = invoke("report", root, "--format", "json", results=lab["results"])
    line = one_line(p)
    assert p.returncode == 2 and str(root / "sweep.json") in line and "runs[0]" in line, line
    assert not (root / "report").exists()


def test_a_symlinked_host_folder_is_not_followed_out_of_the_sweep(lab):
    root = put_sweep(lab, sweep_doc(state="failed", outcome=None))
    (root / "here").symlink_to(lab["victim"])  # results/S/here -> outside/victim
    served_by_host(lab, f"S/{RID}")
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    line = one_line(p)
    assert p.returncode == 2 and "leads outside" in line, line
    untouched(lab)


def test_a_sound_state_is_still_collected(lab):
    root = put_sweep(lab, sweep_doc(state="failed", outcome=None, token="gl-0123456789abcdef", attempts=1))
    served_by_host(lab, f"S/{RID}")
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 run(s) fetched, 1 verified, 0 problem(s)" in p.stdout
    assert json.loads((root / "sweep.json").read_text())["runs"][0]["state"] == "complete"
    untouched(lab)


def test_every_planned_run_field_has_a_check():
    """A field added to PlannedRun must be checked when sweep.json is read back (lab.sweep.statefile)."""
    from dataclasses import fields

    from lab.sweep import plan as pl
    from lab.sweep import statefile

    assert {f.name for f in fields(pl.PlannedRun)} == set(statefile.RUN_FIELDS)
