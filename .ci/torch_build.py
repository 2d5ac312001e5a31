"""Which PyTorch build .ci/setup installs on this machine: prints ``spec``, ``index`` and ``why`` lines.

* no NVIDIA driver: the CPU build (``torch==V+cpu`` from PyTorch's CPU index);
* a driver: the newest CUDA build of that release the driver supports and that
  runs on every GPU present (CUDA 13.0 needs driver >= 580.65.06 and a GPU of
  compute capability 7.5 or newer; CUDA 12.6 needs driver >= 525.60.13 and
  still runs Maxwell, Pascal and Volta, e.g. the V100);
* a driver too old for any of them: the CPU build, and ``why`` says so.

The driver version comes from ``nvidia-smi`` (with the GPUs' compute
capabilities), else from /proc/driver/nvidia/version. Any Python 3 runs this
(.ci/setup calls it before the virtual environment exists): standard library only.
Usage: torch_build.py [VERSION] [--proc PATH] [--smi PATH]
"""

import re
import shutil
import subprocess
import sys

TORCH = "2.13.0"
INDEX = "https://download.pytorch.org/whl/{}"
# PyTorch 2.13's CUDA builds, newest first: (tag, minimum driver, oldest compute capability).
# Sources: PyTorch RELEASE.md support matrix for 2.12/2.13 (CUDA 12.6.3 legacy: Maxwell 5.0
# to Hopper 9.0; CUDA 13.0.2 stable: Turing 7.5 to Blackwell 12.0); CUDA 13.0 and 12.x
# release notes, minimum driver for minor version compatibility (580.65.06, 525.60.13).
BUILDS = [("cu130", (580, 65, 6), (7, 5)), ("cu126", (525, 60, 13), (5, 0))]


def _numbers(text):
    return tuple(int(x) for x in re.findall(r"[0-9]+", text or ""))


def driver_from_smi(smi):
    """(driver version, [compute capabilities]) from nvidia-smi, or (None, [])."""
    if not smi:
        return None, []
    try:
        res = subprocess.run(
            [smi, "--query-gpu=driver_version,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, []
    if res.returncode != 0:
        return None, []
    version, caps = None, []
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 1 and re.fullmatch(r"[0-9]+(\.[0-9]+)+", parts[0]):
            version = parts[0]
        if len(parts) >= 2 and re.fullmatch(r"[0-9]+\.[0-9]+", parts[1]):
            caps.append(_numbers(parts[1]))
    return version, caps


def driver_from_proc(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(4096)
    except OSError:
        return None
    m = re.search(r"Kernel Module(?: for [\w-]+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
    return m.group(1) if m else None


def choose(driver, caps, torch=TORCH):
    """(spec, index, why) for a driver version (None: no driver) and the GPUs' compute capabilities."""
    if not driver:
        return f"torch=={torch}+cpu", INDEX.format("cpu"), "no NVIDIA driver found: the CPU build"
    have = _numbers(driver)
    for tag, min_driver, min_cap in BUILDS:
        if have >= min_driver and all(cap >= min_cap for cap in caps):
            return (f"torch=={torch}+{tag}", INDEX.format(tag), f"NVIDIA driver {driver}: the {tag} build")
    return (
        f"torch=={torch}+cpu",
        INDEX.format("cpu"),
        f"NVIDIA driver {driver} runs none of PyTorch {torch}'s CUDA builds "
        f"(cu130 needs >= 580.65.06, cu126 >= 525.60.13): the CPU build",
    )


def main(argv):
    torch, proc, smi = TORCH, "/proc/driver/nvidia/version", shutil.which("nvidia-smi")
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--proc" and args:
            proc = args.pop(0)
        elif arg == "--smi" and args:
            smi = args.pop(0) or None
        elif re.fullmatch(r"[0-9]+(\.[0-9]+)+", arg):
            torch = arg
        else:
            print(f"torch_build.py: unknown argument {arg!r}", file=sys.stderr)
            return 2
    driver, caps = driver_from_smi(smi)
    if driver is None:
        driver = driver_from_proc(proc)
    spec, index, why = choose(driver, caps, torch)
    print(f"spec={spec}\nindex={index}\nwhy={why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
