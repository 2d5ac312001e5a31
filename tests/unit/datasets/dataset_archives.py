"""Tiny archives in the real formats of the MLPerf datasets and of the pretrained
backbones the catalogue lists, built by the tests.

``build(dir)`` writes them and returns catalogue entries (as inventory/datasets.yml
holds them, with the real sha256 and size of each tiny file; for Detectron's R-50.pkl,
as published, an md5 alone) plus what a correct preparation must find, computed here
independently of runner.datasets. Every entry of inventory/datasets.yml has one here.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import zipfile
from pathlib import Path

import numpy as np

WNIDS = ["n02119789", "n01440764", "n01443537"]  # ILSVRC2012_ID 1, 2, 3 (not in wnid order)
TRAIN_PER_CLASS = [4, 3, 5]
VAL_LABELS = [3, 1, 2, 2, 1, 3, 3]  # ground truth IDs of ILSVRC2012_val_00000001..7


def _sum(path: Path) -> dict:
    data = path.read_bytes()
    return {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def _jpeg(seed: int, size=(12, 10)) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, size=(size[1], size[0], 3), dtype=np.uint8), "RGB")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=80)
    return buf.getvalue()


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_300_000_000
    tf.addfile(info, io.BytesIO(data))


def imagenet(d: Path) -> tuple[dict, dict]:
    from scipy.io import savemat

    with tarfile.open(d / "ILSVRC2012_img_train.tar", "w") as outer:
        for k, (wnid, n) in enumerate(zip(WNIDS, TRAIN_PER_CLASS)):
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as inner:
                for i in range(n):
                    _add(inner, f"{wnid}_{1000 + i}.JPEG", _jpeg(100 * k + i))
            _add(outer, f"{wnid}.tar", buf.getvalue())
    with tarfile.open(d / "ILSVRC2012_img_val.tar", "w") as tf:
        for i in range(len(VAL_LABELS)):
            _add(tf, f"ILSVRC2012_val_{i + 1:08d}.JPEG", _jpeg(9000 + i))
    fields = [
        "ILSVRC2012_ID",
        "WNID",
        "words",
        "gloss",
        "num_children",
        "children",
        "wordnet_height",
        "num_train_images",
    ]
    syn = np.zeros((len(WNIDS) + 1, 1), dtype=[(f, "O") for f in fields])
    for i, wnid in enumerate(WNIDS):
        syn[i, 0] = (i + 1, wnid, f"class {wnid}", "a gloss", 0, np.zeros((1, 0)), 0, 1300)
    syn[len(WNIDS), 0] = (
        1001,
        "n00001740",
        "entity",
        "that which exists",
        3,
        np.array([[1, 2, 3]], dtype=np.float64),
        18,
        0,
    )
    mat = io.BytesIO()
    savemat(mat, {"synsets": syn})
    truth = "".join(f"{x}\n" for x in VAL_LABELS).encode()
    with tarfile.open(d / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tf:
        _add(tf, "ILSVRC2012_devkit_t12/data/meta.mat", mat.getvalue())
        _add(tf, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth)
        _add(tf, "ILSVRC2012_devkit_t12/readme.txt", b"devkit\n")
    val_counts = {w: sum(1 for x in VAL_LABELS if x == i + 1) for i, w in enumerate(WNIDS)}
    expect = {"classes": len(WNIDS), "train_images": sum(TRAIN_PER_CLASS), "val_images": len(VAL_LABELS)}
    entry = {
        "title": "ImageNet ILSVRC2012",
        "licensed": True,
        "artifacts": [
            _sum(d / "ILSVRC2012_img_train.tar"),
            _sum(d / "ILSVRC2012_img_val.tar"),
            _sum(d / "ILSVRC2012_devkit_t12.tar.gz"),
        ],
        "params": {},
        "expect": expect,
    }
    return entry, {"val_per_class": val_counts, "classes_sorted": sorted(WNIDS)}


def coco(d: Path) -> tuple[dict, dict]:
    split_ids = {"train2017": [9, 25, 30, 34, 36], "val2017": [139, 285, 632]}
    anns = {}
    for split, ids in split_ids.items():
        with zipfile.ZipFile(d / f"{split}.zip", "w") as zf:
            zf.writestr(f"{split}/", b"")
            for i in ids:
                zf.writestr(f"{split}/{i:012d}.jpg", _jpeg(i, (16, 12)))
        images = [{"id": i, "file_name": f"{i:012d}.jpg", "width": 16, "height": 12} for i in ids]
        annotations = [
            {
                "id": 100 * i + k,
                "image_id": i,
                "category_id": 1 + (k % 2),
                "bbox": [1, 1, 5, 4],
                "area": 20.0,
                "iscrowd": 0,
                "segmentation": [[1, 1, 6, 1, 6, 5, 1, 5]],
            }
            for i in ids
            for k in range(1 + i % 3)
        ]
        cats = [
            {"id": 1, "name": "person", "supercategory": "person"},
            {"id": 2, "name": "bicycle", "supercategory": "vehicle"},
        ]
        anns[split] = {
            "info": {"year": 2017},
            "licenses": [],
            "images": images,
            "annotations": annotations,
            "categories": cats,
        }
    with zipfile.ZipFile(d / "annotations_trainval2017.zip", "w") as zf:
        for split, doc in anns.items():
            zf.writestr(f"annotations/instances_{split}.json", json.dumps(doc))
            zf.writestr(f"annotations/captions_{split}.json", json.dumps({"annotations": []}))
    expect = {
        "train2017_images": 5,
        "val2017_images": 3,
        "categories": 2,
        "train2017_annotations": len(anns["train2017"]["annotations"]),
        "val2017_annotations": len(anns["val2017"]["annotations"]),
    }
    entry = {
        "title": "COCO 2017",
        "artifacts": [_sum(d / "train2017.zip"), _sum(d / "val2017.zip"), _sum(d / "annotations_trainval2017.zip")],
        "params": {},
        "expect": expect,
    }
    return entry, {}


WORDS_EN = "the house is small , and we see a green tree by the river today . where is my book ?".split()
WORDS_DE = (
    "das haus ist klein , und wir sehen einen grünen baum am fluss heute . wo ist mein buch ? Straße Grüße".split()
)


def _sentences(rng: random.Random, vocab: list[str], n: int) -> list[str]:
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def wmt(d: Path, name: str, vocab_size: int) -> tuple[dict, dict]:
    rng = random.Random(name)
    en, de = _sentences(rng, WORDS_EN, 160), _sentences(rng, WORDS_DE, 160)
    en[5], de[5] = "", "leer"  # an empty side: the pair is dropped
    nc = "training-parallel-nc-v11" if name == "wmt16" else "training"
    ver = "v11" if name == "wmt16" else "v12"
    tgz = d / f"training-parallel-nc-{ver}.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        _add(tf, f"{nc}/news-commentary-{ver}.de-en.en", ("\n".join(en) + "\n").encode())
        _add(tf, f"{nc}/news-commentary-{ver}.de-en.de", ("\n".join(de) + "\n").encode())
    ev_en = _sentences(rng, WORDS_EN, 12) + ['Tom & Jerry say "hi" -- naïve café, 100 % sure!']
    ev_de = _sentences(rng, WORDS_DE, 12) + ["Tom & Jerry sagen „hallo“ – naiv, 100 % sicher!"]

    def sgm(lines, lang, kind):
        import html

        segs = "".join(f'<seg id="{i + 1}">{html.escape(s, quote=False)}</seg>\n' for i, s in enumerate(lines))
        return (
            f'<{kind}set setid="newstest2014" srclang="any" trglang="{lang}">\n'
            f'<doc sysid="ref" docid="1" origlang="en">\n{segs}</doc>\n</{kind}set>\n'
        ).encode()

    dev = d / ("dev.tgz" if name == "wmt16" else "dev-2017.tgz")
    with tarfile.open(dev, "w:gz") as tf:
        _add(tf, "dev/newstest2014-deen-src.en.sgm", sgm(ev_en, "en", "src"))
        _add(tf, "dev/newstest2014-deen-ref.de.sgm", sgm(ev_de, "de", "ref"))
        _add(tf, "dev/newstest2013.en", b"other\n")
    params = {
        "vocab_size": vocab_size,
        "train": [
            {"archive": tgz.name, "en": f"news-commentary-{ver}.de-en.en", "de": f"news-commentary-{ver}.de-en.de"}
        ],
        "eval": [{"archive": dev.name, "en": "newstest2014-deen-src.en.sgm", "de": "newstest2014-deen-ref.de.sgm"}],
    }
    entry = {
        "title": f"{name.upper()} En-De",
        "artifacts": [_sum(tgz), _sum(dev)],
        "params": params,
        "expect": {"train_pairs": 159, "eval_pairs": 13, "vocab": vocab_size},
    }
    return entry, {"eval_en": ev_en, "eval_de": ev_de}


def movielens(d: Path, n_items: int = 1100) -> tuple[dict, dict]:
    """ratings.csv with 40 users of 20..60 ratings and 6 users below 20 (dropped)."""
    rng = random.Random(20)
    movie_ids = rng.sample(range(1, 5 * n_items), n_items)
    rows = []
    qualified = []
    cycle = movie_ids * 3  # qualified users take consecutive slices: every movie is rated
    at = 0
    for k in range(46):
        user = 7 + 3 * k
        n = rng.randint(20, 60) if k < 40 else rng.randint(3, 19)
        if k < 40:
            qualified.append(user)
            items, at = cycle[at : at + n], at + n
        else:
            items = rng.sample(movie_ids, n)
        for j, m in enumerate(items):
            rows.append((user, m, rng.choice([1.0, 2.5, 3.5, 5.0]), 1_100_000_000 + rng.randint(0, 10_000_000) + j))
    rng.shuffle(rows)
    text = "userId,movieId,rating,timestamp\n" + "".join(f"{u},{m},{r},{t}\n" for u, m, r, t in rows)
    with zipfile.ZipFile(d / "ml-20m.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ml-20m/", b"")
        zf.writestr("ml-20m/ratings.csv", text)
        zf.writestr("ml-20m/movies.csv", "movieId,title,genres\n")
    # what a correct conversion gives, computed plainly
    kept = [r for r in rows if r[0] in set(qualified)]
    n_kept_items = len({r[1] for r in kept})
    latest = {}
    for idx, (u, m, _, t) in enumerate(rows):
        if u in set(qualified) and (u not in latest or (t, idx) >= latest[u][0]):
            latest[u] = ((t, idx), m)
    facts = {
        "users": len(qualified),
        "items": n_kept_items,
        "ratings": len(kept),
        "rows": rows,
        "qualified": qualified,
        "latest": {u: m for u, (_, m) in latest.items()},
    }
    entry = {
        "title": "MovieLens-20M",
        "artifacts": [_sum(d / "ml-20m.zip")],
        "params": {"min_ratings": 20, "negatives": 999, "seed": 0},
        "expect": {
            "users": len(qualified),
            "items": n_kept_items,
            "test": len(qualified),
            "train": len(kept) - len(qualified),
        },
    }
    return entry, facts


def resnet34_torchvision(d: Path) -> tuple[dict, dict]:
    """A torch.save state dict in torchvision's ResNet names (the stem and one block, few channels),
    under the published file name; the entry gives its sha256 and size as torchvision's does."""
    import torch

    g = torch.Generator().manual_seed(34)
    shapes = {
        "conv1.weight": (4, 3, 7, 7),
        "layer1.0.conv1.weight": (4, 4, 3, 3),
        "layer1.0.conv2.weight": (4, 4, 3, 3),
        "fc.weight": (5, 4),
        "fc.bias": (5,),
    }
    state = {k: torch.randn(*s, generator=g) for k, s in shapes.items()}
    for bn in ("bn1", "layer1.0.bn1", "layer1.0.bn2"):
        state.update(
            {
                f"{bn}.weight": torch.ones(4),
                f"{bn}.bias": torch.zeros(4),
                f"{bn}.running_mean": torch.zeros(4),
                f"{bn}.running_var": torch.ones(4),
            }
        )
    torch.save(state, d / "resnet34-333f7ec4.pth")
    entry = {
        "title": "ResNet-34 ImageNet weights (torchvision)",
        "kind": "weights",
        "artifacts": [_sum(d / "resnet34-333f7ec4.pth")],
    }
    return entry, {"keys": sorted(state)}


