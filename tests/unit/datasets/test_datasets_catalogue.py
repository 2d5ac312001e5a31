"""The dataset catalogue (inventory/datasets.yml), name resolution and sources, and the
`invoke datasets` edge: bad input is one line, exit code 2, before any host is touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.hosts import datasets as ds
from lab.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def test_the_catalogue_loads_and_names_every_artifact_with_sum_and_size():
    cat = ds.load_catalogue()
    assert set(cat.datasets) == {"imagenet", "coco", "wmt16", "wmt17", "ml-20m", "resnet34-torchvision", "r50-msra"}
    # the detection benchmarks also fetch the pretrained backbone their reference loads
    assert cat.resolve("resnet50,ncf,ssd,maskrcnn") == [
        "imagenet",
        "coco",
        "ml-20m",
        "resnet34-torchvision",
        "r50-msra",
    ]
    assert cat.resolve("ssd") == ["coco", "resnet34-torchvision"]
    assert cat.resolve("transformer,gnmt") == ["wmt16", "wmt17"]
    for name, entry in cat.datasets.items():
        for a in entry["artifacts"]:
            if name == "r50-msra":  # only an md5 is published for Detectron's R-50.pkl
                assert a["sha256"] is None and a["size"] is None and len(a["md5"]) == 32
                continue
            assert len(a["sha256"]) == 64 and a["size"] > 0
    assert cat.datasets["wmt16"]["params"]["vocab_size"] == 32320
    assert cat.datasets["wmt17"]["params"]["vocab_size"] == 33712
    assert cat.datasets["imagenet"]["expect"] == {"classes": 1000, "train_images": 1281167, "val_images": 50000}
    spec = cat.spec("ml-20m")
    assert spec["catalogue_version"] == cat.version and spec["params"]["negatives"] == 999


def test_sources_mirror_overrides_and_licensed_data():
    cat = ds.load_catalogue()
    src = ds.host_sources(cat, ["ml-20m"], "h", {})
    assert src == {"ml-20m.zip": "https://files.grouplens.org/datasets/movielens/ml-20m.zip"}
    src = ds.host_sources(cat, ["ml-20m", "imagenet"], "h", {"gpulab_mirror": "http://mirror.lab:8080/"})
    assert src["ILSVRC2012_img_val.tar"] == "http://mirror.lab:8080/datasets/imagenet/ILSVRC2012_img_val.tar"
    src = ds.host_sources(cat, ["imagenet"], "h", {"datasets_origins": {"imagenet": "/nfs/ilsvrc2012"}})
    assert src["ILSVRC2012_devkit_t12.tar.gz"] == "/nfs/ilsvrc2012/ILSVRC2012_devkit_t12.tar.gz"
    with pytest.raises(
        ConfigError,
        match=r"^host h: imagenet: licensed data: never taken from a public site; no "
        r"source for ILSVRC2012_img_train\.tar",
    ):
        ds.host_sources(cat, ["imagenet"], "h", {})
    with pytest.raises(ConfigError, match="neither an http"):
        ds.host_sources(cat, ["coco"], "h", {"datasets_origins": {"coco": "ftp://x"}})


def _write(tmp_path, mutate) -> Path:
    doc = yaml.safe_load((REPO / "inventory" / "datasets.yml").read_text())
    mutate(doc)
    path = tmp_path / "datasets.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda d: d["datasets"]["coco"]["artifacts"][0].update(sha256="abc"),
            r"datasets\.coco\.artifacts\.0\.sha256: 'abc' is not valid here \(64 lower-case hex digits",
        ),
        (lambda d: d["datasets"]["coco"]["artifacts"][1].pop("size"), r"datasets\.coco\.artifacts\.1: size is missing"),
        (
            lambda d: d["datasets"]["ml-20m"]["artifacts"][0].update(origin="nowhere"),
            r"datasets\.ml-20m\.artifacts\.0: origin 'nowhere' is not defined under origins",
        ),
        (
            lambda d: d["origins"].update(imagenet="https://image-net.org/data"),
            r"datasets\.imagenet\.artifacts\.0: imagenet is licensed: its origin 'imagenet' must be null or a lab path",
        ),
        (lambda d: d["datasets"].update(bert=d["datasets"]["coco"]), r"datasets: 'bert' is not one of"),
        (
            lambda d: d["datasets"]["wmt17"]["artifacts"][3].update(size=5),
            r"datasets\.wmt17\.artifacts\.3: dev\.tgz is listed again with another sha256 or size",
        ),
        (
            lambda d: d["datasets"]["wmt16"]["params"]["eval"][0].update(archive="dev2.tgz"),
            r"datasets\.wmt16\.params\.eval\.0: archive 'dev2\.tgz' is not one of wmt16's artifacts",
        ),
        (lambda d: d["datasets"]["ml-20m"].update(extra=1), r"datasets\.ml-20m: unknown key\(s\) extra"),
        (
            lambda d: d["datasets"]["r50-msra"]["artifacts"][0].pop("md5"),
            r"datasets\.r50-msra\.artifacts\.0: sha256 is null: give the sum the publisher does publish \(md5\)",
        ),
        (lambda d: d["benchmarks"].update(ssd=["coco", "resnet18"]), r"benchmarks\.ssd: 'resnet18' is not a dataset"),
        # a path below a controller:/ origin that climbs out of it would copy any file of the controller to hosts
        (
            lambda d: d["datasets"]["coco"]["artifacts"][0].update(path="zips/../../../etc/shadow"),
            r"datasets\.coco\.artifacts\.0\.path: 'zips/\.\./\.\./\.\./etc/shadow' does not match",
        ),
        # JSON Schema's $ ends the text: a trailing newline is not a file name
        (
            lambda d: d["datasets"]["coco"]["artifacts"][0].update(file="train2017.zip\n"),
            r"datasets\.coco\.artifacts\.0\.file: 'train2017\.zip\\n' does not match",
        ),
        # ... and a key of patternProperties too (jsonschema searches those with Python's $)
        (lambda d: d["origins"].update({"coco\n": "/data"}), r"origins: unknown key\(s\) 'coco\\n'$"),
        (lambda d: d["benchmarks"].update({"ssd\n": "coco"}), r"benchmarks: unknown key\(s\) 'ssd\\n'$"),
        # params of the wrong shape were a traceback (AttributeError, TypeError), a bool a vocabulary size
        (
            lambda d: d["datasets"]["wmt16"]["params"].update(train=["x"]),
            r"datasets\.wmt16\.params\.train\.0: archive missing \('x' is not a mapping\)",
        ),
        (
            lambda d: d["datasets"]["wmt17"]["params"].update(eval={"archive": "dev.tgz"}),
            r"datasets\.wmt17\.params\.eval: a mapping is not a list of sources$",
        ),
        (
            lambda d: d["datasets"]["wmt16"]["params"]["train"][0].update(archive=["dev.tgz"]),
            r"datasets\.wmt16\.params\.train\.0: archive a list is not one of wmt16's artifacts",
        ),
        (
            lambda d: d["datasets"]["wmt16"]["params"].update(vocab_size=True),
            r"datasets\.wmt16\.params\.vocab_size: True is not a whole number from 1$",
        ),
        # sizes JSON Schema's integer lets through: a float the fetch module refuses on the host, 10**30 bytes
        (
            lambda d: d["datasets"]["coco"]["artifacts"][0].update(size=1e3),
            r"datasets\.coco\.artifacts\.0\.size: 1000\.0 is not a whole number of bytes from 1 to",
        ),
        (
            lambda d: d["datasets"]["coco"]["artifacts"][0].update(size=10**30),
            r"datasets\.coco\.artifacts\.0\.size: 1000000000000000000000000000000 is not a whole number of bytes",
        ),
        # the version goes into every manifest and into the sweep's lines: one short word
        (lambda d: d.update(version="2026.12\n\x1b[31m"), r"version: '2026\.12\\n\\x1b\[31m' does not match"),
        (lambda d: d.update(version="v" * 100_000), r"version: 'vvvv.*\.\.\. does not match"),
    ],
)
def test_catalogue_errors_are_one_line_naming_file_and_place(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ConfigError) as e:
        ds.load_catalogue(path)
    assert "\n" not in e.value.message and e.value.message.startswith(f"{path}: ")
    import re

    assert re.search(message, e.value.message), e.value.message


def _invoke(*args):
    return subprocess.run(
        [sys.executable, "-m", "invoke", "datasets", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )


def test_invoke_datasets_bad_input_is_exit_2_one_line(tmp_path):
    inv = ["--inventory", str(REPO / "inventory" / "hosts.yml"), "--host", "r740-01"]
    r = _invoke(*inv, "--names", "bert")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "unknown dataset or benchmark 'bert'" in r.stderr
    r = _invoke(*inv, "--names", "resnet50")  # ImageNet without a lab path or mirror
    assert r.returncode == 2 and "host r740-01: imagenet: licensed data" in r.stderr
    bad = _write(tmp_path, lambda d: d.update(version=3))
    r = _invoke(*inv, "--names", "ncf", "--catalogue", str(bad))
    assert r.returncode == 2 and r.stderr.strip() == f"gpulab: {bad}: version: 3 is not of type 'string'"
    r = _invoke(*inv, "--names", "ncf", "--storage", "nfs")
    assert r.returncode == 2 and "--storage 'nfs': use one of copy, shared" in r.stderr


def test_provision_with_datasets_checks_them_before_touching_hosts():
    args = [
        sys.executable,
        "-m",
        "invoke",
        "provision",
        "--inventory",
        str(REPO / "inventory" / "hosts.yml"),
        "--host",
        "r740-01",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(args + ["--datasets", "bert"], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "unknown dataset or benchmark 'bert'" in r.stderr
    r = subprocess.run(
        args + ["--datasets", "resnet50"], cwd=REPO, capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 2 and "host r740-01: imagenet: licensed data" in r.stderr


def test_controller_folders_as_sources(tmp_path):
    cat = ds.load_catalogue()
    src = ds.host_sources(cat, ["ml-20m"], "h", {"datasets_origins": {"grouplens": f"controller:{tmp_path}"}})
    assert src == {"ml-20m.zip": f"controller:{tmp_path}/ml-20m.zip"}
    with pytest.raises(ConfigError, match=r"^host h: datasets_origins\.grouplens: /no/such is not a folder"):
        ds.host_sources(cat, ["ml-20m"], "h", {"datasets_origins": {"grouplens": "controller:/no/such"}})


def test_a_controller_origin_too_long_for_a_file_name_is_one_line():
    """A controller:/ folder whose name no file system takes (ENAMETOOLONG) was an OSError traceback."""
    cat = ds.load_catalogue()
    for folder in ("/" + "a" * 300, "/a" * 1000):
        with pytest.raises(ConfigError) as e:
            ds.host_sources(cat, ["coco"], "h", {"datasets_origins": {"coco": f"controller:{folder}"}})
        assert e.value.message.startswith("host h: datasets_origins.coco: /a") and len(e.value.message) < 250
        assert e.value.message.endswith("... is not a folder on this controller")


def test_a_names_storage_or_root_value_is_quoted_short():
    """--names, --storage and --root were quoted whole (their repr) in the line that refused them."""
    cat = ds.load_catalogue()
    for refuse in (
        lambda: cat.resolve("n" * 100_000),
        lambda: ds.plan([], "ncf", inventory=None, storage="s" * 100_000),
        lambda: ds.check_root("r\n" * 100_000),
    ):
        with pytest.raises(ConfigError) as e:
            refuse()
        assert len(e.value.message) < 400
