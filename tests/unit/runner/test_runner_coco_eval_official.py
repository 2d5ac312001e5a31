"""The runner's COCO evaluator equals the official COCO API used the way a COCO user uses it.

A realistic ground truth (images of different sizes, non-contiguous category
ids, objects of one or several polygons, crowd regions in uncompressed and
compressed RLE, images without annotations) is written as an instances JSON
file, detections as a results JSON file (boxes ``[x, y, w, h]``, masks as RLE
with string counts); ``COCO(file)``, ``loadRes(file)`` and ``COCOeval`` score
them. The runner's evaluator gets the same images one by one, in two shares
merged after a pickle round trip (as several processes hand them over), and
must report the same AP, AP50 and AP75 bit for bit.
"""

import json
import pickle

import numpy as np
import pytest

mask_util = pytest.importorskip("pycocotools.mask")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

from runner.workloads import detection as D  # noqa: E402
from runner.workloads.coco_eval import COCOEvaluator  # noqa: E402

CAT_IDS = [1, 3, 7, 18, 90]


def _polygon(rng, cx, cy, rx, ry, n):
    t = np.sort(rng.uniform(0, 2 * np.pi, n))
    r = rng.uniform(0.6, 1.0, n)
    return np.stack([cx + rx * r * np.cos(t), cy + ry * r * np.sin(t)], 1).reshape(-1).round(2).tolist()


def make_coco(seed=0, n_images=36):
    """(instances dict, per-image detections {image_id: [(category id, score, xyxy box, bool mask)]})."""
    rng = np.random.default_rng(seed)
    images, anns, dets = [], [], {}
    for i in range(n_images):
        iid = 1000 + 7 * i
        h, w = int(rng.integers(120, 360)), int(rng.integers(120, 360))
        images.append({"id": iid, "height": h, "width": w, "file_name": f"{iid:012d}.jpg"})
        objs = [] if i % 9 == 4 else range(int(rng.integers(1, 7)))  # a few images without objects
        mine = []
        for _ in objs:
            cat = int(rng.choice(CAT_IDS))
            cx, cy = rng.uniform(0.15, 0.85) * w, rng.uniform(0.15, 0.85) * h
            rx, ry = rng.uniform(6, w / 4), rng.uniform(6, h / 4)
            crowd = rng.uniform() < 0.1
            if crowd:  # crowd regions are RLE, as in COCO; half of them with uncompressed counts
                m = np.zeros((h, w), np.uint8)
                m[int(max(0, cy - ry)) : int(cy + ry), int(max(0, cx - rx)) : int(cx + rx)] = 1
                rle = mask_util.encode(np.asfortranarray(m))
                if rng.uniform() < 0.5:
                    seg = {"size": [h, w], "counts": _uncompressed(m)}
                else:
                    seg = {"size": [h, w], "counts": rle["counts"].decode()}
            else:
                seg = [_polygon(rng, cx, cy, rx, ry, int(rng.integers(5, 16)))]
                if rng.uniform() < 0.3:  # a second part
                    seg.append(_polygon(rng, min(w - 5, cx + rx), cy, rx / 2, ry / 2, 6))
            rle = (
                mask_util.merge(mask_util.frPyObjects(seg, h, w))
                if isinstance(seg, list)
                else (mask_util.frPyObjects(seg, h, w) if isinstance(seg["counts"], list) else seg)
            )
            x, y, bw, bh = mask_util.toBbox(rle).tolist()
            ann = {
                "id": len(anns) + 1,
                "image_id": iid,
                "category_id": cat,
                "segmentation": seg,
                "bbox": [round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)],
                "area": float(mask_util.area(rle)) * rng.uniform(0.97, 1.03),
                "iscrowd": int(crowd),
            }
            anns.append(ann)
            m = mask_util.decode(rle).astype(bool)
            for _ in range(int(rng.integers(0, 3))):  # detections near the object, some of the wrong class
                dx, dy = rng.normal(0, 0.08 * bw), rng.normal(0, 0.08 * bh)
                box = [x + dx, y + dy, x + bw + dx * rng.uniform(0.5, 1.5), y + bh + dy * rng.uniform(0.5, 1.5)]
                dm = np.roll(np.roll(m, int(round(dy)), 0), int(round(dx)), 1)
                c = cat if rng.uniform() < 0.8 else int(rng.choice(CAT_IDS))
                mine.append((c, float(rng.uniform(0.05, 1.0)), box, dm))
        for _ in range(int(rng.integers(0, 4)) if i % 5 else 110):  # false positives; one image over 100
            bx, by = rng.uniform(0, w - 10), rng.uniform(0, h - 10)
            bw, bh = rng.uniform(4, w - bx), rng.uniform(4, h - by)
            dm = np.zeros((h, w), bool)
            dm[int(by) : int(by + bh), int(bx) : int(bx + bw)] = True
            mine.append((int(rng.choice(CAT_IDS)), float(rng.uniform(0.05, 0.9)), [bx, by, bx + bw, by + bh], dm))
        dets[iid] = mine
    cats = [{"id": c, "name": f"c{c}", "supercategory": "s"} for c in CAT_IDS]
    return {"images": images, "annotations": anns, "categories": cats}, dets


