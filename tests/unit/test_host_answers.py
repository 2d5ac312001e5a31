"""What a host answers on the way to and before a sweep's runs is input: the free space its ``df`` prints, the
runner version it reports, the dataset manifests the preflight reads. An odd answer is one short line naming the
host, never a run started on it nor a line that quotes all of it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from lab.hosts import datasets
from lab.hosts import remote as rmt
from lab.sweep import node as nodes
from lab.sweep import preflight
from lab.sweep.hostrun import Settings
from tests.unit.localhost import local_host

HEADER = "Filesystem     1024-blocks      Used Available Capacity Mounted on\n"


def _node(stdout: str):
    """A node whose ``df`` prints ``stdout``."""
    remote = SimpleNamespace(run=lambda command, timeout=None: rmt.Result(command, 0, stdout, ""))
    return SimpleNamespace(
        layout=SimpleNamespace(base="/w/sweeps/s"), host=SimpleNamespace(name="h1"), call=lambda fn: fn(remote)
    )


def test_this_machines_df_is_read(tmp_path):
    host = local_host(tmp_path / "work")
    node = nodes.Node(host, rmt.connect(host), None, Settings(), "s1")
    assert nodes.free_space(node, 0) is None
    assert nodes.free_space(node, 10**12).startswith("disk full: ")


@pytest.mark.parametrize(
    "stdout, free",
    [
        (HEADER + "/dev/sda1 100000000 5000 99000000 1% /\n", None),
        (HEADER + "/dev/sda1 100000 5000 1000 99% /w\n", "disk full: 0 MB free"),
        (HEADER + "fs with spaces 100000000 5000 99000000 1% /mnt/a b\n", None),  # sshfs names, mount points
    ],
)
def test_a_df_line_gives_its_available_space(stdout, free):
    got = nodes.free_space(_node(stdout), 1024)
    assert got == free or got.startswith(free)


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "abc",
        "-1",
        "1e308",
        HEADER,
        HEADER + "/dev/x 100 1 -1 1% /",
        HEADER + "/dev/x 100 1 1e308 1% /",
        HEADER + "/dev/x 100 1 99999999999999999999999 1% /",
        HEADER + "/dev/x 100 1 NaN 1% /",
        HEADER + "/dev/x 100 1 5000000 1% /\nmore\n",
        "\x1b[31m" + "9" * 5000,
        " 1" * 50_000,
    ],
)
def test_an_odd_df_answer_never_lets_a_run_start(stdout):
    """It was taken as enough space: the run started on a host whose free space nobody knew."""
    got = nodes.free_space(_node(stdout), 1024)
    assert got is not None and got.startswith("free space unknown: `df -Pk /w/sweeps/s` on h1 printed ")
    assert len(got) < 250 and got.isprintable()


@pytest.mark.parametrize("version", ["v" * 900_000, {"v": [1] * 100_000}, ["2026.12-2"] * 50_000])
def test_a_manifests_catalogue_version_is_quoted_short(version):
    """The host's catalogue_version was quoted whole (its repr): a stale manifest made a dry-run line and the
    sweep's refusal of up to a megabyte."""
    cat = datasets.load_catalogue()
    manifest = {"kind": "gpulab-dataset", "dataset": "ml-20m", "spec_sha256": "0" * 64, "catalogue_version": version}
    why = preflight.judge(cat, "ml-20m", json.dumps(manifest))
    assert why.startswith("prepared from catalogue ") and why.endswith(f"catalogue {cat.version!r} (prepare it again)")
    assert len(why) < 200


@pytest.mark.parametrize(
    "said, code, start",
    [
        ("x" * 2_000_000, 0, "runner version is 'xxx"),
        ("\x1b]0;owned\x07" * 5000, 1, "the runner does not start with "),
    ],
)
def test_a_runner_version_answer_is_quoted_short(tmp_path, said, code, start):
    """The version a host's runner reported after the install was quoted whole (its repr), as was the line it
    failed with: a host's megabytes in one error line."""
    (tmp_path / "said").write_text(said)
    python = tmp_path / "python"  # the host's runner interpreter (gpulab_python), answering what it likes
    python.write_text(f"#!/bin/sh\ncat {tmp_path / 'said'} >&{2 if code else 1}\nexit {code}\n")
    python.chmod(0o755)
    host = local_host(tmp_path / "work", python=str(python))
    with rmt.connect(host) as remote, pytest.raises(rmt.RunError) as exc:
        rmt.ensure_runner(remote)
    assert exc.value.message.startswith(f"here: {start}") and len(exc.value.message) < 400


