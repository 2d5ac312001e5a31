"""A real Slurm in the test lab: Debian bookworm's slurmctld, slurmd and munge (slurm-wlm 22.05).

* ``ensure_layer()``: one more read-only overlay layer, ``slurm-<key>.tar.zst``: what
  ``apt-get install --no-install-recommends slurmd slurmctld slurm-client munge`` adds to the
  rootfs, installed in a chroot of an overlay over the rootfs from this machine's Debian mirror
  (policy-rc.d keeps the daemons from starting), cleaned of apt lists, docs and man pages.
  Only labs made with ``Lab(..., slurm=True)`` stack it; other labs keep their layers and keys.
* ``Cluster(lab)``: started by ``Lab.up()`` of a Slurm lab. The lab's extra host ``slurmctl``
  (not in the inventory) runs munged and slurmctld; every inventory host runs munged and slurmd.
  The root namespace (the controller machine, where ``sbatch``/``sinfo``/``scontrol`` run) has
  a munged of its own on a socket under the lab's state directory; its ``slurm.conf`` differs
  from the hosts' only by ``AuthInfo=socket=...``: ``cluster.env`` (``SLURM_CONF``) points the
  Slurm commands at it. One munge key per lab. Slurm's ports are inside the host namespaces
  (nothing listens outside them); the root munged has a Unix socket only.
"""

from __future__ import annotations

import base64
import inspect
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from tests.testlab.util import LabError, cache_dir, digest, flock, run, wait_for

PACKAGES = ["slurmd", "slurmctld", "slurm-client", "munge"]
CONTROLLER = "slurmctl"          # the lab host that runs slurmctld (not written into the inventory)
PARTITION = "gpulab"
CTLD_PORT, SLURMD_PORT = 6817, 6818   # inside the host namespaces only
HEALTH_PROGRAM = "/usr/local/sbin/gpulab-slurm-health"   # slurm.conf's HealthCheckProgram (absent: no check)
HEALTH_INTERVAL_S = 5
HEALTH_HOME = "/opt/gpulab-health"
PROLOG_DIR = "/etc/slurm/prolog.d"   # slurm.conf's Prolog=/etc/slurm/prolog.d/* (the lab's 00-testlab: never empty)
PROLOG = f"{PROLOG_DIR}/gpulab-health"   # gpulab's prolog when a test installs it (absent: the lab's alone)


def health_script(prolog: bool = False) -> str:
    """gpulab's node health check (lab.validate.nodehealth) as Slurm runs it: HealthCheckProgram, or a prolog
    (``--prolog``: exit 1 on FAIL). slurmd gives a prolog no PATH: the script sets it."""
    what = "a prolog (Prolog=)" if prolog else "Slurm's HealthCheckProgram"
    return f"""#!/bin/sh
# gpulab's node health check (lab.validate.nodehealth), as {what}
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONPATH={HEALTH_HOME}/src:{HEALTH_HOME}/deps
cd {HEALTH_HOME}/src && exec /usr/bin/python3 -m lab.validate.nodehealth{' --prolog' if prolog else ''} \\
    --runner-python /usr/bin/python3 --runner-path {HEALTH_HOME}/src >> /var/log/slurm/gpulab-health.log 2>&1
"""


HEALTH_SCRIPT = health_script()

