"""gpulab run directories and sweeps (runner/README.md), read back."""

import json

import pytest

from lab.results.logreader import read_runs, read_telemetry
from report_logs import write_mllog, write_rundir, write_sums

# Run on GPUs 0 and 2 of a 4-GPU host; GPU 1 belongs to another run and is excluded.
# GPU 0: 60 W, 80 W, 70 W at 0, 10, 20 s -> 10*70 + 10*75 = 1450 J over 20 s = 72.5 W
# GPU 2: 50 W, 50 W at 0, 20 s          -> 1000 J over 20 s = 50 W
TELEMETRY = [(0, 0, 60), (0, 1, 999), (0, 2, 50), (10, 0, 80), (20, 0, 70), (20, 1, 999), (20, 2, 50)]


def test_run_directory_facts(tmp_path):
    rd = write_rundir(
        tmp_path / "gnmt-2g-s7",
        gpus=(0, 2),
        telemetry=TELEMETRY,
        result={"epochs": 3, "samples_per_s": 1000.0, "time_to_train_s": 300.0},
        mllog_kwargs={"epochs": 3, "epoch_s": 100.0},
    )
    (run,) = read_runs([tmp_path]).runs
    assert run.source == str(rd) and run.fmt == "rundir"
    assert (run.benchmark, run.device, run.gpus, run.host) == ("gnmt", "T4", 2, "r740-01")
    # The probe's versions name the stack: driver, CUDA and framework in the label, all in stack_versions.
    assert run.stack == "driver 410.72, cuda 10.0.130, torch 1.0.0"
    assert run.stack_versions == "driver 410.72, cuda 10.0.130, cudnn 7.4.1, nccl 2.3.7, torch 1.0.0"
    assert run.success and run.outcome == "success"
    assert run.ttt_s == pytest.approx(300.0)
    assert run.epochs == 3 and run.seed == 7
    assert run.samples_per_s == 1000.0 and run.throughput_basis == "status.json result.samples_per_s"
    assert run.energy_j == pytest.approx(2450.0)
    assert run.avg_power_w == pytest.approx(122.5)
    assert run.perf_per_watt == pytest.approx(1000.0 / 122.5)
    assert run.energy_to_train_wh == pytest.approx(122.5 * 300.0 / 3600.0)
    assert run.facts_from == "GPUs: status.json, device: manifest.json, stack: manifest.json"


def test_telemetry_integration_by_hand(tmp_path):
    p = tmp_path / "telemetry.csv"
    p.write_text("time_s,gpu,power_w\n0,0,100\n1,0,200\n3,0,200\n0,1,10\n")
    energy, power, note = read_telemetry(p)
    # GPU 0: 150 + 400 = 550 J over 3 s; GPU 1 has one sample and adds nothing.
    assert energy == pytest.approx(550.0) and power == pytest.approx(550.0 / 3) and note is None
    p.write_text("time_s,gpu,temp_c\n0,0,50\n")
    assert read_telemetry(p) == (None, None, "telemetry.csv lacks time_s, gpu or power_w")


def test_failed_run_counts_as_a_run_not_a_skip(tmp_path):
    write_rundir(tmp_path / "r1", outcome="aborted", mllog_kwargs={"truncate_after": 1})
    (run,) = read_runs([tmp_path]).runs
    assert not run.success and run.outcome == "aborted" and run.ttt_s is None
    assert "mllog.log: no run_stop" in "; ".join(run.notes)


def test_bad_run_directories_are_skipped_with_reasons(tmp_path):
    write_rundir(tmp_path / "ok")
    changed = write_rundir(tmp_path / "changed")
    (changed / "mllog.log").write_text((changed / "mllog.log").read_text() + "\n")
    write_rundir(tmp_path / "nosums", sums=False)
    running = write_rundir(tmp_path / "running", sums=False)
    (running / "status.json").unlink()
    liar = write_rundir(tmp_path / "liar", mllog_kwargs={"truncate_after": 2}, sums=False)
    write_sums(liar)
    badstatus = write_rundir(tmp_path / "badstatus", sums=False)
    (badstatus / "status.json").write_text("{not json")
    write_sums(badstatus)
    coll = read_runs([tmp_path])
    assert [r.source.rsplit("/", 1)[1] for r in coll.runs] == ["ok"]
    reasons = {s.source.rsplit("/", 1)[1]: s.reason for s in coll.skipped}
    assert reasons == {
        "changed": "mllog.log does not match SHA256SUMS (changed after the run)",
        "nosums": "no SHA256SUMS: incomplete run directory",
        "running": "incomplete run directory: no status.json (still running or interrupted)",
        "liar": "status.json says success but mllog.log: no run_stop: the log is truncated or the run did not finish",
        "badstatus": "status.json is not a readable JSON object",
    }


