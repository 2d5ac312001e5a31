"""What Slurm's commands print is input too: scontrol, sbatch and scancel faked on PATH by small shell
scripts that print hostile records (free text that looks like keys, odd job and task ids, garbage on
stderr), and what gpulab then reads, decides and hands back to Slurm."""

from __future__ import annotations

import os
import shlex

import pytest

from lab.core.errors import ConfigError, HostError
from lab.hosts import slurm
from tests.unit.localhost import local_host


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """scontrol, sbatch, scancel and sinfo on PATH: each prints ``<name>.out`` (and ``<name>.err``), exits with
    ``<name>.rc`` (0 when absent) and appends its arguments, one line per call, to ``calls``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "sbatch", "scancel", "sinfo"):
        d = shlex.quote(str(tmp_path))
        script = bin_dir / name
        script.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "{name} $*" >> {d}/calls\n'
            f"[ -f {d}/{name}.out ] && cat {d}/{name}.out\n"
            f"[ -f {d}/{name}.err ] && cat {d}/{name}.err >&2\n"
            f"exit $(cat {d}/{name}.rc 2>/dev/null || echo 0)\n"
        )
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    class Fake:
        def say(self, name, out="", err="", rc=0):
            (tmp_path / f"{name}.out").write_text(out)
            (tmp_path / f"{name}.err").write_text(err)
            (tmp_path / f"{name}.rc").write_text(str(rc))

        @property
        def calls(self) -> list[str]:
            path = tmp_path / "calls"
            return path.read_text().splitlines() if path.exists() else []

    return Fake()


STAMP = " [root@2026-12-06T18:33:24]"


def test_a_reason_holding_key_like_text_stays_that_nodes_reason(fake):
    """An admin's reason ``x NodeName=sl-02 State=IDLE`` was read as a record of sl-02, idle (sl-01 vanished)."""
    fake.say(
        "scontrol",
        "NodeName=sl-01 Gres=gpu:2 State=IDLE+DRAIN Reason=x NodeName=sl-02 State=IDLE Gres=(null)" + STAMP + "\n"
        "NodeName=sl-02 Gres=gpu:2 State=MIXED Reason=(null)\n",
    )
    nodes = slurm.nodes()
    assert sorted(nodes) == ["sl-01", "sl-02"]
    assert nodes["sl-01"].drained and nodes["sl-01"].reason == "x NodeName=sl-02 State=IDLE Gres=(null)"
    assert nodes["sl-01"].gres == "gpu:2" and nodes["sl-01"].stamp == "2026-12-06T18:33:24"
    assert not nodes["sl-02"].drained and nodes["sl-02"].reason == ""


def test_an_admins_reason_that_holds_reason_gpulab_is_not_gpulabs(fake):
    """``maint Reason=gpulab: x`` was read as gpulab's reason: a release resumed, a drain overwrote an admin's."""
    fake.say("scontrol", "NodeName=sl-01 State=IDLE+DRAIN Reason=maint Reason=gpulab: x -> y" + STAMP + "\n")
    assert slurm.resume("sl-01") == "left: drained by someone else (maint Reason=gpulab: x -> y)"
    assert slurm.drain("sl-01", "gpulab: ECC: bad") == "left: drained by someone else (maint Reason=gpulab: x -> y)"
    assert not [c for c in fake.calls if "update" in c]  # nothing changed on any node


def test_a_queued_task_is_cancelled_by_its_array_task_id(fake):
    """The sweep cancels a task queued for a drained node as ``<job>_<task>``: scancel was never called."""
    slurm.cancel(["12_0", "13"])
    assert fake.calls == ["scancel 12_0 13"]


@pytest.mark.parametrize("job", ["", "-1", "12_", "_0", "12_[1-4]", "12_0;x", "--me", "١٢", "12_٣", 12, None])
def test_nothing_but_job_and_task_ids_reaches_scancel(fake, job):
    slurm.cancel([job])
    assert fake.calls == []


