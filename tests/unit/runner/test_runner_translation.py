"""The translation workloads (gnmt, transformer): generated data, tiny runs to target, recorded recipe."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.workloads import translation as T  # noqa: E402
from runner_helpers import assert_complete, mllog_events, runner, status  # noqa: E402


# --- generated data ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gnmt", "transformer"])
def test_generated_task_is_deterministic_and_follows_its_rule(name):
    cfg = workloads.load()[name]["scales"]["tiny"]
    swap = cfg.get("swap_pairs", True)
    a, b = T.generate(cfg), T.generate(cfg)
    assert a["refs"] == b["refs"]
    src, tgt = a["train"]
    n = cfg["words"]
    lex = {}
    for s, t in zip(src, tgt):
        assert len(s) == len(t) and T.N_SPECIAL <= s.min() and s.max() < T.N_SPECIAL + n <= t.min()
        unswapped = t.copy()
        for i in range(0, len(t) - 1, 2) if swap else ():
            unswapped[i], unswapped[i + 1] = t[i + 1], t[i]
        for w, x in zip(s, unswapped):  # one fixed translation per source word
            assert lex.setdefault(int(w), int(x)) == int(x)
    assert a["vocab_size"] == cfg["vocab_size"]


# --- tiny runs to the target, through the command line, with the compliance checker ---------


@pytest.mark.parametrize("name", ["gnmt", "transformer"])
def test_tiny_run_reaches_its_target_and_passes_the_compliance_checker(tmp_path, name):
    out = tmp_path / "run"
    r = runner("run", name, "--scale", "tiny", "--seed", "3", "--gpus", "0", "--out", out, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr + (out / "stdout.log").read_text()
    assert_complete(out)
    st = status(out)
    assert st["outcome"] == "success"
    assert st["result"]["quality"] >= workloads.load()[name]["scales"]["tiny"]["target"]
    ev = mllog_events(out)
    keys = [e["key"] for e in ev]
    assert keys.count("eval_accuracy") == st["result"]["epochs"]
    assert next(e for e in ev if e["key"] == "max_sequence_length")["metadata"]["method"] == "discard"
    hp = {e["key"]: e["value"] for e in ev}
    if name == "gnmt":  # the reference's beam search settings are in the log
        assert (
            hp["eval_hp_beam_size"],
            hp["eval_hp_length_normalization_factor"],
            hp["eval_hp_length_normalization_constant"],
            hp["eval_hp_coverage_penalty_factor"],
        ) == (5, 0.6, 5.0, 0.1)
        assert hp["gpulab_bleu"] == "sacrebleu tokenize=intl lowercase"
    else:
        assert hp["model_hp_sequence_beam_search"]["beam_size"] == 4
        assert hp["model_hp_sequence_beam_search"]["alpha"] == 1.0
    assert hp["gpulab_scale"] == "tiny" and hp["submission_division"] == "open"
    chk = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            "0.7.0",
            str(out / "mllog.log"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )  # the checker writes compliance_checker.log into its cwd
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert "SUCCESS" in chk.stdout + chk.stderr, chk.stdout + chk.stderr


def test_full_scale_ttt_names_what_is_missing_in_the_data_folder(tmp_path):
    data = tmp_path / "data"
    (data / "wmt17_en_de").mkdir(parents=True)
    out = tmp_path / "run"
    r = runner(
        "run", "transformer", "--scale", "full", "--gpus", "0", "--data", data, "--out", out, "--max-epochs", "1"
    )
    assert r.returncode == 1
    st = status(out)
    assert st["outcome"] == "failed"
    # one line naming the dataset and where it was looked for (through runner.datasets where installed)
    assert "wmt17" in st["reason"] and str(data) in st["reason"], st["reason"]
    assert "\n" not in st["reason"]