def _uncompressed(m):
    flat = m.reshape(-1, order="F")
    counts, val, run = [], 0, 0
    for v in flat:
        if v != val:
            counts.append(run)
            val, run = v, 0
        run += 1
    counts.append(run)
    return counts


def official(tmp_path, inst, dets, iou_type):
    ann_file = tmp_path / "instances.json"
    ann_file.write_text(json.dumps(inst))
    results = []
    for iid, items in dets.items():
        for c, s, (x1, y1, x2, y2), m in items:
            r = {"image_id": iid, "category_id": c, "score": s}
            if iou_type == "bbox":
                r["bbox"] = [x1, y1, x2 - x1, y2 - y1]
            else:
                rle = mask_util.encode(np.asfortranarray(m.astype(np.uint8)))
                r["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode("utf-8")}
            results.append(r)
    res_file = tmp_path / f"results_{iou_type}.json"
    res_file.write_text(json.dumps(results))
    gt = COCO(str(ann_file))
    ev = COCOeval(gt, gt.loadRes(str(res_file)), iou_type)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return [float(v) for v in ev.stats[:3]]


def runners(inst, dets, iou_type):
    label_of = {c: i + 1 for i, c in enumerate(CAT_IDS)}
    by_image = {im["id"]: [] for im in inst["images"]}
    for a in inst["annotations"]:
        by_image[a["image_id"]].append(a)
    shares = [COCOEvaluator(iou_type), COCOEvaluator(iou_type)]
    for k, im in enumerate(inst["images"]):
        items = dets[im["id"]]
        kw = {}
        if iou_type == "bbox":
            kw["det_boxes"] = np.array([d[2] for d in items], float).reshape(-1, 4)
        else:
            kw["det_masks"] = np.stack([d[3] for d in items]) if items else np.zeros((0, im["height"], im["width"]))
        shares[k % 2].add_annotations(
            im["height"],
            im["width"],
            by_image[im["id"]],
            label_of,
            [d[1] for d in items],
            [label_of[d[0]] for d in items],
            **kw,
        )
    total = COCOEvaluator(iou_type)
    total.merge([pickle.loads(pickle.dumps(s.state())) for s in shares])
    r = total.summarize()
    return [r["AP"], r["AP50"], r["AP75"]]


@pytest.mark.parametrize("iou_type", ["bbox", "segm"])
def test_the_runner_evaluator_equals_pycocotools_on_a_coco_json(tmp_path, iou_type):
    inst, dets = make_coco()
    want = official(tmp_path, inst, dets, iou_type)
    assert 0.05 < want[0] < 0.95, want  # neither trivial nor empty
    assert runners(inst, dets, iou_type) == want


def test_generated_masks_given_as_arrays_score_as_their_rle_in_a_coco_json(tmp_path):
    # the small and tiny scales hand masks over as boolean arrays
    inst, dets = make_coco(seed=3, n_images=12)
    inst["annotations"] = [a for a in inst["annotations"] if not a["iscrowd"]]
    want = official(tmp_path, inst, dets, "segm")
    label_of = {c: i + 1 for i, c in enumerate(CAT_IDS)}
    ev = COCOEvaluator("segm")
    for im in inst["images"]:
        h, w = im["height"], im["width"]
        anns = [a for a in inst["annotations"] if a["image_id"] == im["id"]]
        gm = (
            np.stack(
                [
                    mask_util.decode(mask_util.merge(mask_util.frPyObjects(a["segmentation"], h, w))).astype(bool)
                    for a in anns
                ]
            )
            if anns
            else np.zeros((0, h, w), bool)
        )
        items = dets[im["id"]]
        ev.add(
            [label_of[a["category_id"]] for a in anns],
            [d[1] for d in items],
            [label_of[d[0]] for d in items],
            gt_masks=gm,
            det_masks=np.stack([d[3] for d in items]) if items else None,
            image_size=(h, w),
        )
    r = ev.summarize()
    assert [r["AP"], r["AP50"], r["AP75"]] == want


def test_training_masks_are_pycocotools_rasterisations(tmp_path):
    inst, _ = make_coco(seed=5, n_images=10)
    gt = COCO()
    gt.dataset = inst
    gt.createIndex()
    for a in inst["annotations"]:
        im = gt.imgs[a["image_id"]]
        h, w = im["height"], im["width"]
        got = D.segmentation_mask(a["segmentation"], h, w)
        assert got.dtype == bool and np.array_equal(got, gt.annToMask(a).astype(bool))
        if isinstance(a["segmentation"], list):  # scaled polygons, rasterised on the smaller grid
            oh, ow = (h + 1) // 2, (w + 1) // 2
            sx, sy = ow / w, oh / h
            scaled = [[v * (sx if j % 2 == 0 else sy) for j, v in enumerate(p)] for p in a["segmentation"]]
            want = mask_util.decode(mask_util.merge(mask_util.frPyObjects(scaled, oh, ow))).astype(bool)
            assert np.array_equal(D.segmentation_mask(a["segmentation"], h, w, (sx, sy), (oh, ow)), want)
