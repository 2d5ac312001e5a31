"""Word values are read in any case, everywhere: `--scale TINY` and `--mode TTT` as `--gpus ALL` and `--seeds AUTO`
already were, and a setting's word in a file; downstream only the lowercase word is seen (run ids, folder names,
sweep.json), so that a run planned with TINY is the run planned with tiny. An unknown word keeps its one line."""

from __future__ import annotations

import pytest
from test_hostile_state import invoke, lab  # noqa: F401 (lab: a fixture)

from lab.core import config, fields, settings
from lab.core.errors import ConfigError
from lab.sweep import plan as pl
from lab.sweep import state as sweepstate
from test_sweep_plan import host


def test_choice_takes_any_case_and_gives_the_lowercase_word():
    assert fields.choice("TINY", fields.SCALES, "--scale") == "tiny"
    assert fields.choice(" Throughput ", fields.MODES, "--mode") == "throughput"
    with pytest.raises(ConfigError, match=r"^--scale: 'huge' is not one of tiny, small, full$"):
        fields.choice("huge", fields.SCALES, "--scale")


def test_a_run_planned_with_upper_case_words_is_the_same_run(tmp_path):
    upper = pl.plan([host(count=2)], ["ncf"], "ALL", "1", mode="TTT", scale="TINY")
    lower = pl.plan([host(count=2)], ["ncf"], "all", "1", mode="ttt", scale="tiny")
    assert [r.run_id for r in upper] == [r.run_id for r in lower] == ["ncf-ttt-tiny-1gpu-s1", "ncf-ttt-tiny-2gpu-s1"]
    assert {(r.mode, r.scale) for r in upper} == {("ttt", "tiny")}
    s = sweepstate.Sweep(root=tmp_path / "s", name="s", runs=upper)
    s.save()
    back = sweepstate.Sweep.load(tmp_path / "s")  # sweep.json read back (lab.sweep.statefile)
    assert [(r.run_id, r.mode, r.scale) for r in back.runs] == [(r.run_id, "ttt", "tiny") for r in lower]
    again = sweepstate.Sweep.open(tmp_path / "s", "s", lower, {})  # resuming with tiny finds the TINY runs
    assert [r.run_id for r in again.runs] == [r.run_id for r in upper]


def test_a_setting_word_in_a_file_takes_any_case():
    config.conform_layer({"scale": "TINY", "mode": "Throughput", "sweep": {"backend": "SSH"}}, "c.yml")
    assert settings.read({"scale": "TINY"}, "scale") == "tiny"
    with pytest.raises(ConfigError, match=r"^config gpulab\.scale: 'huge' is not one of tiny, small, full \(c\.yml\)$"):
        config.conform_layer({"scale": "huge"}, "c.yml")


def test_the_dry_run_of_upper_case_words_is_the_dry_run_of_lower_case_ones(lab):  # noqa: F811
    args = ["sweep", "--inventory", lab["inventory"], "--workloads", "ncf", "--name", "w", "--dry-run"]
    upper = invoke(
        *args, "--scale", "TINY", "--mode", "TTT", "--gpus", "ALL", "--seeds", "AUTO", results=lab["results"]
    )
    lower = invoke(
        *args, "--scale", "tiny", "--mode", "ttt", "--gpus", "all", "--seeds", "auto", results=lab["results"]
    )
    assert upper.returncode == lower.returncode == 0, upper.stderr + lower.stderr
    assert upper.stdout == lower.stdout and upper.stdout.startswith("sweep w: mode ttt, scale tiny; ")


def test_a_sweep_keeps_the_lowercase_words(monkeypatch, tmp_path):
    from lab.sweep import driver

    seen = {}

    def stop(hosts, workloads, planner, *rest):
        seen.update(planner.keywords)
        raise ConfigError("stop here")

    monkeypatch.setattr(driver, "_checked", stop)
    with pytest.raises(ConfigError, match="stop here"):
        driver.run_sweep([], ["ncf"], tmp_path, "w", gpus="ALL", seeds="AUTO", mode="TTT", scale="TINY")
    assert {k: seen[k] for k in ("gpus", "seeds", "mode", "scale")} == {
        "gpus": "all",
        "seeds": "auto",
        "mode": "ttt",
        "scale": "tiny",
    }
