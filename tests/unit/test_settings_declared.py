"""Every gpulab: setting is declared once (lab.core.settings.DECLARED); what is made from it stays equal to it.

The README's settings table is the output of ``python -m lab.core.settings``; the schema each Invoke layer
is checked against, the defaults Invoke merges and the range checks come from the same declaration; and a
reader asks the declaration, never its own fallback: ``invoke collect`` fetches a copy that does not verify
as often as gpulab.sweep.fetch_retries says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from lab.core import config, settings
from lab.core.errors import ConfigError
from rundirs import write_run

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- settings table: python -m lab.core.settings -->\n", "<!-- end of the settings table -->"


def test_the_readme_holds_exactly_the_generated_table():
    printed = subprocess.run(
        [sys.executable, "-m", "lab.core.settings"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=60,
        check=True,
    ).stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count(BEGIN) == 1 and readme.count(END) == 1
    assert readme.split(BEGIN, 1)[1].split(END, 1)[0] == printed, (
        "README's settings table is stale: paste the output of `python -m lab.core.settings`"
    )
    assert printed.count("\n") == len(settings.DECLARED) + 2


def test_every_declaration_is_complete_and_its_default_fits_it():
    jsonschema.Draft202012Validator.check_schema(settings.schema())
    for s in settings.DECLARED:
        assert s.kind in settings.KINDS and s.doc and "\n" not in s.doc, s.key
        assert (s.range is not None) == (s.kind in ("number", "count")), s.key
        if s.default is not settings.INHERIT:
            settings.read({}, s.key)  # the declared default is inside its own range
    section = config.defaults()["gpulab"]
    assert settings.read(section, "sweep") == settings.default("sweep")


def test_the_schema_names_every_setting_and_nothing_else():
    sch = settings.schema()

    def keys(node, prefix=""):
        for name, sub in node["properties"].items():
            if "properties" in sub:
                assert sub["additionalProperties"] is False
                yield from keys(sub, f"{prefix}{name}.")
            else:
                yield prefix + name

    assert sorted(keys(sch)) == sorted(settings.BY_KEY)


@pytest.mark.parametrize(
    "section, words",
    [
        ({"sweep": {"fetch_retries": 11}}, "config gpulab.sweep.fetch_retries: 11 is not a whole number from 0 to 10"),
        ({"sweep": {"poll_s": "0"}}, "config gpulab.sweep.poll_s: '0' is not a number from 0.01 to 60 s"),
        ({"slurm": {"partition": "gpu --wrap=x"}}, "config gpulab.slurm.partition: 'gpu --wrap=x' is not a Slurm name"),
        (
            {"run_timeout_minutes": "soon"},
            "config gpulab.run_timeout_minutes: 'soon' is not valid here (a number or auto)",
        ),
        (
            {"run_timeout_minutes": 0},
            "config gpulab.run_timeout_minutes: 0 is not a number from 0.05 to 10080 minutes or auto",
        ),
        (
            {"validate": {"quarantine": "maybe"}},
            "config gpulab.validate.quarantine: 'maybe' is not valid here (true/false",
        ),
        ({"seeds": "1001"}, "config gpulab.seeds: '1001' is not a whole number from 1 to 1000 seeds, auto or mlperf"),
        ({"demo": {"seeds": "often"}}, "config gpulab.demo.seeds: 'often' is not a whole number from 1 to 1000 seeds"),
        ({"gpus": "1,,x"}, "config gpulab.gpus: '1,,x' is not a comma list of whole numbers from 1 to 64 GPUs or all"),
        ({"gpus": 0}, "config gpulab.gpus: 0 is not a comma list of whole numbers from 1 to 64 GPUs or all"),
        (
            {"workloads": "all,ncf"},
            "config gpulab.workloads: 'all,ncf' is not a comma list of names (letters, digits, _ -) or all alone",
        ),
        (
            {"demo": {"workloads": "ncf;rm -rf"}},
            "config gpulab.demo.workloads: 'ncf;rm -rf' is not a comma list of names",
        ),
        (
            {"report_formats": "html,pdf"},
            "config gpulab.report_formats: 'html,pdf' is not a comma list of html, md, json, csv",
        ),
    ],
)
def test_a_value_out_of_its_declared_range_names_the_setting_and_the_file(section, words):
    with pytest.raises(ConfigError) as got:
        config._checked(section, "/home/u/.invoke.yaml")
    assert got.value.message.startswith(words) and got.value.message.endswith("(/home/u/.invoke.yaml)"), (
        got.value.message
    )


def test_the_report_formats_declared_are_the_ones_a_report_writes():
    from lab.report import build

    assert settings.declared("report_formats").items == build.FORMATS


def test_an_environment_variable_out_of_range_names_the_variable():
    base = config.defaults()["gpulab"]
    assert config.env_section(base, {"INVOKE_GPULAB_SWEEP_FETCH_RETRIES": "3"}) == {"sweep": {"fetch_retries": "3"}}
    with pytest.raises(
        ConfigError,
        match=r"^config gpulab.sweep.fetch_retries: '99' is not a whole number from 0 "
        r"to 10 fetches \(INVOKE_GPULAB_SWEEP_FETCH_RETRIES\)$",
    ):
        config.env_section(base, {"INVOKE_GPULAB_SWEEP_FETCH_RETRIES": "99"})
    with pytest.raises(ConfigError, match=r"^INVOKE_GPULAB_SWEEP_POLL_S='often': gpulab.sweep.poll_s takes a number"):
        config.env_section(base, {"INVOKE_GPULAB_SWEEP_POLL_S": "often"})


def test_every_bound_the_table_shows_is_taken_as_typed():
    """A number's bounds, typed as the table shows them (an environment variable is text), are in its range:
    sweep.min_free_mb's maximum was shown as 1e+08, a text its whole-number parser refuses."""
    base = config.defaults()["gpulab"]
    numbers = [s for s in settings.DECLARED if s.kind == "number"]
    assert any(s.range.hi >= 1e6 and s.range.integer for s in numbers)  # a bound :g would print with an exponent
    for s in numbers:
        var = "INVOKE_GPULAB_" + s.key.upper().replace(".", "_")
        for bound in (s.range.lo, s.range.hi):
            shown = s.range.shown(bound)
            assert f"{shown} to" in settings._takes(s) or f"to {shown}" in settings._takes(s), (s.key, shown)
            assert config.env_section(base, {var: shown}), (var, shown)


