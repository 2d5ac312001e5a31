"""runner burnin on a machine without a GPU, and its pure parts on plain data."""

import hashlib
import json
import subprocess
import sys

import pytest

from runner import burnin
from runner.cli import UsageError

DMESG = """\
[    0.000000] Linux version 6.8.0-45-generic
[ 5123.456789] NVRM: Xid (PCI:0000:1b:00): 79, pid=2301, name=python, GPU has fallen off the bus.
[ 5123.456801] NVRM: GPU 0000:1b:00.0: GPU has fallen off the bus.
[ 7000.000001] NVRM: Xid (PCI:0000:2a:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Illegal Instruction Encoding
[ 7100.5] NVRM: Xid (0000:9c:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.
some other line with Xid but not NVRM
"""

JOURNAL = "[ 8123.000100] host kernel: NVRM: Xid (PCI:0000:1b:00): 119, pid=7, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n"


def test_parse_xids_maps_pci_to_gpu():
    gpus = [{"index": 0, "pci_bus_id": "00000000:1B:00.0"}, {"index": 1, "pci_bus_id": "00000000:2A:00.0"}]
    ev = burnin.parse_xids(DMESG, gpus)
    assert [(e["xid"], e["gpu"], e["pci"]) for e in ev] == [
        (79, 0, "0000:1b:00"),
        (13, 1, "0000:2a:00"),
        (48, None, "0000:9c:00"),
    ]
    assert ev[0]["uptime_s"] == 5123.456789
    assert ev[0]["text"].endswith("GPU has fallen off the bus.")
    j = burnin.parse_xids(JOURNAL, gpus)
    assert j[0]["xid"] == 119 and j[0]["gpu"] == 0


def test_resolve_gpus():
    assert burnin.resolve_gpus("all", 4) == [0, 1, 2, 3]
    assert burnin.resolve_gpus("2", 4) == [0, 1]
    assert burnin.resolve_gpus("3,1", 4) == [3, 1]
    assert burnin.resolve_gpus("3,", 4) == [3]
    for bad in ("0", "5", "4,", "1,1", "x", "-1"):
        with pytest.raises(UsageError):
            burnin.resolve_gpus(bad, 4)


def _run(*argv, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "runner", "burnin", *argv], capture_output=True, text=True, timeout=timeout
    )


def test_no_gpu_host_writes_document_and_exits_1(tmp_path):
    out = tmp_path / "b"
    p = _run("--level", "standard", "--out", str(out), "--json")
    doc = json.loads(p.stdout)
    if doc["outcome"] != "no_gpu":
        pytest.skip("this machine has an NVIDIA GPU; tests/gpu covers it")
    assert p.returncode == 1
    assert p.stderr.strip() == f"runner burnin: {doc['reason']}"
    assert doc["reason"].startswith("no NVIDIA driver/GPU found: ")
    assert doc["gpus"] == {} and doc["probe"]["gpus"] == []
    assert json.loads((out / "burnin.json").read_text()) == doc
    assert (out / "telemetry.csv").read_text().startswith("time_s,gpu,uuid,")
    # SHA256SUMS lists every other file and verifies
    sums = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {"burnin.json", "probe.json", "telemetry.csv"}
    for name, digest in sums.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--level", "slow"], "invalid choice"),
        (["--minutes", "90"], "--minutes 90 is not in"),
        (["--interval", "0"], "--interval 0 is not in"),
    ],
)
def test_bad_input_exit_2_nothing_written(tmp_path, argv, msg):
    out = tmp_path / "b"
    p = _run("--out", str(out), *argv)
    assert p.returncode == 2 and msg in p.stderr and p.stderr.count("\n") == 1
    assert not out.exists()


def test_out_not_empty_is_refused(tmp_path):
    (tmp_path / "old.txt").write_text("x")
    p = _run("--level", "quick", "--out", str(tmp_path))
    assert p.returncode == 2 and "is not an empty directory" in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["old.txt"]


def test_worker_without_cuda_reports_every_test_failed(tmp_path):
    """The real worker process on this CPU-only torch: each test is a failure with the reason."""
    (tmp_path / "logs").mkdir()
    tests = burnin.gpu_tests(burnin.LEVELS["standard"], True)
    recs = burnin.run_workers(sys.executable, [([0], 0, tests)], tmp_path, "solo", False)
    dev, rest = recs[0], recs[1:]
    if dev["ok"]:
        pytest.skip("torch sees a CUDA device here")
    assert "sees no CUDA device" in dev["error"]
    assert [(r["test"], r["dtype"]) for r in rest] == [(t["test"], t.get("dtype")) for t in tests]
    assert all(not r["ok"] and "sees no CUDA device" in r["error"] and r["phase"] == "solo" for r in rest)


