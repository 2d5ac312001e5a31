"""`invoke sweep` / `invoke collect` against the SSH test lab, driven through the CLI.

Real SSH (Fabric, strict host keys), the real runner installed on each host and
real tiny CPU ncf runs. Faults are real ones: sshd killed mid-sweep, a
workload process killed with SIGSEGV, a runner frozen with SIGSTOP, a full
file system, Ctrl-C to the controller, a corrupted local copy, unknown and
changed host keys, shell metacharacters in a host variable and a workload name.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

from lab.results import checksums
from tests.testlab import controllers
from tests.testlab.fixtures import lab_required
from tests.testlab.lab import pids_mentioning
from tests.testlab.util import LabError, wait_until

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
EVIL_WORKDIR = "/var/lib/gl wd;touch /tmp/pwned-workdir;$(touch /tmp/pwned-subst)"
SMALL_WORKDIR = "/var/lib/gl-small"
LAB_VARS = {"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0, "gpulab_stack": "current"}
RUNNER = "[r]unner run"  # a pgrep pattern that does not match pgrep's own shell


def invoke_cmd() -> list[str]:
    return [str(INVOKE)] if INVOKE.exists() else [sys.executable, "-m", "invoke"]


def env_for(results: Path, **settings) -> dict:
    # these tests sweep tiny ncf runs (the declared defaults (lab.core.settings) are the full-scale study)
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        INVOKE_GPULAB_RESULTS=str(results),
        INVOKE_GPULAB_WORKLOADS="ncf",
        INVOKE_GPULAB_SCALE="tiny",
    )
    for key, value in settings.items():
        env[f"INVOKE_GPULAB_SWEEP_{key.upper()}"] = str(value)
    return env


def sweep(args, results: Path, *, timeout=900, **settings) -> subprocess.CompletedProcess:
    return subprocess.run(
        invoke_cmd() + ["sweep", *args],
        cwd=ROOT,
        env=env_for(results, **settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_sweep(args, results: Path, **settings) -> subprocess.Popen:
    """`invoke sweep ARGS` started in the background, its output (both streams) on ``.stdout``."""
    return subprocess.Popen(
        invoke_cmd() + ["sweep", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env_for(results, **settings),
    )


def state(results: Path, name: str) -> dict:
    doc = json.loads((results / name / "sweep.json").read_text())
    return {(r["host"], r["run_id"]): r for r in doc["runs"]}


def runner_pids(lab, name) -> list[str]:
    return lab.exec(name, f"pgrep -f '{RUNNER}' || true").stdout.split()


def worker_pids(lab, name) -> list[str]:
    return lab.exec(name, "pgrep -f '[r]unner.worker' || true").stdout.split()


@pytest.fixture(scope="module")
def lab(testlab):
    return testlab(
        4,
        prefix="sw",
        all_vars=LAB_VARS,
        host_vars={"sw-02": {"gpulab_workdir": EVIL_WORKDIR}, "sw-04": {"gpulab_workdir": SMALL_WORKDIR}},
    )


@pytest.fixture(autouse=True)
def hosts_as_found(lab):
    """After each test every host answers SSH, no workload is left frozen and no controller runs: a test that
    failed after killing sw-03's sshd (or freezing a workload) left the host so, and each later test of the file
    failed on it too (one failure was eight in CI, five of them waiting ten minutes each)."""
    yield
    # a controller a failed test left running (a passing one waits for its own): it holds the hosts' locks
    for pid in pids_mentioning(f"sweep --inventory {lab.inventory}"):  # /proc read here: no procps needed
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for name in lab.names:
        lab.exec(name, "pkill -CONT -f '[r]unner.worker' || true")
        if not lab.reachable(name, 2.0):
            lab.start_sshd(name)


def test_sweep_survives_a_lost_host_resumes_and_collects_again(lab, tmp_path):
    results = tmp_path / "results"
    args = ["--inventory", str(lab.inventory), "--host", "sw-01,sw-02,sw-03", "--seeds", "1", "--name", "s1"]
    proc = start_sweep(args, results, reconnect_s=2)
    # kill sw-03's sshd while its run is going: the run goes on there, the controller loses the host
    wait_until(lambda: runner_pids(lab, "sw-03") or proc.poll() is not None, "a run on sw-03")
    lab.kill_sshd("sw-03")
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 1, out
    runs = state(results, "s1")
    rid = "ncf-ttt-tiny-cpu-s1"
    assert runs[("sw-01", rid)]["state"] == "complete" and runs[("sw-02", rid)]["state"] == "complete", out
    lost = runs[("sw-03", rid)]
    assert lost["state"] == "failed" and lost["reason"].startswith("host lost: "), lost
    assert f"FAILED sw-03 {rid}: failed: host lost" in out
    # the results tree: one verified run directory per complete run, beside sweep.json
    for h in ("sw-01", "sw-02"):
        d = results / "s1" / h / rid
        assert sorted(p.name for p in d.iterdir()) == [
            "SHA256SUMS",
            "manifest.json",
            "mllog.log",
            "status.json",
            "stdout.log",
            "telemetry.csv",
        ]
        assert checksums.verify(d) == []
        assert json.loads((d / "status.json").read_text())["outcome"] == runs[(h, rid)]["outcome"]
    # the host variable with shell metacharacters was a path, nothing more
    assert lab.exec("sw-02", f"test -f '{EVIL_WORKDIR}/sweeps/s1/{rid}/status.json'", check=False).returncode == 0
    assert lab.exec("sw-02", "ls /tmp/pwned-workdir /tmp/pwned-subst", check=False).returncode != 0

    # resume: sshd back, the same name resumes only the failed run; the run went on on sw-03 while the
    # controller had lost it, and finished: the resume adopts it (fetched, verified, counted), never reruns it
    lab.start_sshd("sw-03")
    wait_until(lambda: not runner_pids(lab, "sw-03"), "the orphaned run on sw-03 to end")
    on_host = json.loads(lab.exec("sw-03", f"cat /var/lib/gpulab/sweeps/s1/{rid}/status.json").stdout)
    before = {h: (results / "s1" / h / rid / "status.json").stat().st_mtime_ns for h in ("sw-01", "sw-02")}
    p = sweep(args, results, reconnect_s=2)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 already complete (resumed)" in p.stdout
    assert f"[sw-03] {rid}: finished on the host before this resume; fetching it" in p.stdout
    assert "[sw-01]" not in p.stdout and "[sw-02]" not in p.stdout
    assert {h: (results / "s1" / h / rid / "status.json").stat().st_mtime_ns for h in before} == before
    resumed = state(results, "s1")[("sw-03", rid)]
    assert resumed["state"] == "complete" and resumed["attempts"] == 1, resumed
    assert checksums.verify(results / "s1" / "sw-03" / rid) == []
    assert json.loads((results / "s1" / "sw-03" / rid / "status.json").read_text()) == on_host

    # a corrupted local copy: `invoke collect` fetches it again
    (results / "s1" / "sw-01" / rid / "mllog.log").write_text("corrupted\n")
    c = subprocess.run(
        invoke_cmd() + ["collect", str(results / "s1"), "--inventory", str(lab.inventory)],
        cwd=ROOT,
        env=env_for(results),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert c.returncode == 0, c.stdout + c.stderr
    assert "1 run(s) fetched, 3 verified, 0 problem(s)" in c.stdout
    assert checksums.verify(results / "s1" / "sw-01" / rid) == []
    for h in lab.names[:3]:
        assert runner_pids(lab, h) == []


def test_sshd_killed_while_a_run_is_being_started_loses_the_host_and_the_resume_adopts_the_run(lab, tmp_path):
    """sw-03's sshd killed while the command that starts its run is still open: the runner starts all the same,
    the exit status never comes. That is a lost host (it was read as a failed start, "`mkdir ...` exited -1"),
    and the resume fetches what the host ran instead of running it again. The launch is held open by an `rm` of
    sw-03 that waits while it removes a launch log, so sshd dies at that moment every time."""
    held, wrapper = "/tmp/gl-launch-held", "/usr/local/bin/rm"  # before /usr/bin in sshd's PATH
    script = f'#!/bin/sh\ncase "$*" in *.launch.log) touch {held}; until [ -e {held}.go ]; do sleep 0.1; done;; esac\n'
    lab.exec(
        "sw-03",
        f"/bin/rm -f {held} {held}.go && cat > {wrapper} && chmod +x {wrapper}",
        input=script + 'exec /bin/rm "$@"\n',
    )
    results = tmp_path / "results"
    args = ["--inventory", str(lab.inventory), "--host", "sw-03", "--seeds", "1", "--name", "held"]
    rid = "ncf-ttt-tiny-cpu-s1"
    try:
        proc = start_sweep(args, results, reconnect_s=2)
        wait_until(
            lambda: lab.exec("sw-03", f"test -e {held}", check=False).returncode == 0 or proc.poll() is not None,
            "the launch on sw-03",
        )
        lab.kill_sshd("sw-03")
        lab.exec("sw-03", f"touch {held}.go")
        out, _ = proc.communicate(timeout=300)
    finally:
        lab.exec("sw-03", f"/bin/rm -f {wrapper} {held} {held}.go")
    assert proc.returncode == 1, out
    lost = state(results, "held")[("sw-03", rid)]
    assert lost["state"] == "failed" and lost["reason"].startswith("host lost: "), lost
    assert "exited -1" not in out

    lab.start_sshd("sw-03")
    wait_until(lambda: not runner_pids(lab, "sw-03"), "the run on sw-03 to end")
    assert lab.exec("sw-03", f"test -f /var/lib/gpulab/sweeps/held/{rid}/SHA256SUMS", check=False).returncode == 0
    p = sweep(args, results, reconnect_s=2)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"[sw-03] {rid}: finished on the host before this resume; fetching it" in p.stdout
    resumed = state(results, "held")[("sw-03", rid)]
    assert resumed["state"] == "complete" and resumed["attempts"] == 1, resumed
    assert checksums.verify(results / "held" / "sw-03" / rid) == []


def test_a_host_that_refuses_a_copy_is_a_failed_command_not_a_lost_host(lab, tmp_path):
    """SFTP refused by a host that answers (here its disk is full): a RunError naming the host and the file,
    not a HostError (the sweep took it for a lost host, reconnected for gpulab.sweep.reconnect_s and failed every
    run left on it; validate called it "reachable"); the connection goes on."""
    from lab.core.errors import HostError, RunError
    from lab.hosts import inventory
    from lab.hosts import remote as rmt

    tiny = "/var/lib/gl-tiny"
    lab.exec("sw-04", f"mkdir -p {tiny} && mount -t tmpfs -o size=1m tmpfs {tiny} && echo x > {tiny}/file")
    try:
        with rmt.connect(inventory.load(lab.inventory).host("sw-04")) as r:
            with pytest.raises(RunError) as full:
                r.put(io.BytesIO(b"x" * (4 << 20)), f"{tiny}/big")
            assert not isinstance(full.value, HostError)
            assert full.value.message.startswith(f"sw-04 ({r.host.address}): cannot write {tiny}/big: ")
            assert r.run(["cat", f"{tiny}/file"]).stdout == "x\n"
    finally:
        lab.exec("sw-04", f"umount {tiny}")


def test_crash_hang_and_full_disk_are_recorded_with_reasons(lab, tmp_path):
    results = tmp_path / "results"
    # sw-04's workdir is a 4 MiB file system: the runner fits, a run's free-space check does not pass
    lab.exec("sw-04", f"mkdir -p {SMALL_WORKDIR} && mount -t tmpfs -o size=4m tmpfs {SMALL_WORKDIR}")
    args = [
        "--inventory",
        str(lab.inventory),
        "--host",
        "sw-01,sw-02,sw-04",
        "--seeds",
        "1",
        "--name",
        "s2",
        "--timeout",
        "0.4",
    ]
    proc = start_sweep(args, results, kill_margin_s=1, stop_grace_s=2, min_free_mb=64)
    # sw-01: the workload process crashes; sw-02: the whole run freezes (the runner cannot stop it itself)
    wait_until(lambda: worker_pids(lab, "sw-01") or proc.poll() is not None, "a workload process on sw-01")
    lab.exec("sw-01", "pkill -SEGV -f '[r]unner.worker'")
    wait_until(lambda: worker_pids(lab, "sw-02") or proc.poll() is not None, "a workload process on sw-02")
    lab.exec("sw-02", f"pkill -STOP -f '{RUNNER}'; pkill -STOP -f '[r]unner.worker'")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1, out
    rid = "ncf-ttt-tiny-cpu-s1"
    runs = state(results, "s2")
    crash, hang, full = runs[("sw-01", rid)], runs[("sw-02", rid)], runs[("sw-04", rid)]
    assert crash["state"] == "failed" and crash["outcome"] == "failed", crash
    assert crash["reason"].startswith("run failed: workload processes exited with code -11"), crash
    assert hang["state"] == "failed" and hang["reason"].startswith("timed out: still running"), hang
    assert hang["reason"].endswith("its processes were killed"), hang
    assert full["state"] == "failed" and full["reason"].startswith("disk full: "), full
    assert f"in {SMALL_WORKDIR}/sweeps/s2 on sw-04, 64 MB needed" in full["reason"]
    # what the crashed run wrote was collected and verifies; the frozen run's partial files are kept
    assert checksums.verify(results / "s2" / "sw-01" / rid) == []
    assert (results / "s2" / "sw-02" / rid / "manifest.json").is_file()
    for name in ("sw-01", "sw-02", "sw-04"):
        assert runner_pids(lab, name) == [] and worker_pids(lab, name) == [], name
    assert all(f"{h} {rid}" in out for h in ("FAILED sw-01", "FAILED sw-02", "FAILED sw-04"))


@pytest.fixture(scope="module", params=controllers.VERSIONS)
def controller_python(request) -> str:
    """The controller's interpreter, one of each Python gpulab supports (tests/testlab/controllers.py)."""
    try:
        return controllers.python_for(request.param)
    except controllers.NoInterpreter as exc:  # the machine has none: a visible skip
        pytest.skip(str(exc))
    except LabError as exc:  # the environment could not be made (venv, pip): an error in CI, never a skip
        if lab_required():
            pytest.fail(f"GPULAB_REQUIRE_LAB is set but {exc}", pytrace=False)
        pytest.skip(str(exc))


