"""benchmarks/bn_kernels.py: ResNet-50's batch-norm sites timed alone, Inductor's kernels against ATen's (issue 47).

The figures mean something on a GPU only; here the site table is checked against the network, the script's
code path runs on the CPU (eager, two sites), and bad input is one line, exit 2, nothing written.
"""

import importlib.util
import json

import pytest

from runner_helpers import ROOT, script

SCRIPT = ROOT / "benchmarks" / "bn_kernels.py"


def _module():
    spec = importlib.util.spec_from_file_location("bn_kernels", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_sites_are_resnet50_v15s_53_batch_norms():
    sites = _module().sites()
    assert sum(k for _, _, k, _ in sites) == 53  # 1 stem + 16 blocks x 3 + 4 projections
    assert sum(k for _, _, k, add in sites if add) == 16  # one residual add per block
    assert (64, 112, 1, False) in sites and (2048, 7, 3, True) in sites and (512, 28, 4, True) in sites
    assert len({(c, s, add) for c, s, _, add in sites}) == len(sites)  # each shape once, with its count


def test_it_times_the_sites_on_the_cpu_and_writes_its_json(tmp_path):
    out = tmp_path / "bn.json"
    r = script(
        SCRIPT,
        "--device",
        "cpu",
        "--batch",
        "2",
        "--impl",
        "eager",
        "--repeat",
        "1",
        "--sites",
        "2",
        "--out",
        str(out),
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert [s["channels"] for s in doc["sites"]] == [64, 64] and all(s["eager_ms"] > 0 for s in doc["sites"])
    assert doc["ms_per_step"]["eager"] == pytest.approx(
        sum(s["eager_ms"] * s["layers"] for s in doc["sites"]), rel=1e-3
    )
    assert "[bn] per training step: eager " in r.stdout


@pytest.mark.parametrize(
    "args, said",
    [
        (["--impl", "cudnn"], "--impl 'cudnn': use inductor, eager"),
        (["--batch", "0"], "1 or more"),
        (["--sites", "0"], "1 or more"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, said):
    out = tmp_path / "bn.json"
    r = script(SCRIPT, "--device", "cpu", *args, "--out", str(out), timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and said in r.stderr, r.stderr
    assert not out.exists()