def test_the_readers_take_their_defaults_from_the_declaration():
    from lab.sweep import hostrun, slurmworker
    from lab.tune import search
    from lab.validate import dcgm, gathering

    assert hostrun.Settings().fetch_retries == settings.default("sweep.fetch_retries")
    assert {k: getattr(hostrun.Settings(), k) for k in config.sweep_settings({})} == config.sweep_settings({})
    assert slurmworker.SlurmSettings().max_running == settings.default("slurm.max_running")
    assert search.TuneRequest.retries == settings.default("tune.retries")
    assert dcgm.LEVELS == settings.default("validate.dcgm_levels")
    assert gathering.time_limits()["dcgm_s"][3] == settings.default("validate.time_limits.dcgm_s.3")


# --------------------------------------------------------------------------- invoke collect and fetch_retries


@pytest.mark.parametrize("retries", ["0", "3"])
def test_collect_fetches_a_corrupt_copy_as_often_as_fetch_retries_says(tmp_path, retries):
    """A host (this machine, ansible_connection=local) serves a run whose file no longer matches its
    SHA256SUMS: collect fetches it 1 + gpulab.sweep.fetch_retries times and says so."""
    import json

    rid, work = "ncf-ttt-tiny-cpu-s1", tmp_path / "host-workdir"
    inv = tmp_path / "inventory.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "here": {
                            "ansible_connection": "local",
                            "gpulab_gpu_model": "cpu",
                            "gpulab_gpu_count": 0,
                            "gpulab_stack": "current",
                            "gpulab_workdir": str(work),
                        }
                    }
                }
            }
        )
    )
    served = write_run(work / "sweeps" / "S" / rid)
    (served / "mllog.log").write_text(':::MLLOG {"key": "run_stop"}\n')  # corrupt on the host: never verifies
    root = tmp_path / "results" / "S"
    root.mkdir(parents=True)
    (root / "sweep.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "S",
                "hosts": {"here": {}},
                "runs": [
                    {
                        "host": "here",
                        "workload": "ncf",
                        "gpus": 0,
                        "seed": 1,
                        "mode": "ttt",
                        "scale": "tiny",
                        "state": "failed",
                        "outcome": None,
                        "reason": "",
                        "run_id": rid,
                        "token": "gl-0123456789abcdef",
                        "attempts": 1,
                    }
                ],
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), INVOKE_GPULAB_SWEEP_FETCH_RETRIES=retries)
    p = subprocess.run(
        [sys.executable, "-m", "invoke", "collect", str(root), "--inventory", str(inv)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr + p.stdout, p.stdout + p.stderr
    assert "1 run(s) fetched, 0 verified, 1 problem(s)" in p.stdout
    assert f"fetched {int(retries) + 1} time(s), gpulab.sweep.fetch_retries {retries}" in p.stdout, p.stdout


def test_the_readme_states_a_default_only_in_the_table():
    """README names settings in its prose; their defaults are said once, in the generated table."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    prose = readme.split(BEGIN, 1)[0] + readme.split(END, 1)[1]
    for s in settings.DECLARED:
        if s.kind == "number" and isinstance(s.default, (int, float)):
            said = re.search(rf"`gpulab\.{re.escape(s.key)}`,? \((default )?{s.default:g}\b", prose)
            assert said is None, f"README restates gpulab.{s.key}'s default: {said.group(0)!r}"