def test_ctrl_c_stops_every_remote_run_and_saves_the_state(lab, tmp_path, controller_python):
    """Ctrl-C to `invoke sweep` run by each of Python 3.10-3.13: every running run on the hosts is stopped
    (SIGTERM, then SIGKILL), the state is saved, exit 130."""
    results = tmp_path / "results"
    version = subprocess.run(
        [controller_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    sweep_name = "s3-py" + version.replace(".", "")
    args = ["--inventory", str(lab.inventory), "--host", "sw-01,sw-03", "--seeds", "2", "--name", sweep_name]
    # as from a terminal: SIGINT at its default even when the tests run in the background (where the shell
    # starts them with SIGINT ignored, and Python would then never raise KeyboardInterrupt)
    proc = subprocess.Popen(
        [controller_python, "-m", "invoke", "sweep", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env_for(results, stop_grace_s=10),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # a tiny run lasts seconds: hold each host's first workload process as soon as it appears, so that
    # Ctrl-C finds the first run going on both hosts however the two happen to be scheduled
    held = set()

    def hold_both():
        for name in {"sw-01", "sw-03"} - held:
            if lab.exec(name, "pkill -STOP -f '[r]unner.worker' && echo held || true").stdout.strip():
                held.add(name)
        return len(held) == 2 or proc.poll() is not None

    wait_until(hold_both, "workload processes on both hosts")
    for name in held:
        lab.exec(name, "pkill -CONT -f '[r]unner.worker' || true")
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, f"Python {version}: {out}"
    assert "interrupted" in out
    for name in ("sw-01", "sw-03"):
        assert runner_pids(lab, name) == [] and worker_pids(lab, name) == [], name
    runs = state(results, sweep_name)
    assert {r["state"] for (h, rid), r in runs.items() if rid.endswith("s1")} == {"interrupted"}
    assert {r["state"] for (h, rid), r in runs.items() if rid.endswith("s2")} == {"planned"}


def test_a_killed_controller_resumed_reruns_nothing_that_finished_on_the_host(lab, tmp_path):
    """SIGKILL to the controller while a run goes on each host (the laptop slept, its SSH dropped), then the
    same command again: sw-01's run had finished meanwhile and is fetched; sw-03's is still going and is
    waited for, then fetched; neither starts again."""
    results = tmp_path / "results"
    rid = "ncf-ttt-tiny-cpu-s1"
    args = ["--inventory", str(lab.inventory), "--host", "sw-01,sw-03", "--seeds", "1", "--name", "k1"]
    proc = start_sweep(args, results)
    held = set()

    def hold_both():  # freeze each host's workload as soon as it appears: both runs are mid-way
        for name in {"sw-01", "sw-03"} - held:
            if lab.exec(name, "pkill -STOP -f '[r]unner.worker' && echo held || true").stdout.strip():
                held.add(name)
        return len(held) == 2 or proc.poll() is not None

    wait_until(hold_both, "workload processes on both hosts")
    assert proc.poll() is None, "the sweep ended before it could be killed"
    proc.kill()  # SIGKILL: no cleanup, no state saved at the end
    proc.communicate(timeout=60)
    saved = state(results, "k1")
    assert {r["state"] for r in saved.values()} == {"running"}, saved
    runs_dir = "/var/lib/gpulab/sweeps/k1"
    lab.exec("sw-01", "pkill -CONT -f '[r]unner.worker'")  # sw-01's run ends before the resume
    wait_until(lambda: not runner_pids(lab, "sw-01"), "sw-01's run to end on its own")
    host_status = {"sw-01": json.loads(lab.exec("sw-01", f"cat {runs_dir}/{rid}/status.json").stdout)}

    p = start_sweep(args, results)
    # sw-03's run is still going (frozen) when the resume takes over the lock the killed controller left
    wait_until(
        lambda: (
            f"pid={p.pid} " in lab.exec("sw-03", "cat /var/lib/gpulab/sweep.lock/owner", check=False).stdout
            or p.poll() is not None
        ),
        "the resume to take over sw-03's lock",
    )
    assert runner_pids(lab, "sw-03"), "sw-03's run ended before the resume found it"
    lab.exec("sw-03", "pkill -CONT -f '[r]unner.worker'")
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out
    assert f"[sw-01] {rid}: finished on the host before this resume; fetching it" in out
    assert f"[sw-03] {rid}: still running on the host since before this resume; waiting for it" in out
    host_status["sw-03"] = json.loads(lab.exec("sw-03", f"cat {runs_dir}/{rid}/status.json").stdout)
    runs = state(results, "k1")
    for h in ("sw-01", "sw-03"):
        r = runs[(h, rid)]
        assert r["state"] == "complete" and r["attempts"] == 1 and "adopted on resume" in r["reason"], r
        d = results / "k1" / h / rid
        assert checksums.verify(d) == []
        assert json.loads((d / "status.json").read_text()) == host_status[h]  # the host's own first run
        # nothing was started again: no earlier attempt moved aside on the host, none kept here
        assert lab.exec(h, f"ls {runs_dir}").stdout.split() == [rid, f"{rid}.launch.log"]
        assert not (results / "k1" / ".attempts").exists()
        assert runner_pids(lab, h) == [] and worker_pids(lab, h) == []


def test_unknown_changed_and_unreachable_hosts_are_refused_and_bad_names_rejected(lab, tmp_path):
    results = tmp_path / "results"
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    h = lab.hosts
    known = tmp_path / "known_hosts"
    known.write_text(f"sw-03,{h['sw-03'].address} {wrong}\n")  # changed key; sw-01 unknown
    inv = yaml.safe_load(lab.inventory.read_text().replace(str(lab.known_hosts), str(known)))
    inv["all"]["hosts"]["ghost"] = {"ansible_host": str(lab.net.network_address + 200)}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    lab.exec("sw-01", "rm -rf /var/lib/gpulab")
    p = sweep(
        ["--inventory", str(path), "--host", "sw-01,sw-03,ghost", "--seeds", "1", "--name", "keys"],
        results,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    runs = state(results, "keys")
    rid = "ncf-ttt-tiny-cpu-s1"
    assert "host key verification failed: host unknown to" in runs[("sw-01", rid)]["reason"]
    assert "host key verification failed: the key it offers differs from" in runs[("sw-03", rid)]["reason"]
    assert "unreachable" in runs[("ghost", rid)]["reason"]
    assert known.read_text() == f"sw-03,{h['sw-03'].address} {wrong}\n"  # never added nor rewritten
    assert lab.exec("sw-01", "test -e /var/lib/gpulab", check=False).returncode != 0  # nothing ran there

    # a workload name with shell metacharacters: rejected before any host is touched
    p = sweep(
        [
            "--inventory",
            str(lab.inventory),
            "--host",
            "sw-01",
            "--workloads",
            "ncf;touch /tmp/pwned-name",
            "--seeds",
            "1",
            "--name",
            "evil",
        ],
        results,
        timeout=120,
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["gpulab: --workloads: 'ncf;touch /tmp/pwned-name' is not a workload name"]
    assert lab.exec("sw-01", "ls /tmp/pwned-name /var/lib/gpulab", check=False).returncode != 0
    assert not (results / "evil").exists()


def test_dry_run_touches_nothing(lab, tmp_path):
    results = tmp_path / "results"
    lab.exec("sw-03", "rm -rf /var/lib/gpulab")
    p = sweep(
        ["--inventory", str(lab.inventory), "--host", "sw-03", "--seeds", "mlperf", "--name", "dry", "--dry-run"],
        results,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == "100 runs planned for sweep dry on 1 unit(s); nothing started (--dry-run)"
    assert not results.exists()
    assert lab.exec("sw-03", "test -e /var/lib/gpulab", check=False).returncode != 0


def test_multi_node_run_with_one_rendezvous(lab, tmp_path):
    results = tmp_path / "results"
    p = sweep(
        ["--inventory", str(lab.inventory), "--host", "sw-01,sw-03", "--nodes", "2", "--seeds", "1", "--name", "mn"],
        results,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    rid = "ncf-ttt-tiny-2node-cpu-s1"
    (run,) = state(results, "mn").values()
    assert run["nodes"] == ["sw-01", "sw-03"] and run["state"] == "complete", run
    for rank, h in enumerate(("sw-01", "sw-03")):
        d = results / "mn" / h / rid
        assert checksums.verify(d) == []
        st = json.loads((d / "status.json").read_text())
        assert (st["nnodes"], st["node_rank"], st["world_size"]) == (2, rank, 2)
        man = json.loads((d / "manifest.json").read_text())
        assert f"--rdzv-endpoint={lab.hosts['sw-01'].address}:29400" in man["launch"]
