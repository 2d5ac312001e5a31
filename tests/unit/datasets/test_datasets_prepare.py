"""On-host preparation (runner.datasets) on tiny archives in the real formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from runner.datasets import NotPrepared, PrepareError, check, readers
from runner.datasets.bpe import BPE
from runner.datasets.movielens import convert, read_ratings
from runner.datasets.prepare import prepare
from tests.unit.datasets.dataset_archives import build, spec

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("datasets")
    entries, facts = build(d / "arch")
    return d, entries, facts


@pytest.fixture(scope="module")
def prepared(tiny):
    d, entries, facts = tiny
    root = d / "root"
    docs = {n: prepare(spec(entries, n), d / "arch" / n, root)[1] for n in entries}
    return root, docs


def test_ncf_filtering_and_leave_one_out_by_counts(tiny, prepared):
    _, entries, facts = tiny
    root, docs = prepared
    f = facts["ml-20m"]
    data = readers.ncf(root)
    assert data["users"] == f["users"] == 40  # the 6 users below 20 ratings are gone
    assert data["items"] == f["items"]
    assert len(data["test_users"]) == f["users"] and sorted(data["test_users"]) == list(range(f["users"]))
    assert len(data["train_users"]) + len(data["test_users"]) == f["ratings"]
    assert docs["ml-20m"]["counts"]["train"] == f["ratings"] - f["users"]
    # ids follow first appearance in the file: map them back and compare the held-out items
    users_in_order = list(dict.fromkeys(r[0] for r in f["rows"] if r[0] in set(f["qualified"])))
    items_in_order = list(dict.fromkeys(r[1] for r in f["rows"] if r[0] in set(f["qualified"])))
    for u, i in zip(data["test_users"], data["test_items"]):
        assert items_in_order[i] == f["latest"][users_in_order[u]]


def test_ncf_negatives_are_999_distinct_unrated_items_per_user(prepared, tiny):
    root, _ = prepared
    data = readers.ncf(root)
    neg = data["test_negatives"]
    assert neg.shape == (40, 999)
    rated = {}
    for u, i in zip(np.r_[data["train_users"], data["test_users"]], np.r_[data["train_items"], data["test_items"]]):
        rated.setdefault(int(u), set()).add(int(i))
    for u in range(40):
        row = set(neg[u].tolist())
        assert len(row) == 999
        assert not row & rated[u]
        assert all(0 <= x < data["items"] for x in row)


def test_the_pretrained_backbones_are_put_in_place_in_their_published_forms(tiny, prepared, tmp_path):
    # every entry of inventory/datasets.yml has a tiny stand-in; the backbones are copied as published
    # and read by the workloads' loaders: torchvision's state dict, Detectron's pickle of numpy blobs
    import torch

    from runner.workloads.pretrained import read_detectron_pkl

    d, entries, facts = tiny
    root, docs = prepared
    real = yaml.safe_load((REPO / "inventory" / "datasets.yml").read_text())
    assert set(entries) == set(real["datasets"])
    for name, file in (("resnet34-torchvision", "resnet34-333f7ec4.pth"), ("r50-msra", "R-50.pkl")):
        assert (root / name / file).read_bytes() == (d / "arch" / name / file).read_bytes()
        assert docs[name]["counts"] == {"files": 1} and check(name, root)["dataset"] == name
    assert (
        sorted(torch.load(root / "resnet34-torchvision" / "resnet34-333f7ec4.pth", weights_only=True))
        == facts["resnet34-torchvision"]["keys"]
    )
    assert sorted(read_detectron_pkl(root / "r50-msra" / "R-50.pkl")) == facts["r50-msra"]["blobs"]
    assert docs["r50-msra"]["files"]["R-50.pkl"] == {k: facts["r50-msra"][k] for k in ("sha256", "size")}
    # only an md5 is given for R-50.pkl, as published: a file that does not match it is refused
    (tmp_path / "R-50.pkl").write_bytes((d / "arch" / "r50-msra" / "R-50.pkl").read_bytes() + b"x")
    with pytest.raises(
        PrepareError, match=r"R-50\.pkl: md5 mismatch: expected " + entries["r50-msra"]["artifacts"][0]["md5"]
    ):
        prepare(spec(entries, "r50-msra"), tmp_path, tmp_path / "root")


def test_ncf_sampling_is_fixed_by_the_seed(tiny):
    d, entries, _ = tiny
    ratings = read_ratings(d / "arch" / "ml-20m" / "ml-20m.zip")
    a, b = convert(ratings, 20, 999, seed=0), convert(ratings, 20, 999, seed=0)
    c = convert(ratings, 20, 999, seed=1)
    assert np.array_equal(a["test_negatives"], b["test_negatives"])
    assert not np.array_equal(a["test_negatives"], c["test_negatives"])


def test_ncf_refuses_a_bad_ratings_file(tmp_path):
    z = tmp_path / "ml-20m.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("ml-20m/ratings.csv", "userId,movieId,rating,timestamp\n1,2,x,4\n")
    with pytest.raises(PrepareError, match=r"ml-20m\.zip: ml-20m/ratings\.csv: line 2: .x. is not a number"):
        read_ratings(z)
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("ml-20m/movies.csv", "x\n")
    with pytest.raises(PrepareError, match="no ratings.csv"):
        read_ratings(z)


ROUND_TRIP = [
    "Hello world, this is a test.",
    "Grüße aus Köln — „Anführungszeichen“ und 100 %!",
    "  two  spaces\tand a tab  ",
    "Ωμέγα 日本語 emoji 🙂",
    "<s> </s> <0x41> <unk> literal ▁ mark",
    "",
    "das haus ist klein , und wir sehen einen grünen baum am fluss heute .",
]


def test_bpe_round_trip_on_any_text(prepared):
    root, _ = prepared
    wmt = readers.wmt("gnmt", root)
    for text in ROUND_TRIP:
        assert wmt.bpe.decode(wmt.bpe.encode(text)) == text
    assert wmt.vocab_size == 400 and len(wmt.bpe.vocab) == len(set(wmt.bpe.vocab))


def test_bpe_learns_merges_and_is_deterministic():
    lines = ["low lower lowest", "new newer newest", "wide wider widest"] * 20
    a, b = BPE.learn(lines, 285), BPE.learn(list(reversed(lines)), 285)
    assert a.vocab == b.vocab and a.merges == b.merges
    assert len(a.vocab) == 285
    assert a.merges[:2] == [("w", "e"), ("d", "e")]  # the most frequent pairs first, ties by name
    assert [a.vocab[i] for i in a.encode(" lowest")] == ["▁lowe", "st"]
    with pytest.raises(ValueError, match="below the 261 base tokens"):
        BPE.learn(lines, 100)


def test_wmt_arrays_decode_to_the_eval_text(prepared, tiny):
    root, docs = prepared
    _, _, facts = tiny
    for name in ("wmt16", "wmt17"):
        wmt = readers.wmt(name, root)
        en, de = wmt.pairs("eval")
        assert len(en) == len(de) == 13 == docs[name]["counts"]["eval_pairs"]
        assert [wmt.bpe.decode(en[i]) for i in range(len(en))] == facts[name]["eval_en"]
        assert [wmt.bpe.decode(de[i]) for i in range(len(de))] == facts[name]["eval_de"]
        tr = wmt.split("train", "en")
        assert len(tr) == 159 and tr.ids.dtype == np.int32 and tr.offsets[-1] == len(tr.ids)
        assert int(tr.ids.max()) < wmt.vocab_size
    assert readers.wmt("wmt17", root).vocab_size == 380


def test_imagenet_layout_and_labels(prepared, tiny):
    root, docs = prepared
    _, _, facts = tiny
    d = root / "imagenet"
    classes = [ln.split()[0] for ln in (d / "classes.txt").read_text().splitlines()]
    assert classes == facts["imagenet"]["classes_sorted"]
    for wnid, n in facts["imagenet"]["val_per_class"].items():
        assert len(list((d / "val" / wnid).glob("ILSVRC2012_val_*.JPEG"))) == n
    assert sorted(p.name for p in (d / "train" / "n02119789").iterdir()) == [
        f"n02119789_{1000 + i}.JPEG" for i in range(4)
    ]
    data = readers.imagenet(root)
    assert len(data["train"][0]) == 12 and len(data["val"][0]) == 7
    for path, label in zip(*data["val"]):
        assert Path(path).parent.name == classes[label]


def test_coco_layout(prepared):
    root, docs = prepared
    d = root / "coco"
    assert sorted(p.name for p in (d / "val2017").iterdir()) == [
        "000000000139.jpg",
        "000000000285.jpg",
        "000000000632.jpg",
    ]
    doc = json.loads((d / "annotations" / "instances_train2017.json").read_text())
    assert {im["file_name"] for im in doc["images"]} == {p.name for p in (d / "train2017").iterdir()}
    assert not (d / "annotations" / "captions_train2017.json").exists()
    assert docs["coco"]["counts"]["categories"] == 2


def test_detection_workloads_open_the_prepared_coco(prepared, tmp_path):
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from runner.workloads import detection as D
    from runner.workloads.base import WorkloadError

    root, _ = prepared
    ctx = SimpleNamespace(data=str(root))
    train_idx, val_idx, ids = D.open_coco(ctx, 3)  # 2 categories + background
    assert len(train_idx.cat_ids) == 2 and len(val_idx.ids) == 3 and ids
    with pytest.raises(WorkloadError, match="2 categories, expected 80"):
        D.open_coco(ctx, 81)
    # through the runner: a full ssd run first needs the backbone its reference loads, the published
    # file; the tiny stand-in prepared here is not it, so the run is refused before anything is
    # written (tests/unit/runner/test_runner_artifacts.py)
    size = (root / "resnet34-torchvision" / "resnet34-333f7ec4.pth").stat().st_size
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, "-m", "runner", "run", "ssd", "--scale", "full", "--data", str(root), "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"runner run: {root}/resnet34-torchvision/resnet34-333f7ec4.pth: {size} bytes, the published file has "
        f"87306240 (fetch it with `invoke datasets --names resnet34-torchvision` again)"
    ], r.stdout + r.stderr
    assert not out.exists()


def test_coco_images_must_match_the_annotations(tiny, tmp_path):
    d, entries, _ = tiny
    arch = tmp_path / "arch"
    arch.mkdir()
    for a in entries["coco"]["artifacts"]:
        os.link(d / "arch" / "coco" / a["file"], arch / a["file"])
    (arch / "val2017.zip").unlink()
    with zipfile.ZipFile(arch / "val2017.zip", "w") as zf:
        zf.writestr("val2017/000000000139.jpg", b"x")
    s = spec(entries, "coco")
    s["artifacts"] = [dict(a, size=(arch / a["file"]).stat().st_size) for a in s["artifacts"]]
    with pytest.raises(
        PrepareError,
        match=r"val2017\.zip: does not match annotations/instances_val2017\.json: "
        r"2 listed image\(s\) missing",
    ):
        prepare(s, arch, tmp_path / "root")
    assert not (tmp_path / "root" / "coco").exists() and not list((tmp_path / "root").glob(".coco*"))


def test_manifest_records_counts_sums_tools_and_catalogue_version(prepared):
    root, docs = prepared
    doc = json.loads((root / "ml-20m" / "gpulab-dataset.json").read_text())
    assert doc["kind"] == "gpulab-dataset" and doc["dataset"] == "ml-20m" and doc["catalogue_version"] == "test-1"
    assert set(doc["files"]) == {"train.npy", "test.npy", "test_negatives.npy"}
    assert doc["tools"]["numpy"] == np.__version__ and "python" in doc["tools"]
    assert doc["artifacts"]["ml-20m.zip"]["size"] == (root.parent / "arch" / "ml-20m" / "ml-20m.zip").stat().st_size
    assert check("ncf", root, deep=True)["counts"] == doc["counts"]
    assert check("ml-20m", root / "ml-20m")["dataset"] == "ml-20m"  # the dataset folder itself works too


def test_rerun_does_nothing_and_a_changed_entry_prepares_again(tiny, tmp_path):
    d, entries, _ = tiny
    s = spec(entries, "ml-20m")
    assert prepare(s, d / "arch" / "ml-20m", tmp_path)[0] is True
    stamp = (tmp_path / "ml-20m" / "gpulab-dataset.json").stat().st_mtime_ns
    assert prepare(s, d / "arch" / "ml-20m", tmp_path)[0] is False
    assert (tmp_path / "ml-20m" / "gpulab-dataset.json").stat().st_mtime_ns == stamp
    s2 = dict(s, params=dict(s["params"], seed=5))
    changed, doc = prepare(s2, d / "arch" / "ml-20m", tmp_path)
    assert changed and doc["params"] if "params" in doc else changed
    bad = dict(s, expect=dict(s["expect"], users=41))
    with pytest.raises(PrepareError, match="ml-20m: users is 40, the catalogue expects 41"):
        prepare(bad, d / "arch" / "ml-20m", tmp_path)
    assert check("ncf", tmp_path)["counts"]["users"] == 40  # the previous complete data stays


def test_incomplete_data_is_not_prepared_with_one_line(tiny, tmp_path):
    d, entries, _ = tiny
    prepare(spec(entries, "ml-20m"), d / "arch" / "ml-20m", tmp_path)
    (tmp_path / "ml-20m" / "test_negatives.npy").unlink()
    with pytest.raises(NotPrepared) as e:
        check("ncf", tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "MovieLens-20M" in msg and "test_negatives.npy is missing" in msg
    with pytest.raises(NotPrepared, match=r"no gpulab-dataset\.json"):
        (tmp_path / "coco").mkdir()
        check("ssd", tmp_path)
    with pytest.raises(NotPrepared, match="does not exist"):
        readers.wmt("transformer", tmp_path)
    # a rerun repairs what is missing
    assert prepare(spec(entries, "ml-20m"), d / "arch" / "ml-20m", tmp_path)[0] is True
    check("ncf", tmp_path)


def test_imagenet_check_counts_the_images(tiny, tmp_path):
    d, entries, _ = tiny
    prepare(spec(entries, "imagenet"), d / "arch" / "imagenet", tmp_path)
    next((tmp_path / "imagenet" / "val" / "n01440764").iterdir()).unlink()
    with pytest.raises(NotPrepared, match=r"imagenet/val holds 6 images, the manifest says 7"):
        check("resnet50", tmp_path)


def test_a_damaged_archive_names_the_file(tiny, tmp_path):
    d, entries, _ = tiny
    arch = tmp_path / "arch"
    arch.mkdir()
    s = spec(entries, "ml-20m")
    (arch / "ml-20m.zip").write_bytes(b"not a zip" * 10)
    s["artifacts"][0]["size"] = 90
    with pytest.raises(PrepareError, match=r"ml-20m\.zip: not a readable zip archive"):
        prepare(s, arch, tmp_path / "root")
    s["artifacts"][0]["size"] = 91
    with pytest.raises(PrepareError, match=r"ml-20m\.zip: 90 bytes, the catalogue says 91"):
        prepare(s, arch, tmp_path / "root")


def _runner(*args):
    return subprocess.run(
        [sys.executable, "-m", "runner", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )


def test_runner_datasets_check_command(prepared, tmp_path):
    root, _ = prepared
    r = _runner("datasets", "check", "ncf", "--data", root)
    assert (
        r.returncode == 0
        and r.stdout.startswith("ml-20m: complete (catalogue test-1): items 1100,")
        and "users 40" in r.stdout
    )
    r = _runner("datasets", "check", "gnmt", "--data", tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "WMT16" in r.stderr
    r = _runner("datasets", "check", "bert", "--data", tmp_path)
    assert r.returncode == 2 and "unknown dataset 'bert'" in r.stderr
