"""The stack facts of a real NVIDIA machine against profiles: `invoke audit` and `invoke validate`.

Run on a GPU machine from the checkout, in one command (standard library only to start):

    python3 benchmarks/stack_readback.py --wheels DIR --out OUT [--real KEY=VERSION ...]

1. Records the evidence as the machine itself tells it (nvidia-smi, /proc/driver/nvidia/version,
   /usr/local/cuda*, the package database, the Python packages, torch's own view) in
   OUT/evidence.txt, so that any drift below can be checked by hand.
2. Puts the controller's packages beside the machine's Python (`pip install --target`, offline
   from DIR: benchmarks/stack_readback.requirements.txt), so that the PyTorch read is its own.
3. Writes two profiles from inventory/stacks/current.yml into a scratch inventory: `real`, the
   versions this machine is known to run (REAL, or --real KEY=VERSION), and `wrong`, the same
   with one version changed (NCCL). The machine's OS (/etc/os-release) is added to `supports`.
4. Runs `invoke audit` and `invoke validate --level quick` (health only, no load: seconds) on
   the embedded default (inventory/local.yml's host, no gpulab_os: detected) against each.

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
# of its own wheels; the stack facts read the system's first (lab.validate.installed_version, the
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
    "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | grep -iE 'nvidia|cuda|cudnn|nccl'",
    "rpm -qa | grep -iE 'nvidia|cuda|cudnn|nccl'",
    "{py} -m pip list 2>/dev/null | grep -iE 'torch|nvidia|cuda|tensorflow|triton'",
    "{py} -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), "
    "torch.cuda.nccl.version(), torch.cuda.is_available())'",
]


def sh(cmd: str | list, *, env=None, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=isinstance(cmd, str), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def evidence(out: Path, py: str) -> None:
    with open(out / "evidence.txt", "w") as f:
        for cmd in EVIDENCE:
            cmd = cmd.replace("{py}", py)
            try:
                res = sh(cmd, timeout=120)
                text, rc = (res.stdout + res.stderr).rstrip(), res.returncode
            except subprocess.TimeoutExpired:
                text, rc = "(timed out)", "-"
            f.write(f"$ {cmd}   [exit {rc}]\n{text}\n\n")


def controller_env(work: Path, wheels: Path) -> dict:
    """The environment that puts the controller's packages in front of this interpreter's own.

    ``pip --target`` beside the running Python (a venv of it would not see the packages of
    the venv this Python may itself be, such as the one holding the machine's PyTorch).
    """
    site = work / "site"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    res = sh([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
              "--target", str(site), "-r", str(REQUIREMENTS)], env=env, timeout=1200)
    if res.returncode != 0:
        raise SystemExit(f"stack_readback: pip install --target {site} failed: {res.stderr.strip()[-800:]}")
    return {**os.environ, "PYTHONPATH": str(site), "PATH": f"{site / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


def os_name() -> str:
    fields = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        k, _, v = line.partition("=")
        fields[k] = v.strip().strip('"')
    names = {"ubuntu": "Ubuntu", "debian": "Debian", "rhel": "RedHat", "rocky": "Rocky", "centos": "CentOS",
             "almalinux": "AlmaLinux"}
    dist = names.get(fields.get("ID", ""), "")
    version = fields.get("VERSION_ID", "")
    return f"{dist} {version if dist == 'Ubuntu' else version.split('.')[0]}"


def write_profiles(inv: Path, real: dict) -> dict:
    """Scratch inventory: local.yml (stack `real`) and stacks/{real,wrong}.yml from current.yml."""
    import yaml  # the controller environment's (run after controller_env)

    stacks = inv / "stacks"
    stacks.mkdir(parents=True)
    base = yaml.safe_load((REPO / "inventory" / "stacks" / "current.yml").read_text())
    local = yaml.safe_load((REPO / "inventory" / "local.yml").read_text())
    profiles = {}
    for name, change in (("real", None), ("wrong", WRONG)):
        prof = json.loads(json.dumps(base))
        prof["name"] = name
        prof["description"] = f"the GPU machine's stack as known ({name})"
        prof["driver"] = {"branch": real["driver"].split(".")[0], "version": real["driver"]}
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
        if here.split()[0] and here not in prof["supports"]:
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
    t0 = time.monotonic()
    res = sh([py, "-m", "invoke", *args], env=env, cwd=REPO, timeout=1800)
    (out / f"{label}.txt").write_text(f"$ invoke {' '.join(args)}   [exit {res.returncode}, "
                                      f"{time.monotonic() - t0:.0f} s]\n{res.stdout}\n--- stderr\n{res.stderr}")
    return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr}


def judge(audits: dict, validates: dict) -> dict:
    drift = {k: re.findall(r"^localhost\s+\S+\s+(\w+)\s+expected (\S+)\s+found (.+)$", v["stdout"], re.M)
             for k, v in audits.items()}
    checks = {}
    for k, v in validates.items():
        try:
            doc = json.loads(v["stdout"])
            host = next(iter(doc["hosts"].values()))
            checks[k] = {c["check"]: [c["verdict"], c.get("measured"), c.get("expected")]
                         for c in host["checks"] if c["check"].startswith("stack")}
        except (ValueError, KeyError, StopIteration, TypeError):
            checks[k] = None
    ok = (audits["real"]["rc"] == 0 and drift["real"] == [] and "no drift" in audits["real"]["stdout"]
          and audits["wrong"]["rc"] == 1 and len(drift["wrong"]) == 1 and drift["wrong"][0][0] == WRONG[0]
          and checks["real"] is not None and checks["wrong"] is not None
          and all(v[0] == "PASS" for v in checks["real"].values()) and len(checks["real"]) >= 5
          and [k for k, v in checks["wrong"].items() if v[0] != "PASS"] == [f"stack {WRONG[0]}"])
    return {"ok": ok, "audit_drift": drift, "validate_stack_checks": checks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", required=True, help="folder of the controller's wheels (see the requirements file)")
    ap.add_argument("--out", required=True, help="folder for the records (evidence, outputs, summary.json)")
    ap.add_argument("--real", action="append", default=[], metavar="KEY=VERSION",
                    help=f"a version this machine runs, replacing the known one {REAL}")
    args = ap.parse_args(argv)
    wheels, out = Path(args.wheels), Path(args.out)
    real = dict(REAL)
    for item in args.real:
        key, sep, value = item.partition("=")
        if not sep or key not in REAL or not re.fullmatch(r"[0-9]+(\.[0-9]+)+", value):
            print(f"stack_readback: --real {item!r}: use KEY=VERSION with KEY one of {', '.join(REAL)}", file=sys.stderr)
            return 2
        real[key] = value
    if not wheels.is_dir():
        print(f"stack_readback: --wheels {wheels}: no such folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    evidence(out, sys.executable)
    work = Path(tempfile.mkdtemp(prefix="gpulab-readback-"))
    try:
        env = controller_env(work, wheels)
        py = sys.executable
        sys.path.insert(0, str(work / "site"))
        profiles = write_profiles(work / "inv", real)
        (out / "profiles.json").write_text(json.dumps(profiles, indent=1))
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
               "INVOKE_GPULAB_STACKS": str(work / "inv" / "stacks"),
               "INVOKE_GPULAB_ARTIFACTS": str(work / "artifacts"), "INVOKE_GPULAB_RESULTS": str(work / "results")}
        audits, validates = {}, {}
        for name, inv in (("real", "local.yml"), ("wrong", "local-wrong.yml")):
            inventory = str(work / "inv" / inv)
            audits[name] = invoke(py, env, out, f"audit-{name}", "audit", "-i", inventory)
            invoke(py, env, out, f"audit-{name}-json", "audit", "--json", "-i", inventory)
            validates[name] = invoke(py, env, out, f"validate-{name}", "validate", "--level", "quick", "--json",
                                     "-i", inventory)
        summary = {**judge(audits, validates), "known": real, "wrong": dict([WRONG]), "os": os_name(),
                   "python": sys.version.split()[0]}
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary, indent=1))
        return 0 if summary["ok"] else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