BUILD_SCRIPT = r"""
set -eu
W="$GL_WORK"
mount -t tmpfs -o size=3g,mode=755 gpulab-slurm-build "$W"
mkdir "$W/upper" "$W/work" "$W/root"
R="$W/root"
mount -t overlay overlay -o "lowerdir=$GL_ROOTFS,upperdir=$W/upper,workdir=$W/work" "$R"
mount -t proc proc "$R/proc"
for d in null zero random urandom; do mount --bind "/dev/$d" "$R/dev/$d"; done
cp /etc/resolv.conf "$R/etc/resolv.conf"
echo "deb $GL_MIRROR bookworm main" > "$R/etc/apt/sources.list"
chroot "$R" apt-get -q update > "$W.log" 2>&1 || { tail -20 "$W.log" >&2; exit 1; }
chroot "$R" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $GL_PACKAGES \
    >> "$W.log" 2>&1 || { tail -20 "$W.log" >&2; exit 1; }
chroot "$R" apt-get clean
: > "$R/etc/apt/sources.list"
printf '# test lab host: no DNS\n' > "$R/etc/resolv.conf"
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/debconf/*-old "$R"/var/lib/dpkg/*-old \
       "$R"/var/log/apt "$R"/var/log/dpkg.log "$R"/etc/munge/munge.key
mkdir -p "$R/var/lib/apt/lists/partial"
touch -d @0 "$R/var/lib/apt/lists"
for d in usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian; do
  [ -d "$W/upper/$d" ] && rm -rf "${W:?}/upper/$d"
done
umount "$R/proc"
for d in null zero random urandom; do umount "$R/dev/$d"; done
umount "$R"
tar --numeric-owner -C "$W/upper" -cf - . | zstd -q -T0 -6 -o "$GL_OUT"
"""


def layer_key(rootfs_key: str) -> str:
    from tests.testlab import image
    return digest(inspect.getsource(_build), BUILD_SCRIPT, " ".join(PACKAGES), rootfs_key, image.apt_mirror())


def ensure_layer():
    """The Slurm layer (an image.Layer), built when missing."""
    from tests.testlab import image

    rootfs = image.ensure_rootfs()
    name = f"slurm-{layer_key(image.rootfs_key())}"
    tarball = cache_dir() / f"{name}.tar.zst"
    if not tarball.exists():
        with flock(cache_dir() / "locks" / "slurm.lock", "building the Slurm layer"):
            if not tarball.exists():
                _build(tarball, rootfs.tree)
    return image.Layer(name, tarball, image._unpack(name, tarball))


def _build(tarball: Path, rootfs_tree: Path) -> None:
    from tests.testlab import image

    t0 = time.monotonic()
    image._log(f"building {tarball.name}: {' '.join(PACKAGES)} over the rootfs (about half a minute)")
    work = Path(f"/tmp/gpulab-testlab-slurm-{os.getpid()}")
    work.mkdir(exist_ok=True)
    tmp_out = tarball.with_name(f".{tarball.name}.{os.getpid()}.tmp")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "GL_WORK": str(work), "GL_ROOTFS": str(rootfs_tree),
           "GL_MIRROR": image.apt_mirror(), "GL_PACKAGES": " ".join(PACKAGES), "GL_OUT": str(tmp_out)}
    try:
        run(["unshare", "--mount", "--propagation", "private", "sh", "-c", BUILD_SCRIPT], env=env, timeout=900)
        tmp_out.rename(tarball)
    finally:
        tmp_out.unlink(missing_ok=True)
        run(["rm", "-rf", str(work), f"{work}.log"], check=False)
    image._log(f"built {tarball.name} ({tarball.stat().st_size / 2**20:.1f} MiB) in {time.monotonic() - t0:.0f}s")


# -- the cluster of one lab ------------------------------------------------------------

def slurm_conf(lab, computes: list[str], auth_socket: str | None = None) -> str:
    ctl = lab.hosts[CONTROLLER]
    lines = [
        "# written by the gpulab test lab " + lab.id,
        f"ClusterName=gpulab{lab.id}",
        f"SlurmctldHost={CONTROLLER}({ctl.address})",
        f"SlurmctldPort={CTLD_PORT}", f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        *( [f"AuthInfo=socket={auth_socket}"] if auth_socket else []),
        "StateSaveLocation=/var/spool/slurmctld", "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid", "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log", "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2",
        "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "MinJobAge=300", "KillWait=5",
        "MessageTimeout=10", "SchedulerParameters=sched_interval=2",
        "GresTypes=gpu",
        f"HealthCheckProgram={HEALTH_PROGRAM}", f"HealthCheckInterval={HEALTH_INTERVAL_S}", "HealthCheckNodeState=ANY",
        "PrologFlags=Alloc", f"Prolog={PROLOG_DIR}/*",
    ]
    cpus = os.cpu_count() or 2
    for name in computes:
        lines.append(f"NodeName={name} NodeAddr={lab.hosts[name].address} CPUs={cpus} RealMemory=1000 State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(computes)} Default=YES MaxTime=INFINITE State=UP "
                 "OverSubscribe=NO")
    return "\n".join(lines) + "\n"


