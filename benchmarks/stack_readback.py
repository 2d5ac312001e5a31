"""The stack facts of a real NVIDIA machine against profiles: `invoke audit` and `invoke validate`.

Run on a GPU machine from the checkout, in one command (standard library only to start):

    python3 benchmarks/stack_readback.py --wheels DIR --out OUT [--real KEY=VERSION ...] [--budget S]

1. Records the evidence as the machine itself tells it (nvidia-smi, /proc/driver/nvidia/version,
   /usr/local/cuda*, the package database, the Python packages, torch's own view) in
   OUT/evidence.txt, so that any drift below can be checked by hand.
   Without an NVIDIA driver (no /proc/driver/nvidia/version, nvidia-smi and NVML silent) it
   stops there with one line.
2. Reads the versions by plain means, apart from the stack facts module (the driver's
   version, CUDA's version.json or cuda.h, the system's cuDNN and NCCL headers, torch's
   version): these over the known ones (REAL), --real KEY=VERSION over both, make the profile.
3. Puts the controller's packages beside the machine's Python (`pip install --target`, offline
   from DIR: benchmarks/stack_readback.requirements.txt; the wheels unpacked where the
   interpreter has no pip), so that the PyTorch read is its own.
4. Writes two profiles from inventory/stacks/current.yml into a scratch inventory: `real`, the
   versions of step 2, and `wrong`, the same with one version changed (NCCL). The machine's
   OS (/etc/os-release) is added to `supports`.
5. Runs `invoke audit` and `invoke validate --level quick` (health only, no load: seconds) on
   the embedded default (inventory/local.yml's host, no gpulab_os: detected) against each,
   as text and as --json, each output in OUT/ as soon as it is there.

It cannot hang: every command runs in its own process group with no input, limited by what
is left of --budget (default 540 s, under a 10-minute call), and killed with its children
when that is spent. OUT/evidence.txt and OUT/summary.json (the step reached, any error, what
was read and used, the verdicts) are written whatever step fails.

Expected: `real` gives "no drift" in the audit and PASS on every `stack *` check of validate;
`wrong` gives exactly one drift line (nccl) and one failing stack check. OUT/summary.json says
whether that held; the exit code is 0 when it did, 1 when not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What the GPU machine of this project runs, from its recorded probe (2026-12-02,
# tests/unit/validate/fixtures/probe-h200-x1.recorded.json): driver 580.159.04, CUDA 13.0
# (/usr/local/cuda/include/cuda.h), the system's cuDNN 9.14.0 and NCCL 2.28.3 (headers and
# libraries of the image), PyTorch 2.11.0. Its PyTorch loads the cuDNN 9.19.0.56 and NCCL 2.28.9
# of its own wheels; the stack facts read the system's first (lab.validate.hostchecks.installed_version, the
# stack facts module), as a profile's packages are the system's. --real overrides any of them.
REAL = {"driver": "580.159.04", "cuda": "13.0", "cudnn": "9.14.0", "nccl": "2.28.3", "torch": "2.11.0"}
WRONG = ("nccl", "2.27.7")  # one component, a real but different release
REQUIREMENTS = REPO / "benchmarks" / "stack_readback.requirements.txt"
EVIDENCE = [
    "nvidia-smi",
    "nvidia-smi --query-gpu=index,name,driver_version,compute_cap --format=csv",
    "cat /proc/driver/nvidia/version",
    "cat /etc/os-release",
    "uname -r",
    "ls -la /usr/local/ | grep -i cuda",
    "cat /usr/local/cuda/version.json",
    "/usr/local/cuda/bin/nvcc --version",
    "ls /usr/include/cudnn*.h /usr/include/*-linux-gnu/cudnn*.h /usr/include/nccl.h /usr/local/cuda/include/cudnn*.h",
    "grep -HE '#define (CUDNN_MAJOR|CUDNN_MINOR|CUDNN_PATCHLEVEL|NCCL_MAJOR|NCCL_MINOR|NCCL_PATCH|CUDA_VERSION) ' "
    "/usr/include/*-linux-gnu/cudnn_version.h /usr/include/cudnn_version.h /usr/include/nccl.h "
    "/usr/local/cuda/include/cuda.h",
    "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | grep -iE 'nvidia|cuda|cudnn|nccl'",
    "rpm -qa | grep -iE 'nvidia|cuda|cudnn|nccl'",
    "{py} -m pip list 2>/dev/null | grep -iE 'torch|nvidia|cuda|tensorflow|triton'",
    "{py} -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), "
    "torch.cuda.nccl.version(), torch.cuda.is_available())'",
]


class Clock:
    """The run's time budget: every command gets what is left of it, less a reserve for the records."""

    def __init__(self, budget_s: float):
        self.end = time.monotonic() + budget_s

    def left(self, reserve: float = 15.0) -> float:
        return self.end - time.monotonic() - reserve