@pytest.mark.parametrize("said", ["0", "1", "\u0661\u0662\u0663", "99999999999999999999", "", "12 13", "-5"])
def test_a_launch_answer_that_is_no_process_id_is_a_failed_start(said):
    """`echo $!` answered 0 (or Arabic-Indic digits, which str.isdigit takes): the sweep kept that as the runner's
    pid, and `kill -0 0` on the host said the run was alive whatever had become of it."""
    remote = SimpleNamespace(run=lambda command, timeout=None: rmt.Result(command, 0, said + "\n", ""))
    layout = SimpleNamespace(base="/w/s", run_dir=lambda run: "/w/s/r1", launch_log=lambda run: "/w/s/r1.launch.log")
    node = SimpleNamespace(
        layout=layout,
        host=SimpleNamespace(name="h1"),
        install=SimpleNamespace(argv=lambda *a: ["python", "-m", "runner", *a]),
        call=lambda fn: fn(remote),
    )
    run = SimpleNamespace(run_id="r1", token="gl-1")
    with pytest.raises(rmt.RunError) as exc:
        nodes.launch(run, node, ["run", "ncf"])
    assert exc.value.message.startswith("h1: could not start r1: its shell printed '")
    ok = SimpleNamespace(
        **{
            **vars(node),
            "call": lambda fn: fn(SimpleNamespace(run=lambda c, timeout=None: rmt.Result(c, 0, "4242\n", ""))),
        }
    )
    assert nodes.launch(run, ok, ["run", "ncf"]) == "4242"


class _Home(rmt.LocalRemote):
    """This machine, answering ``printf %s "$HOME"`` as a host might."""

    def __init__(self, host, said: rmt.Result):
        super().__init__(host)
        self.said = said

    def _run(self, text, timeout):
        return self.said if text.startswith("printf %s") else super()._run(text, timeout)


@pytest.mark.parametrize(
    "code, home",
    [(0, ""), (124, ""), (0, "relative/home"), (0, "/home/a\x1b[2J"), (0, "/h/" + "a" * 5000), (1, "/home/a")],
)
def test_a_home_folder_answer_that_is_no_absolute_path_places_nothing(tmp_path, code, home):
    """An empty answer (or one a timeout cut: exit 124) made ~/.local/share/gpulab the host's
    /.local/share/gpulab: the runner was installed, and runs were written, at the root of the host."""
    remote = _Home(local_host("~/.local/share/gpulab"), rmt.Result("printf", code, home, ""))
    with pytest.raises(rmt.RunError) as exc:
        remote.expand("~/.local/share/gpulab")
    assert exc.value.message.startswith("here: its home folder ($HOME) is ") and len(exc.value.message) < 250
    with pytest.raises(rmt.RunError):
        rmt.ensure_runner(remote)  # nothing made anywhere
    assert _Home(local_host("~/w"), rmt.Result("printf", 0, str(tmp_path), "")).expand("~/w") == f"{tmp_path}/w"


def test_a_failed_commands_last_line_is_quoted_short(tmp_path):
    """A command that failed had the last line it printed quoted whole: a host's megabyte line in one error."""
    remote = rmt.connect(local_host(tmp_path))
    with pytest.raises(rmt.RunError) as exc:
        remote.run("head -c 2000000 /dev/zero | tr '\\0' x >&2; exit 3", timeout=60)
    assert exc.value.message.startswith("here: `head -c 2000000") and " exited 3: xxx" in exc.value.message
    assert len(exc.value.message) < 500


@pytest.mark.parametrize("cap, kept", [(1000, False), (1 << 20, True)])
def test_a_failed_runs_launch_log_is_copied_only_up_to_its_cap(tmp_path, monkeypatch, cap, kept):
    """A run that left no SHA256SUMS had its launch log copied whatever its size: a run that wrote without end
    filled the controller's disk with it."""
    from lab.core import limits

    monkeypatch.setattr(limits, "LOG_BYTES", cap)
    host = local_host(tmp_path / "work")
    node = nodes.Node(host, rmt.connect(host), None, Settings(), "s1")
    run = SimpleNamespace(run_id="r1")
    (tmp_path / "work" / "sweeps" / "s1" / "r1").mkdir(parents=True)
    (tmp_path / "work" / "sweeps" / "s1" / "r1.launch.log").write_text("x" * 5000 + "\nboom\n")
    dest = tmp_path / "results" / "here" / "r1"
    assert nodes.fetch_run(run, node, dest, 0) == ["no complete run directory (runner: boom)"]
    assert dest.with_name("r1.launch.log").exists() == kept


def test_a_failed_runs_last_words_are_read_from_the_logs_end_only(tmp_path):
    """`tail -n 5` of a log without a newline brought the whole log (a run's endless line) into memory and into
    the run's reason; the last 4 kB are read."""
    host = local_host(tmp_path / "work")
    node = nodes.Node(host, rmt.connect(host), None, Settings(), "s1")
    (tmp_path / "work" / "sweeps" / "s1" / "r1").mkdir(parents=True)
    (tmp_path / "work" / "sweeps" / "s1" / "r1.launch.log").write_text("y" * 3_000_000)
    (problem,) = nodes.fetch_run(SimpleNamespace(run_id="r1"), node, tmp_path / "results" / "here" / "r1", 0)
    assert problem.startswith("no complete run directory (runner: yyy") and len(problem) < 5000


def test_a_stop_answer_of_odd_digits_is_no_process():
    """The pids a host's shell listed were taken as int(word) for every word str.isdigit takes: 5000 digits were
    a ValueError out of stopping a run."""
    from lab.sweep import hostrun

    said = "123 " + "9" * 5000 + " \u0661\u0662 456\n"
    remote = SimpleNamespace(run=lambda argv, timeout=None, check=True: rmt.Result("kill", 0, said, ""))
    assert hostrun.tagged_alive(remote, "tok") == [123, 456]