def test_a_model_has_the_same_name_in_reports_and_verdicts(tmp_path):
    """One device catalogue: a run on a 'Tesla V100-PCIE-16GB' is reported on V100-PCIe, the
    name validate judges that GPU under (its references' model)."""
    from lab.validate import fleet

    write_rundir(tmp_path / "gnmt-1g-s7", gpu_name="Tesla V100-PCIE-16GB")
    (run,) = read_runs([tmp_path]).runs
    assert run.device == "V100-PCIe"
    assert fleet.model_key("Tesla V100-PCIE-16GB", fleet.load_references()) == run.device


def test_sweep_host_facts_and_planned_runs_without_directories(tmp_path):
    sweep = tmp_path / "results" / "sw1"
    write_rundir(sweep / "r740-03" / "gnmt-g1-s1", manifest=False, seed=1)
    sweep.joinpath("sweep.json").write_text(
        json.dumps(
            {
                "name": "sw1",
                "hosts": {"r740-03": {"gpu_model": "V100-PCIE-16GB", "gpu_count": 3, "stack": "mlperf-v0.5"}},
                "runs": [
                    {"id": "gnmt-g1-s1", "host": "r740-03", "workload": "gnmt", "gpus": 1, "seed": 1, "state": "done"},
                    {
                        "id": "gnmt-g2-s1",
                        "host": "r740-03",
                        "workload": "gnmt",
                        "gpus": 2,
                        "seed": 1,
                        "state": "failed",
                        "reason": "host unreachable",
                    },
                ],
            }
        )
    )
    coll = read_runs([tmp_path / "results"])
    (run,) = coll.runs
    assert (run.device, run.gpus, run.stack, run.host) == ("V100-PCIe", 1, "mlperf-v0.5", "r740-03")
    assert run.facts_from == "GPUs: status.json, device: sweep.json, stack: sweep.json"
    assert [(s.source, s.reason) for s in coll.skipped] == [
        (
            str(sweep / "r740-03" / "gnmt-g2-s1"),
            "planned run has no run directory (sweep state: failed; host unreachable)",
        )
    ]


def test_reduced_scale_runs_are_their_own_benchmark_rows(tmp_path):
    write_rundir(tmp_path / "a", scale="tiny", seed=1)
    write_rundir(tmp_path / "b", scale="full", seed=2)
    labels = sorted(r.bench_label for r in read_runs([tmp_path]).runs)
    assert labels == ["gnmt", "gnmt [tiny]"]


def test_cpu_run_and_throughput_mode(tmp_path):
    write_rundir(tmp_path / "cpu", gpus=(), host_gpus=0, mode="throughput", result={"samples_per_s": 321.0})
    (run,) = read_runs([tmp_path]).runs
    assert (run.device, run.gpus, run.mode) == ("CPU", 0, "throughput")
    assert run.ttt_s is None and run.samples_per_s == 321.0


def test_telemetry_with_gaps_and_text_values(tmp_path):
    # Rows with an empty or "N/A" power are left out: GPU 0 keeps (0, 100), (2, 100), (4, 300).
    p = tmp_path / "telemetry.csv"
    p.write_text(
        'time_s,gpu,uuid,power_w,throttle_reasons\n0,0,"GPU-a,1",100,0\n1,0,"GPU-a,1",,0\n'
        '2,0,"GPU-a,1",100,0\n3,0,"GPU-a,1",N/A,0\n4,0,"GPU-a,1",300,0\n'
    )
    energy, power, _ = read_telemetry(p, [0])
    assert energy == pytest.approx(200.0 + 400.0) and power == pytest.approx(600.0 / 4)