def job_record(task="0", state="RUNNING", job="7", extra=""):
    return (
        f"JobId=9 ArrayJobId={job} ArrayTaskId={task} JobName=gpulab-S UserId=me(1000) JobState={state} "
        f"Reason=None ExitCode=0:0 NodeList=sl-01{extra}\n"
    )


@pytest.mark.parametrize(
    "task, want",
    [
        ("²", []),  # a digit of another script: int() refused it (a traceback)
        ("٣", []),
        ("0-4294967294%1", list(range(slurm.MAX_TASK + 1))),  # was spelled out: 4 billion ids, memory gone
        ("4294967295", []),
        ("1-x", []),
        ("", []),
        ("2,5-6", [2, 5, 6]),
    ],
)
def test_array_task_ids_are_ascii_and_bounded(fake, task, want):
    fake.say("scontrol", job_record(task, "PENDING"))
    assert sorted(t for _, t in slurm.tasks(["7"])) == want


@pytest.mark.parametrize("state", ["", "running", "RUN NING", "$(reboot)", "0"])
def test_a_task_record_without_a_readable_state_is_not_known(fake, state):
    """A record without a JobState was a task of state '': finished, and the sweep's reading of it failed
    (IndexError in SlurmUnitWorker._finish); now it is a task Slurm does not know."""
    fake.say("scontrol", job_record("0", state) + job_record("1", "COMPLETED"))
    assert list(slurm.tasks(["7"])) == [("7", 1)]


def test_a_task_record_with_a_missing_state_key_is_not_known(fake):
    fake.say("scontrol", "JobId=9 ArrayJobId=7 ArrayTaskId=0 Reason=None ExitCode=0:0\n")
    assert slurm.tasks(["7"]) == {}


@pytest.mark.parametrize("job", ["١٢", "-1", "", "7_0", 7])
def test_job_ids_asked_of_scontrol_are_ascii_digits(fake, job):
    with pytest.raises(ConfigError, match="is not a job id"):
        slurm.tasks([job])
    assert fake.calls == []


@pytest.mark.parametrize("out", ["١٢\n", "12;cluster;x\n", "-1\n", "\n", "12\n13\n"])
def test_sbatch_answers_that_are_not_a_job_id(fake, out):
    fake.say("sbatch", out)
    if out.startswith("12;"):
        assert slurm.submit("#!/bin/sh\n", []) == "12"
    else:
        with pytest.raises(HostError, match="not a job id"):
            slurm.submit("#!/bin/sh\n", [])


def test_a_failing_command_is_one_short_line_of_what_it_said(fake):
    """A failing command's stderr was the error as it came ('str: ' before it, megabytes long, a terminal's
    escape sequences raw); now one line of at most 200 characters of it, control characters escaped."""
    fake.say("scontrol", err="scontrol: error: \x1b[2J bad\nnext line\n" + "x" * 1_000_000, rc=1)
    with pytest.raises(HostError) as exc:
        slurm.run(["scontrol", "update", "nodename=sl-01", "state=resume"])
    msg = exc.value.message
    assert msg.startswith("slurm: scontrol update nodename=sl-01: scontrol: error: \\x1b[2J bad next line xx")
    assert len(msg) < 300 and "\x1b" not in msg and msg.endswith("...")
    fake.say("sbatch", "Submitted batch job \x1b]0;x\x07 12\n" + "y" * 1000)
    with pytest.raises(HostError, match=r"^slurm: sbatch answered 'Submitted batch job \\x1b\]0;x") as exc:
        slurm.submit("#!/bin/sh\n", [])
    assert len(exc.value.message) < 120 and "\x1b" not in exc.value.message and "str:" not in exc.value.message


@pytest.fixture
def nvml_down(monkeypatch):
    """The node's runner health: NVML does not answer. A GPU node fails on it; a CPU host passes."""
    from lab.validate import nodehealth

    monkeypatch.setattr(nodehealth, "gather", lambda python, path: {"nvidia": "NVML: driver not loaded"})
    monkeypatch.setattr(
        nodehealth,
        "verdict",
        lambda doc, expect_gpus, gpus=0: ("GPU present", "NVML: driver not loaded", None) if expect_gpus else None,
    )
    return nodehealth


