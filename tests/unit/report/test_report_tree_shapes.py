"""The shape of what the report reads from disk, as a hostile tree gives it: folders nested deeper than Python
recurses. Each is a line naming the path, never a traceback or a hang."""

from __future__ import annotations

from lab.results.logreader import read_runs
from report_logs import v05_run, write_lines
from tests.unit.deeptree import nested

DEPTH = 1200  # past Python's default recursion limit of 1000: os.walk of Python 3.11 recurses once a folder


def test_folders_nested_deeper_than_python_recurses_are_a_skip_not_a_traceback(tmp_path):
    """Was: RecursionError from os.walk (the round detection's and the discovery's), exit 1 with a traceback."""
    root = tmp_path / "logs"
    write_lines(root / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    with nested(root, DEPTH):
        found = read_runs([root])
    assert [r.benchmark for r in found.runs] == ["gnmt"]
    assert [(s.source, s.reason) for s in found.skipped] == [
        (str(root.joinpath(*["d"] * 65)), f"more than 64 folders below {root}: not searched")
    ]