CLOCK = Clock(540)


class Result:
    def __init__(self, rc, stdout: str, stderr: str, seconds: float, timed_out: bool = False):
        self.returncode, self.stdout, self.stderr = rc, stdout, stderr
        self.seconds, self.timed_out = seconds, timed_out


def sh(cmd: str | list, *, env=None, cwd=None, timeout=600) -> Result:
    """Run a command in its own process group, no stdin; on time-out the whole group is killed.

    The limit is the smaller of ``timeout`` and what is left of the run's budget (CLOCK), so
    that no command (nvidia-smi on a wedged driver, an Ansible child) can hold the run.
    """
    limit = max(1.0, min(timeout, CLOCK.left()))
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            shell=isinstance(cmd, str),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as e:
        return Result(None, "", f"cannot start: {e}", 0.0)
    try:
        out, err = proc.communicate(timeout=limit)
        return Result(proc.returncode, out, err, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a child left the group and holds the pipes
            out, err = "", ""
        return Result(
            None, out or "", (err or "") + f"\n(killed after {limit:.0f} s)", time.monotonic() - t0, timed_out=True
        )


def evidence(out: Path, py: str) -> None:
    with open(out / "evidence.txt", "w") as f:
        for cmd in EVIDENCE:
            cmd = cmd.replace("{py}", py)
            res = sh(cmd, timeout=60)
            rc = "timed out" if res.timed_out else res.returncode
            f.write(f"$ {cmd}   [exit {rc}]\n{(res.stdout + res.stderr).rstrip()}\n\n")
            f.flush()


def driver_version(proc: Path, py: str) -> str | None:
    """The NVIDIA driver's version: the kernel module's (/proc/driver/nvidia/version), else
    nvidia-smi's, else NVML's through the interpreter's nvidia-ml-py; None where none answers."""
    try:
        m = re.search(
            r"Kernel Module(?: for [\w-]+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)", proc.read_text(errors="replace")
        )
        if m:
            return m.group(1)
    except OSError:
        pass
    for cmd in (
        [shutil.which("nvidia-smi") or "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        [
            py,
            "-c",
            "import pynvml as n; n.nvmlInit(); v = n.nvmlSystemGetDriverVersion(); "
            "print(v.decode() if isinstance(v, bytes) else v)",
        ],
    ):
        res = sh(cmd, timeout=60)
        lines = res.stdout.split()
        if res.returncode == 0 and lines and re.fullmatch(r"[0-9]+(\.[0-9]+)+", lines[0]):
            return lines[0]
    return None


def _header_version(paths, names) -> str | None:
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        parts = [re.search(rf"#define\s+{n}\s+([0-9]+)", text) for n in names]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return None


def read_machine(py: str, proc: Path) -> dict:
    """The machine's versions read by plain means, apart from the stack facts module: the
    kernel module's version, CUDA's version.json or cuda.h, the system's cuDNN and NCCL
    headers, the interpreter's torch. Components it cannot read are left out."""
    found = {"driver": driver_version(proc, py)}
    try:
        found["cuda"] = json.loads(Path("/usr/local/cuda/version.json").read_text())["cuda"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        m = re.search(
            r"#define\s+CUDA_VERSION\s+([0-9]+)",
            Path("/usr/local/cuda/include/cuda.h").read_text(errors="replace")
            if Path("/usr/local/cuda/include/cuda.h").is_file()
            else "",
        )
        found["cuda"] = f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}" if m else None
    arch = f"/usr/include/{os.uname().machine}-linux-gnu"
    found["cudnn"] = _header_version(
        [f"{arch}/cudnn_version.h", "/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h"],
        ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"),
    )
    found["nccl"] = _header_version(
        ["/usr/include/nccl.h", "/usr/local/cuda/include/nccl.h"], ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH")
    )
    res = sh([py, "-c", "import torch; print(torch.__version__)"], timeout=120)
    m = re.match(r"([0-9]+(?:\.[0-9]+)+)", res.stdout.strip()) if res.returncode == 0 else None
    found["torch"] = m.group(1) if m else None
    return {k: v for k, v in found.items() if v}


def _install_unpacked(wheels: Path, site: Path) -> None:
    """Without pip: every wheel of the folder unpacked into site, console scripts written to
    site/bin with this interpreter (the folder holds one wheel per project, made by pip download)."""
    import configparser
    import zipfile

    (site / "bin").mkdir(parents=True, exist_ok=True)
    whls = sorted(wheels.glob("*.whl"))
    if not whls:
        raise RuntimeError(f"no wheels in {wheels}")
    for whl in whls:
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
            for name in z.namelist():
                if name.endswith(".dist-info/entry_points.txt"):
                    ep = configparser.ConfigParser(delimiters=("=",), interpolation=None)
                    ep.optionxform = str
                    ep.read_string(z.read(name).decode())
                    for script, target in ep["console_scripts"].items() if ep.has_section("console_scripts") else []:
                        module, _, func = target.strip().partition(":")
                        path = site / "bin" / script.strip()
                        path.write_text(
                            f"#!{sys.executable}\nimport sys\nfrom {module} import {func.split('.')[0]}\n"
                            f"sys.exit({func}())\n"
                        )
                        path.chmod(0o755)


def controller_env(work: Path, wheels: Path) -> dict:
    """The environment that puts the controller's packages in front of this interpreter's own.

    ``pip --target`` beside the running Python (a venv of it would not see the packages of
    the venv this Python may itself be, such as the one holding the machine's PyTorch); an
    interpreter without pip (a uv-made venv) gets the wheels unpacked instead.
    """
    site = work / "site"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    if sh([sys.executable, "-m", "pip", "--version"], env=env, timeout=60).returncode == 0:
        res = sh(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--find-links",
                str(wheels),
                "--target",
                str(site),
                "-r",
                str(REQUIREMENTS),
            ],
            env=env,
            timeout=300,
        )
        if res.returncode != 0:
            tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"pip install --target {site} from {wheels} failed: {tail[0]}")
    else:
        _install_unpacked(wheels, site)
    env = {**os.environ, "PYTHONPATH": str(site), "PATH": f"{site / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    if not (os.environ.get("LC_ALL") or os.environ.get("LANG")):
        env["LC_ALL"] = "C.UTF-8"  # Ansible refuses a locale that is not UTF-8
    return env


def os_name() -> str:
    fields = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        k, _, v = line.partition("=")
        fields[k] = v.strip().strip('"')
    names = {
        "ubuntu": "Ubuntu",
        "debian": "Debian",
        "rhel": "RedHat",
        "rocky": "Rocky",
        "centos": "CentOS",
        "almalinux": "AlmaLinux",
    }
    dist = names.get(fields.get("ID", ""), "")
    version = fields.get("VERSION_ID", "")
    return f"{dist} {version if dist == 'Ubuntu' else version.split('.')[0]}"


def wrong_version(real: dict) -> tuple[str, str]:
    """The one component the `wrong` profile changes (NCCL), to a real release other than the machine's."""
    comp, version = WRONG
    return comp, (version if real.get(comp, "").split(".")[:2] != version.split(".")[:2] else "2.26.2")


def write_profiles(inv: Path, real: dict) -> dict:
    """Scratch inventory: local.yml (stack `real`) and stacks/{real,wrong}.yml from current.yml."""
    import yaml  # the controller environment's (run after controller_env)

    stacks = inv / "stacks"
    stacks.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load((REPO / "inventory" / "stacks" / "current.yml").read_text())
    local = yaml.safe_load((REPO / "inventory" / "local.yml").read_text())
    profiles = {}
    for name, change in (("real", None), ("wrong", wrong_version(real))):
        prof = json.loads(json.dumps(base))
        prof["name"] = name
        prof["description"] = f"the GPU machine's stack as known ({name})"
        prof["driver"] = {**prof["driver"], "branch": real["driver"].split(".")[0], "version": real["driver"]}
        for comp in ("cuda", "cudnn", "nccl"):
            prof[comp] = {"version": real[comp]}
        prof["python"]["frameworks"] = {k: v for k, v in real.items() if k not in ("driver", "cuda", "cudnn", "nccl")}
        if change:
            comp, version = change
            if comp in prof["python"]["frameworks"]:
                prof["python"]["frameworks"][comp] = version
            else:
                prof[comp] = {"version": version}
        here = os_name()
        if here.split() and here not in prof["supports"]:
            prof["supports"].append(here)
        (stacks / f"{name}.yml").write_text(yaml.safe_dump(prof, sort_keys=False))
        profiles[name] = prof
    host = local["all"]["children"]["local"]["hosts"]["localhost"]
    host["gpulab_stack"] = "real"
    (inv / "local.yml").write_text(yaml.safe_dump(local, sort_keys=False))
    local_wrong = json.loads(json.dumps(local))
    local_wrong["all"]["children"]["local"]["hosts"]["localhost"]["gpulab_stack"] = "wrong"
    (inv / "local-wrong.yml").write_text(yaml.safe_dump(local_wrong, sort_keys=False))
    return profiles


def invoke(py: str, env: dict, out: Path, label: str, *args: str) -> dict:
    """`python -m invoke ARGS` from the checkout; its output goes to OUT/<label>.txt at once."""
    res = sh([py, "-m", "invoke", *args], env=env, cwd=REPO, timeout=300)
    rc = "killed: out of time" if res.timed_out else res.returncode
    (out / f"{label}.txt").write_text(
        f"$ invoke {' '.join(args)}   [exit {rc}, {res.seconds:.0f} s]\n{res.stdout}\n--- stderr\n{res.stderr}"
    )
    return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "timed_out": res.timed_out}