def test_builtin_resnet50_is_the_workloads_resnet50():
    """The burn-in's builtin step builds the resnet50 workload's trainer (no copy of its own): at full
    scale that is ResNet-50 v1.5, the model `runner run resnet50` trains."""
    pytest.importorskip("torch")
    import inspect

    from runner import burnin_worker
    from runner.workloads import base
    from runner.workloads.trainer import spec_of

    src = "".join(inspect.getsource(burnin_worker).split())  # whitespace aside: the same however it is laid out
    assert "nn.Conv2d" not in src and 'base.bench_context("resnet50",' in src
    ctx, module = base.bench_context(
        "resnet50", "cpu", True, scale="full", precision="fp32", batch_size=2, compile=False
    )
    model = spec_of(module).build(ctx).model
    assert sum(p.numel() for p in model.parameters()) == 25_557_032  # torchvision's resnet50 has the same count


def _rec(test, gpu, phase, value, start, end, dtype=None, ok=True, error=None, **kw):
    return {
        "test": test,
        "dtype": dtype,
        "gpu": gpu,
        "phase": phase,
        "value": value,
        "ok": ok,
        "error": error,
        "start": start,
        "end": end,
        "unit": None,
        "detail": kw.get("detail", {}),
        **{k: v for k, v in kw.items() if k != "detail"},
    }


