"""The shape of the tree `invoke history.import` searches, as a hostile one gives it: nothing in it is a
traceback, nothing found is passed over without a line."""

from __future__ import annotations

import os

import pytest
from histdata import write_validation

from lab.core.errors import ConfigError
from lab.history import memory as history
from lab.history.sources import read_sources
from tests.unit.treeshapes import listed_not_searched, nested


def test_folders_nested_deeper_than_python_recurses_are_not_a_traceback(tmp_path):
    """Was: RecursionError from the os.walk looking for validate.json files, exit 1 with a traceback."""
    root = tmp_path / "results"
    found = write_validation(root / "validate")
    with nested(root, 1200):
        src = read_sources([root])
    assert [v.source for v in src.validations] == [str(found.resolve())]
    assert any("more than 64 folders below" in s for s in src.skipped), src.skipped


def test_an_input_that_is_neither_file_nor_folder_is_named_for_what_it_is(tmp_path):
    """Was: listed as a folder, one line "cannot read (Not a directory)"."""
    fifo, link = tmp_path / "validate.json", tmp_path / "zero"
    os.mkfifo(fifo)
    link.symlink_to("/dev/zero")
    for path, what in ((fifo, "a FIFO"), (link, "a character device")):
        with pytest.raises(ConfigError) as exc:
            read_sources([path])
        assert str(exc.value) == f"{path}: is {what}, not a file or a folder; not read"


def test_a_validate_json_that_is_a_link_is_listed_as_not_read(tmp_path):
    """A validate.json found in a tree is never followed when it is a symbolic link; it was passed over without
    a word (one alone: "no run directories or MLPerf log files found"). Now it is listed as skipped."""
    root = tmp_path / "results"
    found = write_validation(root / "validate")
    (root / "latest").mkdir()
    (root / "latest" / "validate.json").symlink_to(found)
    (root / "shadow").mkdir()
    (root / "shadow" / "validate.json").symlink_to("/etc/shadow")
    src = read_sources([root])
    assert [v.source for v in src.validations] == [str(found.resolve())]
    why = "a symbolic link; not read (import the file it leads to by its path)"
    assert src.skipped == [f"{root / 'latest' / 'validate.json'}: {why}", f"{root / 'shadow' / 'validate.json'}: {why}"]
    with pytest.raises(ConfigError) as exc:
        history.import_paths([root / "shadow"], f"sqlite:///{tmp_path / 'h.sqlite'}")
    assert str(exc.value) == f"nothing to import: {root / 'shadow' / 'validate.json'}: {why}"
    assert not (tmp_path / "h.sqlite").exists()


def test_an_input_below_a_folder_that_may_not_be_searched_is_one_line(tmp_path, monkeypatch):
    """As a user other than root, a path below a folder of mode r--: was PermissionError from pathlib's exists()
    (a traceback, exit 1)."""
    root = tmp_path / "results"
    found = write_validation(root / "validate")
    listed_not_searched(monkeypatch, root / "validate")
    with pytest.raises(ConfigError) as exc:
        read_sources([found])
    assert str(exc.value) == f"{found}: cannot read (Permission denied)"
