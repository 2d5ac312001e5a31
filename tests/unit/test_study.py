"""The reference study as the sweep's defaults: the plan of the example lab, its estimates,
the read-only check of prepared data, and `invoke demo` keeping its own small sweep.

Prepared data here is made by the runner's own preparation code (runner.datasets) from
tiny archives in the real formats, and probed through lab.hosts.remote's local host, which runs
the same shell command as over SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.hosts import datasets
from lab.hosts import inventory
from lab.sweep import preflight
from lab.sweep import study
from lab.sweep import plan as pl
from lab.sweep import state as sweepstate
from lab.core import config
from lab.core.errors import ConfigError
from lab.core.mlperf import Rules

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "hosts.yml"
SIX = ["resnet50", "ssd", "maskrcnn", "gnmt", "transformer", "ncf"]


def invoke(*args, env=None, timeout=300):
    full_env = dict(
        os.environ, PYTHONPATH=str(ROOT), INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"), **(env or {})
    )
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True, env=full_env, timeout=timeout
    )


def runs_required(w):
    rules = Rules()
    return rules.benchmarks[rules.benchmark(w)].runs_required


# --------------------------------------------------------------------------- the plan of the example lab


@pytest.mark.parametrize("device, counts", [("t4", [1, 2, 3, 4]), ("v100", [1, 2, 3])])
def test_the_default_plan_of_the_example_lab_is_the_study(device, counts):
    hosts = inventory.load(EXAMPLE).select(device=device)
    runs = pl.plan(hosts, ["all"], "all", "auto", "ttt", "full")
    for h in hosts:
        mine = [r for r in runs if r.host == h.name]
        assert list(dict.fromkeys(r.workload for r in mine)) == SIX
        for w in SIX:
            got = [(r.gpus, r.seed) for r in mine if r.workload == w]
            assert got == [(n, s) for n in counts for s in range(1, runs_required(w) + 1)], (h.name, w)
        assert {(r.mode, r.scale) for r in mine} == {("ttt", "full")}
    assert len(runs) == len(hosts) * len(counts) * (5 + 5 + 5 + 10 + 10 + 100)


def test_seeds_auto_and_mlperf_by_mode():
    hosts = inventory.load(EXAMPLE).select(device="v100")
    thr = pl.plan(hosts, ["all"], "all", "auto", "throughput", "full")
    assert len(thr) == 2 * 6 * 3 and {r.seed for r in thr} == {1}  # one run per configuration
    mlperf = pl.plan(hosts, ["gnmt"], "1", "mlperf", "throughput", "full")
    assert len(mlperf) == 2 * 10  # mlperf means the run count in any mode
    with pytest.raises(ConfigError, match="'all' stands for the study's benchmarks"):
        pl.plan(hosts, ["all", "ncf"], "1", 1)
    with pytest.raises(ConfigError, match="is not a number of seeds, 'auto' or 'mlperf'"):
        pl.plan(hosts, ["ncf"], "1", "most")


def test_settings_defaults_are_the_study_and_the_demo_keeps_its_own():
    cfg = config.defaults()["gpulab"]
    assert (cfg["workloads"], cfg["seeds"], cfg["gpus"], cfg["mode"], cfg["scale"]) == (
        "all",
        "auto",
        "all",
        "ttt",
        "full",
    )
    demo = cfg["demo"]
    assert (demo["workloads"], demo["seeds"], demo["mode"], demo["scale"]) == ("ncf", "2", "ttt", "tiny")


def test_throughput_dry_run_of_the_example_lab_through_the_cli():
    """No prepared data is read in throughput mode, so the dry run contacts no host."""
    r = invoke("sweep", "--device", "t4", "--mode", "throughput", "--dry-run", "--name", "fig2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "sweep fig2: mode throughput, scale full; 48 runs on 2 unit(s)"
    for host in ("r740-01", "r740-02"):
        i = lines.index(next(x for x in lines if x.startswith(f"{host} (4x T4): 24 runs, about ")))
        rows = lines[i + 1 : i + 7]
        assert [x.split()[0] for x in rows] == SIX
        assert all(" GPUs 1,2,3,4 " in x and " x   1 seed(s) " in x and " 4 runs " in x for x in rows), rows
    assert lines[-1] == "48 runs planned for sweep fig2 on 2 unit(s); nothing started (--dry-run)"


def test_the_ttt_plan_shows_days_of_machine_time():
    hosts = inventory.load(EXAMPLE).select(device="v100")
    runs = pl.plan(hosts, ["all"], "all", "auto", "ttt", "full")
    lines, totals = study.describe(runs, hosts)
    assert lines[0].startswith("r740-03 (3x V100-PCIe): 405 runs, about ") and " d " in lines[0]
    row = next(x for x in lines if x.strip().startswith("ncf"))
    assert " GPUs 1,2,3 " in row and " x 100 seed(s) " in row and " 300 runs " in row
    assert all(t.minutes > 7 * 24 * 60 and t.unknown == 0 for t in totals)  # more than a week per host
    assert lines[-1].startswith("estimated wall time: ")
    # the study ran each configuration once: about a week on a V100 host (README, "Redo the R740 study")
    once = study.describe(pl.plan(hosts, ["all"], "all", "1", "ttt", "full"), hosts)[1]
    assert all(6 * 24 * 60 < t.minutes < 8 * 24 * 60 for t in once)


# --------------------------------------------------------------------------- estimates


def test_estimates_follow_the_data_file():
    st = study.load()
    est = st.estimates
    ref = est["workloads"]["resnet50"]["reference"]
    one_v100 = ref["epoch_minutes"] * ref["gpus"] * 1.12
    overhead = est["run_overhead_minutes"]["value"]
    assert st.minutes("resnet50", "ttt", "V100-PCIe", 1) == pytest.approx(63 * one_v100 + overhead)
    assert st.minutes("resnet50", "ttt", "T4", 1) == pytest.approx(63 * one_v100 * 3.6 + overhead)
    assert st.minutes("resnet50", "ttt", "V100-PCIe", 2) == pytest.approx(63 * one_v100 / (2 * 0.9) + overhead)
    # the study's epochs by device and GPU count (the seed effect)
    g = est["workloads"]["gnmt"]["reference"]
    assert st.minutes("gnmt", "ttt", "T4", 4) == pytest.approx(
        4 * g["epoch_minutes"] * 8 * 1.12 * 3.0 / (4 * 0.9) + overhead
    )
    assert st.epochs("gnmt", "V100-PCIe", 3) == 9 and st.epochs("gnmt", "H200", 1) == 3
    assert st.minutes("ncf", "throughput", "T4", 3) == est["workloads"]["ncf"]["throughput_run_minutes"]["value"]
    assert st.minutes("ncf", "ttt", "H200", 1) is None  # no figure: no guess
    assert study.fmt_minutes(None) == "unknown" and study.fmt_minutes(0.2) == "under 1 min"
    assert study.fmt_minutes(125) == "2 h 05 min" and study.fmt_minutes(3 * 24 * 60 + 61) == "3 d 1 h"


def test_earlier_runs_of_this_lab_replace_the_figures(tmp_path):
    results = tmp_path / "results"
    runs = [
        pl.PlannedRun(
            "gpu1",
            "ncf",
            2,
            s,
            "ttt",
            "full",
            state="complete",
            outcome="success",
            started=f"2026-12-01T10:{s:02d}:00.000Z",
            ended=f"2026-12-01T10:{s + 10 * s:02d}:00.000Z",
        )
        for s in (1, 2, 3)
    ]
    runs.append(
        pl.PlannedRun(
            "gpu1",
            "ncf",
            2,
            4,
            "ttt",
            "full",
            state="failed",
            started="2026-12-01T11:00:00Z",
            ended="2026-12-01T15:00:00Z",
        )
    )
    sweepstate.Sweep(
        root=results / "old",
        name="old",
        runs=runs,
        hosts={
            "gpu1": {
                "gpu_model": "auto",
                "topology": {
                    "gpu_count": 2,
                    "gpus": [{"index": 0, "name": "Tesla T4"}, {"index": 1, "name": "Tesla T4"}],
                },
            }
        },
    ).save()
    (results / "junk").mkdir()
    (results / "junk" / "sweep.json").write_text("{not json")  # passed over
    past = study.history(results)
    assert past == {
        ("ncf", "ttt", "full", "T4", 2): [10.0, 20.0, 30.0],  # failed runs do not count
        ("host", "gpu1", "ncf", "ttt", "full", 2): [10.0, 20.0, 30.0],
    }
    run = pl.PlannedRun("r740-01", "ncf", 2, 9, "ttt", "full")
    assert study.estimate(run, "T4", past) == (20.0, "earlier runs")
    assert study.estimate(run, "V100-PCIe", past)[1] == "lab/data/study.yml"
    tiny = pl.PlannedRun("r740-01", "ncf", 2, 1, "ttt", "tiny")
    assert study.estimate(tiny, "T4", past) == (None, "test scale")
    # run_timeout_minutes: auto -> three times the estimate, at least an hour
    assert study.time_limit_minutes(run, "T4", past) == 60.0
    long = pl.PlannedRun("r740-01", "resnet50", 1, 1, "ttt", "full")
    assert study.time_limit_minutes(long, "V100-PCIe", {}) == pytest.approx(
        3 * study.load().minutes("resnet50", "ttt", "V100-PCIe", 1)
    )
    assert study.time_limit_minutes(long, None, {}) == 10080 and study.time_limit_minutes(tiny, "T4", {}) == 60
    mask = pl.PlannedRun("r740-01", "maskrcnn", 1, 1, "ttt", "full")  # 4.4 days: capped at a week
    assert study.load().minutes("maskrcnn", "ttt", "T4", 1) > 4 * 24 * 60
    assert study.time_limit_minutes(mask, "T4", {}) == 7 * 24 * 60


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["estimates"]["devices"]["T4"].update(relative_to="A100"), "relative_to 'A100' is not a device"),
        (
            lambda d: d["estimates"]["devices"]["V100-PCIe"].update(relative_to="T4", by_workload={}, factor=None),
            "estimates.devices.V100-PCIe",
        ),
        (lambda d: d["estimates"]["workloads"].pop("ssd"), "no entry for the study's workload 'ssd'"),
        (
            lambda d: d["estimates"]["workloads"]["ncf"]["epochs"].pop("source"),
            "estimates.workloads.ncf.epochs: source",
        ),
        (lambda d: d["estimates"]["scaling_efficiency"].update(value=1.5), "scaling_efficiency"),
    ],
)
def test_a_bad_study_file_is_one_line_naming_the_place(tmp_path, mutate, message):
    doc = yaml.safe_load(study.DATA.read_text())
    mutate(doc)
    path = tmp_path / "study.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=message) as exc:
        study.load(path)
    assert str(path) in exc.value.message


# --------------------------------------------------------------------------- prepared data


def test_lab_and_runner_agree_on_the_spec_digest_of_every_catalogue_entry():
    from runner.datasets.common import spec_digest

    cat = datasets.load_catalogue()
    for name in cat.datasets:
        assert cat.spec_digest(name) == spec_digest(cat.spec(name)), name


@pytest.fixture(scope="module")
def data_lab(tmp_path_factory):
    """A local host (V100-PCIe x3 by its inventory) whose data root holds ml-20m, prepared by the runner."""
    from runner.datasets.prepare import prepare
    from tests.unit.datasets import dataset_archives as arch

    d = tmp_path_factory.mktemp("study")
    entries = {}
    (d / "arch" / "ml-20m").mkdir(parents=True)
    entries["ml-20m"], _ = arch.movielens(d / "arch" / "ml-20m")
    (d / "arch" / "wmt16").mkdir(parents=True)
    entries["wmt16"], _ = arch.wmt(d / "arch" / "wmt16", "wmt16", 400)
    cat = {
        "schema": 1,
        "version": "study-test-1",
        "origins": {"nowhere": None},
        "benchmarks": {"ncf": "ml-20m", "gnmt": "wmt16"},
        "datasets": {
            n: {**e, "artifacts": [{**a, "origin": "nowhere"} for a in e["artifacts"]]} for n, e in entries.items()
        },
    }
    (d / "catalogue.yml").write_text(yaml.safe_dump(cat, sort_keys=False))
    workdir = d / "wd"
    prepare(arch.spec(entries, "ml-20m", "study-test-1"), d / "arch" / "ml-20m", workdir / "data")
    inv = {
        "all": {
            "hosts": {
                "here": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    "gpulab_gpu_model": "V100-PCIE-16GB",
                    "gpulab_gpu_count": 3,
                    "gpulab_stack": "current",
                    "gpulab_workdir": str(workdir),
                }
            }
        }
    }
    (d / "inventory.yml").write_text(yaml.safe_dump(inv))
    return d


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_missing_data_is_refused_before_any_host_is_touched(data_lab, tmp_path):
    env = {
        "INVOKE_GPULAB_DATASETS_CATALOGUE": str(data_lab / "catalogue.yml"),
        "INVOKE_GPULAB_RESULTS": str(tmp_path / "results"),
    }
    before = listing(data_lab / "wd")
    common = ["--inventory", str(data_lab / "inventory.yml"), "--workloads", "ncf,gnmt", "--name", "s1"]
    dry = invoke("sweep", *common, "--dry-run", env=env)
    assert dry.returncode == 2, dry.stdout + dry.stderr
    out = dry.stdout.splitlines()
    root = data_lab / "wd" / "data"
    i = out.index(f"  data in {root}: 1 of 2 ready")
    assert out[i + 1] == "    wmt16 (gnmt): not prepared"
    assert out[-1] == "330 runs planned for sweep s1 on 1 unit(s); nothing started (--dry-run)"
    err = dry.stderr.strip().splitlines()
    assert err == [
        f"gpulab: prepared data missing for full-scale time-to-train runs: here: wmt16 (gnmt) not "
        f"prepared in {root}; prepare it with `invoke datasets --host here --names gnmt --inventory "
        f"{data_lab / 'inventory.yml'}` "  # the advice carries the inventory it was given
        f"(nothing was started)"
    ]
    real = invoke("sweep", *common, env=env)
    assert real.returncode == 2 and real.stderr.strip().splitlines() == err, real.stdout + real.stderr
    assert "Traceback" not in real.stderr and real.stdout == ""
    assert listing(data_lab / "wd") == before  # no runner installed, no sweep folder, no lock
    assert not (tmp_path / "results").exists()
    # the data it has is enough for the workloads that read it
    ok = invoke(
        "sweep", *common[:2], "--workloads", "ncf", "--gpus", "1", "--seeds", "2", "--name", "s2", "--dry-run", env=env
    )
    assert ok.returncode == 0, ok.stderr
    assert f"  data in {root}: ready (ml-20m)" in ok.stdout.splitlines()
    # tiny and throughput runs read no prepared data: nothing is checked
    thr = invoke("sweep", *common, "--mode", "throughput", "--dry-run", env=env)
    assert thr.returncode == 0 and "data in" not in thr.stdout, thr.stdout + thr.stderr


def test_a_manifest_from_another_catalogue_entry_is_stale(data_lab):
    host = inventory.load(data_lab / "inventory.yml").select()[0]
    doc = yaml.safe_load((data_lab / "catalogue.yml").read_text())
    doc["version"] = "study-test-2"
    (data_lab / "catalogue-2.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    cat = datasets.load_catalogue(data_lab / "catalogue-2.yml")
    runs = pl.plan([host], ["ncf"], "1", 1, "ttt", "full")
    got = preflight.gather([host], runs, cat)["here"]
    assert got.problems == {
        "ml-20m": "prepared from catalogue 'study-test-1', not from the entry of catalogue "
        "'study-test-2' (prepare it again)"
    }
    assert preflight.gather([host], pl.plan([host], ["ncf"], "1", 1, "ttt", "small"), cat) == {}


def test_probe_output_and_manifests_are_judged_as_input():
    cat = datasets.load_catalogue()
    with pytest.raises(ConfigError, match="ended early"):
        preflight.parse_probe('@@gpulab-dataset ml-20m present\n{"kind": ')
    got = preflight.parse_probe(
        "@@gpulab-dataset coco absent\n@@gpulab-dataset ml-20m present\n{}\n@@gpulab-dataset end\n"
    )
    assert got == {"coco": None, "ml-20m": "{}"}
    assert preflight.judge(cat, "ml-20m", None) == "not prepared"
    assert preflight.judge(cat, "ml-20m", "\x00\x01") == "unreadable gpulab-dataset.json"
    assert (
        preflight.judge(cat, "ml-20m", json.dumps({"kind": "gpulab-dataset", "dataset": "coco"}))
        == "gpulab-dataset.json is not the manifest of ml-20m"
    )
    good = {"kind": "gpulab-dataset", "dataset": "ml-20m", "spec_sha256": cat.spec_digest("ml-20m")}
    assert preflight.judge(cat, "ml-20m", json.dumps(good)) is None


def test_unreachable_hosts_are_left_to_the_sweep(tmp_path):
    h = inventory.Host(
        name="gone",
        address="127.0.0.1",
        port=1,
        user="root",
        connection="ssh",
        gpu_model="T4",
        gpu_count=1,
        stack="current",
        groups=(),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts=str(tmp_path / "known_hosts"),
    )
    runs = pl.plan([h], ["ncf"], "1", 1, "ttt", "full")
    got = preflight.gather([h], runs)["gone"]
    assert got.error and got.lines()[0].startswith("data in /var/lib/gpulab/data: not checked: ")
    assert preflight.refusal({"gone": got}) is None


# the demo's small sweep (its two seeds, the report's path): tests/integration/test_readme_walk.py runs it
# as the README's quick start writes it


def test_a_host_of_auto_model_is_estimated_from_its_own_earlier_runs(tmp_path):
    """The demo's settings right after the demo ran: this machine (GPU model and count 'auto') has done them."""
    results = tmp_path / "results"
    runs = [
        pl.PlannedRun(
            "localhost",
            "ncf",
            0,
            s,
            "ttt",
            "tiny",
            state="complete",
            outcome="success",
            started="2026-12-01T10:00:00Z",
            ended=f"2026-12-01T10:0{s}:00Z",
        )
        for s in (1, 3)
    ]
    sweepstate.Sweep(
        root=results / "demo-1",
        name="demo-1",
        runs=runs,
        hosts={"localhost": {"gpu_model": "auto", "topology": {"gpu_count": 0, "gpus": []}}},
    ).save()
    past = study.history(results)
    host = inventory.load(ROOT / "inventory" / "local.yml").select()[0]
    planned = pl.plan([host], ["ncf"], "all", 2, "ttt", "tiny")
    assert [r.gpus for r in planned] == [-1, -1]  # 'all' on 'auto': not known yet
    assert study.estimate(planned[0], None, past) == (2.0, "earlier runs on this host")
    lines, _ = study.describe(planned, [host], past=past)
    assert lines[0] == "localhost (GPU model auto): 2 runs, about 4 min"
    assert "(earlier runs on this host)" in lines[1] and "unknown" not in " ".join(lines)
    other = pl.PlannedRun("elsewhere", "ncf", -1, 1, "ttt", "tiny")
    assert study.estimate(other, None, past) == (None, "test scale")  # another host's past is not this one's