def _json(doc: dict | None):
    try:
        return json.loads(doc["stdout"]) if doc else None
    except (ValueError, TypeError):
        return None


def judge(audits: dict, validates: dict, wrong: tuple[str, str]) -> dict:
    """Did `real` give no drift and only passing stack checks, and `wrong` exactly one of each, on `wrong`'s component?

    audits and validates map real/wrong to the `--json` runs' {rc, stdout}.
    """
    drift, checks = {}, {}
    for k in ("real", "wrong"):
        doc = _json(audits.get(k))
        try:
            host = next(iter(doc["hosts"].values()))
            drift[k] = (
                None
                if host["state"] not in ("ok", "changed")
                else [(d["component"], d["expected"], d["found"]) for d in host["drift"]]
            )
        except (KeyError, StopIteration, TypeError, AttributeError):
            drift[k] = None
        doc = _json(validates.get(k))
        try:
            host = next(iter(doc["hosts"].values()))
            checks[k] = {
                c["check"]: [c["verdict"], c.get("measured"), c.get("expected")]
                for c in host["checks"]
                if c["check"].startswith("stack")
            }
        except (KeyError, StopIteration, TypeError, AttributeError):
            checks[k] = None
    comp = wrong[0]
    audit_ok = (
        drift["real"] == []
        and audits["real"]["rc"] == 0
        and drift["wrong"] is not None
        and [d[0] for d in drift["wrong"]] == [comp]
        and audits["wrong"]["rc"] == 1
    )
    validate_ok = (
        checks["real"] is not None
        and checks["wrong"] is not None
        and len(checks["real"]) >= 5
        and all(v[0] == "PASS" for v in checks["real"].values())
        and [k for k, v in checks["wrong"].items() if v[0] != "PASS"] == [f"stack {comp}"]
    )
    return {
        "ok": audit_ok and validate_ok,
        "audit_ok": audit_ok,
        "validate_ok": validate_ok,
        "audit_drift": drift,
        "validate_stack_checks": checks,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", required=True, help="folder of the controller's wheels (see the requirements file)")
    ap.add_argument("--out", required=True, help="folder for the records (evidence, outputs, summary.json)")
    ap.add_argument(
        "--real",
        action="append",
        default=[],
        metavar="KEY=VERSION",
        help=f"a version this machine runs, replacing what is read from it and the known {REAL}",
    )
    ap.add_argument("--budget", type=float, default=540, help="seconds for the whole run (default 540)")
    ap.add_argument("--proc", default="/proc/driver/nvidia/version", help=argparse.SUPPRESS)
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    overrides = {}
    for item in args.real:
        key, sep, value = item.partition("=")
        if not sep or key not in REAL or not re.fullmatch(r"[0-9]+(\.[0-9]+)+", value):
            print(
                f"stack_readback: --real {item!r}: use KEY=VERSION with KEY one of {', '.join(REAL)}", file=sys.stderr
            )
            return 2
        overrides[key] = value
    wheels, out = Path(args.wheels), Path(args.out)
    if not wheels.is_dir():
        print(f"stack_readback: --wheels {wheels}: no such folder", file=sys.stderr)
        return 2
    if not 60 <= args.budget <= 3600:
        print(f"stack_readback: --budget {args.budget:g}: use 60 to 3600 seconds", file=sys.stderr)
        return 2
    global CLOCK
    CLOCK = Clock(args.budget)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"stack_readback: --out {out}: {e.strerror}", file=sys.stderr)
        return 2
    py = sys.executable
    summary = {
        "ok": False,
        "step": "evidence",
        "error": None,
        "argv": sys.argv,
        "python": sys.version.split()[0],
        "executable": py,
        "known": dict(REAL),
    }
    work = Path(tempfile.mkdtemp(prefix="gpulab-readback-"))
    t0 = time.monotonic()
    try:
        evidence(out, py)
        summary["step"] = "driver"
        if driver_version(Path(args.proc), py) is None:
            summary["error"] = (
                f"no NVIDIA driver on this machine (no {args.proc}, nvidia-smi and NVML do not "
                "answer): nothing to read back"
            )
            return 1
        summary["step"] = "read"
        summary["read_independently"] = read = read_machine(py, Path(args.proc))
        real = {**REAL, **read, **overrides}
        summary["used"] = real
        summary["step"] = "controller packages"
        env = controller_env(work, wheels)
        sys.path.insert(0, str(work / "site"))
        summary["step"] = "profiles"
        profiles = write_profiles(work / "inv", real)
        wrong = wrong_version(real)
        summary["wrong"] = dict([wrong])
        summary["os"] = os_name()
        (out / "profiles.json").write_text(json.dumps(profiles, indent=1))
        env = {
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
            "INVOKE_GPULAB_STACKS": str(work / "inv" / "stacks"),
            "INVOKE_GPULAB_ARTIFACTS": str(work / "artifacts"),
            "INVOKE_GPULAB_RESULTS": str(work / "results"),
        }
        audits, validates = {}, {}
        for name, inv in (("real", "local.yml"), ("wrong", "local-wrong.yml")):
            inventory = str(work / "inv" / inv)
            summary["step"] = f"audit {name}"
            invoke(py, env, out, f"audit-{name}", "audit", "-i", inventory)
            audits[name] = invoke(py, env, out, f"audit-{name}-json", "audit", "--json", "-i", inventory)
            summary["step"] = f"validate {name}"
            invoke(py, env, out, f"validate-{name}", "validate", "--level", "quick", "-i", inventory)
            validates[name] = invoke(
                py, env, out, f"validate-{name}-json", "validate", "--level", "quick", "--json", "-i", inventory
            )
        summary["step"] = "judge"
        summary.update(judge(audits, validates, wrong))
        timed_out = [
            k
            for k, v in {
                **{f"audit {k}": v for k, v in audits.items()},
                **{f"validate {k}": v for k, v in validates.items()},
            }.items()
            if v["timed_out"]
        ]
        if timed_out:
            summary["error"] = f"out of time (--budget {args.budget:g} s) in: {', '.join(timed_out)}"
        summary["step"] = "done"
        return 0 if summary["ok"] else 1
    except Exception as e:  # any failure is recorded with its step, never lost
        summary["error"] = f"{type(e).__name__}: {e}"
        return 1
    finally:
        summary["seconds"] = round(time.monotonic() - t0, 1)
        try:
            (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        except OSError as e:
            print(f"stack_readback: cannot write {out / 'summary.json'}: {e.strerror}", file=sys.stderr)
        for sub in ("artifacts", "results"):  # ansible-runner's and validate's own records, for reading by hand
            if (work / sub).is_dir():
                shutil.copytree(
                    work / sub,
                    out / sub,
                    dirs_exist_ok=True,
                    symlinks=True,
                    ignore=shutil.ignore_patterns("fact_cache"),
                )
        shutil.rmtree(work, ignore_errors=True)
        if summary["error"]:
            print(f"stack_readback: {summary['step']}: {summary['error']} (records in {out})", file=sys.stderr)
        else:
            print(
                json.dumps(
                    {
                        k: summary.get(k)
                        for k in (
                            "ok",
                            "audit_ok",
                            "validate_ok",
                            "used",
                            "wrong",
                            "audit_drift",
                            "validate_stack_checks",
                        )
                    },
                    indent=1,
                )
            )
            print(
                f"stack_readback: {'expectations held' if summary['ok'] else 'expectations NOT held'} "
                f"(records in {out})"
            )


if __name__ == "__main__":
    sys.exit(main())