def test_telemetry_numeric_fast_path_matches_by_hand(tmp_path):
    p = tmp_path / "telemetry.csv"
    p.write_text('time_s,gpu,uuid,power_w\n2,1,"GPU-b,x",30\n0,1,"GPU-b,x",10\n1,0,GPU-a,5\n3,0,GPU-a,5\n')
    # GPU 1 (unsorted rows): 2 s x mean 20 W = 40 J; GPU 0: 2 s x 5 W = 10 J.
    assert read_telemetry(p) == (pytest.approx(50.0), pytest.approx(20.0 + 5.0), None)
    assert read_telemetry(p, [0]) == (pytest.approx(10.0), pytest.approx(5.0), None)


def test_stack_profile_name_wins_over_versions(tmp_path):
    write_rundir(tmp_path / "a", stack="mlperf-v0.5")
    (run,) = read_runs([tmp_path]).runs
    assert run.stack == "mlperf-v0.5" and run.system == "1x T4 / mlperf-v0.5"


def test_other_nodes_of_a_multi_host_run_are_listed_not_counted(tmp_path):
    write_rundir(tmp_path / "node0", nnodes=2, node_rank=0)
    write_rundir(tmp_path / "node1", nnodes=2, node_rank=1, mllog_kwargs={"skip_log": True})
    coll = read_runs([tmp_path])
    (run,) = coll.runs
    assert run.gpus == 2 and run.source.endswith("node0")
    assert [(s.source.rsplit("/", 1)[1], s.reason) for s in coll.skipped] == [
        ("node1", "node 1 of a 2-node run: the run is reported from node 0's run directory")
    ]


def test_throughput_event_of_the_runner(tmp_path):
    from mlperf_logging.mllog import constants as C
    from report_logs import T0

    path = write_mllog(tmp_path / "tp" / "mllog.log", epochs=1)
    lines = [x for x in path.read_text().splitlines() if '"run_stop"' not in x]
    event = (
        '{"namespace": "", "time_ms": %d, "event_type": "POINT_IN_TIME", "key": "throughput", '
        '"value": 5120.5, "metadata": {"unit": "tokens", "steps": 50, "elapsed_s": 10.0}}'
    )
    stop = (
        '{"namespace": "", "time_ms": %d, "event_type": "INTERVAL_END", "key": "%s", '
        '"value": null, "metadata": {"status": "success"}}'
    )
    lines += [":::MLLOG " + event % ((T0 + 200) * 1000), ":::MLLOG " + stop % ((T0 + 201) * 1000, C.RUN_STOP)]
    path.write_text("\n".join(lines) + "\n")
    (run,) = read_runs([tmp_path]).runs
    assert run.samples_per_s == 5120.5 and run.throughput_basis == "logged throughput event"
    assert run.sample_unit == "tokens"


def test_sweep_launch_logs_and_incomplete_planned_runs(tmp_path):
    sweep = tmp_path / "sw"
    ok = write_rundir(sweep / "h1" / "ncf-ttt-tiny-1gpu-s1", benchmark="ncf", seed=1)
    broken = write_rundir(
        sweep / "h1" / "ncf-ttt-tiny-1gpu-s2", benchmark="ncf", seed=2, sums=False, mllog_kwargs={"truncate_after": 1}
    )
    (broken / "status.json").unlink()
    (broken / "manifest.json").unlink()
    (sweep / "h1" / "ncf-ttt-tiny-1gpu-s2.launch.log").write_text("Traceback ...\n")
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "sw",
                "hosts": {"h1": {"gpu_model": "T4", "gpu_count": 1, "stack": "current"}},
                "runs": [
                    {
                        "host": "h1",
                        "workload": "ncf",
                        "gpus": 1,
                        "seed": s,
                        "state": st,
                        "reason": why,
                        "run_id": f"ncf-ttt-tiny-1gpu-s{s}",
                    }
                    for s, st, why in (
                        (1, "complete", ""),
                        (2, "failed", "runner ended without a complete run directory"),
                    )
                ],
            }
        )
    )
    coll = read_runs([sweep])
    assert [r.source for r in coll.runs] == [str(ok)]
    # The inventory's stack profile (sweep.json) names the stack; the probe's versions stay with the run.
    assert coll.runs[0].stack == "current"
    assert coll.runs[0].stack_versions == "driver 410.72, cuda 10.0.130, cudnn 7.4.1, nccl 2.3.7, torch 1.0.0"
    assert [(s.source, s.reason) for s in coll.skipped] == [
        (
            str(broken),
            "incomplete run directory: no status.json (still running or interrupted); "
            "sweep state: failed: runner ended without a complete run directory",
        )
    ]
