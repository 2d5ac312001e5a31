"""`invoke collect PATH` takes one sweep folder (README): a comma in its name is part of the name, never a list
of paths, and an empty PATH is refused as no path, never taken as the current folder."""

from __future__ import annotations

import json

from test_hostile_state import RID, invoke, lab, one_line, put_sweep, served_by_host, sweep_doc  # noqa: F401


def test_a_sweep_folder_with_a_comma_is_collected(lab):  # noqa: F811
    doc = sweep_doc(state="failed", outcome=None, token="gl-0123456789abcdef", attempts=1)
    root = put_sweep(lab, doc, name="S,")  # a folder copied or renamed by hand: its sweep is S
    served_by_host(lab, f"S/{RID}")
    p = invoke("collect", root, "--inventory", lab["inventory"], results=lab["results"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{root}: 1 run(s) fetched, 1 verified, 0 problem(s)" in p.stdout
    assert json.loads((root / "sweep.json").read_text())["runs"][0]["state"] == "complete"


def test_a_missing_folder_with_a_comma_is_named_whole(lab):  # noqa: F811
    p = invoke("collect", lab["results"] / "a,,b", results=lab["results"])
    assert p.returncode == 2
    assert one_line(p) == f"gpulab: {lab['results'] / 'a,,b'}: not a sweep directory (no sweep.json)"


def test_an_empty_path_is_no_path(lab):  # noqa: F811
    p = invoke("collect", "", results=lab["results"])
    assert p.returncode == 2
    assert one_line(p) == "gpulab: PATH: '' is not a path"
