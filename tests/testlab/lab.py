"""Network-namespace SSH hosts for tests: each with its own root, own sshd and own address.

A ``Lab`` owns one Linux bridge holding the controller address ``.1`` of a
private /24 and N hosts ``.11, .12, ...``. Each host is a network namespace
with a veth on the bridge, a mount/PID/UTS/IPC namespace whose root is an
overlay of the shared read-only layers (python layer over the Debian rootfs)
with an upper directory on a tmpfs of its own, ``tini`` as PID 1 and an sshd
started beside it (so sshd can be stopped, killed and restarted while the
host and its detached processes keep running).

Several labs may run at once on one machine: each takes a /24 and a name
prefix nobody else uses, recorded under ``/run/gpulab-testlab/labs/<id>.json``
together with its owner process. ``cleanup_stale()`` removes what labs of dead
owners left behind, and only those.
"""

from __future__ import annotations

import functools
import http.server
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tests.testlab import aptrepo, image
from tests.testlab import slurm as slurm_mod
from tests.testlab.util import LabError, alive, flock, proc_start_time, run, run_dir, wait_for

NETWORK = os.environ.get("GPULAB_TESTLAB_NET", "10.213.0.0/16")
NETNS_PREFIX = "gpulab-t"  # netns names: gpulab-t<N>-<host>
LINK_PREFIX = "gtl"  # bridge gtl<N>br, veth host ends gtl<N>h<i> (<= 15 characters)
FIRST_HOST = 11
GATEWAY = 254  # default route of the hosts: an address nobody owns
REQUIRED_TOOLS = [
    "ip",
    "unshare",
    "nsenter",
    "ssh",
    "ssh-keygen",
    "debootstrap",
    "dpkg-deb",
    "dpkg-scanpackages",
    "apt-ftparchive",
    "zstd",
    "tar",
]

SSHD_CONF = """\
# gpulab test lab host (read before sshd_config's own settings: first value wins)
ListenAddress {address}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
"""

HOST_SCRIPT = r"""
set -eu
M="$GL_MNT"
mount -t tmpfs -o "size=$GL_SIZE,mode=755" "gpulab-$GL_NAME" "$M"
mkdir "$M/upper" "$M/work" "$M/root"
cp -a "$GL_SEED/." "$M/upper/"
R="$M/root"
mount -t overlay overlay -o "lowerdir=$GL_LOWER,upperdir=$M/upper,workdir=$M/work" "$R"
mount -t proc proc "$R/proc"
mount -t sysfs -o ro sysfs "$R/sys"
mount -t tmpfs -o mode=755,size=64m run "$R/run"
mkdir -p "$R/run/sshd" "$R/run/lock"
mount -t tmpfs -o mode=755,size=1m dev "$R/dev"
for d in null zero full random urandom tty; do
  : > "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"
done
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o "mode=1777,size=$GL_SHM" shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"; ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"
hostname "$GL_NAME"
exec chroot "$R" /usr/bin/tini -- /bin/sleep infinity
"""

CLEAN_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}


def missing_requirements() -> str | None:
    """Why the lab cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the test lab needs root (network namespaces, mounts)"
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        return f"missing tools: {' '.join(missing)} (run tests/testlab/install-deps.sh)"
    probe = f"gpulab-probe-{os.getpid()}"
    res = run(["ip", "netns", "add", probe], check=False)
    run(["ip", "netns", "del", probe], check=False)
    if res.returncode != 0:
        return f"cannot create network namespaces: {res.stderr.strip()}"
    return None


# -- registry of labs -----------------------------------------------------------


def _registry() -> Path:
    return run_dir() / "labs"


def _read_entries() -> list[dict]:
    out = []
    for path in sorted(_registry().glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _entry_alive(entry: dict) -> bool:
    return alive(entry["owner_pid"], entry.get("owner_start"))


def _netns_list() -> list[str]:
    res = run(["ip", "-j", "netns", "list"], check=False)
    try:
        return [n["name"] for n in json.loads(res.stdout or "[]")]
    except ValueError:
        return []


def _link_list() -> list[str]:
    res = run(["ip", "-j", "link", "show"], check=False)
    try:
        return [n["ifname"] for n in json.loads(res.stdout or "[]")]
    except ValueError:
        return []


def _netns_pids(ns: str) -> list[int]:
    res = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_mentioning(text: str) -> list[int]:
    """Processes of the root namespace whose command line mentions text (ssh control masters).

    Processes come and go while /proc is listed: one that is gone before its cmdline is read is skipped."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and text in _cmdline(int(entry)):
            out.append(int(entry))
    return out


