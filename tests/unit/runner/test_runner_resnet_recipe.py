"""resnet50 at full scale follows Google's MLPerf v0.5 submission (mlcommons/training_results_v0.5,
v0.5.0/google/cloud_v100x8/code/resnet/: run_helper_8xV100.sh and tf_cnn_benchmarks): the learning
rate at chosen steps, Nesterov momentum, weight decay on all but batch norm, no label smoothing, the
evaluation epochs and the MLLOG hyperparameter keys. The reference's values are written out here."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.mllog import MLLog  # noqa: E402
from runner.workloads import base  # noqa: E402
from runner.workloads import resnet50 as R  # noqa: E402
from runner.workloads import resnet50_recipe as recipe  # noqa: E402
from runner_helpers import full_scale_trainer  # noqa: E402

IMAGENET = 1281167
# results/8xV100/resnet/result_0.txt: opt_learning_rate logged every 100 steps (step: value). With
# --variable_update=replicated the 8 GPUs' gradients are summed, so the logged rate is 1/8 of the rate
# on the mean gradient of the 2048 batch (resnet_model.py get_scaled_base_learning_rate)
PUBLISHED = {
    0: 0.0,
    100: 0.00191877189,
    3100: 0.05948193,
    3200: 0.06,
    18700: 0.06,
    18800: 0.006,
    37500: 0.006,
    37600: 0.0006,
}


def reference_lr(step, gbs, base_lr=0.06):
    """resnet_model.py get_learning_rate, written out: rate on the mean gradient of the global batch."""
    peak = base_lr * gbs / 256
    per_epoch = IMAGENET / gbs
    warmup = int(per_epoch * 5)
    if step < warmup:
        return peak * step / warmup
    bounds = [int(per_epoch * e) for e in (30, 60, 80, 90)]
    values = [peak * v for v in (1, 0.1, 0.01, 0.001, 0.0001)]
    for b, v in zip(bounds, values):  # tf.train.piecewise_constant: values[i] while step <= bounds[i]
        if step <= b:
            return v
    return values[-1]


def full_trainer(world_size: int, batch: int):
    return full_scale_trainer("resnet50", R.build, world_size, batch)


@pytest.fixture(scope="module")
def submission():
    return full_trainer(8, 256)  # 8 V100 x 256 images, as the submission


def test_the_rate_equals_the_published_log_at_8x256(submission):
    r = submission.recipe
    assert r.peak == pytest.approx(0.48) and r.warmup == 3127
    assert r.boundaries == [18767, 37534, 50045, 56301]
    for step, logged in PUBLISHED.items():
        assert r.lr(step) == pytest.approx(8 * logged, rel=1e-7, abs=1e-12), step


@pytest.mark.parametrize("gbs", [256, 768, 1024, 2048, 4096])
def test_the_rate_follows_the_global_batch_as_the_reference_formula(gbs):
    r = recipe.Recipe(workloads.load()["resnet50"]["scales"]["full"], gbs, IMAGENET)
    per_epoch = IMAGENET / gbs
    warmup, b = int(per_epoch * 5), [int(per_epoch * e) for e in (30, 60, 80, 90)]
    for step in (0, 1, warmup // 2, warmup - 1, warmup, b[0], b[0] + 1, b[1], b[1] + 1, b[2] + 1, b[3] + 1):
        assert r.lr(step) == pytest.approx(reference_lr(step, gbs), rel=1e-12, abs=1e-15), (gbs, step)
    # by hand at one GPU: 5004.56 steps an epoch, warm-up 25022 steps, first decay after step 150136
    if gbs == 256:
        assert r.lr(12511) == pytest.approx(0.06 * 12511 / 25022) and r.lr(150136) == pytest.approx(0.06)
        assert r.lr(150137) == pytest.approx(0.006)


def test_nesterov_and_weight_decay_on_all_but_batch_norm(submission):
    t = submission
    decay, no_decay = t.optimizer.param_groups
    assert all(g["nesterov"] and g["momentum"] == 0.9 and g["dampening"] == 0 for g in t.optimizer.param_groups)
    assert decay["weight_decay"] == 1e-4 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in t.model.named_parameters()}
    bn = {
        n
        for m_name, m in t.model.named_modules()
        if isinstance(m, torch.nn.BatchNorm2d)
        for n in (f"{m_name}.weight", f"{m_name}.bias")
    }
    assert {names[id(p)] for p in no_decay["params"]} == bn and len(bn) == 2 * 53
    # the classifier's bias is decayed, as every variable whose name lacks 'batchnorm' in the reference
    assert "fc.bias" in {names[id(p)] for p in decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(names)
    assert t.net.label_smoothing == 0.0


def test_the_mllog_keys_carry_the_recipe(submission, tmp_path):
    log = MLLog(tmp_path / "mllog.log")
    log.hyperparameters(submission.hyperparameters())
    log.close()
    import json

    hp = {}
    for line in (tmp_path / "mllog.log").read_text().splitlines():
        e = json.loads(line.split(":::MLLOG ", 1)[1])
        hp[e["key"]] = e["value"]
    # the submission logged input_batch_size 2048, opt_learning_rate_warmup_steps 3127, opt_momentum 0.9,
    # model_l2_regularization 0.0001, model_exclude_bn_from_l2 true, input_bn_span 256
    assert hp["global_batch_size"] == 2048 and hp["opt_learning_rate_warmup_steps"] == 3127
    assert hp["opt_name"] == "sgd" and hp["sgd_opt_momentum"] == 0.9 and hp["sgd_opt_nesterov"] is True
    assert hp["opt_base_learning_rate"] == hp["sgd_opt_base_learning_rate"] == pytest.approx(0.48)
    assert hp["sgd_opt_weight_decay"] == 1e-4 and hp["model_exclude_bn_from_l2"] is True
    assert hp["model_bn_span"] == 256 and hp["label_smoothing"] == 0.0
    assert hp["opt_learning_rate_warmup_epochs"] == 5
    assert hp["opt_learning_rate_decay_boundary_epochs"] == [30, 60, 80, 90]
    assert hp["opt_learning_rate_decay_boundary_steps"] == [18767, 37534, 50045, 56301]
    assert hp["opt_learning_rate_decay_factor"] == 0.1 and hp["gpulab_lr_schedule"] == "step"
    assert not any(k.startswith("sgd_opt_learning_rate_decay_poly") for k in hp)  # no poly decay at full


def test_evaluation_epochs_are_the_submissions():
    cfg = workloads.load()["resnet50"]["scales"]["full"]
    # --eval_during_training_at_specified_epochs='1,5,...,61,62,63' with --num_epochs=64 and the target 0.749
    want = list(range(1, 62, 4)) + [62, 63, 64]
    assert base.eval_epochs(cfg, cfg["max_epochs"]) == want and cfg["max_epochs"] == 64
    assert cfg["target"] == 0.749
    assert base.eval_epochs(cfg, 20) == [1, 5, 9, 13, 17, 20]  # --max-epochs cuts the list
    assert base.eval_epochs({"eval_every": 4}, 10) == [4, 8, 10]  # the other workloads: every n, and the last


def test_test_scales_say_they_keep_a_poly_decay():
    for scale in ("tiny", "small"):
        cfg = workloads.load()["resnet50"]["scales"][scale]
        gbs = cfg["batch_size"]
        r = recipe.Recipe(cfg, gbs, cfg["train_images"])
        hp = r.hyperparameters(gbs)
        assert hp["gpulab_lr_schedule"] == "poly" and hp["sgd_opt_learning_rate_decay_poly_power"] == 2
        assert r.lr(r.total) == pytest.approx(cfg["end_lr"]) and r.lr(r.warmup) == pytest.approx(r.peak)


@torch.no_grad()
def test_the_initialisation_is_the_references(submission):
    m = submission.model
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    assert all(bool((b.weight == 1).all()) and bool((b.bias == 0).all()) for b in bns)  # no zero scale
    convs = [mod for mod in m.modules() if isinstance(mod, torch.nn.Conv2d)]
    for c in convs:
        sd = (1 / c.weight[0].numel()) ** 0.5  # variance scaling, fan in, scale 1: after the truncation
        if c.weight.numel() >= 16384:
            assert float(c.weight.std()) == pytest.approx(sd, rel=0.05), c
        assert float(c.weight.abs().max()) <= 2 * sd / 0.8796 + 1e-6
    sd = (1 / 2048) ** 0.5  # the classifier: truncated_normal_initializer(stddev=sqrt(1/2048)), bias 0
    assert float(m.fc.weight.std()) == pytest.approx(0.8796 * sd, rel=0.05)
    assert float(m.fc.weight.abs().max()) <= 2 * sd + 1e-6 and bool((m.fc.bias == 0).all())


def test_the_training_crop_is_the_references_distorted_box():
    import numpy as np

    rng = np.random.default_rng(0)
    fracs = []
    for _ in range(2000):
        x0, y0, x1, y1 = R.distorted_crop(500, 375, rng)
        cw, ch = x1 - x0, y1 - y0
        assert 0 <= x0 < x1 <= 500 and 0 <= y0 < y1 <= 375
        frac = cw * ch / (500 * 375)
        assert 0.1 <= frac <= 1.0  # area range [0.05, 1] and at least 0.1 of the image (min_object_covered)
        if (cw, ch) != (500, 375):
            assert 0.75 - 1 / ch <= cw / ch <= 1.33 + 1 / ch
        fracs.append(frac)
    assert 0.1 < min(fracs) < 0.15 and max(fracs) > 0.9  # the whole range is drawn
    # a shape no crop of the allowed ratios can cover: after 100 attempts, the whole image
    assert R.distorted_crop(4, 1000, np.random.default_rng(1)) == (0, 0, 4, 1000)


def test_a_jpeg_is_decoded_coarse_only_as_far_as_the_crop_keeps_224_pixels(tmp_path):
    import numpy as np
    from PIL import Image

    path = tmp_path / "a.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (1200, 1600, 3), dtype=np.uint8)).save(path)
    seen = set()
    for seed in range(40):
        box0 = R.distorted_crop(1600, 1200, np.random.default_rng(seed))
        img, box = R.open_cropped(str(path), 224, np.random.default_rng(seed))
        f = img.size[0] / 1600
        assert img.size[1] / 1200 == f and box == tuple(v * f for v in box0)
        assert min(box[2] - box[0], box[3] - box[1]) >= 224 or f == 1.0  # never coarser than the crop allows
        assert f == 1.0 or min(box0[2] - box0[0], box0[3] - box0[1]) * f < 2 * 224  # half that would be too coarse
        seen.add(f)
    assert len(seen) >= 2  # large crops are decoded at a reduced scale, small ones at full size


def test_imagenet_samples_are_224_crops_and_the_input_is_mean_subtracted(tmp_path):
    import numpy as np
    from PIL import Image

    paths = []
    for i, (w, h) in enumerate([(500, 375), (333, 500), (1600, 1200)]):
        p = tmp_path / f"{i}.JPEG"
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    labels = np.arange(3)
    for train in (True, False):
        ds = R.ImageFolder(paths, labels, 224, train, seed=1)
        for i in range(3):
            x, y = ds[i]
            assert x.shape == (224, 224, 3) and x.dtype == torch.uint8 and y == i
    ctx = type("Ctx", (), {"device": torch.device("cpu"), "channels_last": False})()
    x = R.V.to_device_images(ctx, torch.full((1, 2, 2, 3), 128, dtype=torch.uint8), R.REFERENCE_MEAN, R.REFERENCE_STD)
    assert x[0, :, 0, 0].tolist() == pytest.approx([128 - 123.68, 128 - 116.78, 128 - 103.94])
