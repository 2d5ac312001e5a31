"""The gpulab: settings through Invoke's layers: which layer wins, falsy values, ill-typed sections (README "Settings").

gpulab's defaults (declared in lab.core.settings) sit at Invoke's collection level;
~/.invoke.yaml, a lab's invoke.yaml beside tasks.py, INVOKE_GPULAB_*, ``invoke
-f FILE`` and the task's options override them, in that order. The property
tests build Invoke's Config the way its Program does (same layers, same
merge) and read a setting the way the tasks do (lab.core.cli.setting); the command-line
tests run the real program with HOME pointed at a temporary folder.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invoke import Config, Context, Exit
from invoke.config import AmbiguousMergeError

from lab.core import cli, config, program
from lab.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import tasks  # noqa: E402, F401  (its import configures the lab's Invoke, as `invoke` does)

# lowest first, as README "Settings" lists them
LAYERS = ("user", "project", "env", "runtime", "cli")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def configured(tmp: Path, layers: dict[str, dict], env: dict[str, str] | None = None) -> Config:
    """An Invoke Config with gpulab's defaults and ``layers`` = {'user'|'project'|'runtime': gpulab section}."""
    home, project, etc = tmp / "home", tmp / "project", tmp / "etc"
    for d in (home, project, etc):
        d.mkdir(exist_ok=True)
        for f in d.glob("*.yaml"):
            f.unlink()
    files = {"user": home / ".invoke.yaml", "project": project / "invoke.yaml", "runtime": tmp / "runtime.yaml"}
    files["runtime"].unlink(missing_ok=True)
    for name, section in layers.items():
        files[name].write_text(yaml.safe_dump({"gpulab": section}))
    cfg = Config(
        system_prefix=f"{etc}/",
        user_prefix=f"{home}/.",
        project_location=str(project),
        runtime_path=str(files["runtime"]) if "runtime" in layers else None,
    )
    problem = program.layer_problem(cfg)
    if problem:
        raise ConfigError(problem)
    cfg.load_project()
    cfg.load_runtime()
    if program.layer_problem(cfg):
        raise ConfigError(program.layer_problem(cfg))
    cfg.load_collection(config.defaults())
    environ = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    try:
        program.load_env(cfg, {**environ, **(env or {})})
    except Exit as exc:
        raise ConfigError(exc.message.removeprefix("gpulab: ")) from None
    return cfg


def test_the_defaults_check_and_hold_the_study():
    cfg = config.defaults()["gpulab"]
    assert (cfg["workloads"], cfg["seeds"], cfg["gpus"], cfg["mode"], cfg["scale"]) == (
        "all",
        "auto",
        "all",
        "ttt",
        "full",
    )
    assert not (ROOT / "invoke.yaml").exists() or "invoke.yaml" in (ROOT / ".gitignore").read_text()


# values a user may set, falsy ones included: 0, "", false are values, never "unset"
VALUES = st.one_of(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "0", "ncf", "gnmt,ncf", "auto"]),
    st.text(alphabet="abcxyz019,", max_size=8),
)


