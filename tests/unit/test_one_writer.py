"""One function writes a whole file without following a link (runner.rundir.new_file), and every writer of
the controller and the runner uses it (issue 45); the compiled-artifact store never ships a planted link."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from lab.core import writes
from lab.core.errors import ConfigError
from lab.hosts import remote
from lab.sweep import compiled
from runner import rundir
from tests.unit.localhost import local_host

ROOT = Path(__file__).resolve().parents[2]
OWNER = "runner/rundir.py"
# renames of whole folders (a fetched run, an earlier attempt, a prepared dataset): no file is written there
FOLDER_RENAMES = {"lab/sweep/hostrun.py", "lab/sweep/unitworker.py", "runner/datasets/prepare.py"}


def _calls(path: Path) -> set[str]:
    """The os.* calls and flags a module names: replace, rename, O_EXCL."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ("replace", "rename", "O_EXCL")
        ):
            found.add(node.attr)
    return found


def test_only_the_one_writer_makes_a_temporary_file_and_renames_it():
    owners = {}
    for base in ("lab", "runner"):
        for p in sorted((ROOT / base).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if _calls(p):
                owners[rel] = _calls(p)
    assert owners.pop(OWNER) == {"replace", "O_EXCL"}
    assert {k: v for k, v in owners.items() if k not in FOLDER_RENAMES or "O_EXCL" in v} == {}


@pytest.mark.parametrize(
    "write",
    [
        lambda p: writes.write_bytes(p, b"new", "test output"),
        lambda p: rundir.write_new(p, b"new"),
        lambda p: rundir.write_json(p, "new"),
    ],
)
def test_a_link_planted_where_a_file_goes_is_never_written_through(tmp_path, write):
    secret = tmp_path / "secret"
    secret.write_bytes(b"keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "f").symlink_to(secret)
    try:
        write(out / "f")
    except ConfigError as exc:  # the controller refuses it; the runner replaces the name
        assert "symbolic link" in exc.message
    assert secret.read_bytes() == b"keep"
    assert sorted(os.listdir(out)) == ["f"]  # no temporary file left


def _host(tmp_path, name):
    workdir = tmp_path / name
    workdir.mkdir()
    return remote.LocalRemote(local_host(workdir, name, gpu_model="NVIDIA H200", gpu_count=1)), str(workdir)


def test_a_link_planted_in_the_artifact_store_is_not_shipped_and_not_written_through(tmp_path):
    (a, wa), (b, wb) = _host(tmp_path, "a"), _host(tmp_path, "b")
    store = compiled.store_dir(tmp_path / "sweep", "current", "NVIDIA H200")
    store.mkdir(parents=True)
    secret = tmp_path / "controller-secret"
    secret.write_bytes(b"private key")
    name = "ncf.full.ttt.bf16.x1.NVIDIA_H200.torch2.11.bin"
    (store / name).symlink_to(secret)
    assert compiled.push(b, wb, store) == []  # the link is not shipped
    assert not (Path(wb) / compiled.REMOTE_DIR / name).exists()
    host_file = Path(wa) / compiled.REMOTE_DIR / name
    host_file.parent.mkdir(parents=True)
    host_file.write_bytes(b"graphs")
    with pytest.raises(ConfigError, match="symbolic link"):  # a fetch never writes through a link
        a.get(str(host_file), store / name)
    assert secret.read_bytes() == b"private key"
    (store / name).unlink()
    assert compiled.pull(a, wa, store) == [name]
    assert (store / name).read_bytes() == b"graphs" and not (store / name).is_symlink()
    assert compiled.push(b, wb, store) == [name]  # a real file travels
    assert (Path(wb) / compiled.REMOTE_DIR / name).read_bytes() == b"graphs"
