"""GPU selection and the start of workload processes (no framework import).

``--gpus`` selects GPUs as the host numbers them (NVML order, which is PCI bus
order; the children get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that CUDA agrees).
One process runs ``python -m runner.worker``; several run under
``python -m torch.distributed.run`` (torchrun), one per GPU, which also spans
several hosts given a rendezvous endpoint.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from runner import rundir


class LaunchError(Exception):
    """Bad GPU or launch request: one line, exit code 2."""


def host_gpu_count() -> int:
    """Number of GPUs NVML sees; 0 without a driver or without GPUs."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except Exception:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def parse_gpus(spec: str, host_count: int) -> list[int]:
    """Resolve ``--gpus`` against the host.

    ``all``: every GPU (none on a CPU host). ``N`` (a bare number): the first N
    GPUs, ``0`` meaning none (CPU). ``I,J,...``: those indices (a single index
    is written with a trailing comma, ``3,``). Raises LaunchError.
    """
    s = (spec or "").strip()
    where = f"--gpus {spec!r}"
    if s == "all":
        return list(range(host_count))
    if re.fullmatch(r"\d+", s):
        n = int(s)
        if n > host_count:
            have = "no GPUs" if host_count == 0 else f"only {host_count} GPU{'s' if host_count > 1 else ''}"
            raise LaunchError(f"{where}: asks for {n} GPUs but this host has {have}")
        return list(range(n))
    if not re.fullmatch(r"\d+(,\d+)*,?", s):
        raise LaunchError(f"{where}: expected 'all', a count, or comma-separated indices such as 0,2")
    idx = [int(x) for x in s.split(",") if x != ""]
    seen = set()
    for i in idx:
        if i in seen:
            raise LaunchError(f"{where}: GPU {i} is listed twice")
        seen.add(i)
        if i >= host_count:
            have = "has no GPUs" if host_count == 0 else f"has GPUs 0..{host_count - 1}"
            raise LaunchError(f"{where}: GPU {i} does not exist (this host {have})")
    return idx


def parse_endpoint(value: str) -> tuple[str, int]:
    m = re.fullmatch(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", value or "")
    if not m or not 0 < int(m.group(2)) < 65536:
        raise LaunchError(f"--rdzv-endpoint {value!r}: expected HOST:PORT")
    return m.group(1), int(m.group(2))


def runner_root() -> Path:
    """The directory that holds the ``runner`` package (put on PYTHONPATH)."""
    return Path(__file__).resolve().parent.parent


def child_env(gpus: list[int], *, cache_dir: Path | None, nprocs: int, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    # an empty list hides every GPU from the workload (a CPU run)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpus)
    env["PYTHONUNBUFFERED"] = "1"
    root = str(runner_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if cache_dir is not None:
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "inductor"))
        env.setdefault("TRITON_CACHE_DIR", str(cache_dir / "triton"))
        env.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
        env.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    if nprocs > 1 and not gpus:
        env["OMP_NUM_THREADS"] = str(cpu_threads_per_process(env.get("OMP_NUM_THREADS"), nprocs))
    return env


def cpu_threads_per_process(budget: str | None, nprocs: int) -> int:
    """Threads of each of ``nprocs`` CPU ranks: the run's budget (OMP_NUM_THREADS as given
    to the runner, else the usable cores) split between them.

    More threads than cores in all make every collective wait for a peer whose
    threads are descheduled: 2 ranks x 2 threads on 2 cores ran gnmt's tiny
    training steps 60 times slower than 2 x 1.
    """
    try:
        total = int(budget) if budget else 0
    except ValueError:
        total = 0
    if total < 1:
        try:
            total = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            total = os.cpu_count() or 1
    return max(1, total // max(1, nprocs))


def worker_command(
    python: str,
    spec_path: Path,
    *,
    nprocs: int,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv: str | None = None,
    run_id: str = "gpulab",
) -> list[str]:
    """The command that starts the workload processes of this node."""
    tail = ["-m", "runner.worker", "--spec", str(spec_path)]
    if nprocs == 1 and nnodes == 1:
        return [python] + tail
    cmd = [python, "-m", "torch.distributed.run", f"--nproc-per-node={nprocs}"]
    if nnodes == 1 and not rdzv:
        cmd += ["--standalone"]
    else:
        cmd += [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv}",
            f"--rdzv-id={run_id}",
        ]
    return cmd + ["--monitor-interval=0.5"] + tail


def _preexec():  # pragma: no cover - runs in the child
    os.setsid()
    # the children die with the supervisor, even when it is killed outright
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Processes:
    """The workload processes of one run, in a process group of their own."""

    def __init__(self, cmd: list[str], env: dict, log_path: Path, cwd: Path | None = None):
        self.cmd = cmd
        self._log = rundir.open_file(log_path, append=True, binary=True, buffering=0)
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            preexec_fn=_preexec,
        )

    def poll(self):
        return self.proc.poll()

    def signal_group(self, sig) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None = None):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float) -> int:
        """SIGTERM to every process of the group, SIGKILL after ``grace_s``."""
        self.signal_group(signal.SIGTERM)
        rc = self.wait(grace_s)
        if rc is None:
            self.signal_group(signal.SIGKILL)
            rc = self.proc.wait()
        # the leader may be gone while ranks linger: make sure none survive
        self.signal_group(signal.SIGKILL)
        return rc

    def close(self):
        self.signal_group(signal.SIGKILL) if self.proc.poll() is None else None
        self._log.close()


def python_ok(python: str) -> bool:
    return os.path.isfile(python) and os.access(python, os.X_OK)


def has_module(python: str, module: str) -> bool:
    """Whether ``module`` can be imported by ``python`` (found, not imported)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import importlib.util

        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