def r50_msra(d: Path) -> tuple[dict, dict]:
    """Detectron's form: a pickle (protocol 2) of {"blobs": {name: numpy array}} in MSRA's blob names.
    As for the real R-50.pkl, the entry gives an md5 and neither a sha256 nor a size."""
    import pickle

    rng = np.random.default_rng(50)
    blobs = {
        "conv1_w": rng.standard_normal((4, 3, 7, 7)).astype(np.float32),
        "res_conv1_bn_s": np.ones(4, np.float32),
        "res_conv1_bn_b": np.zeros(4, np.float32),
    }
    for j in "abc":
        blobs[f"res2_0_branch2{j}_w"] = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
        blobs[f"res2_0_branch2{j}_bn_s"] = np.ones(4, np.float32)
        blobs[f"res2_0_branch2{j}_bn_b"] = np.zeros(4, np.float32)
    data = pickle.dumps({"blobs": blobs}, protocol=2)
    (d / "R-50.pkl").write_bytes(data)
    entry = {
        "title": "MSRA ResNet-50 ImageNet weights (Detectron R-50.pkl)",
        "kind": "weights",
        "artifacts": [{"file": "R-50.pkl", "sha256": None, "size": None, "md5": hashlib.md5(data).hexdigest()}],
    }
    return entry, {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "blobs": sorted(blobs)}


