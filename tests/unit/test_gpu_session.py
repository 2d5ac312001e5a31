"""benchmarks/gpu_session.sh, the GPU work still to be recorded, names only files and options that exist.

The script runs on the GPU machine only (no GPU here); its --dry-run prints each
part's commands. Each command's options are checked against the --help of the
program it calls, so that a renamed option or a moved script fails here and not
in a device call that costs GPU time.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
WORKLOADS = ("resnet50", "ssd", "maskrcnn", "gnmt", "transformer", "ncf")
PARTS = (
    "gpu-tests",
    "maxpool",
    "gpu-tests-long",
    "stem",
    *(f"throughput-{w}" for w in WORKLOADS),
    *(f"ttfs-{w}" for w in WORKLOADS),
    *(f"profile-{w}" for w in WORKLOADS),
    "ttfs-shipped",
    "validate",
    "nvbandwidth",
    "tune",
    "speed-resnet50",
    "bn-resnet50",
)


def dry_run(*parts: str, env_out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *parts],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "OUT": str(env_out), "GPULAB_SESSION_WORK": str(env_out / "work")},
    )


def commands(tmp_path) -> dict[str, list[str]]:
    r = dry_run(*PARTS, env_out=tmp_path / "out")
    assert r.returncode == 0, r.stderr
    found = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^([a-z0-9-]+) \(\d+s\): (.*)$", line)
        if m:
            found[m.group(1)] = shlex.split(m.group(2))
    return found


def help_of(argv: list[str]) -> str:
    r = subprocess.run(
        [sys.executable, *argv, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, (argv, r.stderr[-2000:])
    return r.stdout


def options(argv: list[str]) -> set[str]:
    return {a.split("=")[0] for a in argv if a.startswith("--")}


def test_every_part_is_listed_and_nothing_is_written(tmp_path):
    found = commands(tmp_path)
    assert set(found) == {
        "gpu-tests",
        "maxpool",
        "gpu-tests-long",
        "stem",
        "shipped-pilot",
        "shipped-second",
        "validate",
        "nvbandwidth-build",
        "nvbandwidth-run",
        "validate-burnin",
        "tune",
        "speed-resnet50",
        "bn-resnet50",
        *(f"throughput-{w}" for w in WORKLOADS),
        *(f"ttfs-{w}-cold" for w in WORKLOADS),
        *(f"ttfs-{w}-warm" for w in WORKLOADS),
        *(f"profile-{w}" for w in WORKLOADS),
    }
    assert not (tmp_path / "out").exists() and not (tmp_path / "out" / "work").exists()


@pytest.mark.parametrize("bad", ["nosuch", "throughput", "throughput-bert", "ttfs", "ttfs-bert", "profile-"])
def test_an_unknown_part_is_refused_before_anything_runs(tmp_path, bad):
    r = dry_run("gpu-tests", bad, env_out=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().startswith(f"gpu_session: no part named {bad}")


def test_each_throughput_part_is_planned_to_fit_one_call(tmp_path):
    """One workload a part; its deadline inside the part's limit, and the limit inside a 10-minute call."""
    found = commands(tmp_path)
    for w in WORKLOADS:
        argv = found[f"throughput-{w}"]
        assert argv[argv.index("--workloads") + 1] == w and argv[argv.index("--runner-runs") + 1] == w
    r = dry_run(*(f"throughput-{w}" for w in WORKLOADS), env_out=tmp_path / "out")
    for line in r.stdout.splitlines()[1:]:
        limit = int(re.match(r"^throughput-[a-z0-9]+ \((\d+)s\)", line).group(1))
        deadline = float(shlex.split(line)[shlex.split(line).index("--deadline") + 1])
        assert 0 < deadline < limit <= 570, line


