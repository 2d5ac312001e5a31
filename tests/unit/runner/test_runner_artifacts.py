"""Pretrained backbones as catalogued artifacts: the two catalogues agree, preparation puts
the file in place, and a full-scale ttt run refuses a missing or wrong file (exit 2, one
line naming it, nothing written) instead of training from scratch."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from runner import artifacts
from runner.datasets import NotPrepared, check
from runner.datasets.common import PrepareError
from runner.datasets.prepare import prepare
from runner.workloads import load as load_workloads
from runner_helpers import ROOT, runner

CATALOGUE = ROOT / "inventory" / "datasets.yml"


def pretrained_entries():
    return {
        (name, scale): s["pretrained"]
        for name, w in load_workloads().items()
        for scale, s in w["scales"].items()
        if "pretrained" in s
    }


def test_full_scale_detection_names_its_published_backbone_and_test_scales_none():
    entries = pretrained_entries()
    assert set(entries) == {("ssd", "full"), ("maskrcnn", "full")}
    assert entries[("ssd", "full")]["file"] == "resnet34-333f7ec4.pth"
    assert entries[("ssd", "full")]["sha256"].startswith("333f7ec4")  # torchvision's published prefix
    assert entries[("maskrcnn", "full")]["file"] == "R-50.pkl"
    assert entries[("maskrcnn", "full")]["md5"] == "b19105fdd7baafb40480251377de18f2"  # NVIDIA's weights.md5


def test_the_runner_and_the_dataset_catalogue_agree_on_every_backbone():
    doc = yaml.safe_load(CATALOGUE.read_text())
    for (name, _), e in pretrained_entries().items():
        ds = doc["datasets"][e["dataset"]]
        assert ds["kind"] == "weights"
        (a,) = [a for a in ds["artifacts"] if a["file"] == e["file"]]
        assert (a["sha256"], a["size"], a.get("md5")) == (e.get("sha256"), e.get("size"), e.get("md5")), name
        assert e["dataset"] in doc["benchmarks"][name]  # `invoke datasets --names <benchmark>` fetches it
        origin = doc["origins"][a["origin"]]
        assert origin.startswith("https://")


def test_a_sum_the_publisher_does_not_give_is_null_and_another_sum_stands_in():
    doc = yaml.safe_load(CATALOGUE.read_text())
    (a,) = doc["datasets"]["r50-msra"]["artifacts"]
    assert a["sha256"] is None and a["size"] is None and len(a["md5"]) == 32
    assert "No sha256 and no size are published" in CATALOGUE.read_text()


def _entry(tmp_path, data: bytes, **kw):
    e = {"dataset": "r50-msra", "file": "R-50.pkl", "title": "the MSRA ResNet-50", "format": "detectron-pkl"}
    e.update(kw)
    return e


def test_check_accepts_the_published_file_and_names_what_is_wrong(tmp_path):
    data = b"weights" * 1000
    (tmp_path / "r50-msra").mkdir()
    f = tmp_path / "r50-msra" / "R-50.pkl"
    e = _entry(tmp_path, data, md5=hashlib.md5(data).hexdigest())
    with pytest.raises(artifacts.ArtifactError, match=rf"^{f}: missing: the MSRA ResNet-50 .*invoke datasets"):
        artifacts.check(e, tmp_path)
    f.write_bytes(data)
    assert artifacts.check(e, tmp_path) == f
    e2 = _entry(tmp_path, data, sha256=hashlib.sha256(data).hexdigest(), size=len(data) + 1)
    with pytest.raises(artifacts.ArtifactError, match=rf"^{f}: 7000 bytes, the published file has 7001"):
        artifacts.check(e2, tmp_path)
    f.write_bytes(data[:-1] + b"x")
    with pytest.raises(artifacts.ArtifactError, match=rf"^{f}: md5 [0-9a-f]{{32}} is not the published"):
        artifacts.check(e, tmp_path)


@pytest.mark.parametrize(
    "name, file", [("maskrcnn", "r50-msra/R-50.pkl"), ("ssd", "resnet34-torchvision/resnet34-333f7ec4.pth")]
)
def test_full_scale_ttt_without_the_backbone_is_bad_input(tmp_path, name, file):
    data = tmp_path / "data"
    (data / "coco").mkdir(parents=True)
    out = tmp_path / "run"
    r = runner("run", name, "--scale", "full", "--data", data, "--gpus", "0", "--out", out)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and f"{data / file}: missing:" in r.stderr, r.stderr
    assert not out.exists()
    # a file that is not the published one: its sum named, still nothing written
    (data / file).parent.mkdir(parents=True)
    (data / file).write_bytes(b"not the weights")
    r = runner("run", name, "--scale", "full", "--data", data, "--gpus", "0", "--out", out)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(data / file) in r.stderr, r.stderr
    assert ("md5" if name == "maskrcnn" else "bytes, the published file has 87306240") in r.stderr
    assert not out.exists()


def test_throughput_at_full_scale_does_not_need_the_backbone(tmp_path):
    from runner import supervisor

    import argparse

    # the parsed command line of `runner run maskrcnn --scale full --mode throughput`, by the runner's own parser
    # (a hand-made one fell behind each new option: --compile, then --set)
    parser = argparse.ArgumentParser(prog="runner run")
    supervisor.add_arguments(parser)
    A = parser.parse_args(
        [
            "maskrcnn",
            "--gpus",
            "0",
            "--scale",
            "full",
            "--mode",
            "throughput",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "run"),
        ]
    )
    assert supervisor.plan(A, host_gpus=0)["workload"] == "maskrcnn"


def test_weights_are_prepared_in_place_with_their_sha256_recorded(tmp_path):
    data = bytes(range(256)) * 100
    arch = tmp_path / "arch"
    arch.mkdir()
    (arch / "R-50.pkl").write_bytes(data)
    spec = {
        "name": "r50-msra",
        "catalogue_version": "t-1",
        "kind": "weights",
        "artifacts": [{"file": "R-50.pkl", "sha256": None, "size": None, "md5": hashlib.md5(data).hexdigest()}],
    }
    changed, doc = prepare(spec, arch, tmp_path / "root")
    assert changed and (tmp_path / "root" / "r50-msra" / "R-50.pkl").read_bytes() == data
    assert doc["files"]["R-50.pkl"] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert check("r50-msra", tmp_path / "root", deep=True)["counts"] == {"files": 1}
    assert prepare(spec, arch, tmp_path / "root")[0] is False  # nothing to do the second time
    (tmp_path / "root" / "r50-msra" / "R-50.pkl").write_bytes(data[:-5])
    with pytest.raises(NotPrepared, match="R-50.pkl has 25595 bytes, the manifest says 25600"):
        check("r50-msra", tmp_path / "root")
    (arch / "R-50.pkl").write_bytes(data[:-1] + b"!")
    with pytest.raises(PrepareError, match=r"R-50\.pkl: md5 mismatch: expected [0-9a-f]{32}, found"):
        prepare(spec, arch, tmp_path / "other", force=True)


def test_the_catalogue_validates_a_pretrained_entry():
    assert (
        artifacts.check_entry({"dataset": "x", "file": "f.pth", "title": "t", "format": "onnx", "md5": "0" * 32})
        == "'pretrained.format' must be one of torchvision, detectron-pkl"
    )
    assert "sha256" in artifacts.check_entry({"dataset": "x", "file": "f.pth", "title": "t", "format": "torchvision"})
    assert "plain names" in artifacts.check_entry(
        {"dataset": "..", "file": "../f", "title": "t", "format": "torchvision", "md5": "0" * 32}
    )


def test_paths_stay_below_the_data_root(tmp_path):
    e = {"dataset": "r50-msra", "file": "R-50.pkl"}
    assert artifacts.path(e, tmp_path) == Path(tmp_path) / "r50-msra" / "R-50.pkl"