def takes(key: str, value, in_file: bool) -> bool:
    """What README's settings table says the key takes (a file's YAML value, or a variable's text)."""
    text = str(value).strip()
    items = [i.strip() for i in str(value).split(",")]  # an empty item ('1,,2', '1,') or a repeated one: refused
    listed = "" not in items and len(set(items)) == len(items)

    def digits(t: str) -> bool:  # ASCII digits only: not '٣', '²', '1_0', '+1'
        return t.isascii() and t.isdigit()

    if key == "nodes":
        return digits(text) and 1 <= int(text) <= 64
    if key == "seeds":
        return text.lower() in ("auto", "mlperf") or (digits(text) and 1 <= int(text) <= 1000)
    if key == "gpus":
        counts = [int(i) for i in items if digits(i)]
        return text.lower() == "all" or (
            listed and len(counts) == len(set(counts)) == len(items) and all(1 <= n <= 64 for n in counts)
        )
    if in_file and not isinstance(value, str):  # workloads: a YAML number is no name
        return False
    return items == ["all"] or (listed and all(re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", i) for i in items))


@FAST
@given(
    chosen=st.dictionaries(st.sampled_from(LAYERS), VALUES, max_size=len(LAYERS)),
    key=st.sampled_from(["seeds", "gpus", "nodes", "workloads"]),
)
def test_the_highest_layer_that_sets_a_key_wins(tmp_path, chosen, key):
    files = {name: {key: value} for name, value in chosen.items() if name in ("user", "project", "runtime")}
    env = {f"INVOKE_GPULAB_{key.upper()}": str(chosen["env"])} if "env" in chosen else {}
    try:
        cfg = configured(tmp_path, files, env)
    except ConfigError as exc:  # a value that is not what the key takes (README's settings table), in any layer
        assert exc.message.startswith((f"config gpulab.{key}: ", f"INVOKE_GPULAB_{key.upper()}="))
        assert not all(takes(key, v, name in files) for name, v in chosen.items() if name != "cli")
        return
    assert all(takes(key, v, name in files) for name, v in chosen.items() if name != "cli")
    given = chosen.get("cli")
    got = cli.setting(Context(config=cfg), key, None if given is None else str(given))
    winner = next((name for name in reversed(LAYERS) if name in chosen), None)
    if winner is None:
        assert got == config.defaults()["gpulab"][key]
    elif winner == "cli":  # the task's argument as given: the task judges it where it is used
        assert got == str(chosen["cli"])
    elif key == "nodes":  # a number setting: read as its number (lab.core.settings)
        assert int(got) == int(chosen[winner])
    elif winner in ("env", "cli"):
        assert str(got) == str(chosen[winner])
    else:
        assert got == chosen[winner]  # as the YAML file typed it: 0 stays 0, "" stays ""


@FAST
@given(
    section=st.dictionaries(
        st.sampled_from(["sweep", "demo", "gpus", "seeds", "workloads", "mode", "nodes", "run_timeout_minutes"]),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
            lambda inner: st.one_of(
                st.lists(inner, max_size=3),
                st.dictionaries(st.sampled_from(["poll_s", "seeds", "x"]), inner, max_size=2),
            ),
            max_leaves=6,
        ),
        max_size=3,
    ),
    layer=st.sampled_from(["user", "project", "runtime"]),
)
def test_any_section_is_refused_in_one_line_or_merges_and_checks(tmp_path, section, layer):
    try:
        cfg = configured(tmp_path, {layer: section})
    except ConfigError as exc:
        assert "\n" not in exc.message and len(exc.message) < 400 and exc.message.startswith("config gpulab")
        return
    except AmbiguousMergeError:  # pragma: no cover - the property under test
        pytest.fail(f"Invoke's merge failed on a section layer_problem let through: {section!r}")
    config.conform(cfg.get("gpulab"))


def invoke(*args, home: Path, env=None, cwd=ROOT):
    full = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    full.update(PYTHONPATH=str(ROOT), HOME=str(home), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True, env=full, timeout=120
    )


def planned(result) -> list[str]:
    assert result.returncode == 0, result.stderr
    return sorted({line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ") and "GPUs" in line})


DRY = (
    "sweep",
    "--device",
    "v100",
    "--mode",
    "throughput",
    "--dry-run",
    "--name",
    "layers",
    "--inventory",
    str(ROOT / "inventory" / "hosts.yml"),
)  # the example lab: a dry run contacts no host


def test_each_layer_overrides_the_one_below_on_the_command_line(tmp_path):
    """The README's order, each step once: defaults < ~/.invoke.yaml < INVOKE_GPULAB_* < -f FILE < --option."""
    home = tmp_path / "home"
    home.mkdir()
    assert len(planned(invoke(*DRY, home=home))) == 6  # the defaults: the study's six
    (home / ".invoke.yaml").write_text("gpulab: {workloads: gnmt}\n")
    assert planned(invoke(*DRY, home=home)) == ["gnmt"]  # the user's file wins over the defaults
    env = {"INVOKE_GPULAB_WORKLOADS": "ncf"}
    assert planned(invoke(*DRY, home=home, env=env)) == ["ncf"]  # the environment over the user's file
    (tmp_path / "run.yaml").write_text("gpulab: {workloads: transformer}\n")
    assert planned(invoke("-f", str(tmp_path / "run.yaml"), *DRY, home=home, env=env)) == ["transformer"]
    assert planned(invoke("-f", str(tmp_path / "run.yaml"), *DRY, "--workloads", "ssd", home=home, env=env)) == [
        "ssd"
    ]  # the option over everything


@pytest.mark.parametrize(
    "where, text, message",
    [
        ("user", "gpulab: {sweep: [1, 2]}\n", "config gpulab.sweep: [1, 2] is not of type 'object'"),
        ("user", "gpulab: [1, 2]\n", "config gpulab: [1, 2] is not of type 'object'"),
        ("user", "gpulab: {demo: 3}\n", "config gpulab.demo: 3 is not of type 'object'"),
        ("runtime", "gpulab: {sweep: {poll_s: [1]}}\n", "config gpulab.sweep.poll_s: [1] is not valid here"),
        ("runtime", "gpulab: {sweep: {poll_s: 1}\n", "while parsing a flow mapping"),
        ("runtime", "run: [1]\n", "run.yaml: run: [1] where Invoke's run is a mapping of settings (set the keys"),
        ("user", "gpulab: {nodes: 0}\n", "config gpulab.nodes: 0 is not a whole number from 1 to 64 hosts ("),
        (
            "user",
            "gpulab: {sweep: {fetch_retries: 11}}\n",
            "config gpulab.sweep.fetch_retries: 11 is not a whole number",
        ),
        (
            "user",
            "gpulab: {seeds: 0, workloads: ncf}\n",
            "config gpulab.seeds: 0 is not a whole number from 1 to 1000 seeds, auto or mlperf (",
        ),
        ("user", "gpulab: {gpus: true}\n", "config gpulab.gpus: True is not valid here"),
        ("user", "gpulab: {workloads: ''}\n", "config gpulab.workloads: '' is not a comma list of names"),
        (
            "user",
            "gpulab: {results: /etc}\n",
            "config gpulab.results: /etc is a system folder; give a folder of its own (",
        ),
        (
            "runtime",
            "gpulab: {demo: {gpus: '1,0'}}\n",
            "config gpulab.demo.gpus: '1,0' is not a comma list of whole numbers from 1 to 64 GPUs or all: item 2 is '0' (",
        ),
        ("user", "gpulab: {sweep: {poll_s: " + "9" * 400 + "}}\n", "config gpulab.sweep.poll_s: "),
    ],
)
def test_an_ill_typed_layer_is_one_line_and_exit_2(tmp_path, where, text, message):
    home = tmp_path / "home"
    home.mkdir()
    args = DRY
    if where == "user":
        (home / ".invoke.yaml").write_text(text)
    else:
        (tmp_path / "run.yaml").write_text(text)
        args = ("-f", str(tmp_path / "run.yaml"), *DRY)
    r = invoke(*args, home=home)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
    if message.endswith(" ("):  # a value out of what the key takes: the file it came from is named
        assert lines[0].endswith(f"({home / '.invoke.yaml' if where == 'user' else tmp_path / 'run.yaml'})"), lines[0]
    assert lines[0].startswith("gpulab: ") and len(lines[0]) < 300 and r.stdout == ""


def test_a_settings_value_refused_where_it_is_used_names_the_layer_that_set_it(tmp_path):
    """A value only its use can judge (a system folder as gpulab.results) is refused by the task naming the
    setting; lab.core.cli.task_errors adds the file or variable it came from (cli.with_source)."""
    said = "config gpulab.results: /etc is a system folder; give a folder of its own"
    cfg = configured(tmp_path, {"user": {"results": "/etc"}})
    assert cli.with_source(cfg, said) == f"{said} ({tmp_path / 'home' / '.invoke.yaml'})"
    cfg = configured(tmp_path, {"user": {"results": "/etc"}, "runtime": {"results": "/etc"}})
    assert cli.with_source(cfg, said) == f"{said} ({tmp_path / 'runtime.yaml'})"  # the highest layer
    cfg = configured(
        tmp_path, {"user": {"results": "/etc", "sweep": {"backend": "slurm"}}}, env={"INVOKE_GPULAB_RESULTS": "/etc"}
    )
    assert cli.with_source(cfg, said) == f"{said} (INVOKE_GPULAB_RESULTS)"
    backend = "config gpulab.sweep.backend: no Slurm here"
    assert cli.with_source(cfg, backend) == f"{backend} ({tmp_path / 'home' / '.invoke.yaml'})"
    for as_is in (f"{said} (INVOKE_GPULAB_RESULTS)", "config gpulab.mode: x", "--results: /etc is a system folder"):
        assert cli.with_source(cfg, as_is) == as_is  # named already; set by no layer; not a setting


def test_falsy_values_are_values_and_integers_from_yaml_work(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    results = tmp_path / "results"
    r = invoke("demo", home=home, env={"INVOKE_GPULAB_DEMO_SEEDS": "0", "INVOKE_GPULAB_RESULTS": str(results)})
    assert r.returncode == 2 and r.stderr.strip() == (
        "gpulab: config gpulab.demo.seeds: '0' is not a whole number from "
        "1 to 1000 seeds, auto or mlperf (INVOKE_GPULAB_DEMO_SEEDS)"
    ), r.stderr
    assert not results.exists()  # nothing planned, nothing started
    (home / ".invoke.yaml").write_text("gpulab: {gpus: 2, seeds: 3, workloads: ncf}\n")
    r = invoke(*DRY, home=home)
    assert r.returncode == 0, r.stderr
    assert "  ncf          GPUs 2        x   3 seed(s)     3 runs" in r.stdout
