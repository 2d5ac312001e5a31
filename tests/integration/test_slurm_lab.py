"""gpulab on the test lab's real Slurm (Debian's slurmctld, slurmd and munge 22.05: tests/testlab/slurm.py).

One Slurm lab per session (the ``slurmlab`` fixture): compute hosts node-01 and node-02, the
controller host beside them, the Slurm commands of this machine pointed at it by SLURM_CONF.

* The README's "On a Slurm cluster" commands, read from the README and run as written: a tiny ncf
  sweep as Slurm job arrays on both nodes (its report has the rows of the SSH backend's report of the
  same sweep), node-02's health check failing (the stand-in NVML reports uncorrected ECC errors) and
  draining it with gpulab's reason, `sinfo -R`, `invoke quarantine`, a release that asks for a
  validate and a forced one that resumes the node.
* Ctrl-C of the controller cancels the jobs it submitted, and an admin's job keeps running.
* An admin's own drain reason is never touched (health check, release); a sweep leaves a drained node
  out and finishes on the other.
* A unit's later array waits (afterany) for its earlier one; a GPU run's array asks Slurm for its GPUs
  (``--gres``), which a node without them refuses.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

from lab.results import checksums
from tests.testlab import fakenvml
from tests.testlab.util import reaped, wait_until

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
RID = "ncf-ttt-tiny-cpu-s1"
BAD_GPU = [{"name": "Tesla T4", "memory_mib": 15360, "ecc_uncorrected": 3}]
ECC = "gpulab: ECC uncorrected: GPU 0 3 uncorrected ECC error(s)"


def invoke_cmd() -> list[str]:
    return [str(INVOKE)] if INVOKE.exists() else [sys.executable, "-m", "invoke"]


def readme() -> tuple[str, list[str]]:
    """(the settings block, the commands) of the README's "On a Slurm cluster"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## On a Slurm cluster\n", 1)[1].split("\n## ", 1)[0]
    settings = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return settings, [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def env_for(lab, results: Path, **extra) -> dict:
    env = {
        **os.environ,
        **lab.cluster.env,
        "PYTHONPATH": str(ROOT),
        "INVOKE_GPULAB_INVENTORY": str(lab.inventory),
        "INVOKE_GPULAB_RESULTS": str(results),
        "INVOKE_GPULAB_SLURM_POLL_S": "0.5",
    }
    env.pop("INVOKE_GPULAB_HISTORY_URL", None)
    env.update(extra)
    return env


def invoke(lab, results: Path, *args, timeout=600, **extra) -> subprocess.CompletedProcess:
    p = subprocess.run(
        invoke_cmd() + ["-r", str(ROOT), *args],
        cwd=results.parent,
        capture_output=True,
        text=True,
        env=env_for(lab, results, **extra),
        timeout=timeout,
    )
    print(f"$ invoke {shlex.join(args)} -> {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-2000:]}")
    return p


def node(lab, name) -> dict:
    out = lab.cluster.command("scontrol", "show", "node", "-o", name).stdout
    return dict(re.findall(r"(?:^|\s)(State|Reason)=(.*?)(?=\s[A-Za-z/:]+=|$)", out.strip()))


def break_gpu(lab, name, tmp_path) -> None:
    """The node's stand-in NVML reports a GPU with uncorrected ECC errors; gpulab's health check on it."""
    lab.cluster.install_health(name, ROOT)
    fakenvml.install(lab, name, fakenvml.build(tmp_path), json.dumps(BAD_GPU))


def fix_gpu(lab, name) -> None:
    """The GPU fixed: NVML gone again (a CPU host: the check passes)."""
    lab.exec(name, "rm -f /usr/lib/libnvidia-ml.so.1 /etc/gpulab-testlab/fake-gpus.json")


def report_rows(results: Path, sweep: str) -> list[dict]:
    """The report's records without what depends on the wall clock (minutes, energy, dates)."""
    doc = json.loads((results / sweep / "report" / "summary.json").read_text())
    timed = re.compile(r"minutes|seconds|cv_pct|_std|_s$|time|energy|joule|watt|throughput|samples_per|date|at$")
    return [{k: v for k, v in r.items() if not timed.search(k)} for r in doc["records"]]


def test_the_readme_on_a_slurm_cluster_and_the_ssh_backend_agree(slurmlab, tmp_path):
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    settings, commands = readme()
    cfg = tmp_path / "invoke.yaml"
    cfg.write_text(settings)
    ran = []
    for line in commands:
        argv = shlex.split(line)
        if argv[0] == "invoke":
            p = invoke(lab, results, "-f", str(cfg), *argv[1:])
        else:
            if argv[:2] == ["sinfo", "-R"]:  # between the sweep and sinfo -R: node-02's GPU fails its check
                break_gpu(lab, "node-02", tmp_path)
                wait_until(lambda: node(lab, "node-02").get("Reason", "").startswith(ECC), "the health drain", 90)
                fix_gpu(lab, "node-02")  # the hardware fixed: the check passes again, and resumes nothing
                lab.exec("node-02", ": > /var/log/slurm/gpulab-health.log")  # (a check under way may still fail)
                wait_until(
                    lambda: (
                        "gpulab health node-02: PASS"
                        in lab.exec("node-02", "cat /var/log/slurm/gpulab-health.log").stdout
                    ),
                    "a passing check after the fix",
                    90,
                )
                assert "DRAIN" in node(lab, "node-02")["State"]
            p = lab.cluster.command(*argv, check=False)
            print(f"$ {line} -> {p.returncode}\n{p.stdout}{p.stderr}")
        ran.append((argv, p))
    assert [a[:2] for a, _ in ran] == [
        ["invoke", "sweep"],
        ["sinfo", "-R"],
        ["invoke", "quarantine"],
        ["invoke", "quarantine.release"],
        ["invoke", "quarantine.release"],
    ]
    sweep, sinfo, listed, refused, forced = (p for _, p in ran)

    # the sweep: one array per node, both runs complete, run directories verified, task ids in sweep.json
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    assert "sweep on-slurm: 2 runs on 2 host(s) as Slurm jobs" in sweep.stdout
    assert len(re.findall(r"Slurm job (\d+): 1 run\(s\) \(CPU\)", sweep.stdout)) == 2
    doc = json.loads((results / "on-slurm" / "sweep.json").read_text())
    assert doc["options"]["backend"] == "slurm"
    jobs = {r["host"]: r["slurm_job"] for r in doc["runs"]}
    assert [r["state"] for r in doc["runs"]] == ["complete", "complete"] and set(jobs) == {"node-01", "node-02"}
    assert all(re.fullmatch(r"\d+_0", j) for j in jobs.values()) and len(set(jobs.values())) == 2
    for h in ("node-01", "node-02"):
        assert checksums.verify(results / "on-slurm" / h / RID) == []

    # what the admin sees, and gpulab's view of it
    assert sinfo.returncode == 0 and re.search(r"^gpulab: ECC uncorrec\s+root\s+\S+\s+node-02$", sinfo.stdout, re.M)
    assert listed.returncode == 0 and "node-02 " in listed.stdout and "Slurm idle+drain: " + ECC in listed.stdout
    assert "(gpulab's drain)" in listed.stdout and "node-01" not in listed.stdout
    assert refused.returncode == 1 and "quarantine release: node-02: Slurm node drained by gpulab" in refused.stderr
    assert forced.returncode == 0 and forced.stdout.strip() == "node-02: Slurm node resumed", forced.stdout
    assert wait_until(lambda: node(lab, "node-02")["State"] == "IDLE", "node-02 to be idle", 30)
    assert lab.cluster.command("sinfo", "-R", "-h").stdout.strip() == ""

    # the same sweep through gpulab's own SSH controller: the report has the same rows (same score rule)
    ssh = invoke(
        lab,
        results,
        "sweep",
        "--backend",
        "ssh",
        "--host",
        "node-01,node-02",
        "--workloads",
        "ncf",
        "--scale",
        "tiny",
        "--seeds",
        "1",
        "--name",
        "on-ssh",
    )
    assert ssh.returncode == 0, ssh.stdout + ssh.stderr
    for name in ("on-slurm", "on-ssh"):
        rep = invoke(lab, results, "report", str(results / name), "--format", "json")
        assert rep.returncode == 0, rep.stderr
    slurm_rows, ssh_rows = report_rows(results, "on-slurm"), report_rows(results, "on-ssh")
    assert slurm_rows and slurm_rows == ssh_rows
    assert slurm_rows[0]["runs"] == 2 and slurm_rows[0]["score_basis"].startswith("mean of 2")

    # resume: nothing left to submit
    again = invoke(lab, results, "-f", str(cfg), *shlex.split(commands[0])[1:])
    assert again.returncode == 0 and "2 already complete (resumed)" in again.stdout
    assert not re.search(r"Slurm job \d", again.stdout)


def test_ctrl_c_cancels_the_sweeps_jobs_and_nothing_else(slurmlab, tmp_path):
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    theirs = lab.cluster.command(
        "sbatch",
        "--parsable",
        "--nodelist=node-01",
        "--job-name=admins-own",
        "--output=/dev/null",
        "--wrap",
        "sleep 600",
    ).stdout.strip()
    proc = subprocess.Popen(
        invoke_cmd()
        + [
            "-r",
            str(ROOT),
            "sweep",
            "--backend",
            "slurm",
            "--workloads",
            "ncf",
            "--scale",
            "tiny",
            "--seeds",
            "1",
            "--name",
            "cc",
        ],
        cwd=tmp_path,
        env=env_for(lab, results),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def ours_running():
        out = lab.cluster.command("squeue", "-h", "-n", "gpulab-cc", "-o", "%i %T").stdout.split("\n")
        return sum(1 for line in out if line.endswith(" RUNNING")) == 2

    with reaped(proc):
        wait_until(lambda: ours_running() or proc.poll() is not None, "both tasks running", 120)
        wait_until(lambda: lab.exec("node-01", "pgrep -f '[r]unner run' || true").stdout.strip(), "the runner", 60)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    print(out)
    assert proc.returncode == 130, out
    queue = lab.cluster.command("squeue", "-h", "-o", "%i %j %T").stdout
    assert "gpulab-cc" not in queue and f"{theirs} admins-own RUNNING" in queue, queue
    runs = json.loads((results / "cc" / "sweep.json").read_text())["runs"]
    assert [r["state"] for r in runs] == ["interrupted", "interrupted"], runs
    assert all(r["reason"].startswith("interrupted (Ctrl-C); Slurm job ") for r in runs)
    for h in ("node-01", "node-02"):
        wait_until(
            lambda h=h: not lab.exec(h, "pgrep -f '[r]unner run' || true").stdout.strip(),
            f"the runner on {h} to end",
            30,
        )
    lab.cluster.command("scancel", theirs)


def test_an_admins_drain_is_kept_and_a_sweep_finishes_on_the_other_node(slurmlab, tmp_path):
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    admin = "swapping a disk (ticket 4711)"
    lab.cluster.command("scontrol", "update", "nodename=node-01", "state=drain", f"reason={admin}")
    for h in ("node-01", "node-02"):
        break_gpu(lab, h, tmp_path)
    wait_until(lambda: node(lab, "node-02").get("Reason", "").startswith(ECC), "node-02's health drain", 90)
    wait_until(
        lambda: (
            "left: drained by someone else"
            in lab.exec("node-01", "cat /var/log/slurm/gpulab-health.log 2>/dev/null || true").stdout
        ),
        "node-01's health check",
        90,
    )
    assert node(lab, "node-01")["Reason"].startswith(admin + " [root@")
    # a release of the admin's node: not gpulab's to resume
    p = invoke(lab, results, "quarantine.release", "node-01", "--force", INVOKE_GPULAB_SWEEP_BACKEND="slurm")
    assert p.returncode == 2 and "node-01 is not quarantined" in p.stderr, p.stderr
    assert node(lab, "node-01")["Reason"].startswith(admin + " [root@")
    listed = invoke(lab, results, "quarantine", INVOKE_GPULAB_SWEEP_BACKEND="auto")
    assert f"node-01                  Slurm idle+drain: {admin}" in listed.stdout and "node-02" in listed.stdout

    # the admin is done: node-01 fixed and resumed; node-02 stays drained by gpulab; the sweep runs on node-01
    fix_gpu(lab, "node-01")  # and no check of the broken GPU still under way when the admin resumes it
    wait_until(lambda: not lab.cluster.checking("node-01"), "node-01's health check in progress to end", 90)
    lab.cluster.command("scontrol", "update", "nodename=node-01", "state=resume")
    p = invoke(
        lab,
        results,
        "sweep",
        "--backend",
        "slurm",
        "--workloads",
        "ncf",
        "--scale",
        "tiny",
        "--seeds",
        "1",
        "--name",
        "one-left",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"QUARANTINE node-02: skipped: quarantined (Slurm: idle+drain: {ECC}" in p.stdout
    (run,) = json.loads((results / "one-left" / "sweep.json").read_text())["runs"]
    assert run["host"] == "node-01" and run["state"] == "complete" and run["slurm_job"], run
    assert "DRAIN" in node(lab, "node-02")["State"]


def test_gpulabs_prolog_drains_a_failing_node_before_a_job_starts_there(slurmlab, tmp_path):
    """The health check as a prolog (``--prolog``): on node-02, whose stand-in NVML reports uncorrected ECC
    errors, it drains the node with gpulab's reason (Slurm keeps it: the node was drained before the prolog
    failed) and the job does not run there (Slurm requeues it, held); on healthy node-01 the job runs."""
    lab = slurmlab
    lab.cluster.reset()
    for h in ("node-01", "node-02"):
        lab.cluster.install_health(h, ROOT, program=False, prolog=True)
    fakenvml.install(lab, "node-02", fakenvml.build(tmp_path), json.dumps(BAD_GPU))
    jobs = {
        h: lab.cluster.command(
            "sbatch", "--parsable", f"--nodelist={h}", "--output=/dev/null", "--wrap", "touch /tmp/ran-$SLURM_JOB_ID"
        ).stdout.strip()
        for h in ("node-01", "node-02")
    }

    def job(h):
        out = lab.cluster.command("scontrol", "show", "job", "-o", jobs[h]).stdout
        return dict(re.findall(r"(?:^|\s)(JobState|Reason)=(\S+)", out))

    assert wait_until(lambda: job("node-01")["JobState"] == "COMPLETED", "the job on node-01", 60)
    assert lab.exec("node-01", f"test -e /tmp/ran-{jobs['node-01']} && echo ran").stdout.strip() == "ran"
    wait_until(lambda: job("node-02")["Reason"] == "launch_failed_requeued_held", "the job on node-02 held", 60)
    assert job("node-02")["JobState"] == "PENDING"
    assert node(lab, "node-02")["Reason"].startswith(ECC) and "DRAIN" in node(lab, "node-02")["State"]
    assert lab.exec("node-02", f"test -e /tmp/ran-{jobs['node-02']} || echo not-run").stdout.strip() == "not-run"
    log = lab.exec("node-02", "cat /var/log/slurm/gpulab-health.log").stdout
    assert f"gpulab health node-02: FAIL: {ECC}" in log and ": drained" in log, log
    lab.cluster.reset()


def test_the_slurm_node_role_sets_up_a_node_and_its_health_check_idempotently(slurmlab, tmp_path):
    """playbooks/roles/slurm_node on node-01 with real Ansible: Slurm's node side as gpulab manages it (the
    lab's munge key and slurm.conf, gres.conf of the probed GPUs; no systemd here: services off) and the
    health check from a bundle, as HealthCheckProgram and as a prolog; a second run changes nothing, the
    node stays idle, the check passes."""
    from lab.hosts.ansible import run_playbook
    from tests.testlab import slurm as lab_slurm

    lab = slurmlab
    lab.cluster.reset()
    from lab.hosts import runnerdist

    bundle = runnerdist.health_bundle(tmp_path / "health")  # what `invoke provision` hands the role
    playbook = tmp_path / "slurm.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Slurm node",
                    "hosts": "node-01",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                    "roles": ["slurm_node"],
                }
            ]
        )
    )
    extravars = {
        "gpulab_slurm": True,
        "slurm_node_manage": True,
        "slurm_node_services": False,
        "slurm_node_munge_key_file": str(lab.cluster.dir / "munge.key"),
        "slurm_node_conf_file": str(lab.cluster.dir / "hosts-slurm.conf"),
        "slurm_node_health_bundle": str(bundle),
        "slurm_node_prolog": lab_slurm.PROLOG,
        "slurm_node_pip_args": ["--no-index", "--find-links", lab.find_links_url, "--trusted-host", lab.controller],
    }
    envvars = {**lab.ansible_env(), "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks" / "roles")}
    runs = [
        run_playbook(
            playbook,
            lab.inventory,
            extravars=extravars,
            artifacts_root=tmp_path / "artifacts",
            quiet=True,
            envvars=envvars,
        )
        for _ in range(2)
    ]
    assert runs[0].ok and runs[0].changed >= 1, runs[0].hosts
    assert runs[1].ok and runs[1].changed == 0, runs[1].hosts  # idempotent
    assert lab.exec("node-01", "cat /etc/slurm/gres.conf").stdout.startswith("# Ansible managed")
    assert lab.exec("node-01", "stat -c '%U %a' /etc/munge/munge.key").stdout.split() == ["munge", "400"]
    lab.exec("node-01", "/usr/local/sbin/gpulab-slurm-health")  # what slurmd runs
    assert "gpulab health node-01: PASS" in lab.exec("node-01", "cat /var/log/slurm/gpulab-health.log").stdout
    prolog = lab.exec("node-01", f"cat {lab_slurm.PROLOG}; env -i {lab_slurm.PROLOG} && echo prolog-ok").stdout
    assert "nodehealth --prolog" in prolog and prolog.endswith("prolog-ok\n"), prolog  # slurmd gives no PATH
    assert node(lab, "node-01")["State"] == "IDLE"

    # the audit's part (playbooks/audit.yml imports it): node-01 has everything, node-02 lacks the health check
    from lab.hosts import provision, readback

    audit = tmp_path / "audit.yml"
    audit.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Audit",
                    "hosts": "node-01,node-02",
                    "gather_facts": True,
                    "gather_subset": ["min"],
                    "tasks": [
                        {
                            "name": "Read Slurm's node side",
                            "ansible.builtin.import_role": {"name": "slurm_node", "tasks_from": "audit"},
                        }
                    ],
                }
            ]
        )
    )
    res = run_playbook(
        audit, lab.inventory, extravars=extravars, artifacts_root=tmp_path / "artifacts", quiet=True, envvars=envvars
    )
    assert res.ok and res.changed == 0, res.hosts
    assert readback.slurm_drift(res.result("node-01", provision.SLURM_TASK)) == []
    drift = readback.slurm_drift(res.result("node-02", provision.SLURM_TASK))
    assert {"component": "slurm health check", "expected": "installed", "found": "missing"} in drift, drift
    assert all(d["component"].startswith("slurm health") for d in drift), drift
    lab.cluster.reset()