def build(d: Path) -> tuple[dict, dict]:
    """All tiny archives under ``d/<dataset>/``; returns (catalogue datasets section, facts per dataset)."""
    entries, facts = {}, {}
    for name, fn in (("imagenet", imagenet), ("coco", coco), ("ml-20m", movielens)):
        (d / name).mkdir(parents=True, exist_ok=True)
        entries[name], facts[name] = fn(d / name)
    for name, size in (("wmt16", 400), ("wmt17", 380)):
        (d / name).mkdir(parents=True, exist_ok=True)
        entries[name], facts[name] = wmt(d / name, name, size)
    for name, fn in (("resnet34-torchvision", resnet34_torchvision), ("r50-msra", r50_msra)):
        (d / name).mkdir(parents=True, exist_ok=True)
        entries[name], facts[name] = fn(d / name)
    return entries, facts


def spec(entries: dict, name: str, version: str = "test-1") -> dict:
    """The JSON spec the datasets role hands to ``runner prepare``."""
    e = entries[name]
    return {
        "name": name,
        "catalogue_version": version,
        "title": e["title"],
        "kind": e.get("kind", "data"),
        "artifacts": [{k: a[k] for k in ("file", "sha256", "size", "md5") if k in a} for a in e["artifacts"]],
        "params": e.get("params", {}),
        "expect": e.get("expect", {}),
    }