def test_build_document_metrics_and_windows():
    probe_doc = {
        "host": {"hostname": "h200-01"},
        "gpus": [
            {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-a", "pci_bus_id": "00000000:1B:00.0"},
            {"index": 1, "name": "NVIDIA H200", "uuid": "GPU-b", "pci_bus_id": "00000000:2A:00.0"},
        ],
    }
    records = [
        _rec("matmul", 0, "solo", 700.0, 110, 115, dtype="bf16"),
        _rec("h2d", 0, "solo", 55.1, 115, 118),
        _rec("matmul", 1, "solo", 690.0, 120, 125, dtype="bf16"),
        _rec("matmul", 0, "concurrent", 650.0, 130, 135, dtype="bf16"),
        _rec("matmul", 1, "concurrent", 640.0, 130, 135, dtype="bf16"),
        _rec("nccl", None, "host", 480.0, 140, 142),
        _rec("membw", 1, "solo", None, 125, 126, ok=False, error="RuntimeError: CUDA error: an illegal memory access"),
    ]
    rows = []
    for t in range(100, 143):
        for g in (0, 1):
            busy = (110 <= t <= 115 and g == 0) or (120 <= t <= 125 and g == 1) or 130 <= t <= 135
            rows.append(
                {
                    "time_s": float(t),
                    "gpu": g,
                    "uuid": f"GPU-{g}",
                    "power_w": 690.0 if busy else 75.0,
                    "temp_c": 70 if busy else 30,
                    "sm_clock_mhz": 1980 if busy else 345,
                    "mem_clock_mhz": 3201,
                    "util_gpu_pct": 100 if busy else 0,
                    "util_mem_pct": 0,
                    "mem_used_mib": 1,
                    "throttle_reasons": "sw_power_cap" if busy else "gpu_idle",
                    "pcie_gen": 5 if busy else 1,
                    "pcie_width": 16,
                }
            )
    xb = {
        "source": "dmesg",
        "error": None,
        "events": [{"xid": 13, "pci": "0000:1b:00", "gpu": 0, "uptime_s": 5.0, "text": "a"}],
    }
    xa = {
        "source": "dmesg",
        "error": None,
        "events": [dict(xb["events"][0]), {"xid": 79, "pci": "0000:2a:00", "gpu": 1, "uptime_s": 9.0, "text": "b"}],
    }
    doc = burnin.build_document("standard", [0, 1], probe_doc, xb, xa, records, rows, (100, 105), None, "s", 0, [])
    g0, g1 = doc["gpus"]["0"], doc["gpus"]["1"]
    assert g0["solo"] == {"matmul_bf16_tflops": 700.0, "h2d_bandwidth_gbs": 55.1}
    assert g1["solo"] == {"matmul_bf16_tflops": 690.0}  # the failed membw gives no metric
    assert g0["concurrent"] == {"matmul_bf16_tflops": 650.0}
    assert doc["host_metrics"] == {"nccl_allreduce_busbw_gbs": 480.0, "matmul_bf16_tflops_sum": 1290.0}
    assert g0["idle"]["power_w_max"] == 75.0 and g0["idle"]["pcie_gen_max"] == 1
    # under load = the windows of GPU 0's load tests (matmul solo and concurrent; not h2d)
    assert g0["load"]["power_w_max"] == 690.0 and g0["load"]["sm_clock_mhz_median"] == 1980
    assert g0["load"]["samples"] == 12 and g0["load"]["pcie_gen_max"] == 5
    assert doc["outcome"] == "failed" and "membw on GPU 1" in doc["reason"] and "illegal memory access" in doc["reason"]
    assert doc["xid"]["new_during_burnin"] == 1 and doc["xid"]["before_load"] == 1
    assert [e["during_burnin"] for e in doc["xid"]["events"]] == [False, True]
    json.dumps(doc)


@pytest.mark.slow
def test_worker_pipeline_on_cpu(tmp_path):
    """Every load test through the real worker process, on the CPU (small sizes).

    The numbers mean nothing here; the test checks that each test runs, reports
    its value, unit, timing and details, that the matmul check passes, and that
    the document is built from the records.
    """
    pytest.importorskip("torch")
    (tmp_path / "logs").mkdir()
    tests = [{"test": "matmul", "dtype": p, "seconds": 0.1, "n": 128} for p in burnin.PRECISIONS]
    tests += [
        {"test": "membw", "seconds": 0.1, "bytes": 1 << 20},
        {"test": "h2d", "seconds": 0.1, "bytes": 1 << 20},
        {"test": "d2h", "seconds": 0.1, "bytes": 1 << 20},
        {"test": "resnet50", "seconds": 0.1, "batch": 2, "scale": "tiny", "warmup_steps": 1},
    ]
    recs = burnin.run_workers(sys.executable, [([0], 0, tests)], tmp_path, "solo", False, device="cpu")
    host = burnin.run_workers(
        sys.executable,
        [([0, 1], None, [{"test": "nccl", "iters": 2, "sizes": [1 << 16], "world": 2}])],
        tmp_path,
        "host",
        False,
        device="cpu",
    )
    by = {(r["test"], r.get("dtype")): r for r in recs + host}
    assert by[("device", None)]["detail"]["name"] == "cpu"
    for t in tests + [{"test": "nccl"}]:
        r = by[(t["test"], t.get("dtype"))]
        assert r["ok"], r
        assert r["value"] > 0 and r["end"] >= r["start"] and r["unit"]
    for p in burnin.PRECISIONS:
        d = by[("matmul", p)]["detail"]
        assert d["n"] == 128 and d["max_rel_error"] <= d["tolerance"] and d["chunks"] >= 3
    resnet = by[("resnet50", None)]["detail"]
    assert (resnet["batch"], resnet["image"], resnet["scale"], resnet["model"]) == (
        2,
        32,
        "tiny",
        "runner.workloads.resnet50",
    )
    assert by[("nccl", None)]["detail"]["backend"] == "gloo"
    assert by[("nccl", None)]["detail"]["world_size"] == 2
    probe_doc = {"host": {"hostname": "cpu"}, "gpus": [{"index": 0, "name": "cpu", "uuid": None}]}
    xid = {"source": None, "error": "x", "events": []}
    doc = burnin.build_document(
        "standard",
        [0],
        probe_doc,
        xid,
        xid,
        [r for r in recs if r["test"] != "device"] + host,
        [],
        (0, 0),
        None,
        "s",
        0,
        [],
    )
    assert doc["outcome"] == "completed"
    assert set(doc["gpus"]["0"]["solo"]) == {
        "matmul_fp32_tflops",
        "matmul_tf32_tflops",
        "matmul_bf16_tflops",
        "matmul_fp16_tflops",
        "memory_bandwidth_gbs",
        "h2d_bandwidth_gbs",
        "d2h_bandwidth_gbs",
        "resnet50_images_per_s",
    }
    assert doc["host_metrics"]["nccl_allreduce_busbw_gbs"] > 0
