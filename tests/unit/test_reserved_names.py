"""A sweep (or tune study) may not take the name of what gpulab keeps for its own files under the results folder
(validate's output folder, the history and tune databases with their journals, the results folder's own report):
one line, exit 2, nothing written; a sweep.json naming one is refused when read back; a real sweep resumes."""

from __future__ import annotations

import pytest
from test_hostile_state import RID, invoke, lab, one_line, put_sweep, sweep_doc  # noqa: F401 (lab: a fixture)

from lab.core import fields
from lab.core.errors import ConfigError
from lab.history import db
from lab.tune import storage


def test_the_reserved_names_are_what_gpulab_writes_there():
    files = {f"{db.DEFAULT_FILE}{s}" for s in db.SQLITE_FILES}
    stem, dot, ext = db.DEFAULT_FILE.rpartition(".")
    files |= {f"{stem}{storage.SQLITE_SUFFIX}{dot}{ext}{s}" for s in db.SQLITE_FILES}
    assert set(fields.RESERVED_NAMES) == files | {"validate", "report"}


@pytest.mark.parametrize("name", ["validate", "history.sqlite", "history.sqlite-wal", "History-Tune.sqlite", "report"])
def test_sweep_refuses_a_reserved_name(lab, name):  # noqa: F811
    p = invoke(
        "sweep",
        "--name",
        name,
        "--workloads",
        "ncf",
        "--scale",
        "tiny",
        "--inventory",
        lab["inventory"],
        results=lab["results"],
    )
    assert p.returncode == 2
    line = one_line(p)
    assert line.startswith(f"gpulab: --name: '{name}' is the name of ") and line.endswith("; give another name")
    assert not lab["results"].exists()


def test_tune_refuses_a_reserved_name(lab):  # noqa: F811
    p = invoke(
        "tune", "ncf", "--scale", "tiny", "--name", "validate", "--inventory", lab["inventory"], results=lab["results"]
    )
    assert p.returncode == 2
    assert one_line(p).startswith("gpulab: --name: 'validate' is the name of validate's output folder")


def test_a_sweep_json_naming_a_reserved_name_is_refused(lab):  # noqa: F811
    put_sweep(lab, sweep_doc(name="validate"), name="validate")
    p = invoke("collect", lab["results"] / "validate", results=lab["results"])
    assert p.returncode == 2
    assert "name: 'validate' is the name of validate's output folder" in one_line(p)


@pytest.mark.parametrize("name", ["validate-2", "demo-20261207-225900", "reports", "history", "my.sqlite"])
def test_other_names_stay_sweep_names(name):
    assert fields.sweep_name(name) == name


def test_the_refusal_is_one_config_error():
    with pytest.raises(ConfigError, match=r"^gpulab_sweep: 'VALIDATE' is the name of validate's output"):
        fields.sweep_name("VALIDATE", "gpulab_sweep")
    assert RID  # the shared run id of test_hostile_state's documents
