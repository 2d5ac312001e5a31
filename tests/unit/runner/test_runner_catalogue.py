"""The workload catalogue (workloads.yml) and ``python -m runner list``."""

import json

import pytest
import yaml

from runner import workloads
from runner_helpers import runner


def test_catalogue_loads_and_every_module_exists():
    import importlib.util

    ws = workloads.load()
    assert "ncf" in ws
    for name, w in ws.items():
        assert importlib.util.find_spec(w["module"]) is not None, name


def _broken(tmp_path, mutate):
    doc = yaml.safe_load(workloads.CATALOGUE.read_text())
    mutate(doc)
    p = tmp_path / "workloads.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda d: d["workloads"]["ncf"]["scales"].pop("tiny"), "workloads.ncf: 'scales' must hold exactly"),
        (
            lambda d: d["workloads"]["ncf"]["scales"]["tiny"].update(target="high"),
            "workloads.ncf.scales.tiny: 'target' must be a number",
        ),
        (lambda d: d["workloads"]["ncf"].update(frameworks=["jax"]), "workloads.ncf: 'frameworks'"),
        (
            lambda d: d["workloads"]["ncf"]["scales"]["full"].update(max_epochs=0),
            "workloads.ncf.scales.full: 'max_epochs'",
        ),
        (lambda d: d.update(schema=2), "'schema: 1' expected"),
        (
            lambda d: d["workloads"]["resnet50"]["scales"]["full"].update(compile_mode="fastest"),
            "workloads.resnet50.scales.full: 'compile_mode' must be one of",
        ),
        (
            lambda d: d["workloads"]["gnmt"]["scales"]["small"].update(lr_schedule="cosine"),
            "workloads.gnmt.scales.small: 'lr_schedule' must be one of",
        ),
        (
            lambda d: d["workloads"]["ncf"]["scales"]["tiny"].pop("lr_schedule"),
            "workloads.ncf.scales.tiny: 'lr_schedule' must be one of",
        ),
        (
            lambda d: d["workloads"]["resnet50"]["scales"]["full"].update(inductor=["conv_1x1_as_mm"]),
            "workloads.resnet50.scales.full: 'inductor' must map",
        ),
        (
            lambda d: d["workloads"]["resnet50"]["scales"]["full"].update(eval_epochs=[5, 1]),
            "workloads.resnet50.scales.full: 'eval_epochs' must be a list of increasing positive integers",
        ),
    ],
)
def test_catalogue_errors_name_the_place(tmp_path, mutate, words):
    with pytest.raises(workloads.CatalogueError) as exc:
        workloads.load(_broken(tmp_path, mutate))
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_list_prints_every_workload():
    r = runner("list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["workload", "benchmark", "metric"]
    names = {ln.split()[0] for ln in lines[1:]}
    assert names == set(workloads.load())
    js = json.loads(runner("list", "--json").stdout)
    ncf = next(w for w in js if w["name"] == "ncf")
    assert ncf["targets"]["full"] == 0.635 and ncf["metric"] == "hr@10"
