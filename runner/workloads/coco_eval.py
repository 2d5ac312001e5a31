"""COCO box and mask AP through pycocotools, the official COCO API the MLPerf references score with.

``COCOEvaluator(iou_type)`` ("bbox" or "segm") collects one image at a time:
its ground truth (arrays, or the image's annotations as the COCO JSON holds
them) and its detections. Masks are turned into COCO run-length encoding as
they arrive (``pycocotools.mask.encode``), so a whole validation set of masks
is never held in memory; ``state()``/``merge()`` combine the shares of several
processes. ``summarize()`` builds the ground truth and the results as COCO
objects and runs ``COCOeval`` (evaluate, accumulate, summarize): AP over IoU
0.50:0.95, AP50 and AP75 at 100 detections per image, area "all".

Ground truth from the COCO JSON keeps its own segmentation (polygons, RLE),
``bbox``, ``area`` and ``iscrowd``, so that pycocotools rasterises it as the
official evaluation does (``COCO.annToRLE``). Categories are the workload's
contiguous labels (a one-to-one renaming of COCO's ids, which AP does not see).
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
from pycocotools import mask as mask_util
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

IOU_TYPES = ("bbox", "segm")


def box_iou(dets: np.ndarray, gts: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU matrix (D, G) of xyxy boxes; against a crowd box: intersection over the detection's area."""
    d = np.asarray(dets, dtype=np.float64).reshape(-1, 4)
    g = np.asarray(gts, dtype=np.float64).reshape(-1, 4)
    if len(d) == 0 or len(g) == 0:
        return np.zeros((len(d), len(g)))
    iw = np.minimum(d[:, None, 2], g[None, :, 2]) - np.maximum(d[:, None, 0], g[None, :, 0])
    ih = np.minimum(d[:, None, 3], g[None, :, 3]) - np.maximum(d[:, None, 1], g[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    ad = ((d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1]))[:, None]
    ag = ((g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1]))[None, :]
    union = np.where(np.asarray(crowd, dtype=bool)[None, :], ad, ad + ag - inter)
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def encode_masks(masks) -> list[dict]:
    """Boolean masks (N, H, W) as COCO RLEs (compressed counts), one per mask."""
    m = np.asarray(masks, dtype=np.uint8)
    if m.ndim != 3 or len(m) == 0:
        return []
    return mask_util.encode(np.asfortranarray(m.transpose(1, 2, 0)))


def _xywh(boxes) -> np.ndarray:
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)