@pytest.mark.parametrize(
    "listing, said",
    [
        ("NodeName=sl-02 Gres=gpu:2 State=IDLE Reason=(null)\n", "slurm: no node sl-01 in this cluster"),
        ("", "slurm: no node sl-01 in this cluster"),  # scontrol printed nothing (cut short)
        ("NodeName=sl-01 Gres=gpu:t4:3x(S:0) State=IDLE\n", "slurm: node sl-01: Gres 'gpu:t4:3x(S:0)' holds no GPU"),
        ("NodeName=sl-01 Gres=gpu:t4:\u00b2 State=IDLE\n", "slurm: node sl-01: Gres 'gpu:t4:\u00b2' holds no GPU"),
        ("NodeName=sl-01 Gres=gpu State=IDLE\n", "slurm: node sl-01: Gres 'gpu' holds no GPU count"),
    ],
)
@pytest.mark.parametrize("prolog", [False, True])
def test_node_health_never_passes_a_node_whose_gpus_it_cannot_read(fake, nvml_down, capsys, listing, said, prolog):
    """The node's GPUs unknown (not in scontrol's listing, a Gres count that is no number) were none: a GPU
    node whose NVML is down passed as a CPU host ('²' was a ValueError traceback); now one line, no PASS."""
    fake.say("scontrol", listing)
    rc = nvml_down.main(["--node", "sl-01"] + (["--prolog"] if prolog else []))
    out = capsys.readouterr().out.splitlines()
    assert out == [f"gpulab health sl-01: {out[0].split(': ', 1)[1]}"] and said in out[0], out
    assert "PASS" not in out[0] and rc == (1 if prolog else 0)
    assert not [c for c in fake.calls if "update" in c]


def test_node_health_drains_the_node_named_and_no_other(fake, nvml_down, capsys):
    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:t4:2(S:0) State=IDLE Reason=(null)\n")
    assert nvml_down.main(["--node", "sl-01"]) == 0
    assert capsys.readouterr().out.startswith("gpulab health sl-01: FAIL: gpulab: GPU present: NVML")
    assert [c for c in fake.calls if "update" in c] == [
        "scontrol update nodename=sl-01 state=drain reason=gpulab: GPU present: NVML: driver not loaded"
    ]


@pytest.fixture
def worker(tmp_path):
    """A Slurm unit of sweep S on one local host, 'sl-01'."""
    return make_worker(tmp_path / "work")


def make_worker(workdir):
    import threading

    from lab.hosts import remote
    from lab.sweep.hostrun import Settings
    from lab.sweep.node import Node
    from lab.sweep.slurmworker import SlurmUnitWorker
    from lab.sweep.state import Sweep

    class Progress:
        def __init__(self):
            self.lines = []

        def print(self, line):
            self.lines.append(line)

        def status(self, unit, text):
            self.lines.append(text)

    workdir.mkdir()
    host = local_host(workdir, "sl-01")
    sweep = Sweep.open(workdir.parent / "results" / "S", "S", [], {})
    node = Node(host, remote.LocalRemote(host), remote.RunnerInstall("python3", "", "0", False), Settings(), "S")
    settings = Settings(stop_grace_s=0)
    return SlurmUnitWorker(sweep, [node], [], settings, Progress(), threading.Event())


