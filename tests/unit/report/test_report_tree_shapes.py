"""The shape of what the report reads from disk, as a hostile tree gives it: folders nested deeper than Python
recurses, inputs that are neither file nor folder, run directories whose SHA256SUMS would have the same bytes
hashed without end, one run directory copied under several names, FIFOs named like logs, a sweep.json that
plans more runs than a sweep can, or runs whose folder is a file. Each is a line naming the path, never a traceback, a hang or a run counted
twice."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from lab.core import limits
from lab.commands.report import report
from lab.core.errors import ConfigError
from lab.report.build import build_report
from lab.results import telemetry
from lab.results.logreader import read_runs
from report_logs import v05_run, write_lines
from runner import rundir as runner_rundir
from tests.unit.treeshapes import listed_not_searched, nested
from tests.unit.rundirs import write_run

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


def special_files(tmp_path) -> list[tuple[Path, str]]:
    """A FIFO, a socket, a device node and a link to /dev/zero, each named like a log, and what each is."""
    fifo, sock, dev, link = (tmp_path / n for n in ("fifo.log", "sock.log", "null.log", "zero.log"))
    os.mkfifo(fifo)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
    os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers (the tests run as root)
    link.symlink_to("/dev/zero")
    return [(fifo, "a FIFO"), (sock, "a socket"), (dev, "a character device"), (link, "a character device")]


def test_an_input_that_is_neither_file_nor_folder_is_named_for_what_it_is(tmp_path):
    """Was: listed as a folder, one line "cannot read (Not a directory)"."""
    for path, what in special_files(tmp_path):
        with pytest.raises(ConfigError) as exc:
            build_report([path], tmp_path / "out")
        assert str(exc.value) == f"{path}: is {what}, not a file or a folder; not read"
        assert exc.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_a_sums_file_that_names_one_big_file_many_times_is_refused_before_hashing(tmp_path, monkeypatch):
    """SHA256SUMS may name a file under several spellings (``x``, ``./x``): each was hashed up to
    limits.HASH_BYTES (64 GiB), so that one sparse file, costing no disk, listed a thousand times in the 1 MiB
    SHA256SUMS kept the report hashing for days. The files it lists now hold at most HASH_BYTES in all,
    counted before anything is hashed."""
    run = write_run(tmp_path / "sweep" / "r1" / "run1", mode="throughput", result={"samples_per_s": 10.0})
    with open(run / "ckpt.bin", "wb") as f:
        f.truncate(1 << 20)  # sparse: no byte is written
    digest = hashlib.sha256(bytes(1 << 20)).hexdigest()
    with open(run / "SHA256SUMS", "a") as f:
        f.writelines(f"{digest}  {name}\n" for name in ("ckpt.bin", "./ckpt.bin", ".//ckpt.bin"))
    listed = sum((run / n).stat().st_size for n in os.listdir(run) if n != "SHA256SUMS") + 2 * (1 << 20)
    monkeypatch.setattr(limits, "HASH_BYTES", 5 << 19)  # 2.5 MiB: the file once, not three times
    found = read_runs([tmp_path / "sweep"])
    assert found.runs == []
    assert [(s.source, s.reason) for s in found.skipped] == [
        (
            str(run),
            f"the files SHA256SUMS lists hold {listed} bytes, more than the {5 << 19} verified of one run "
            "directory; not read",
        )
    ]
    monkeypatch.setattr(limits, "HASH_BYTES", 4 << 20)
    assert [r.source for r in read_runs([tmp_path / "sweep"]).runs] == [str(run)]


def test_a_run_directory_copied_under_another_name_is_one_run(tmp_path):
    """r1/run1 and r1/RUN1 (or a sweep copied beside itself) are one run's bytes: the report counted it once
    per copy (its mean unchanged, its run count and spread not), where history.import knows the run by its
    SHA256SUMS and adds it once. Now the copies are skipped, each naming the run directory it copies."""
    sweep = tmp_path / "sweep"
    run = write_run(sweep / "r1" / "run1", mode="throughput", result={"samples_per_s": 10.0})
    shutil.copytree(run, sweep / "r1" / "RUN1")
    shutil.copytree(sweep / "r1", sweep / "R1")
    other = write_run(sweep / "r1" / "run2", seed=2, mode="throughput", result={"samples_per_s": 12.0})
    found = read_runs([sweep])
    first = sweep / "R1" / "RUN1"  # the first in the search's (sorted) order
    assert sorted(r.source for r in found.runs) == [str(first), str(other)]
    copy = f"a copy of {first} (the same SHA256SUMS and status.json): the run is counted once"
    assert sorted((s.source, s.reason) for s in found.skipped) == [
        (str(sweep / "R1" / "run1"), copy),
        (str(sweep / "r1" / "RUN1"), copy),
        (str(run), copy),
    ]


def test_a_fifo_socket_or_device_named_like_a_log_beside_good_logs_is_listed_as_skipped(tmp_path):
    """Was: passed over without a word (a FIFO result_39.txt of a round's unet3d folder left 39 runs and "too few
    runs" with no input skipped), while a link to /dev/zero in its place was listed. Now each is listed, saying
    what it is; one not named like a log (``control``) is passed over as any such file is."""
    root = tmp_path / "logs"
    write_lines(root / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    specials = special_files(root)
    os.mkfifo(root / "control")
    found = read_runs([root])
    assert [r.benchmark for r in found.runs] == ["gnmt"]
    reasons = {str(p): f"is {what}, not a regular file; not read" for p, what in specials if not p.is_symlink()}
    reasons[str(root / "zero.log")] = f"leads outside {root} (a symbolic link); not read"
    assert {s.source: s.reason for s in found.skipped} == reasons


def test_a_sweep_json_that_plans_more_runs_than_a_sweep_can_is_not_used(tmp_path):
    """Each planned run's folder is looked up and each missing one is a line: a 13 MB sweep.json planning
    250,000 runs took 42 s and wrote an 85 MB report of "planned run has no run directory". A sweep plans at
    most limits.PLANNED_RUNS; a sweep.json listing more is not used (one line), as one that is no JSON object."""
    sweep = tmp_path / "sweep"
    run = write_run(sweep / "r1" / "run1", mode="throughput", result={"samples_per_s": 10.0})
    too_many = limits.PLANNED_RUNS.hi + 1
    planned = [{"id": "run1", "host": "r1"}] + [{"id": f"x{i}", "host": "r1"} for i in range(too_many - 1)]
    (sweep / "sweep.json").write_text(json.dumps({"name": "sweep", "hosts": {"r1": {}}, "runs": planned}))
    found = read_runs([sweep])
    assert [r.source for r in found.runs] == [str(run)]
    assert [(s.source, s.reason) for s in found.skipped] == [
        (
            str(sweep / "sweep.json"),
            f"sweep.json lists {too_many} runs, more than the 10000 of one sweep; its run directories are read "
            "without host facts",
        )
    ]


def test_a_planned_run_whose_folder_is_a_file_or_a_fifo_is_listed(tmp_path):
    """A planned run with no run directory is listed with its sweep state; one whose name was taken by a file
    or a FIFO vanished without a word (it is no folder to search, nor a log). Now it is listed, saying what is
    there."""
    sweep = tmp_path / "sweep"
    run = write_run(sweep / "r1" / "run1", mode="throughput", result={"samples_per_s": 10.0})
    planned = [{"id": n, "host": "r1", "state": "done"} for n in ("run1", "run2", "run3", "run4")]
    (sweep / "sweep.json").write_text(json.dumps({"name": "sweep", "hosts": {"r1": {}}, "runs": planned}))
    os.mkfifo(sweep / "r1" / "run2")
    (sweep / "r1" / "run3").write_text("not a folder\n")
    found = read_runs([sweep])
    assert [r.source for r in found.runs] == [str(run)]
    assert sorted((s.source, s.reason) for s in found.skipped) == [
        (str(sweep / "r1" / "run2"), "planned run is a FIFO, not a run directory (sweep state: done)"),
        (str(sweep / "r1" / "run3"), "planned run is a file, not a run directory (sweep state: done)"),
        (str(sweep / "r1" / "run4"), "planned run has no run directory (sweep state: done)"),
    ]


@pytest.mark.parametrize(
    "status, why",
    [
        ({"gpus": [0] * 100_000, "world_size": 1}, "gpus [0, 0, 0, "),
        ({"gpus": [0, 1, 1]}, "gpus [0, 1, 1] is not a list of distinct GPU indices from 0 to 63"),
        ({"gpus": [0, 64]}, "gpus [0, 64] is not a list of distinct GPU indices from 0 to 63"),
        ({"gpus": [0], "nnodes": 10**9}, "nnodes: 1000000000 is not a whole number from 1 to 64 hosts"),
    ],
)
def test_a_status_json_that_lists_gpus_no_run_used_is_skipped(tmp_path, status, why):
    """status.json's gpus listing GPU 0 a hundred thousand times made a run of 100,000 GPUs in the report (its
    system "100000x ...", its scaling point), while history.import refused the same run. Now such a run
    directory is skipped in one line naming the field."""
    run = write_run(tmp_path / "sweep" / "r1" / "run1", mode="throughput", result={"samples_per_s": 1.0}, **status)
    found = read_runs([tmp_path / "sweep"])
    assert found.runs == []
    assert [s.source for s in found.skipped] == [str(run)]
    assert found.skipped[0].reason.startswith("status.json: ") and why in found.skipped[0].reason


def test_a_folder_that_may_be_listed_but_not_searched_is_a_skip_not_a_traceback(tmp_path, monkeypatch):
    """As a user other than root: a folder of mode r-- beside good logs, an input path below one, a run directory
    of mode r--. Was: PermissionError from pathlib's is_file() and exists() (a traceback, exit 1), and "no
    status.json" for a run directory whose status.json is there. Now each says "cannot read (Permission
    denied)" where it is."""
    root = tmp_path / "logs"
    write_lines(root / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    write_lines(root / "locked" / "b.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    run = write_run(root / "sweep" / "r1" / "run1", mode="throughput", result={"samples_per_s": 1.0})
    listed_not_searched(monkeypatch, root / "locked")
    listed_not_searched(monkeypatch, run)
    found = read_runs([root])
    assert [r.source for r in found.runs] == [str(root / "a.log")]
    assert sorted((s.source, s.reason) for s in found.skipped) == [
        (str(root / "locked" / "b.log"), "cannot read (Permission denied)"),
        (str(run), "status.json cannot read (Permission denied)"),
    ]
    for given in (root / "locked" / "b.log", root / "locked" / "nested" / "c.log"):
        with pytest.raises(ConfigError) as exc:
            report([given], out=tmp_path / "out")
        assert str(exc.value) == f"{given}: cannot read (Permission denied)"
        with pytest.raises(ConfigError) as exc:  # the default report folder beside it: refused, not a traceback
            report([given])
        assert "(Permission denied)" in str(exc.value)
    assert not (tmp_path / "out").exists() and not os.path.lexists(root / "locked" / "report")


def test_a_sweep_folder_that_may_not_be_searched_is_said_once_and_as_it_is(tmp_path, monkeypatch):
    """A planned run below a host folder of mode r-- was also "planned run has no run directory" beside what the
    search found there; a sweep.json that could not be read (a FIFO, too big, mode ---) was "not a readable JSON
    object". Now the run is said once, by the search, and sweep.json's line says why it was not read."""
    sweep = tmp_path / "sweep"
    run = write_run(sweep / "r1" / "run1", mode="throughput", result={"samples_per_s": 1.0})
    (sweep / "sweep.json").write_text(json.dumps({"name": "sweep", "runs": [{"id": "run1", "host": "r1"}]}))
    listed_not_searched(monkeypatch, sweep / "r1")
    found = read_runs([sweep])
    denied = "status.json cannot read (Permission denied); sweep state: unknown"
    assert [(s.source, s.reason) for s in found.skipped] == [(str(run), denied)]
    monkeypatch.undo()
    (sweep / "sweep.json").unlink()
    os.mkfifo(sweep / "sweep.json")
    found = read_runs([sweep])
    assert [r.source for r in found.runs] == [str(run)]
    assert [(s.source, s.reason) for s in found.skipped] == [
        (
            str(sweep / "sweep.json"),
            "sweep.json is a FIFO, not a regular file; not read; its run directories are read without host facts",
        )
    ]


@pytest.mark.parametrize("line", [b"x" * 200_000, bytes(1 << 20)])
def test_a_telemetry_line_longer_than_a_row_is_a_note_not_a_traceback(tmp_path, line):
    """telemetry.csv may hold 1 GiB (limits.TELEMETRY_BYTES): a line past csv's 128 KiB field limit was csv's
    traceback (exit 1), and one line of 1 GiB held 12 GiB while it was parsed. Now a line longer than a
    telemetry row leaves the file unparsed, said in the run's notes; the run is reported without energy."""
    run = write_run(tmp_path / "sweep" / "r1" / "run1", mode="throughput", result={"samples_per_s": 1.0})
    (run / "telemetry.csv").write_bytes(b"time_s,gpu,power_w\n0,0,100\n" + line + b"\n1,0,100\n")
    (run / "SHA256SUMS").unlink()
    runner_rundir.write_sums(run)
    (found,) = read_runs([tmp_path / "sweep"]).runs
    assert found.energy_j is None
    assert f"telemetry.csv has a line longer than the {telemetry.ROW_BYTES} bytes of a telemetry row: not read" in (
        found.notes
    )