def test_the_tune_part_searches_ncf_small_on_this_machine_into_work(tmp_path):
    """Issue 41's GPU search: ncf at the small scale on localhost (no SSH), the reference recipe first, the
    study's SQLite file and its report under the session's work folder (they come back in its archive)."""
    argv = commands(tmp_path)["tune"]
    work = tmp_path / "out" / "work"
    assert argv[:2] == ["env", f"INVOKE_GPULAB_RESULTS={work}/tune-results"]
    assert argv[argv.index("python3") + 1 : argv.index("python3") + 5] == ["-m", "invoke", "tune", "ncf"]
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert opt["--host"] == "localhost" and opt["--inventory"] == "inventory/local.yml"
    assert opt["--scale"] == "small" and int(opt["--seeds"]) >= 3 and "--baseline" not in opt
    assert opt["--gpus"] == "1"  # one GPU a run, on any machine: the trials compare like with like
    r = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "tune"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "OUT": str(tmp_path / "o2"),
            "GPULAB_SESSION_WORK": str(tmp_path / "w2"),
            "GPULAB_TUNE_SCALE": "tiny",
            "GPULAB_TUNE_SEEDS": "2",
            "GPULAB_TUNE_TRIALS": "2",
            "GPULAB_TUNE_GPUS": "",
            "GPULAB_TUNE_WORKLOAD": "gnmt",
        },
    )
    assert r.returncode == 0, r.stderr
    assert (
        "tune gnmt --host localhost --scale tiny --seeds 2 --trials 2 --name tune-gnmt-tiny-gpu --inventory "
        "inventory/local.yml\n"
    ) in r.stdout, r.stdout


def test_first_steps_and_profiles_of_every_workload(tmp_path):
    """ttfs-W: a cold and a warm full-scale runner run of W with one cache; profile-W: profile_step.py of W at full
    scale reading that cache, writing its JSON and table into the session's work folder (the archive)."""
    found = commands(tmp_path)
    work = str(tmp_path / "out" / "work")
    for w in WORKLOADS:
        cold, warm = found[f"ttfs-{w}-cold"], found[f"ttfs-{w}-warm"]
        for argv in (cold, warm):
            assert argv[argv.index("run") + 1] == w and argv[argv.index("--scale") + 1] == "full"
            assert argv[argv.index("--cache-dir") + 1] == f"{work}/ttfs-cache-{w}"
        assert cold[cold.index("--out") + 1] != warm[warm.index("--out") + 1]
        prof = found[f"profile-{w}"]
        assert f"TORCHINDUCTOR_CACHE_DIR={work}/ttfs-cache-{w}/inductor" in prof
        assert prof[prof.index("benchmarks/profile_step.py") + 1] == w
        assert prof[prof.index("--table") + 1] == f"{work}/profile-{w}.md"
        assert prof[prof.index("--out") + 1] == f"{work}/profile-{w}.json"
    # the planned call of issue 47: four workloads' first steps and profiles within one call's budget
    r = dry_run(
        *(f"{p}-{w}" for w in ("ncf", "gnmt", "transformer", "ssd") for p in ("ttfs", "profile")),
        env_out=tmp_path / "out",
    )
    assert r.returncode == 0, r.stderr
    assert [ln.split(" ")[0] for ln in r.stdout.splitlines()[1:]] == [
        n for w in ("ncf", "gnmt", "transformer", "ssd") for n in (f"ttfs-{w}-cold", f"ttfs-{w}-warm", f"profile-{w}")
    ]


@pytest.mark.parametrize(
    "tries, ok",
    [
        ("threads1:TORCHINDUCTOR_COMPILE_THREADS=1 two:A=1:B_2=x", True),
        ("threads1", False),
        ("Bad:A=1", False),
        ("x:a=1", False),
    ],
)
def test_first_step_tries_add_warm_runs_with_their_environment(tmp_path, tries, ok):
    r = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "ttfs-ncf"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "OUT": str(tmp_path / "o"),
            "GPULAB_SESSION_WORK": str(tmp_path / "w"),
            "GPULAB_TTFS_TRIES": tries,
        },
    )
    if not ok:
        assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r
        assert r.stderr.startswith(f"gpu_session: GPULAB_TTFS_TRIES: {tries} is not NAME:VAR=VALUE"), r.stderr
        return
    assert r.returncode == 0, r.stderr
    runs = {ln.split(" ")[0]: shlex.split(ln.split(": ", 1)[1]) for ln in r.stdout.splitlines()[1:]}
    assert list(runs) == ["ttfs-ncf-cold", "ttfs-ncf-warm", "ttfs-ncf-threads1", "ttfs-ncf-two"]
    assert runs["ttfs-ncf-threads1"][:3] == ["env", "TORCHINDUCTOR_COMPILE_THREADS=1", "python3"]
    assert runs["ttfs-ncf-two"][:4] == ["env", "A=1", "B_2=x", "python3"]
    cache = runs["ttfs-ncf-warm"][runs["ttfs-ncf-warm"].index("--cache-dir") + 1]
    assert runs["ttfs-ncf-two"][runs["ttfs-ncf-two"].index("--cache-dir") + 1] == cache  # warm: the same cache


