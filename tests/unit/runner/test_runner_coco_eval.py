"""COCO AP (runner/workloads/coco_eval.py, pycocotools underneath) on cases worked out by hand."""

import numpy as np
import pytest

from runner.workloads.coco_eval import COCOEvaluator, box_iou


def ap(gt_boxes, gt_labels, dets, crowd=None, iou_type="bbox"):
    ev = COCOEvaluator(iou_type)
    ev.add(
        gt_labels,
        [d[1] for d in dets],
        [d[2] for d in dets],
        gt_boxes=np.array(gt_boxes, float),
        det_boxes=np.array([d[0] for d in dets], float).reshape(-1, 4),
        gt_crowd=crowd,
    )
    return ev.summarize()


def test_box_iou_by_hand():
    # 10x10 against a 10x10 shifted by 5: 50 / 150
    iou = box_iou([[0, 0, 10, 10]], [[5, 0, 15, 10], [20, 20, 30, 30]], [False, False])
    assert iou[0, 0] == pytest.approx(1 / 3) and iou[0, 1] == 0.0
    # against a crowd box the union is the detection's own area: 50 / 100
    assert box_iou([[0, 0, 10, 10]], [[5, 0, 15, 10]], [True])[0, 0] == pytest.approx(0.5)


def test_a_perfect_detection_is_ap_1():
    r = ap([[10, 10, 50, 40]], [1], [([10, 10, 50, 40], 0.9, 1)])
    assert r == pytest.approx({"AP": 1.0, "AP50": 1.0, "AP75": 1.0})


def test_iou_072_counts_at_five_of_ten_thresholds():
    # a detection of IoU 0.72 matches at 0.50, 0.55, 0.60, 0.65, 0.70 only: AP 0.5
    gt = [0, 0, 100, 100]
    det = [0, 0, 100, 72]
    assert box_iou([det], [gt], [False])[0, 0] == pytest.approx(0.72)
    r = ap([gt], [3], [(det, 0.5, 3)])
    assert r["AP"] == pytest.approx(0.5) and r["AP50"] == pytest.approx(1.0) and r["AP75"] == 0.0


def test_a_higher_scored_false_positive_halves_precision():
    # 2 ground truths; the best-scored detection is wrong, the second matches one:
    # precision 0.5 up to recall 0.5 (51 of 101 recall points), 0 above: 51 * 0.5 / 101
    gts = [[0, 0, 10, 10], [50, 50, 60, 60]]
    dets = [([100, 100, 110, 110], 0.9, 1), ([0, 0, 10, 10], 0.8, 1)]
    assert ap(gts, [1, 1], dets)["AP"] == pytest.approx(51 * 0.5 / 101)


def test_the_same_detections_in_the_other_order_are_better():
    # right first: precision 1 up to recall 0.5 -> 51 / 101
    gts = [[0, 0, 10, 10], [50, 50, 60, 60]]
    dets = [([100, 100, 110, 110], 0.7, 1), ([0, 0, 10, 10], 0.8, 1)]
    assert ap(gts, [1, 1], dets)["AP"] == pytest.approx(51 / 101)


def test_a_duplicate_detection_is_a_false_positive():
    # two detections on one object: the second is a false positive, but after recall 1.0
    # was reached, so precision at every recall point stays 1
    r = ap([[0, 0, 10, 10]], [1], [([0, 0, 10, 10], 0.9, 1), ([0, 0, 10, 10], 0.8, 1)])
    assert r["AP"] == pytest.approx(1.0)
    # an IoU-0.9 box scored above the perfect one: at the 9 thresholds up to 0.90 it matches
    # first (AP 1); at 0.95 it is a false positive before the perfect box (precision 0.5
    # at recall 1, AP 0.5): (9 * 1 + 0.5) / 10
    r = ap([[0, 0, 10, 10]], [1], [([0, 0, 10, 10], 0.9, 1), ([1, 0, 10, 10], 0.95, 1)])
    assert r["AP"] == pytest.approx(0.95)


def test_crowd_regions_neither_count_nor_punish():
    # a detection inside a crowd region is ignored, not a false positive
    gts = [[0, 0, 10, 10], [50, 50, 100, 100]]
    dets = [([60, 60, 70, 70], 0.95, 1), ([0, 0, 10, 10], 0.9, 1)]
    r = ap(gts, [1, 1], dets, crowd=[False, True])
    assert r["AP"] == pytest.approx(1.0)
    r = ap(gts, [1, 1], dets, crowd=[False, False])  # not crowd: a false positive first, a missed object
    assert r["AP"] == pytest.approx(51 * 0.5 / 101)


