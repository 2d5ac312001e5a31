"""The README's "Redo the R740 study", command by command, against SSH test hosts.

Four lab hosts carry the names, groups and variables of inventory/hosts.yml (the file
itself, with the lab's addresses and SSH settings put in): r740-01/02 in `t4`, r740-03/04
in `v100`, all on the `mlperf-v0.5` stack. The commands are read from the README section:
every `invoke` line of it must be one this test runs, and every `$ invoke` block's output
must be what the command prints here.

What the lab hosts cannot be, and how the commands run on them:
- they are Debian 12 without GPUs: `invoke provision` installs the stand-in NVIDIA
  packages of the lab's mirror (declared Ubuntu 18.04, the OS check off, as in
  test_provision.py; nvidia-smi reports each host's GPUs of the inventory); `invoke
  validate` then fails every host with "no NVIDIA GPU", as it must;
- `invoke datasets` prepares tiny archives in the real formats and tiny stand-ins of the
  pretrained backbones in theirs (a catalogue of the same benchmarks and entries as
  inventory/datasets.yml, given as gpulab.datasets_catalogue; R-50.pkl with an md5 alone,
  as published), so that the study's data check sees every entry a benchmark reads;
- the time-to-train sweeps are run as the README writes them with --dry-run (the data
  check passes on every host), then as written with the scale, workloads and seeds
  turned down through INVOKE_GPULAB_* (tiny ncf on the hosts' CPUs, which
  gpulab.sweep.cpu_without_gpus allows: a GPU host without GPUs is otherwise a failed host), and the throughput
  sweeps likewise (tiny ncf and gnmt): so that the reports have real run directories.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("tests.testlab.fixtures", reason="the SSH test lab (tests/testlab) is not in this checkout")

from tests.integration import provisioning_lab
from tests.unit.datasets.dataset_archives import build

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
INVOKE = Path(sys.executable).parent / "invoke"
T4, V100 = ["r740-01", "r740-02"], ["r740-03", "r740-04"]
GPUS = {
    "T4": {"name": "Tesla T4", "memory_mib": 15360},
    "V100-PCIE-16GB": {"name": "Tesla V100-PCIE-16GB", "memory_mib": 16160},
}
# what the lab hosts cannot do (provisioning_lab.PROVISION_VARS without the hosts' own facts)
LAB_ONLY = {
    k: v
    for k, v in provisioning_lab.PROVISION_VARS.items()
    if k not in ("gpulab_gpu_model", "gpulab_gpu_count", "gpulab_stack", "gpulab_os", "gpulab_mirror")
}


def section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Redo the R740 study\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def blocks(kind: str) -> list[list[str]]:
    return [b.splitlines() for b in re.findall(rf"^```{kind}\n(.*?)^```$", section(), re.S | re.M)]


def commands() -> list[str]:
    """Every invoke command of the section, in order (sh blocks, and `$ ` lines of console blocks)."""
    out = []
    for kind in ("sh", "console"):
        for b in blocks(kind):
            for line in b:
                line = line[2:] if line.startswith("$ ") else (line if kind == "sh" else "")
                if line.strip() and not line.lstrip().startswith("#"):
                    out.append(line.strip())
    return out


def shown(command: str) -> list[str]:
    """The output the README shows for a `$ command` line."""
    for b in blocks("console"):
        if b and b[0] == f"$ {command}":
            return b[1:]
    raise AssertionError(f"the README shows no output of {command!r}")


def one(pattern: str) -> str:
    found = {c for c in commands() if re.fullmatch(pattern, c)}
    assert len(found) == 1, (pattern, found)
    return found.pop()


class Walk:
    """The lab, its environment and the README's commands run against it."""

    def __init__(self, lab, work: Path):
        self.lab, self.work = lab, work
        self.results = work / "results"
        self.env = {
            **os.environ,
            **lab.ansible_env(),
            "PYTHONPATH": str(REPO),
            "INVOKE_GPULAB_INVENTORY": str(work / "hosts.yml"),
            "INVOKE_GPULAB_RESULTS": str(self.results),
            "INVOKE_GPULAB_ARTIFACTS": str(work / "artifacts"),
            "INVOKE_GPULAB_DATASETS_CATALOGUE": str(work / "catalogue.yml"),
        }
        self.ran: set[str] = set()

    def run(self, command: str, *, extra=(), env=None, timeout=900) -> subprocess.CompletedProcess:
        (p,) = self.together([(command, extra, env)], timeout=timeout)
        return p

    def together(self, jobs, timeout=900) -> list[subprocess.CompletedProcess]:
        """Run (command, extra, env) jobs at the same time, as from one shell each; their results in order."""
        started = []
        for command, extra, env in jobs:
            argv = shlex.split(command)
            assert argv[0] == "invoke", command
            # the README's results/ is the configured results folder (INVOKE_GPULAB_RESULTS here)
            argv = [re.sub(r"(^|,)results/", rf"\g<1>{self.results}/", a) for a in argv[1:]]
            self.ran.add(command)
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            proc = subprocess.Popen(
                [str(INVOKE), *argv, *extra],
                cwd=REPO,
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=err,
                text=True,
            )
            started.append((command, extra, argv, proc, out, err))
        done = []
        try:
            for command, extra, argv, proc, out, err in started:
                proc.wait(timeout=timeout)
                out.seek(0), err.seek(0)
                p = subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())
                print(f"$ {command} {' '.join(extra)} -> {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
                done.append(p)
        finally:
            for _, _, _, proc, out, err in started:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                out.close(), err.close()
        return done

    def untouched(self) -> bool:
        return all(self.lab.exec(n, "test -e /var/lib/gpulab", check=False).returncode != 0 for n in T4 + V100)


@pytest.fixture(scope="module")
def walk(testlab, tmp_path_factory):
    work = tmp_path_factory.mktemp("walkthrough")
    lab = testlab(names=T4 + V100)
    provisioning_lab.prepare(lab, ("ubuntu1804",))
    # inventory/hosts.yml as it is, with the lab's addresses, SSH settings and mirror
    inv = yaml.safe_load((REPO / "inventory" / "hosts.yml").read_text())
    lab_vars = yaml.safe_load(lab.inventory.read_text())["all"]["vars"]
    inv["all"]["vars"].update(lab_vars, gpulab_mirror=lab.http_url, **LAB_ONLY)
    groups = inv["all"]["children"]["r740"]
    groups["vars"].update(gpulab_os="Ubuntu 18.04", stack_profile_verify_os=False)
    for group in ("t4", "v100"):
        g = groups["children"][group]
        for name, h in g["hosts"].items():
            h["ansible_host"] = lab.hosts[name].address
            fake = [GPUS[g["vars"]["gpulab_gpu_model"]]] * g["vars"]["gpulab_gpu_count"]
            lab.exec(name, f"echo '{json.dumps(fake)}' > /etc/gpulab-testlab/fake-gpus.json")
    (work / "hosts.yml").write_text(yaml.safe_dump(inv, sort_keys=False))
    # tiny archives of every dataset, served at the mirror's layout <mirror>/datasets/<dataset>/<file>,
    # and a catalogue of them with the benchmarks of the real one
    entries, _ = build(work / "archives")
    real = yaml.safe_load((REPO / "inventory" / "datasets.yml").read_text())
    assert set(real["datasets"]) == set(entries), "a catalogue entry has no tiny archive to test it with"
    assert {n: e.get("kind", "data") for n, e in real["datasets"].items()} == {
        n: e.get("kind", "data") for n, e in entries.items()
    }
    assert {n for n, e in real["datasets"].items() if any(a["sha256"] is None for a in e["artifacts"])} == {
        n for n, e in entries.items() if any(a["sha256"] is None for a in e["artifacts"])
    }
    www = lab.state_dir / "www" / "datasets"
    for name, e in entries.items():
        (www / name).mkdir(parents=True)
        for a in e["artifacts"]:
            os.link(work / "archives" / name / a["file"], www / name / a["file"])
    cat = {
        "schema": 1,
        "version": "walkthrough-1",
        "origins": {"nowhere": None},
        "benchmarks": real["benchmarks"],
        "datasets": {
            n: {**e, "artifacts": [{**a, "origin": "nowhere"} for a in e["artifacts"]]} for n, e in entries.items()
        },
    }
    (work / "catalogue.yml").write_text(yaml.safe_dump(cat, sort_keys=False))
    walk = Walk(lab, work)
    walk.datasets = list(entries)
    walk.md5 = entries["r50-msra"]["artifacts"][0]["md5"]
    return walk


def test_1_missing_data_is_refused_before_any_host_is_touched(walk):
    command = one(r"invoke sweep --device t4 --name r740-t4")
    assert walk.untouched()
    p = walk.run(command)
    assert p.returncode == 2
    assert (p.stdout + p.stderr).splitlines() == shown(command)
    assert walk.untouched() and not walk.results.exists()


def test_2_provision(walk):
    p = walk.run(one(r"invoke provision"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    for name in T4 + V100:
        stack = json.loads(walk.lab.exec(name, "cat /etc/gpulab/stack.json").stdout)
        assert stack["stack"] == "mlperf-v0.5" and stack["drift"] == []
        assert stack["driver"]["version"] == "410.72" and stack["cuda"]["default"] == "10.0.130"


def test_3_datasets(walk):
    p = walk.run(one(r"invoke datasets --names \S+"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    for name in T4 + V100:
        for ds in walk.datasets:  # the five datasets and the backbones of ssd and maskrcnn
            doc = json.loads(walk.lab.exec(name, f"cat /var/lib/gpulab/data/{ds}/gpulab-dataset.json").stdout)
            assert doc["dataset"] == ds and doc["catalogue_version"] == "walkthrough-1"
        got = walk.lab.exec(name, "md5sum /var/lib/gpulab/data/r50-msra/R-50.pkl").stdout.split()[0]
        assert got == walk.md5


def test_4_validate(walk):
    # its history apart: a failing validate quarantines each host, and the sweeps below must still run here
    history = f"sqlite:///{walk.work / 'validate-history.sqlite'}"
    p = walk.run(one(r"invoke validate --level standard"), env={"INVOKE_GPULAB_HISTORY_URL": history})
    assert p.returncode == 1, p.stdout + p.stderr  # no host of the lab has a GPU the runner can use
    for name in T4 + V100:
        assert re.search(rf"^FAIL\s+{name}: GPU present: no NVIDIA GPU", p.stdout, re.M), p.stdout
        assert re.search(rf"^quarantined {name}: validate \S+: GPU present: no NVIDIA GPU", p.stdout, re.M), p.stdout


def test_5_the_dry_runs_print_what_the_readme_shows(walk):
    for command in (
        one(r"invoke sweep --device v100 --dry-run --name r740-v100"),
        one(r"invoke sweep --device v100 --mode throughput --dry-run --name r740-v100-throughput"),
    ):
        p = walk.run(command)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines() == shown(command)
        assert p.stderr == ""


def sweeps(pattern: str) -> list[str]:
    found = sorted({c for c in commands() if re.fullmatch(pattern, c)})
    assert len(found) == 2, found
    return found


# the lab's hosts have no GPU: their runs are on the CPU, asked for (a GPU host without GPUs is a failed host)
SMALL = {
    "INVOKE_GPULAB_SCALE": "tiny",
    "INVOKE_GPULAB_WORKLOADS": "ncf",
    "INVOKE_GPULAB_SEEDS": "1",
    "INVOKE_GPULAB_SWEEP_CPU_WITHOUT_GPUS": "1",
}


def test_6_the_time_to_train_sweeps(walk):
    commands = sweeps(r"invoke sweep --device (t4|v100) --name r740-(t4|v100)")
    for command in commands:
        # as written: the whole study passes its data check on every host
        p = walk.run(command, extra=["--dry-run"])
        assert p.returncode == 0, p.stderr
        assert (
            p.stdout.count(
                "data in /var/lib/gpulab/data: ready (imagenet, coco, resnet34-torchvision, r50-msra, "
                "wmt16, wmt17, ml-20m)"
            )
            == 2
        )
    # the groups at the same time, one shell each, as the README allows
    for p in walk.together([(command, (), SMALL) for command in commands]):
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    for name, hosts in (("r740-t4", T4), ("r740-v100", V100)):
        state = json.loads((walk.results / name / "sweep.json").read_text())
        assert sorted(r["host"] for r in state["runs"]) == hosts
        assert {r["state"] for r in state["runs"]} == {"complete"}, name


def test_7_the_throughput_sweeps(walk):
    commands = sweeps(r"invoke sweep --device (t4|v100) --mode throughput --name \S+")
    for p in walk.together([(command, (), {**SMALL, "INVOKE_GPULAB_WORKLOADS": "ncf,gnmt"}) for command in commands]):
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    for name, hosts in (("r740-t4-throughput", T4), ("r740-v100-throughput", V100)):
        state = json.loads((walk.results / name / "sweep.json").read_text())
        assert sorted(r["host"] for r in state["runs"]) == sorted(hosts * 2)
        assert {r["state"] for r in state["runs"]} == {"complete"}, name


def test_8_the_reports(walk):
    ttt = one(r"invoke report results/r740-t4,results/r740-v100 --out results/r740-study")
    thr = one(
        r"invoke report results/r740-t4-throughput,results/r740-v100-throughput "
        r"--out results/r740-study-throughput"
    )
    for command, out in ((ttt, "r740-study"), (thr, "r740-study-throughput")):
        p = walk.run(command)
        assert p.returncode == 0, p.stderr
        for f in (
            "report.html",
            "report.md",
            "summary.json",
            "tables/ratios.csv",
            "tables/scaling.csv",
            "tables/seeds.csv",
        ):
            assert (walk.results / out / f).is_file(), (out, f)
    doc = json.loads((walk.results / "r740-study" / "summary.json").read_text())
    assert {(r["benchmark"], r["runs"]) for r in doc["records"]} == {("ncf [tiny]", 4)}
    doc = json.loads((walk.results / "r740-study-throughput" / "summary.json").read_text())
    assert {r["benchmark"] for r in doc["records"]} == {"ncf [tiny]", "gnmt [tiny]"}
    assert all(r["throughput_mean"] and not r["too_few_runs"] for r in doc["records"])
    assert (walk.results / "r740-study-throughput" / "figures" / "fig2_throughput.png").is_file()


def test_9_every_command_of_the_section_was_run(walk):
    assert set(commands()) == walk.ran