class Cluster:
    """Munge and Slurm daemons of one lab (see the module docstring)."""

    def __init__(self, lab):
        self.lab = lab
        self.computes = list(lab.names)
        self.dir = lab.state_dir / "slurm"
        self.munge_proc: subprocess.Popen | None = None

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    @property
    def env(self) -> dict:
        """What the Slurm commands of the root namespace need: SLURM_CONF."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> "Cluster":
        (self.dir / "munge").mkdir(parents=True, mode=0o700, exist_ok=True)
        key = os.urandom(1024)
        keyfile = self.dir / "munge.key"
        keyfile.write_bytes(key)
        keyfile.chmod(0o400)
        self.conf.write_text(slurm_conf(self.lab, self.computes, str(self.socket)))
        host_conf = slurm_conf(self.lab, self.computes)
        (self.dir / "hosts-slurm.conf").write_text(host_conf)   # what the hosts have (the slurm_node role's input)
        self.munge_proc = subprocess.Popen(
            ["munged", "--foreground", f"--socket={self.socket}", f"--key-file={keyfile}",
             f"--pid-file={self.dir / 'munge' / 'munged.pid'}", f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
             f"--log-file={self.dir / 'munge' / 'munged.log'}", "--force"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.lab._register_pid(self.munge_proc.pid)
        b64 = base64.b64encode(key).decode()
        for name in [CONTROLLER, *self.computes]:
            self.lab.exec(name, "set -e; mkdir -p /etc/munge /etc/slurm /var/log/slurm /run/munge "
                          "/var/spool/slurmd /var/spool/slurmctld; base64 -d > /etc/munge/munge.key; "
                          "chown munge:munge /etc/munge/munge.key /run/munge; chmod 400 /etc/munge/munge.key; "
                          f"cat > /etc/slurm/slurm.conf <<'EOF'\n{host_conf}EOF\n"
                          ": > /etc/slurm/gres.conf; "
                          f"mkdir -p {PROLOG_DIR}; printf '#!/bin/sh\\nexit 0\\n' > {PROLOG_DIR}/00-testlab; "
                          f"chmod 755 {PROLOG_DIR}/00-testlab; "
                          "su -s /bin/sh munge -c /usr/sbin/munged", input=b64)
        wait_for(self.socket.exists, 10, "the controller's munged socket")
        self.lab.exec(CONTROLLER, "slurmctld")
        for name in self.computes:   # slurmd 22.05 loads a cgroup plugin even with proctrack/linuxproc and
            # task/none: an empty tmpfs on /sys/fs/cgroup selects cgroup/v1, which then stays unused
            self.lab.exec(name, "mountpoint -q /sys/fs/cgroup || mount -t tmpfs -o size=1m,mode=755 cgroup "
                          "/sys/fs/cgroup; printf 'CgroupPlugin=cgroup/v1\\n' > /etc/slurm/cgroup.conf; slurmd")
        wait_for(self._nodes_idle, 60, "the Slurm nodes to come up idle", 0.3)
        return self

    def install_health(self, name: str, repo: Path, program: bool = True, prolog: bool = False) -> None:
        """gpulab's node health check on compute host ``name`` as a provisioning would put it there: this
        checkout's lab, runner and GPU references under /opt/gpulab-health/src, jsonschema from the lab's
        wheelhouse in /opt/gpulab-health/deps; with ``program``, the HealthCheckProgram that runs it; with
        ``prolog``, the prolog that runs it before each job on the node (PROLOG)."""
        tar = subprocess.run(["tar", "-C", str(repo), "--exclude=__pycache__", "-czf", "-", "lab", "runner",
                              "inventory/references"],
                             capture_output=True, check=True).stdout
        subprocess.run(self.lab.nsenter(name) + ["/bin/sh", "-c", f"rm -rf {HEALTH_HOME}/src && mkdir -p "
                       f"{HEALTH_HOME}/src && tar -xzf - -C {HEALTH_HOME}/src"], input=tar, check=True,
                       capture_output=True, timeout=60)
        self.lab.exec(name, f"test -d {HEALTH_HOME}/deps/jsonschema || python3 -m pip install -q "
                      f"--break-system-packages --no-index --find-links {self.lab.find_links_url} --trusted-host "
                      f"{self.lab.controller} --target {HEALTH_HOME}/deps jsonschema", timeout=300)
        for path, wanted, text in ((HEALTH_PROGRAM, program, HEALTH_SCRIPT), (PROLOG, prolog, health_script(True))):
            if wanted:
                self.lab.exec(name, f"cat > {path}.tmp && chmod 755 {path}.tmp && mv {path}.tmp {path}", input=text)

    def command(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm command of the root namespace against this cluster (sinfo, squeue, scontrol...)."""
        return run(list(args), env=dict(os.environ, **self.env), check=check, timeout=timeout)

    def node_states(self) -> dict[str, str]:
        out = self.command("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = {}
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def _nodes_idle(self) -> bool:
        states = self.node_states()
        return all(states.get(n) == "idle" for n in self.computes)

    def checking(self, name: str) -> bool:
        """Whether a health check (the HealthCheckProgram or gpulab's prolog) is running on host ``name``."""
        return bool(self.lab.exec(name, "pgrep -f '[g]pulab-slurm-health|prolog[.]d/[g]pulab|[l]ab[.]validate[.]nodehealth' "
                                  "|| true", check=False).stdout.strip())

    def reset(self) -> None:
        """Between tests: cancel every job, remove the health check and stand-in NVML, wait for a check that
        was under way to end (it may still drain its node), resume every node."""
        self.command("scancel", "-u", "root", check=False)
        for name in self.computes:
            self.lab.exec(name, f"rm -f {HEALTH_PROGRAM} {PROLOG} /var/log/slurm/gpulab-health.log "
                          "/usr/lib/libnvidia-ml.so.1 /etc/gpulab-testlab/fake-gpus.json", check=False)
        for name in self.computes:
            wait_for(lambda name=name: not self.checking(name), 120, f"the health check under way on {name} to end",
                     0.3)
        wait_for(lambda: not self.command("squeue", "-h", check=False).stdout.strip(), 30, "the queue to empty", 0.3)
        self.command("scontrol", "update", f"nodename={','.join(self.computes)}", "state=resume", check=False)
        try:
            wait_for(self._nodes_idle, 60, "the Slurm nodes to be idle again", 0.3)
        except LabError as exc:
            raise LabError(f"{exc}: {self.node_states()}") from None

    def log(self, name: str) -> str:
        which = "slurmctld" if name == CONTROLLER else "slurmd"
        return self.lab.exec(name, f"tail -50 /var/log/slurm/{which}.log", check=False).stdout

    def stop(self) -> None:
        if self.munge_proc is not None and self.munge_proc.poll() is None:
            self.munge_proc.send_signal(signal.SIGTERM)
            try:
                self.munge_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.munge_proc.kill()
                self.munge_proc.wait()
        self.munge_proc = None


def shell_env(cluster: Cluster) -> str:
    """`export SLURM_CONF=...` for a shell by hand."""
    return " ".join(f"export {k}={shlex.quote(v)};" for k, v in cluster.env.items())


__all__ = ["CONTROLLER", "Cluster", "LabError", "PARTITION", "ensure_layer", "slurm_conf"]