def test_categories_without_ground_truth_are_left_out_and_wrong_labels_count_as_misses():
    gts = [[0, 0, 10, 10]]
    # a perfect box of the right class and a spurious class-7 detection (no class-7 ground truth)
    r = ap(gts, [1], [([0, 0, 10, 10], 0.9, 1), ([30, 30, 40, 40], 0.99, 7)])
    assert r["AP"] == pytest.approx(1.0)
    # the right box with the wrong label: class 1 is missed entirely
    assert ap(gts, [1], [([0, 0, 10, 10], 0.9, 2)])["AP"] == 0.0


def test_images_accumulate_and_states_merge():
    a, b = COCOEvaluator(), COCOEvaluator()
    a.add([1], [0.9], [1], gt_boxes=[[0, 0, 10, 10]], det_boxes=[[0, 0, 10, 10]])
    b.add([1], [0.8], [1], gt_boxes=[[0, 0, 10, 10]], det_boxes=[[50, 50, 60, 60]])
    whole = COCOEvaluator()
    whole.merge([a.state(), b.state()])
    # over both images: 1 of 2 found, first in score order -> 51 / 101
    assert whole.summarize()["AP"] == pytest.approx(51 / 101)


def test_max_dets_keeps_the_best_scores_per_image():
    ev = COCOEvaluator(max_dets=1)
    ev.add([1], [0.9, 0.5], [1, 1], gt_boxes=[[0, 0, 10, 10]], det_boxes=[[50, 50, 60, 60], [0, 0, 10, 10]])
    assert ev.summarize()["AP"] == 0.0


def test_mask_ap_by_hand():
    gt = np.zeros((1, 20, 20), bool)
    gt[0, 0:10, 0:10] = True  # 100 pixels
    det = np.zeros((1, 20, 20), bool)
    det[0, 0:10, 0:8] = True  # inside: IoU 80 / 100
    ev = COCOEvaluator("segm")
    ev.add([1], [0.9], [1], gt_masks=gt, det_masks=det)
    # IoU 0.8 matches at 0.50..0.80 (7 of 10 thresholds)
    assert ev.summarize()["AP"] == pytest.approx(0.7)
    far = np.zeros((1, 20, 20), bool)
    far[0, 10:20, 10:20] = True  # disjoint
    ev = COCOEvaluator("segm")
    ev.add([1], [0.9], [1], gt_masks=gt, det_masks=far)
    assert ev.summarize()["AP"] == 0.0


def test_no_ground_truth_at_all_is_zero_not_nan():
    ev = COCOEvaluator()
    ev.add([], [0.9], [1], gt_boxes=np.zeros((0, 4)), det_boxes=[[0, 0, 1, 1]])
    assert ev.summarize()["AP"] == 0.0


def test_device_nms_is_exact_greedy_suppression():
    torch = pytest.importorskip("torch")
    from runner.workloads import detection as D

    g = torch.Generator().manual_seed(0)
    xy = torch.rand(300, 2, generator=g) * 50
    wh = torch.rand(300, 2, generator=g) * 20 + 5
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(300, generator=g)
    # the plain greedy loop, written out
    order = scores.argsort(descending=True).tolist()
    iou = D.box_iou(boxes, boxes)
    kept, removed = [], set()
    for i in order:
        if i in removed:
            continue
        kept.append(i)
        removed |= {j for j in order if iou[i, j] > 0.5}
    assert D.nms(boxes, scores, 0.5).tolist() == kept
    # the padded, batched form: two rows, the second with padding at its end
    srt = boxes[order]
    valid = torch.ones(2, 300, dtype=torch.bool)
    valid[1, 200:] = False
    keep = D.nms_sorted_padded(torch.stack([srt, srt]), valid, 0.5)
    assert [order[j] for j in torch.nonzero(keep[0]).squeeze(1).tolist()] == kept
    sub = D.nms(srt[:200], scores[order][:200], 0.5).tolist()
    assert sorted(torch.nonzero(keep[1]).squeeze(1).tolist()) == sorted(sub)