def test_the_resnet50_candidates_run_beside_plain_compile_and_leave_the_profile_its_cache(tmp_path):
    """Issue 47's resnet50 call: plain torch.compile first and again later (the drift), the runner's path and
    each with CUDA graphs between, then without cuDNN's search, in one cache that profile-resnet50 then reads;
    the part's deadline inside its limit, and the two parts inside one call's budget."""
    r = dry_run("speed-resnet50", "profile-resnet50", env_out=tmp_path / "out")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()[1:]
    speed, prof = (shlex.split(ln.split(": ", 1)[1]) for ln in lines)
    work = tmp_path / "out" / "work"
    assert speed[speed.index("--cache") + 1] == f"{work}/ttfs-cache-resnet50"
    assert f"TORCHINDUCTOR_CACHE_DIR={work}/ttfs-cache-resnet50/inductor" in prof
    variants = [speed[i + 1] for i, a in enumerate(speed) if a == "--variant"]
    assert variants[0] == variants[4] == "resnet50 compiled" and variants[1] == "resnet50"
    assert variants[2:4] == ["resnet50 compiled mode=reduce-overhead", "resnet50 mode=reduce-overhead"]
    assert variants[5] == "resnet50 compiled cudnn=off"  # warm, as variants[4]: the first step's cuDNN search
    limits = [int(re.match(r"^[a-z0-9-]+ \((\d+)s\)", ln).group(1)) for ln in lines]
    assert len(variants) == 6
    # in a 540 s call: setup (~20 s) and the archive (15 s) leave the profile 60 s or more
    assert float(speed[speed.index("--deadline") + 1]) < limits[0] <= 540 - 20 - 15 - 60


@pytest.mark.slow
def test_the_options_each_command_uses_exist(tmp_path):
    found = commands(tmp_path)
    python = [c[c.index("python3") :] for c in found.values() if "python3" in c]
    for argv in python:
        argv = argv[1:]
        if argv[:2] == ["-m", "pytest"]:
            marker = argv[argv.index("-m", 1) + 1]
            assert re.fullmatch(r"(not )?long", marker)
            assert (ROOT / argv[2]).is_dir()
            continue
        if argv[:2] == ["-m", "runner"]:
            text = help_of(["-m", "runner", "run"])
        elif argv[:2] == ["-m", "invoke"]:
            text = help_of(["-m", "invoke", argv[2]])
            if argv[2] == "validate":
                assert argv[argv.index("--level") + 1] in ("standard", "burn-in")
        else:
            assert (ROOT / argv[0]).is_file(), argv[0]
            text = help_of([argv[0]])
        missing = {o for o in options(argv) if o not in text}
        assert not missing, (argv, missing)


def _tracked_gpu_code_id() -> str:
    """The id of benchmarks/gpu_session.sh's gpu_code_id, computed from git's own list of tracked files."""
    import hashlib

    line = next(ln for ln in SCRIPT.read_text().splitlines() if ln.startswith("GPU_CODE="))
    paths = shlex.split(line.split("=", 1)[1])[0].split()
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *paths], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    files = sorted(f for f in listed if f and not f.startswith(b"benchmarks/recorded/") and not f.endswith(b".md"))
    sums = b"".join(
        hashlib.sha256((ROOT / f.decode()).read_bytes()).hexdigest().encode() + b"  " + f + b"\n" for f in files
    )
    return hashlib.sha256(sums).hexdigest()[:16]


def test_the_gpu_code_id_covers_exactly_the_tracked_code(tmp_path):
    """Records made at two commits can be shown to have run the same code: the id the GPU machine prints
    (no .git there) is the one of git's tracked files, whatever caches or records lie beside them."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    if subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=normal", "--", "runner", "benchmarks", "tests/gpu", "lab"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip():
        pytest.skip("uncommitted changes in the GPU code: the id would differ from git's by design")
    r = dry_run("ttfs-ncf", env_out=tmp_path / "out")
    assert r.returncode == 0, r.stderr
    shown = re.search(r"gpu code ([0-9a-f]{16})$", r.stdout.splitlines()[0])
    assert shown, r.stdout.splitlines()[0]
    assert shown.group(1) == _tracked_gpu_code_id()