def test_lab_data_s_rules_are_read_once_for_a_sweep_s_plans_estimates_and_limits(monkeypatch):
    """A sweep plans (again after its hosts are prepared), estimates and sets each run's limit from the device of
    its unit: lab/data's Rules (four YAML files checked against their schemas) are built once for all of it."""
    from lab.core import mlperf

    built = []
    init = mlperf.Rules.__init__
    monkeypatch.setattr(mlperf.Rules, "__init__", lambda self, *a, **k: (built.append(1), init(self, *a, **k))[1])
    mlperf.default_rules.cache_clear()
    hosts = inventory.load(EXAMPLE).select(device="v100")
    probed = [{"index": i, "name": "Tesla V100-PCIE-16GB"} for i in range(3)]
    topologies = {h.name: {"gpu_count": 3, "gpus": probed} for h in hosts}
    for _ in range(2):  # the plan of the dry run, then the one after the hosts were prepared
        runs = pl.plan(hosts, ["all"], "all", "auto", "ttt", "full", topologies=topologies)
        for run in runs:  # driver._estimate_runs and hostprep's time limits
            device = study.unit_device(hosts, run, topologies)
            assert device == "V100-PCIe"
            study.estimate(run, device, {})
            study.time_limit_minutes(run, device, {})
    assert len(runs) == 2 * 3 * (5 + 5 + 5 + 10 + 10 + 100) and len(built) == 1
