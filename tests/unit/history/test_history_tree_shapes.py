"""The shape of the tree `invoke history.import` searches, as a hostile one gives it: nothing in it is a
traceback."""

from __future__ import annotations

from histdata import write_validation

from lab.history.sources import read_sources
from tests.unit.deeptree import nested


def test_folders_nested_deeper_than_python_recurses_are_not_a_traceback(tmp_path):
    """Was: RecursionError from the os.walk looking for validate.json files, exit 1 with a traceback."""
    root = tmp_path / "results"
    found = write_validation(root / "validate")
    with nested(root, 1200):
        src = read_sources([root])
    assert [v.source for v in src.validations] == [str(found.resolve())]
    assert any("more than 64 folders below" in s for s in src.skipped), src.skipped