class COCOEvaluator:
    """Accumulates images for one IoU type and scores them with pycocotools' COCOeval."""

    def __init__(self, iou_type: str = "bbox", max_dets: int = 100):
        if iou_type not in IOU_TYPES:
            raise ValueError(f"iou_type {iou_type!r}: expected 'bbox' or 'segm'")
        self.iou_type = iou_type
        self.max_dets = int(max_dets)
        self.images: list[dict] = []  # {"size": (h, w), "gts": [...], "dets": [...]}

    # --- one image --------------------------------------------------------------------------

    def add(
        self,
        gt_labels,
        det_scores,
        det_labels,
        *,
        gt_boxes=None,
        det_boxes=None,
        gt_crowd=None,
        gt_masks=None,
        det_masks=None,
        image_size=None,
    ) -> None:
        """One image given as arrays: boxes xyxy in pixels, masks boolean (N, H, W).

        "bbox" reads ``gt_boxes``/``det_boxes``; "segm" reads ``gt_masks``/``det_masks``
        (the image size is the masks' size unless ``image_size`` (h, w) is given).
        """
        gt_labels = np.asarray(gt_labels, dtype=np.int64).reshape(-1)
        crowd = (
            np.zeros(len(gt_labels), dtype=bool) if gt_crowd is None else np.asarray(gt_crowd, dtype=bool).reshape(-1)
        )
        if self.iou_type == "bbox":
            xywh = _xywh(gt_boxes if gt_boxes is not None else np.zeros((0, 4)))
            gts = [
                {"category_id": int(c), "bbox": [float(v) for v in b], "area": float(b[2] * b[3]), "iscrowd": int(k)}
                for c, b, k in zip(gt_labels, xywh, crowd)
            ]
            size = image_size or (0, 0)
        else:
            masks = np.zeros((0, 1, 1), bool) if gt_masks is None else np.asarray(gt_masks, dtype=bool)
            size = tuple(image_size or masks.shape[1:])
            rles = encode_masks(masks)
            gts = [
                {
                    "category_id": int(c),
                    "segmentation": r,
                    "area": float(mask_util.area(r)),
                    "bbox": [float(v) for v in mask_util.toBbox(r)],
                    "iscrowd": int(k),
                }
                for c, r, k in zip(gt_labels, rles, crowd)
            ]
        self._add(size, gts, det_scores, det_labels, det_boxes, det_masks)

    def add_annotations(
        self,
        height: int,
        width: int,
        anns: list[dict],
        label_of: dict,
        det_scores,
        det_labels,
        *,
        det_boxes=None,
        det_masks=None,
    ) -> None:
        """One image with its ground truth as the COCO JSON holds it (``anns``: that image's
        annotations; ``label_of`` maps COCO category ids to the workload's labels)."""
        gts = []
        for a in anns:
            g = {
                "category_id": int(label_of[a["category_id"]]),
                "bbox": [float(v) for v in a["bbox"]],
                "area": float(a.get("area", a["bbox"][2] * a["bbox"][3])),
                "iscrowd": int(a.get("iscrowd", 0)),
            }
            if self.iou_type == "segm":
                g["segmentation"] = a["segmentation"]
            gts.append(g)
        self._add((int(height), int(width)), gts, det_scores, det_labels, det_boxes, det_masks)

    def _add(self, size, gts, det_scores, det_labels, det_boxes, det_masks) -> None:
        scores = np.asarray(det_scores, dtype=np.float64).reshape(-1)
        labels = np.asarray(det_labels, dtype=np.int64).reshape(-1)
        if self.iou_type == "bbox":
            boxes = _xywh(det_boxes if det_boxes is not None else np.zeros((0, 4)))
            dets = [
                {"category_id": int(c), "bbox": [float(v) for v in b], "score": float(s)}
                for c, b, s in zip(labels, boxes, scores)
            ]
        else:
            rles = encode_masks(det_masks) if det_masks is not None else []
            dets = [
                {"category_id": int(c), "segmentation": r, "score": float(s)} for c, r, s in zip(labels, rles, scores)
            ]
        if len(dets) != len(scores):
            raise ValueError(f"{len(scores)} detection scores but {len(dets)} detections")
        self.images.append({"size": tuple(int(v) for v in size), "gts": gts, "dets": dets})

    # --- several processes --------------------------------------------------------------------

    def state(self) -> dict:
        return {"iou_type": self.iou_type, "images": self.images}

    def merge(self, states) -> None:
        for st in states:
            if st["iou_type"] != self.iou_type:
                raise ValueError(f"cannot merge {st['iou_type']} results into a {self.iou_type} evaluator")
            self.images.extend(st["images"])

    # --- the result ------------------------------------------------------------------------------

    def coco_objects(self) -> tuple[COCO, list[dict]]:
        """The ground truth as a pycocotools COCO object and the detections as loadRes takes them."""
        images, anns, dets, cats = [], [], [], set()
        for i, im in enumerate(self.images, start=1):
            h, w = im["size"]
            images.append({"id": i, "height": h, "width": w})
            for g in im["gts"]:
                anns.append(dict(g, id=len(anns) + 1, image_id=i))  # ids from 1: COCOeval reads 0 as "none"
                cats.add(g["category_id"])
            for d in im["dets"]:
                dets.append(dict(d, image_id=i))
                cats.add(d["category_id"])
        gt = COCO()
        gt.dataset = {"images": images, "annotations": anns, "categories": [{"id": c} for c in sorted(cats)]}
        with contextlib.redirect_stdout(io.StringIO()):
            gt.createIndex()
        return gt, dets

    def summarize(self) -> dict:
        """``AP`` (IoU 0.50:0.95), ``AP50``, ``AP75`` from COCOeval; 0.0 where COCOeval has no value
        (no ground truth, or no detection at all)."""
        gt, dets = self.coco_objects()
        if not dets or not gt.getAnnIds():
            return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0}
        with contextlib.redirect_stdout(io.StringIO()):
            res = gt.loadRes(dets)
            ev = COCOeval(gt, res, self.iou_type)
            ev.params.maxDets = [1, 10, self.max_dets]
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        s = [float(v) if v >= 0 else 0.0 for v in ev.stats[:3]]
        return {"AP": s[0], "AP50": s[1], "AP75": s[2]}