@pytest.mark.parametrize("finished_on_host", [False, True])
def test_a_job_id_of_sweep_json_that_is_another_job_now_is_never_adopted_or_cancelled(fake, worker, finished_on_host):
    """sweep.json's slurm_job 5_0, and Slurm's job 5 is now someone else's (ids are reused, or the file was
    written by hand): it was adopted as this sweep's, waited for, and Ctrl-C cancelled it (scancel 5)."""
    from lab.sweep.plan import PlannedRun

    run = PlannedRun("sl-01", "ncf", 0, 1, scale="tiny", token="gl-0123456789abcdef", slurm_job="5_0")
    if finished_on_host:  # the run left a finished folder: collected, but job 5 is still not this sweep's
        done = worker.nodes[0].layout.run_dir(run)
        os.makedirs(done)
        open(f"{done}/SHA256SUMS", "w").close()
    fake.say("scontrol", job_record("0", "RUNNING", job="5").replace("JobName=gpulab-S", "JobName=alice-train"))
    assert worker._adopt_all([run]) == ([run] if finished_on_host else [])
    assert worker.jobs == set() and worker._unfinished() == []
    worker._interrupt([])
    assert not [c for c in fake.calls if c.startswith("scancel")]
    fake.say("scontrol", job_record("0", "RUNNING", job="5"))  # this sweep's own job 5: adopted as before
    assert worker._adopt_all([run]) == [run] and worker.jobs == {"5"} and worker._unfinished() == ["5"]


