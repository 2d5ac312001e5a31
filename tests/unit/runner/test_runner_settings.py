"""Typed workload settings: every key of a scale is declared by its workload (workloads.yml 'settings')
or shared (runner/workloads/settings.py COMMON), and its value matches the declaration when the
catalogue loads; ``ctx.cfg`` refuses undeclared names."""

import copy
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from runner import workloads
from runner.workloads import settings as S
from runner_helpers import env

DOC = yaml.safe_load(workloads.CATALOGUE.read_text())
NAMES = sorted(DOC["workloads"])


def load_mutated(mutate):
    doc = copy.deepcopy(DOC)
    mutate(doc)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "workloads.yml"
        p.write_text(yaml.safe_dump(doc))
        return workloads.load(p, extra="")


def error_of(mutate) -> str:
    with pytest.raises(workloads.CatalogueError) as exc:
        load_mutated(mutate)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("workloads.yml: ")
    return text


def test_every_key_of_every_scale_is_declared():
    for name, w in workloads.load(extra="").items():
        declared = S.declarations(w.get("settings", {}))
        for scale, values in w["scales"].items():
            assert S.check_scale(values, declared) is None, (name, scale)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(NAMES),
    scale=st.sampled_from(workloads.SCALES),
    key=st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True),
    value=st.integers(),
)
def test_an_undeclared_key_is_named_with_its_workload_and_scale(name, scale, key, value):
    declared = set(S.COMMON) | set(DOC["workloads"][name].get("settings", {}))
    if key in declared:
        return
    text = error_of(lambda d: d["workloads"][name]["scales"][scale].update({key: value}))
    assert f"workloads.{name}.scales.{scale}: unknown setting {key!r}" in text


WRONG = st.one_of(
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.none(),
)


def _scalar_keys():
    out = []
    for name in NAMES:
        for key, decl in DOC["workloads"][name].get("settings", {}).items():
            p = S.parse(decl)
            if p[0] == "scalar" and p[1] in ("int", "number", "bool"):
                out.append((name, key, p))
    return out


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(_scalar_keys()), scale=st.sampled_from(workloads.SCALES), value=WRONG)
def test_an_ill_typed_value_is_named_with_its_workload_scale_and_key(which, scale, value):
    name, key, _ = which
    text = error_of(lambda d: d["workloads"][name]["scales"][scale].update({key: value}))
    assert f"workloads.{name}.scales.{scale}: '{key}' must be " in text


@hsettings(max_examples=200, deadline=None)
@given(lo=st.integers(-5, 5), value=st.one_of(st.integers(-10, 10), st.floats(allow_nan=True), st.booleans()))
def test_int_bounds_hold_for_integers_only(lo, value):
    bad = S.check(f"int {lo}..", value)
    good = isinstance(value, int) and not isinstance(value, bool) and value >= lo
    assert (bad is None) == good


@hsettings(max_examples=200, deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.booleans(), st.text(max_size=3)
    )
)
def test_a_number_in_bounds_is_finite_and_no_boolean(value):
    bad = S.check("number 0..1", value)
    good = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    assert (bad is None) == good


@pytest.mark.parametrize(
    "decl, value, ok",
    [
        ("list[2] of int 1..", [3, 7], True),
        ("list[2] of int 1..", [3, 7, 9], False),
        ("list[2] of int 1..", [3, 0], False),
        ("list of list[4] of int 0..", [[1, 2, 3, 4]], True),
        ("list of list[4] of int 0..", [[1, 2, 3]], False),
        ("token | sentence", "sentence", True),
        ("token | sentence", "word", False),
        ("int 1.. or null", None, True),
        ("int 1..", None, False),
        ("map of int 1..", {15: 2, 30: 4}, True),
        ("map of int 1..", {15: 0}, False),
        ({"size": "int 1..", "max_len": "int 1.."}, {"size": 5}, True),
        ({"size": "int 1..", "max_len": "int 1.."}, {"size": 5, "width": 2}, False),
    ],
)
def test_declarations(decl, value, ok):
    assert (S.check(decl, value) is None) == ok


@pytest.mark.parametrize("decl", ["integer", "int one..", "str 1..", "list of", "a|", "", 3, {}])
def test_a_malformed_declaration_is_a_catalogue_error(decl):
    text = error_of(lambda d: d["workloads"]["ncf"]["settings"].update(users=decl))
    assert "workloads.ncf.settings: 'users'" in text


def test_a_workload_may_not_redeclare_a_shared_setting_nor_hold_unknown_entry_keys():
    assert "'batch_size' is a shared setting" in error_of(
        lambda d: d["workloads"]["ncf"]["settings"].update(batch_size="int 1..")
    )
    assert "workloads.gnmt: unknown key 'setting'" in error_of(lambda d: d["workloads"]["gnmt"].update(setting={}))
    assert "'module' must be a module's import path" in error_of(
        lambda d: d["workloads"]["gnmt"].update(module="../../etc/passwd")
    )


def test_the_runner_refuses_a_catalogue_with_an_ill_typed_setting_in_one_line(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "extra.yml"
    doc = {"schema": 1, "workloads": {"ncf2": copy.deepcopy(DOC["workloads"]["ncf"])}}
    doc["workloads"]["ncf2"]["scales"]["tiny"]["users"] = "many"
    bad.write_text(yaml.safe_dump(doc))
    e = env()
    e[workloads.EXTRA_ENV] = str(bad)
    for argv in (["list"], ["run", "ncf", "--scale", "tiny", "--out", str(tmp_path / "run")]):
        r = subprocess.run([sys.executable, "-m", "runner", *argv], env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip()
        assert "\n" not in line and line.endswith(
            "extra.yml: workloads.ncf2.scales.tiny: 'users' must be an integer >= 1 (not 'many')"
        ), line
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()


def test_ctx_cfg_refuses_undeclared_reads_and_ill_typed_overrides():
    from runner.workloads.base import bench_context
    from runner.workloads.errors import WorkloadError

    ctx, _ = bench_context("ncf", "cpu", False, scale="tiny", precision="fp32")
    assert ctx.cfg["users"] == 600 and ctx.cfg.get("latent_dim") == 6 and ctx.cfg.get("eval_every") is None
    with pytest.raises(WorkloadError, match=r"ncf \(tiny scale\): 'userz' is no declared setting"):
        ctx.cfg["userz"]
    with pytest.raises(WorkloadError, match="'users' must be an integer >= 1"):
        bench_context("ncf", "cpu", False, scale="tiny", precision="fp32", overrides={"users": "x"})
