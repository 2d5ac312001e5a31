"""Writes through planted links: every output gpulab writes is made without following a link (lab.core.writes).

A link (to a file or folder outside, dangling, a loop), a FIFO or a folder
where an output file belongs, and a link or a file where an output folder
belongs, is refused as bad input before anything is written, and whatever
the link points at is left as it was. sweep.json's temporary name is never
followed: a link planted there is passed over.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.core import writes
from lab.core.errors import ConfigError
from lab.report.build import CSV_TABLES, build_report
from lab.sweep.state import Sweep
from lab.validate.verdict import PASS, Verdicts, write_outputs

sys.path.insert(0, str(Path(__file__).resolve().parent / "report"))
from report_logs import v05_run, write_lines

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PLANTS = ("link-to-file", "link-to-folder", "dangling", "loop", "fifo", "folder", "file")


def snapshot(root: Path) -> dict:
    """Every entry below ``root`` with what it is and holds (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = os.lstat(p)
            out[str(p.relative_to(root))] = (
                st_.st_mode,
                st_.st_size,
                st_.st_mtime_ns,
                os.readlink(p) if p.is_symlink() else None,
            )
    return out


def plant(where: Path, kind: str, outside: Path) -> None:
    where.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-to-file":
        where.symlink_to(outside / "victim.txt")
    elif kind == "link-to-folder":
        where.symlink_to(outside / "victim-dir")
    elif kind == "dangling":
        where.symlink_to(outside / "not-there")
    elif kind == "loop":
        where.symlink_to(where.name)
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "folder":
        where.mkdir()
    else:
        where.write_text("x\n")


def scene(tmp: Path) -> tuple[Path, Path]:
    for p in sorted(tmp.iterdir(), reverse=True):
        if p.is_dir() and not p.is_symlink():
            import shutil

            shutil.rmtree(p)
        else:
            p.unlink()
    outside = tmp / "outside"
    (outside / "victim-dir").mkdir(parents=True)
    (outside / "victim.txt").write_text("keep me\n")
    work = tmp / "work"
    work.mkdir()
    return work, outside


REPORT_FILES = ["report.html", "report.md", "summary.json", *[f"tables/{n}" for n in CSV_TABLES]]
REPORT_FOLDERS = ["", "tables", "figures"]


@FAST
@given(target=st.sampled_from(REPORT_FILES + REPORT_FOLDERS), kind=st.sampled_from(PLANTS))
def test_report_refuses_a_planted_entry_and_writes_nothing(tmp_path, target, kind):
    work, outside = scene(tmp_path)
    logs = write_lines(work / "logs" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    out = work / "report"
    if target:
        out.mkdir()
    is_folder = target in REPORT_FOLDERS
    if (is_folder and kind == "folder") or (not is_folder and kind == "file"):
        return  # what belongs there: not a plant
    plant(out / target if target else out, kind, outside)
    before, victims = snapshot(work), snapshot(outside)
    with pytest.raises(ConfigError) as exc:
        build_report([logs.parent], out, formats=("html", "md", "json", "csv"))
    assert exc.value.exit_code == 2 and "\n" not in exc.value.message
    assert snapshot(work) == before and snapshot(outside) == victims


@FAST
@given(target=st.sampled_from(["sweep.json", "tmp", "root"]), kind=st.sampled_from(PLANTS))
def test_sweep_state_is_saved_in_place_or_refused(tmp_path, target, kind):
    work, outside = scene(tmp_path)
    root = work / "results" / "s1"
    root.mkdir(parents=True)
    where = {"sweep.json": root / "sweep.json", "root": root, "tmp": root / f".sweep.json.{os.getpid()}.tmp"}[target]
    if target == "root":
        root.rmdir()
    if (target == "sweep.json" and kind == "file") or (target == "root" and kind == "folder"):
        return
    plant(where, kind, outside)
    victims = snapshot(outside)
    sweep = Sweep(root=root, name="s1", runs=[])
    if target == "tmp":  # the old fixed temporary name: passed over, never followed
        sweep.save()
        assert (root / "sweep.json").is_file() and not (root / "sweep.json").is_symlink()
    else:
        with pytest.raises(ConfigError):
            sweep.save()
    assert snapshot(outside) == victims


@FAST
@given(target=st.sampled_from(["validate.json", "validate.html", ""]), kind=st.sampled_from(PLANTS))
def test_validate_outputs_refuse_a_planted_entry(tmp_path, target, kind):
    work, outside = scene(tmp_path)
    out = work / "validate"
    if target:
        out.mkdir()
    if (not target and kind == "folder") or (target and kind == "file"):
        return
    plant(out / target if target else out, kind, outside)
    before, victims = snapshot(work), snapshot(outside)
    with pytest.raises(ConfigError):
        write_outputs(Verdicts({"hosts": {}, "verdict": PASS}), out)
    assert snapshot(work) == before and snapshot(outside) == victims


@FAST
@given(
    depth=st.integers(1, 4),
    at=st.integers(0, 3),
    kind=st.sampled_from(["link-to-folder", "dangling", "loop", "file", "fifo"]),
)
def test_a_folder_is_made_component_by_component_never_through_a_link(tmp_path, depth, at, kind):
    work, outside = scene(tmp_path)
    parts = [f"d{i}" for i in range(depth)]
    at = min(at, depth - 1)
    plant(work.joinpath(*parts[: at + 1]), kind, outside)
    victims = snapshot(outside)
    with pytest.raises(ConfigError):
        writes.folder(work.joinpath(*parts), root=work)
    assert snapshot(outside) == victims


def test_a_clean_write_replaces_a_file_and_leaves_no_temporary(tmp_path):
    out = writes.folder(tmp_path / "a" / "b")
    writes.write_text(out / "x.txt", "one\n")
    writes.write_text(out / "x.txt", "two\n")
    assert (out / "x.txt").read_text() == "two\n" and sorted(os.listdir(out)) == ["x.txt"]


# ------------------------------------------------------------- ansible-runner's artifacts

PLAY = """- name: Say hello
  hosts: all
  gather_facts: false
  tasks:
    - name: Print a line
      ansible.builtin.debug:
        msg: hello
"""


def _play(tmp: Path) -> tuple[Path, Path]:
    play, inv = tmp / "play" / "hello.yml", tmp / "play" / "hosts.yml"
    play.parent.mkdir()
    play.write_text(PLAY)
    inv.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
    )
    return play, inv


@pytest.mark.parametrize("kind", [k for k in PLANTS if k != "folder"])
def test_an_artifacts_root_that_is_not_a_real_folder_is_refused_before_ansible_runs(tmp_path, kind):
    from lab.hosts import ansible

    work, outside = scene(tmp_path)
    play, inv = _play(tmp_path)
    plant(work / "artifacts", kind, outside)
    before, victims = snapshot(work), snapshot(outside)
    with pytest.raises(ConfigError) as exc:
        ansible.run_playbook(play, inv, ["localhost"], artifacts_root=work / "artifacts", quiet=True)
    assert exc.value.exit_code == 2 and "\n" not in exc.value.message and "artifacts" in exc.value.message
    assert snapshot(work) == before and snapshot(outside) == victims


def test_a_link_planted_at_a_runs_artifacts_name_is_passed_over_never_written_through(tmp_path):
    import datetime as dt

    from lab.hosts import ansible

    work, outside = scene(tmp_path)
    play, inv = _play(tmp_path)
    root = work / "artifacts"
    root.mkdir()
    now = dt.datetime.now(dt.timezone.utc)
    kinds = ["link-to-folder", "dangling", "loop"]
    for s in range(-2, 60):  # every name the next minute can give this playbook's run
        name = (now + dt.timedelta(seconds=s)).strftime("%Y%m%d-%H%M%S") + "-hello"
        plant(root / name, kinds[s % 3], outside)
    planted, victims = snapshot(root), snapshot(outside)
    result = ansible.run_playbook(play, inv, ["localhost"], artifacts_root=root, quiet=True)
    assert result.ok and result.artifacts.parent == root and not result.artifacts.is_symlink()
    assert result.artifacts.name.endswith("-hello-2") and (result.artifacts / "stdout").is_file()
    assert snapshot(outside) == victims
    assert {k: v for k, v in snapshot(root).items() if k in planted} == planted


# ------------------------------------------------------------- the history database


@FAST
@given(
    suffix=st.sampled_from(["", "-journal", "-wal", "-shm"]),
    kind=st.sampled_from(PLANTS),
    how=st.sampled_from(["default", "url"]),
)
def test_a_link_planted_at_the_history_database_or_its_journals_is_refused(tmp_path, suffix, kind, how):
    from lab.history import db as hdb

    work, outside = scene(tmp_path)
    results = work / "results"
    results.mkdir()
    if kind == "file" and suffix == "":
        return  # a database file that is not a database: the corrupt-file case (test_history_errors)
    if kind == "file":
        return  # a leftover journal file is SQLite's to read
    plant(results / f"{hdb.DEFAULT_FILE}{suffix}", kind, outside)
    url = hdb.resolve_url(None if how == "default" else f"sqlite:///{results / hdb.DEFAULT_FILE}", results)
    before, victims = snapshot(work), snapshot(outside)
    with pytest.raises(ConfigError) as exc:
        hdb.sqlite_folder(url)
        hdb.open_db(url).close()
    assert exc.value.exit_code == 2 and "\n" not in exc.value.message
    assert snapshot(work) == before and snapshot(outside) == victims


def test_the_history_database_is_made_in_a_real_results_folder(tmp_path):
    from lab.history import db as hdb

    work, outside = scene(tmp_path)
    url = hdb.resolve_url(None, work / "results")
    hdb.sqlite_folder(url)
    hdb.open_db(url).close()
    assert (work / "results" / hdb.DEFAULT_FILE).is_file() and not (work / "results").is_symlink()