def test_a_multi_node_run_takes_its_rendezvous_from_the_slurm_allocation(slurmlab, tmp_path):
    """--nodes 2 through Slurm: one job of two nodes, srun starts one runner per node, the runner's own
    rendezvous on the job's first node (its rank and count from SLURM_NODEID and SLURM_NNODES)."""
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    p = invoke(
        lab,
        results,
        "sweep",
        "--backend",
        "slurm",
        "--host",
        "node-01,node-02",
        "--nodes",
        "2",
        "--workloads",
        "ncf",
        "--scale",
        "tiny",
        "--seeds",
        "1",
        "--name",
        "mn",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = json.loads((results / "mn" / "sweep.json").read_text())["runs"]
    assert run["nodes"] == ["node-01", "node-02"] and run["state"] == "complete" and run["slurm_job"], run
    for rank, h in enumerate(("node-01", "node-02")):
        d = results / "mn" / h / "ncf-ttt-tiny-2node-cpu-s1"
        assert checksums.verify(d) == []
        st = json.loads((d / "status.json").read_text())
        assert (st["nnodes"], st["node_rank"], st["world_size"]) == (2, rank, 2)
        assert "--rdzv-endpoint=node-01:29400" in json.loads((d / "manifest.json").read_text())["launch"]


def test_a_crashed_slurm_labs_munged_is_cleaned_up(testlab_images, tmp_path):
    """The root namespace's munged of a Slurm lab whose owner was SIGKILLed goes with the rest of it."""
    from tests.testlab.lab import cleanup_stale, lab_objects

    script = (
        "import sys, time; from tests.testlab.lab import Lab; lab = Lab(['cr-01'], slurm=True).up(); "
        "print(lab.id, lab.cluster.munge_proc.pid, flush=True); time.sleep(600)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        lab_id, munged = owner.stdout.readline().split()
    finally:
        owner.kill()
        owner.wait()
    assert Path(f"/proc/{munged}/cmdline").read_bytes().startswith(b"munged")
    assert lab_id in cleanup_stale()
    wait_until(lambda: not Path(f"/proc/{munged}").exists(), "the crashed lab's munged to end", 10)
    assert lab_objects(lab_id) == {"netns": [], "links": [], "pids": []}


def test_a_task_that_slurm_ends_is_recorded_with_slurms_word(slurmlab, tmp_path):
    """An admin cancels the sweep's running task (as Slurm ends one at its time limit or on preemption):
    the run fails with Slurm's state for that task, read from scontrol show job."""
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    proc = subprocess.Popen(
        invoke_cmd()
        + [
            "-r",
            str(ROOT),
            "sweep",
            "--backend",
            "slurm",
            "--host",
            "node-01",
            "--workloads",
            "ncf",
            "--scale",
            "tiny",
            "--seeds",
            "1",
            "--name",
            "ended",
        ],
        cwd=tmp_path,
        env=env_for(lab, results),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    with reaped(proc):
        job = wait_until(
            lambda: (
                lab.cluster.command("squeue", "-h", "-n", "gpulab-ended", "-t", "RUNNING", "-o", "%i").stdout.strip()
                or proc.poll() is not None
            ),
            "the task to run",
            120,
        )
        assert proc.poll() is None, proc.stdout.read()
        lab.cluster.command("scancel", job)
        out, _ = proc.communicate(timeout=120)
    print(out)
    assert proc.returncode == 1, out
    (run,) = json.loads((results / "ended" / "sweep.json").read_text())["runs"]
    assert run["state"] == "failed" and run["reason"].startswith(f"Slurm ended task {run['slurm_job']}: CANCELLED"), run


def test_a_units_later_array_waits_for_its_earlier_one(slurmlab, tmp_path, monkeypatch):
    """Two arrays of one unit (a later one: runs a pilot released, another GPU count) run one after the other
    (``afterany``) though node-01 has room for both: the second starts only once the first ended, whatever
    its end (here: cancelled while it ran)."""
    import threading

    from lab.hosts import inventory
    from lab.sweep.hostprep import prepare_host
    from lab.sweep.hostrun import Settings
    from lab.sweep.node import Node
    from lab.sweep.plan import PlannedRun
    from lab.sweep.progress import Progress
    from lab.sweep.slurmworker import SlurmUnitWorker
    from lab.sweep.state import Sweep

    lab = slurmlab
    lab.cluster.reset()
    for key, value in lab.cluster.env.items():
        monkeypatch.setenv(key, value)
    (host,) = inventory.load(lab.inventory).select("node-01")
    remote, install, _, _ = prepare_host(host)
    first, later = PlannedRun("node-01", "ncf", 0, 1), PlannedRun("node-01", "ncf", 0, 2)
    sweep = Sweep.open(tmp_path / "results" / "chain", "chain", [first, later], {})
    w = SlurmUnitWorker(
        sweep,
        [Node(host, remote, install, Settings(), "chain")],
        [first, later],
        Settings(),
        Progress({"node-01": 2}, live=False),
        threading.Event(),
    )
    try:
        (a,), (b,) = w._submit([first]), w._submit([later])
    finally:
        remote.close()
    job_a, job_b = a.slurm_job.split("_")[0], b.slurm_job.split("_")[0]

    def job(j):
        out = lab.cluster.command("scontrol", "show", "job", "-o", j).stdout
        return dict(re.findall(r"(?:^|\s)(JobState|Dependency|StartTime|EndTime)=(\S+)", out))

    assert job(job_b)["Dependency"].startswith(f"afterany:{job_a}_*"), job(job_b)
    wait_until(lambda: job(job_a)["JobState"] != "PENDING", "the first array's task to start", 60)
    lab.cluster.command("scancel", job_a)
    wait_until(lambda: job(job_b)["JobState"] != "PENDING", "the later array to start", 60)
    a, b = job(job_a), job(job_b)  # node-01 had room for both: only the dependency kept them apart
    assert a["JobState"] in ("CANCELLED", "COMPLETED") and b["StartTime"] >= a["EndTime"], (a, b)
    lab.cluster.reset()


def test_a_gpu_run_asks_slurm_for_its_gpus(slurmlab, tmp_path):
    """A 1-GPU run is an array with ``--gres=gpu:1``: node-02's stand-in NVML shows gpulab a GPU, but Slurm
    knows none there (no Gres on the node), so Slurm refuses the job and the run fails with sbatch's word."""
    lab = slurmlab
    lab.cluster.reset()
    results = tmp_path / "results"
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"]["hosts"]["node-02"].update(gpulab_gpu_model="T4", gpulab_gpu_count=1)
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    fakenvml.install(lab, "node-02", fakenvml.build(tmp_path), json.dumps([{**BAD_GPU[0], "ecc_uncorrected": 0}]))
    try:
        p = invoke(
            lab,
            results,
            "sweep",
            "--backend",
            "slurm",
            "--host",
            "node-02",
            "--workloads",
            "ncf",
            "--scale",
            "tiny",
            "--seeds",
            "1",
            "--gpus",
            "1",
            "--name",
            "gres",
            INVOKE_GPULAB_INVENTORY=str(tmp_path / "hosts.yml"),
        )
    finally:
        fix_gpu(lab, "node-02")
    assert p.returncode == 1, p.stdout + p.stderr
    (run,) = json.loads((results / "gres" / "sweep.json").read_text())["runs"]
    assert run["gpus"] == 1 and run["state"] == "failed", run
    assert run["reason"].startswith("slurm: ") and run["reason"].endswith(
        "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    ), run