def _kill(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _teardown_objects(entry: dict, procs: list[subprocess.Popen] = ()) -> None:
    """Remove everything one lab entry names, in the order that works."""
    netns = entry.get("netns", [])
    for pid, start in entry.get("pids", []):  # root-namespace helpers (a Slurm lab's munged), checked by start time
        if alive(pid, start):
            _kill([pid])
    for ns in netns:  # all hosts first (their PID 1 dies, the kernel kills the rest)
        _kill(_netns_pids(ns))
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    if entry.get("control_dir"):  # controller-side ssh masters of this lab
        _kill(pids_mentioning(entry["control_dir"]), signal.SIGTERM)
    for ns in netns:
        wait_for(lambda ns=ns: not _netns_pids(ns), 10, f"processes of {ns} to exit")
    time.sleep(0.2)  # let closing connections finish while the bridge is up
    links = set(_link_list())
    for veth in entry.get("veths", []):
        if veth in links:
            run(["ip", "link", "del", veth], check=False)
    present = set(_netns_list())
    for ns in netns:
        if ns in present:
            run(["ip", "netns", "del", ns], check=False)
    if entry.get("bridge") in links:
        run(["ip", "link", "del", entry["bridge"]], check=False)
    if entry.get("subnet"):
        run(["ip", "route", "del", "unreachable", entry["subnet"], "metric", "4000"], check=False)
    if entry.get("state_dir_owned") and entry.get("state_dir"):
        shutil.rmtree(entry["state_dir"], ignore_errors=True)
    (_registry() / f"{entry['id']}.json").unlink(missing_ok=True)


def cleanup_stale() -> list[str]:
    """Tear down labs whose owner process is dead, and orphaned objects with our prefixes.

    Objects of live labs are never touched. Returns the ids/names removed.
    """
    removed = []
    with flock(run_dir() / "lock", "cleaning stale labs"):
        entries = _read_entries()
        live_ids = {e["id"] for e in entries if _entry_alive(e)}
        for entry in entries:
            if entry["id"] not in live_ids:
                _teardown_objects(entry)
                removed.append(entry["id"])

        # objects no registry entry names (a registry lost with /run): match the naming scheme
        def orphan(name, pattern):
            m = re.match(pattern, name)
            return m and f"t{m.group(1)}" not in live_ids

        for ns in _netns_list():
            if orphan(ns, re.escape(NETNS_PREFIX) + r"(\d+)-"):
                _kill(_netns_pids(ns))
                wait_for(lambda ns=ns: not _netns_pids(ns), 10, f"processes of {ns} to exit")
                run(["ip", "netns", "del", ns], check=False)
                removed.append(ns)
        for link in _link_list():
            if orphan(link.split("@")[0], re.escape(LINK_PREFIX) + r"(\d+)(br|h\d+)$"):
                run(["ip", "link", "del", link.split("@")[0]], check=False)
                removed.append(link)
    return removed


def lab_objects(lab_id: str | None = None) -> dict:
    """Network namespaces, links and processes of one lab (or of any lab): for leak assertions."""
    ns_pat = re.escape(NETNS_PREFIX) + (rf"{lab_id[1:]}-" if lab_id else r"\d+-")
    link_pat = re.escape(LINK_PREFIX) + (rf"{lab_id[1:]}(br|h\d+)$" if lab_id else r"\d+(br|h\d+)$")
    netns = [n for n in _netns_list() if re.match(ns_pat, n)]
    links = [n for n in _link_list() if re.match(link_pat, n)]
    pids = sorted({p for ns in netns for p in _netns_pids(ns)})
    return {"netns": netns, "links": links, "pids": pids}


# -- the HTTP server of the controller address --------------------------------------


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        with open(self.server.log_path, "a") as f:
            f.write("%s - %s\n" % (self.address_string(), fmt % args))


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


# -- the lab ---------------------------------------------------------------------------


class Host:
    def __init__(self, lab: "Lab", index: int, name: str):
        self.lab = lab
        self.index = index
        self.name = name
        self.address = str(lab.net.network_address + FIRST_HOST + index)
        self.netns = f"{NETNS_PREFIX}{lab.octet}-{name}"
        self.veth = f"{LINK_PREFIX}{lab.octet}h{index + 1}"
        self.dir = lab.state_dir / "hosts" / name
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.host_key_pub = ""

    def __repr__(self):
        return f"<Host {self.name} {self.address}>"


class Lab:
    """N SSH hosts on a private bridge, with inventory, known_hosts, key, apt repo and wheelhouse.

    Variables (``all_vars``, ``host_vars``, ``group_vars``) may be callables taking the
    lab, evaluated when the inventory is written (after the addresses are known).
    ``bare=True`` makes hosts of the Debian root filesystem alone (no shared Python
    layer: nothing of gpulab's dependencies); the wheelhouse is served all the same.
    """

    def __init__(
        self,
        names,
        *,
        groups=None,
        host_vars=None,
        group_vars=None,
        all_vars=None,
        state_dir=None,
        package_specs=None,
        tmpfs_size="2g",
        shm_size="512m",
        bare=False,
        slurm=False,
    ):
        names = list(names)
        if not names or len(set(names)) != len(names):
            raise LabError(f"host names must be unique and non-empty: {names}")
        for name in names:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,40}", name):
                raise LabError(f"bad host name {name!r}")
        self.names = names
        self.groups = dict(groups or {})
        self.host_vars = dict(host_vars or {})
        self.group_vars = dict(group_vars or {})
        self.all_vars = dict(all_vars or {})
        self._state_dir_arg = Path(state_dir) if state_dir else None
        self.package_specs = package_specs
        self.tmpfs_size = tmpfs_size
        self.shm_size = shm_size
        self.bare = bare  # hosts of the Debian rootfs alone, without the shared Python layer
        # slurm: one more host (slurm.CONTROLLER, not in the inventory) runs slurmctld, every host slurmd
        # (tests/testlab/slurm.py); self.cluster is the running Slurm after up()
        self.slurm = slurm
        if slurm and slurm_mod.CONTROLLER in names:
            raise LabError(f"{slurm_mod.CONTROLLER} is the Slurm controller host of a Slurm lab")
        self.cluster = None
        self.hosts: dict[str, Host] = {}
        self.id = None
        self.timings: dict[str, float] = {}
        self._httpd = None
        self._entry: dict = {}

    # ---- paths and URLs (valid after up()) ----
    @property
    def inventory(self) -> Path:
        return self.state_dir / "inventory.yml"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def private_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def control_dir(self) -> Path:
        return self.state_dir / "cp"

    @property
    def http_url(self) -> str:
        return f"http://{self.controller}:{self.http_port}"

    @property
    def apt_url(self) -> str:
        """Flat apt repository: ``deb [trusted=yes] <apt_url> ./``."""
        return f"{self.http_url}/apt"

    @property
    def apt_source_line(self) -> str:
        return f"deb [trusted=yes] {self.apt_url} ./"

    @property
    def find_links_url(self) -> str:
        """For ``pip install --no-index --find-links URL --trusted-host <controller>``."""
        return f"{self.http_url}/wheels/"

    @property
    def index_url(self) -> str:
        """A PEP 503 simple index of the same wheels, for ``pip --index-url``."""
        return f"{self.http_url}/simple/"

    @property
    def wheels_dir(self) -> Path:
        """Served as find_links_url; a test may drop extra wheels here (call refresh_index after)."""
        return self.state_dir / "www" / "wheels"

    def ssh_options(self) -> list[str]:
        return [
            "-F",
            "/dev/null",
            "-i",
            str(self.private_key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
        ]

    def ansible_env(self) -> dict:
        """Environment for ansible-runner: strict host keys, all state under the lab's directory."""
        venv_bin = str(Path(sys.executable).parent)
        return {
            "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_HOME": str(self.state_dir / "ansible"),
            "ANSIBLE_LOCAL_TEMP": str(self.state_dir / "ansible" / "tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(self.control_dir),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        }

    # ---- bring up ----
    def up(self) -> "Lab":
        t0 = time.monotonic()
        rootfs = image.ensure_rootfs()
        pylayer, wheelhouse = image.ensure_pylayer()
        repo = aptrepo.ensure_repo(self.package_specs)
        self.timings["images_s"] = time.monotonic() - t0
        self._layers = [rootfs] if self.bare else [pylayer, rootfs]
        self._images = [pylayer.name, rootfs.name]
        if self.slurm:
            layer = slurm_mod.ensure_layer()
            self._layers.insert(0, layer)
            self._images.append(layer.name)
        self._allocate(repo, wheelhouse)
        try:
            self._make_network()
            self._make_keys()
            self._serve(repo, wheelhouse)
            for host in self.hosts.values():
                self._seed(host)
            for host in self.hosts.values():
                self.start_host(host.name, wait=False)
            for host in self.hosts.values():
                self._wait_host(host)
            self.write_known_hosts()
            self.write_inventory()
            if self.slurm:
                self.cluster = slurm_mod.Cluster(self).start()
        except BaseException:
            self.down()
            raise
        self.timings["up_s"] = time.monotonic() - t0 - self.timings["images_s"]
        return self

    def _allocate(self, repo: Path, wheelhouse: Path) -> None:
        net = ipaddress.ip_network(NETWORK)
        if FIRST_HOST + len(self.names) >= GATEWAY:
            raise LabError("too many hosts for one /24")
        with flock(run_dir() / "lock", "allocating a lab subnet"):
            used = {e["octet"] for e in _read_entries()}
            taken = _routed_networks()
            for i, subnet in enumerate(net.subnets(new_prefix=24)):
                if i in used or any(subnet.overlaps(t) for t in taken):
                    continue
                break
            else:
                raise LabError(f"no free /24 left in {NETWORK}")
            self.octet = i
            self.net = subnet
            self.id = f"t{i}"
            self.controller = str(subnet.network_address + 1)
            self.gateway = str(subnet.network_address + GATEWAY)
            self.bridge = f"{LINK_PREFIX}{i}br"
            owned = self._state_dir_arg is None
            self.state_dir = self._state_dir_arg or (run_dir() / self.id)
            if owned:
                shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.state_dir.chmod(0o700)
            every = self.names + ([slurm_mod.CONTROLLER] if self.slurm else [])
            self.hosts = {name: Host(self, k, name) for k, name in enumerate(every)}
            self._entry = {
                "id": self.id,
                "octet": i,
                "subnet": str(subnet),
                "bridge": self.bridge,
                "netns": [h.netns for h in self.hosts.values()],
                "veths": [h.veth for h in self.hosts.values()],
                "hosts": {h.name: h.address for h in self.hosts.values()},
                "state_dir": str(self.state_dir),
                "state_dir_owned": owned,
                "control_dir": str(self.control_dir),
                "owner_pid": os.getpid(),
                "owner_start": proc_start_time(os.getpid()),
                "layers": self._images + [repo.name, wheelhouse.name],
                "pids": [],  # processes of the root namespace the lab started (the Slurm lab's munged)
                "created": time.time(),
            }
            path = _registry() / f"{self.id}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._entry, indent=1))
            tmp.rename(path)

    def _register_pid(self, pid: int) -> None:
        """A process of the root namespace that teardown (also of a crashed owner) must end."""
        self._entry.setdefault("pids", []).append([pid, proc_start_time(pid)])
        path = _registry() / f"{self.id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._entry, indent=1))
        tmp.rename(path)

    def _make_network(self) -> None:
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.controller}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        run(["ip", "route", "replace", "unreachable", str(self.net), "metric", "4000"])
        for h in self.hosts.values():
            run(["ip", "netns", "add", h.netns])
            run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns])
            run(["ip", "link", "set", h.veth, "master", self.bridge, "up"])
            run(["ip", "-n", h.netns, "link", "set", "lo", "up"])
            run(["ip", "-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0"])
            run(["ip", "-n", h.netns, "link", "set", "eth0", "up"])
            run(["ip", "-n", h.netns, "route", "add", "default", "via", self.gateway])

    def _make_keys(self) -> None:
        run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"gpulab-testlab-{self.id}",
                "-f",
                str(self.private_key),
            ]
        )
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        (self.state_dir / "ansible" / "tmp").mkdir(parents=True, exist_ok=True)

    def _serve(self, repo: Path, wheelhouse: Path) -> None:
        www = self.state_dir / "www"
        www.mkdir()
        (www / "apt").symlink_to(repo)
        self.wheels_dir.mkdir()
        for whl in sorted(wheelhouse.glob("*.whl")):
            (self.wheels_dir / whl.name).symlink_to(whl)
        self.refresh_index()
        handler = functools.partial(_Handler, directory=str(www))
        self._httpd = _Server((self.controller, 0), handler)
        self._httpd.log_path = str(self.state_dir / "http.log")
        self.http_port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, name=f"testlab-{self.id}-http", daemon=True).start()

    def refresh_index(self) -> None:
        """Rebuild simple/<project>/ (PEP 503) from the files in wheels_dir."""
        simple = self.state_dir / "www" / "simple"
        shutil.rmtree(simple, ignore_errors=True)
        simple.mkdir()
        for whl in sorted(self.wheels_dir.iterdir()):
            project = re.sub(r"[-_.]+", "-", whl.name.split("-")[0]).lower()
            (simple / project).mkdir(exist_ok=True)
            (simple / project / whl.name).symlink_to(whl.resolve())

    def _seed(self, host: Host) -> None:
        seed = host.dir / "seed"
        shutil.rmtree(host.dir, ignore_errors=True)
        (seed / "etc/ssh/sshd_config.d").mkdir(parents=True)
        (host.dir / "mnt").mkdir()
        key = seed / "etc/ssh/ssh_host_ed25519_key"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}", "-f", str(key)])
        host.host_key_pub = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        (seed / "etc/ssh/sshd_config.d/00-gpulab-testlab.conf").write_text(SSHD_CONF.format(address=host.address))
        ssh_dir = seed / "root/.ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        ssh_dir.chmod(0o700)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.private_key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        (seed / "root").chmod(0o700)
        (seed / "etc/hostname").write_text(host.name + "\n")
        lines = ["127.0.0.1\tlocalhost", f"{self.controller}\tcontroller"]
        lines += [f"{h.address}\t{h.name}" for h in self.hosts.values()]
        (seed / "etc/hosts").write_text("\n".join(lines) + "\n")
        (seed / "etc/machine-id").write_text(secrets.token_hex(16) + "\n")

    # ---- hosts: start, stop, faults ----
    def start_host(self, name: str, wait: bool = True) -> None:
        """Boot a host from its seed (a fresh upper layer: whatever the host wrote before is gone)."""
        host = self.hosts[name]
        lower = ":".join(str(layer.tree) for layer in self._layers)
        env = dict(
            CLEAN_ENV,
            GL_MNT=str(host.dir / "mnt"),
            GL_SEED=str(host.dir / "seed"),
            GL_LOWER=lower,
            GL_NAME=host.name,
            GL_SIZE=self.tmpfs_size,
            GL_SHM=self.shm_size,
        )
        log = open(host.dir / "host.log", "ab")
        host.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.netns,
                "unshare",
                "--mount",
                "--pid",
                "--uts",
                "--ipc",
                "--fork",
                "--kill-child=SIGKILL",
                "--propagation",
                "private",
                "sh",
                "-c",
                HOST_SCRIPT,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        host.init_pid = None
        if wait:
            self._wait_host(host)

    def _wait_host(self, host: Host) -> None:
        def init_ready():
            if host.proc.poll() is not None:
                tail = (host.dir / "host.log").read_text(errors="replace").strip().splitlines()[-5:]
                raise LabError(f"host {host.name} did not start: {' / '.join(tail)}")
            try:
                children = Path(f"/proc/{host.proc.pid}/task/{host.proc.pid}/children").read_text().split()
                if children and Path(f"/proc/{children[0]}/comm").read_text().strip() == "tini":
                    return int(children[0])
            except OSError:
                pass
            return None

        host.init_pid = wait_for(init_ready, 30, f"host {host.name} to boot", 0.02)
        self.start_sshd(host.name)

    def nsenter(self, name: str, root: bool = True) -> list[str]:
        host = self.hosts[name]
        cmd = ["nsenter", "-t", str(host.init_pid), "--mount", "--uts", "--ipc", "--net", "--pid"]
        return cmd + (["--root", "--wd"] if root else [])

    def exec(
        self, name: str, command: str, *, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Run a shell command as root inside a host (through nsenter, not SSH)."""
        return run(
            self.nsenter(name) + ["/bin/sh", "-c", command], check=check, timeout=timeout, env=CLEAN_ENV, input=input
        )

    def ssh(
        self, name: str, command: str, *, check: bool = True, timeout: float = 60, options: list[str] = ()
    ) -> subprocess.CompletedProcess:
        """Run a command on a host over SSH with the lab's key and strict host key checking."""
        return run(
            ["ssh", *self.ssh_options(), *options, f"root@{self.hosts[name].address}", command],
            check=check,
            timeout=timeout,
        )

    def _sshd_pids(self, name: str) -> tuple[list[int], list[int]]:
        """(listener, per-connection) sshd processes of a host, as pids of this namespace."""
        listener, sessions = [], []
        for pid in _netns_pids(self.hosts[name].netns):
            cmd = _cmdline(pid)
            if cmd.startswith("sshd:"):
                (listener if "[listener]" in cmd else sessions).append(pid)
        return listener, sessions

    def reachable(self, name: str, timeout: float = 1.0) -> bool:
        """Whether the host's sshd accepts TCP connections on its address."""
        try:
            with socket.create_connection((self.hosts[name].address, 22), timeout=timeout) as s:
                s.settimeout(timeout)
                return s.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def start_sshd(self, name: str) -> None:
        run(self.nsenter(name) + ["/usr/sbin/sshd", "-E", "/var/log/sshd.log"], env=CLEAN_ENV)
        wait_for(lambda: self.reachable(name, 0.5), 15, f"sshd of {name}")

    def stop_sshd(self, name: str) -> None:
        """Stop the listening sshd (SIGTERM); open SSH sessions stay, new connections are refused."""
        listener, _ = self._sshd_pids(name)
        _kill(listener, signal.SIGTERM)
        wait_for(lambda: not self._sshd_pids(name)[0], 10, f"sshd of {name} to stop")

    def kill_sshd(self, name: str) -> None:
        """SIGKILL every sshd of the host, open sessions included; detached processes keep running."""
        listener, sessions = self._sshd_pids(name)
        _kill(listener + sessions)
        wait_for(lambda: self._sshd_pids(name) == ([], []), 10, f"sshd of {name} to die")

    def disconnect(self, name: str) -> None:
        """Unplug the host's cable (veth down): packets are dropped, nothing is refused."""
        run(["ip", "link", "set", self.hosts[name].veth, "down"])

    def reconnect(self, name: str) -> None:
        run(["ip", "link", "set", self.hosts[name].veth, "up"])

    def power_off(self, name: str) -> None:
        """Kill the whole host (its PID 1); its disk (tmpfs upper layer) is gone with it."""
        host = self.hosts[name]
        _kill(_netns_pids(host.netns))
        if host.proc:
            host.proc.wait(timeout=10)
        host.init_pid = None

    def usage(self, name: str) -> dict:
        """Bytes of tmpfs used by the host's upper layer and /run, and the PSS of its processes."""
        host = self.hosts[name]
        df = run(
            self.nsenter(name, root=False) + ["df", "-B1", "--output=used", str(host.dir / "mnt")], env=CLEAN_ENV
        ).stdout.split()[-1]
        dfrun = self.exec(name, "df -B1 --output=used /run /dev/shm").stdout.split()[1:]
        pss = 0
        for pid in _netns_pids(host.netns):
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            except OSError:
                pass
        return {"upper_bytes": int(df), "run_bytes": sum(int(x) for x in dfrun), "pss_bytes": pss}

    # ---- files for the code under test ----
    def write_known_hosts(self) -> None:
        lines = [f"{h.name},{h.address} {h.host_key_pub}" for h in self.hosts.values()]
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _value(self, value):
        return value(self) if callable(value) else value

    def write_inventory(self) -> Path:
        def resolved(d):
            return {k: self._value(v) for k, v in d.items()}

        common = [
            f"-o UserKnownHostsFile={self.known_hosts}",
            "-o GlobalKnownHostsFile=/dev/null",
            "-o StrictHostKeyChecking=yes",
            "-o IdentitiesOnly=yes",
            "-o ConnectTimeout=10",
        ]
        all_vars = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.private_key),
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": " ".join(common),
            "ansible_control_path_dir": str(self.control_dir),
            **resolved(self.all_vars),
        }
        grouped = {h for members in self.groups.values() for h in members}

        def host_entry(name):
            return {"ansible_host": self.hosts[name].address, **resolved(self.host_vars.get(name, {}))}

        inv: dict = {"all": {"vars": all_vars}}
        loose = [n for n in self.names if n not in grouped]  # a Slurm lab's controller host is not written
        if loose:
            inv["all"]["hosts"] = {n: host_entry(n) for n in loose}
        children = {}
        for group, members in self.groups.items():
            unknown = [m for m in members if m not in self.hosts]
            if unknown:
                raise LabError(f"group {group} names unknown hosts {unknown}")
            children[group] = {"hosts": {m: host_entry(m) for m in members}}
            if self.group_vars.get(group):
                children[group]["vars"] = resolved(self.group_vars[group])
        if children:
            inv["all"]["children"] = children
        self.inventory.write_text(
            "# written by the gpulab test lab " + (self.id or "") + "\n" + yaml.safe_dump(inv, sort_keys=False)
        )
        return self.inventory

    # ---- tear down ----
    def down(self) -> None:
        """Stop every host, then remove links, namespaces, bridge, route, registry entry."""
        if not self._entry:
            return
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if os.environ.get("GPULAB_TESTLAB_KEEP"):
            self._entry["state_dir_owned"] = False
        with flock(run_dir() / "lock", "tearing a lab down"):
            _teardown_objects(self._entry, [h.proc for h in self.hosts.values() if h.proc])
        for h in self.hosts.values():
            h.proc = None
            h.init_pid = None
        self._entry = {}

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    def describe(self) -> str:
        lines = [
            f"lab {self.id}: bridge {self.bridge} {self.controller}/24, state {self.state_dir}",
            f"  inventory {self.inventory}",
            f"  known_hosts {self.known_hosts}",
            f"  key {self.private_key}",
            f"  apt: {self.apt_source_line}",
            f"  pip: --find-links {self.find_links_url} | --index-url {self.index_url} "
            f"--trusted-host {self.controller}",
        ]
        for h in self.hosts.values():
            lines.append(
                f"  {h.name:12} {h.address:15} netns {h.netns}  ssh {shlex.join(self.ssh_options())} root@{h.address}"
            )
        return "\n".join(lines)


def _routed_networks() -> list:
    """Networks this machine already routes or owns (a lab subnet must not overlap them)."""
    out = []
    for cmd in (["ip", "-j", "-4", "route", "show", "table", "all"], ["ip", "-j", "-4", "addr", "show"]):
        try:
            data = json.loads(run(cmd, check=False).stdout or "[]")
        except ValueError:
            continue
        for item in data:
            if "dst" in item and item["dst"] not in ("default",) and item.get("type") != "unreachable":
                try:
                    out.append(ipaddress.ip_network(item["dst"], strict=False))
                except ValueError:
                    pass
            for a in item.get("addr_info", []):
                out.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return [n for n in out if n.prefixlen > 0]