def test_a_controller_that_does_not_answer_is_not_a_job_gone(fake):
    """scontrol show job failing for any reason was read as the job gone past MinJobAge: a slurmctld restart
    ended every watched run ('Slurm no longer knows task') and a resume submitted again runs still running."""
    fake.say("scontrol", err="slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n", rc=1)
    with pytest.raises(HostError, match=r"^slurm: scontrol show job 7: slurm_load_jobs error: Unable to contact"):
        slurm.tasks(["7"])
    fake.say("scontrol", out="garbage\n", rc=2)
    with pytest.raises(HostError, match=r"^slurm: scontrol show job 7: exit 2$"):
        slurm.tasks(["7"])
    fake.say("scontrol", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert slurm.tasks(["7"]) == {}


@pytest.mark.parametrize("state", ["", "State= ", "State=idle", "State=IDLE;x", "State=$(reboot)"])
def test_a_node_without_a_readable_state_is_not_planned_on(fake, state):
    """A record without a readable State was a node up and free: a sweep planned on it (a drained node whose
    state the listing did not give); now it is left out like a drained one."""
    from lab.sweep import driver

    fake.say("scontrol", f"NodeName=sl-01 Gres=gpu:2 {state} Reason=(null)\nNodeName=sl-02 State=MIXED\n")
    nodes = slurm.nodes()
    assert nodes["sl-01"].drained and not nodes["sl-02"].drained
    hosts = [local_host("/tmp/w", n) for n in ("sl-01", "sl-02")]
    assert list(driver.slurm_held(hosts, {})) == ["sl-01"]


@pytest.mark.parametrize(
    "state", ["IDLE", "MIXED", "ALLOCATED+COMPLETING", "IDLE+CLOUD+POWERED_DOWN", "IDLE~", "IDLE+?"]
)
def test_a_node_up_is_still_planned_on(fake, state):
    fake.say("scontrol", f"NodeName=sl-01 State={state} Reason=(null)\n")
    assert not slurm.nodes()["sl-01"].drained


def test_a_health_failure_with_control_characters_drains_with_them_shown(fake, monkeypatch, capsys):
    """runner health's last stderr line holding a NUL went into the drain's scontrol argument: a ValueError
    traceback (embedded null byte), the node not drained; an escape sequence went into Slurm's reason raw."""
    from lab.validate import nodehealth

    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:1 State=IDLE Reason=(null)\n")
    monkeypatch.setattr(nodehealth, "gather", lambda p, q: {"_error": "runner health exited 1: a\x00b \x1b[2J c"})
    assert nodehealth.main(["--node", "sl-01"]) == 0
    assert [c for c in fake.calls if "update" in c] == [
        "scontrol update nodename=sl-01 state=drain reason=gpulab: health: runner health exited 1: a\\x00b \\x1b[2J c"
    ]
    assert "FAIL" in capsys.readouterr().out


def test_a_reason_that_is_not_utf8_is_read(fake, tmp_path):
    """An admin's reason typed in Latin-1 ('L\\xfcfter') made every listing of nodes a UnicodeDecodeError."""
    (tmp_path / "scontrol.out").write_bytes(b"NodeName=sl-01 State=IDLE+DRAIN Reason=L\xfcfter defekt" + STAMP.encode())
    node = slurm.nodes()["sl-01"]
    assert node.drained and node.reason == "L\ufffdfter defekt" and not node.ours


@pytest.mark.parametrize(
    "printed, said",
    [
        (b"[" * 100_000, "runner health printed no usable JSON document"),
        (b'{"kind": "\xff\xfe"', "runner health printed no usable JSON document"),
        (b"\xff" * 10, "runner health printed no usable JSON document"),
        (b"5", "runner health: not a health document"),  # JSON, but no object: TypeError
        (b'"_error"', "runner health: not a health document"),  # a text holding "_error": TypeError
    ],
)
def test_node_health_reads_odd_runner_output_as_a_failure(fake, tmp_path, capsys, printed, said):
    """runner health printing JSON nested past Python's recursion limit, bytes that are not UTF-8, or JSON that
    is no object was a traceback of the node's health check (RecursionError, UnicodeDecodeError, TypeError):
    never judged, never drained."""
    from lab.validate import nodehealth

    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:1 State=IDLE Reason=(null)\n")
    (tmp_path / "printed").write_bytes(printed)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ncat {shlex.quote(str(tmp_path / 'printed'))}\n")
    python.chmod(0o755)
    assert nodehealth.main(["--node", "sl-01", "--runner-python", str(python)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"gpulab health sl-01: FAIL: gpulab: health: {said}")
    assert [c for c in fake.calls if "update" in c]  # drained, with that reason


def test_a_task_id_list_that_repeats_a_range_is_read_once(fake, monkeypatch):
    """An ArrayTaskId of one range repeated ('0-9999,0-9999,...', 700 kB of it: 18 s a look at the queue)
    spelled the range out at every repeat; each id is spelled out once now."""
    spelled = []

    def counted(*args):
        spelled.append(len(range(*args)))
        return range(*args)

    monkeypatch.setattr(slurm, "range", counted, raising=False)  # the module's range, as _task_ids calls it
    fake.say("scontrol", job_record(",".join(["0-9999"] * 100) + ",3-1,9998-10005", "PENDING"))
    assert len(slurm.tasks(["7"])) == slurm.MAX_TASK + 1 and sum(spelled) == slurm.MAX_TASK + 1


@pytest.mark.parametrize("folder, literal", [("w%u", "w%%u"), ("50%", "50%%"), ("a\\%j", "a\\%j"), ("plain", "plain")])
def test_the_output_folder_handed_to_sbatch_is_the_workdirs_own(tmp_path, folder, literal):
    """A workdir holding '%' went into --output as a pattern: /scratch/%u/... was the user's folder (Slurm wrote
    outside the sweep's), %j the job's; now the folder's own % is %% (a backslash turns patterns off)."""
    from lab.sweep.plan import PlannedRun

    w = make_worker(tmp_path / folder)
    opts = w._options([PlannedRun("sl-01", "ncf", 0, 1, scale="tiny", limit_s=60)])
    base = f"{tmp_path}/{folder}/sweeps/S"
    assert f"--chdir={base}" in opts
    assert f"--output={tmp_path}/{literal}/sweeps/S/slurm-%A_%a.out" in opts


@pytest.mark.parametrize("sep", ["\u2028", "\x1e", "\r", "\x85", "\x0c"])
def test_a_reason_holding_a_line_separator_starts_no_record(fake, sep):
    """str.splitlines ended a record at a reason's U+2028, \\x1e, \\r...: 'x<sep>NodeName=sl-02 State=IDLE' was a
    record of its own, and sl-02, drained, was read as idle (the later record of a name won)."""
    fake.say(
        "scontrol",
        "NodeName=sl-02 State=IDLE+DRAIN Reason=broken" + STAMP + "\n"
        f"NodeName=sl-01 State=IDLE+DRAIN Reason=x{sep}NodeName=sl-02 State=IDLE\n",
    )
    nodes = slurm.nodes()
    assert nodes["sl-02"].drained and nodes["sl-02"].reason == "broken"
    assert nodes["sl-01"].drained and nodes["sl-01"].reason.startswith("x\\")


def test_free_text_read_from_slurm_has_no_control_characters(fake):
    """A node's reason (an admin's text), a job's reason, node list and exit code went raw into the sweep's
    lines, sweep.json and the terminal (an escape sequence that clears it); now escaped as \\x1b."""
    fake.say("scontrol", "NodeName=sl-01 State=IDLE+DRAIN\x07 Reason=\x1b[2Jgone" + STAMP + "\n")
    node = slurm.nodes()["sl-01"]
    assert node.reason == "\\x1b[2Jgone" and node.state == "IDLE+DRAIN\\x07" and node.drained
    fake.say("scontrol", job_record("0", "TIMEOUT", extra=" \x1b]0;t\x07").replace("Reason=None", "Reason=\x1b[2J"))
    task = slurm.tasks(["7"])[("7", 0)]
    assert (task.reason, task.nodes) == ("\\x1b[2J", "sl-01 \\x1b]0;t\\x07")


def test_a_refused_submission_fails_the_units_runs_with_slurms_line_once(fake, worker):
    """sbatch refusing the array failed each run with 'slurm: slurm: sbatch ...': the prefix said twice."""
    from lab.sweep.plan import PlannedRun

    fake.say("sbatch", err="sbatch: error: Batch job submission failed: Invalid partition name specified\n", rc=1)
    run = PlannedRun("sl-01", "ncf", 0, 1, scale="tiny", limit_s=60)
    worker.runs = [run]
    worker.progress.unit_done = lambda unit, how: worker.progress.lines.append(how)
    worker()
    assert run.state == "failed" and run.reason == (
        "slurm: sbatch --parsable --job-name=gpulab-S: sbatch: error: Batch job submission failed: "
        "Invalid partition name specified"
    )
    assert worker.progress.lines[-1] == "failed" and [c.split()[0] for c in fake.calls] == ["sbatch"]


def test_node_health_says_one_line_whatever_the_node_name(fake, monkeypatch, capsys):
    """A node name that is no Slurm name (SLURMD_NODENAME, --node) was printed as it came: a newline in it
    made two lines, an escape sequence went to the terminal."""
    from lab.validate import nodehealth

    monkeypatch.setenv("SLURMD_NODENAME", "a\nb\x1b[2J")
    assert nodehealth.main([]) == 0 and nodehealth.main(["--prolog"]) == 1
    assert (
        capsys.readouterr().out.splitlines()
        == ["gpulab health a\\nb\\x1b[2J: slurm: 'a\\nb\\x1b[2J' is not a node name"] * 2
    )
    assert fake.calls == []


@pytest.mark.parametrize("content", [b"\x7fELF\x02\x01\x01garbage", b"#!/nonexistent/sh\n"])
def test_a_slurm_command_that_cannot_start_is_one_line(fake, tmp_path, content):
    """scontrol on PATH that cannot be run here (another architecture, a broken #! line) was an OSError
    traceback of every Slurm step (Exec format error, No such file or directory)."""
    (tmp_path / "bin" / "scontrol").write_bytes(content)
    with pytest.raises(HostError, match=rf"^slurm: {tmp_path}/bin/scontrol could not be started: \w"):
        slurm.nodes()


@pytest.mark.parametrize("field", ["Comment", "Extra"])
def test_reason_text_in_a_nodes_comment_is_no_reason(fake, field):
    """A node down without a reason whose Comment (an admin's free text, printed after the Reason) read
    'x Reason=gpulab: y' was a node gpulab drained: a release resumed a node gpulab never drained."""
    fake.say("scontrol", f"NodeName=sl-01 State=DOWN+NOT_RESPONDING {field}=x Reason=gpulab: y -> z\n")
    node = slurm.nodes()["sl-01"]
    assert node.drained and node.reason == "" and not node.ours
    assert slurm.resume("sl-01") == "left: drained by someone else ()"
    assert not [c for c in fake.calls if "update" in c]
    fake.say("scontrol", f"NodeName=sl-01 State=IDLE+DRAIN Reason=gpulab: y{STAMP} {field}=x Reason=z\n")
    assert slurm.nodes()["sl-01"].reason == "gpulab: y"  # its own reason, before the free text


def test_a_node_listed_twice_is_one_line_not_a_guess(fake):
    """A line break in a node's Comment printed a record of its own ('NodeName=sl-02 State=IDLE'): the later
    record of a name won, so drained sl-02 read as idle. Slurm lists a node once: now one line, no guess."""
    fake.say(
        "scontrol",
        "NodeName=sl-02 State=IDLE+DRAIN Reason=broken" + STAMP + "\n"
        "NodeName=sl-01 State=IDLE Comment=x\nNodeName=sl-02 State=IDLE\n",
    )
    with pytest.raises(HostError, match=r"^slurm: scontrol show node lists node sl-02 twice"):
        slurm.nodes()


def health_doc(listed: int) -> dict:
    """runner health of a node whose NVML answers and lists ``listed`` GPUs, each of them healthy."""
    gpu = {"name": "Tesla T4", "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0}}
    return {
        "kind": "gpulab-health",
        "schema": 1,
        "collected_at": "2026-12-07T18:00:00+00:00",
        "boot_id": "6a1f5d2e-0000-4000-8000-000000000001",
        "uptime_s": 1000.0,
        "nvidia": None,
        "gpu_count": listed,
        "gpus": [dict(gpu, index=i, uuid=f"GPU-{i}", serial=f"13200{i}") for i in range(listed)],
        "xid": {"source": "dmesg", "error": None, "events": []},
    }


@pytest.mark.parametrize("listed", [0, 3])
def test_node_health_fails_a_node_whose_nvml_lists_fewer_gpus_than_slurm_hands_out(fake, monkeypatch, capsys, listed):
    """Gres gpu:4 and NVML listing 3 GPUs (one fallen off the bus), or none, passed: the judge only asked that
    NVML answer. Slurm would hand out a GPU that is gone; now each of the node's GPUs must be listed."""
    from lab.validate import nodehealth

    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:t4:4(S:0) State=IDLE Reason=(null)\n")
    monkeypatch.setattr(nodehealth, "gather", lambda p, q: health_doc(listed))
    assert nodehealth.main(["--node", "sl-01", "--prolog"]) == 1
    said = f"gpulab health sl-01: FAIL: gpulab: GPU count: GPU {listed} lost: NVML no longer lists it"
    assert capsys.readouterr().out.startswith(said)
    assert len([c for c in fake.calls if "update nodename=sl-01 state=drain" in c]) == 1
    monkeypatch.setattr(nodehealth, "gather", lambda p, q: health_doc(4))
    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:t4:4(S:0) State=IDLE Reason=(null)\n")
    assert nodehealth.main(["--node", "sl-01", "--prolog"]) == 0
    assert capsys.readouterr().out == "gpulab health sl-01: PASS\n"


def test_mig_instances_are_not_gpus_nvml_must_list(fake, monkeypatch, capsys):
    from lab.validate import nodehealth

    fake.say("scontrol", "NodeName=sl-01 Gres=gpu:1g.10gb:7(S:0),gpu:a100:1 State=IDLE Reason=(null)\n")
    monkeypatch.setattr(nodehealth, "gather", lambda p, q: health_doc(1))
    assert nodehealth.main(["--node", "sl-01"]) == 0 and capsys.readouterr().out == "gpulab health sl-01: PASS\n"
