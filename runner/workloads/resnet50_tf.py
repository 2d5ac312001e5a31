"""ResNet-50 v1.5 in TensorFlow (``--framework tensorflow``), as the reference study ran it.

TensorFlow is an optional extra: the supervisor checks that it can be
imported before it starts anything (``runner run resnet50 --framework
tensorflow`` without it: one line, exit 2). This module imports neither torch
nor the PyTorch workload, so that a TensorFlow-only interpreter (``--python``)
can run it. One process drives every selected GPU through
``tf.distribute.MirroredStrategy``.

Same model, scales and MLLOG events as runner/workloads/resnet50.py, but
at every scale the test scales' recipe (not the v0.5 reference's at full):
ResNet v1.5 bottlenecks (``layers``, ``width``), SGD with momentum, warm-up and
polynomial decay (power 2) to 0.0001, no weight decay on biases and BN,
evaluation every ``eval_every`` epochs; bf16 (or fp16 with loss scaling) through Keras mixed
precision and XLA (``jit_compile``) on GPUs. Full scale reads ImageNet JPEGs
with tf.data (random-resized crop and flip; resize and centre crop for
evaluation); small and tiny scales build the generated data set with the same
recipe (class patterns, shifts, contrast, noise, noisy evaluation labels);
both input pipelines are runner.workloads.resnet50_tfdata's.
"""

from __future__ import annotations

import time


from runner.workloads.resnet50_tfdata import ttt_data
from runner.workloads.settings import Settings, declarations


def _model(tf, cfg, classes, wd):
    L = tf.keras.layers
    reg = tf.keras.regularizers.l2(wd / 2) if wd else None  # l2(x) adds x*sum(w^2): grad wd*w

    def bn(x, zero=False):
        return L.BatchNormalization(momentum=0.9, epsilon=1e-5, gamma_initializer="zeros" if zero else "ones")(x)

    def conv(x, c, k, s=1):
        return L.Conv2D(
            c,
            k,
            strides=s,
            padding="same",
            use_bias=False,
            kernel_regularizer=reg,
            kernel_initializer=tf.keras.initializers.VarianceScaling(2.0, "fan_out", "truncated_normal"),
        )(x)

    size = cfg["image_size"]
    inp = tf.keras.Input((size, size, 3))
    x = L.ReLU()(bn(conv(inp, cfg["width"], 7, 2)))
    x = L.MaxPool2D(3, 2, padding="same")(x)
    cin = cfg["width"]
    for i, n in enumerate(cfg["layers"]):
        w = cfg["width"] * 2**i
        for j in range(n):
            s = 2 if (i > 0 and j == 0) else 1
            idt = x
            if s != 1 or cin != 4 * w:
                idt = bn(conv(x, 4 * w, 1, s))
            y = L.ReLU()(bn(conv(x, w, 1)))
            y = L.ReLU()(bn(conv(y, w, 3, s)))  # v1.5: the stride on the 3x3
            y = bn(conv(y, 4 * w, 1), zero=True)
            x = L.ReLU()(L.Add()([y, idt]))
            cin = 4 * w
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(classes, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01))(x)
    out = L.Activation("linear", dtype="float32")(out)
    return tf.keras.Model(inp, out)


def _devices(tf, spec, seed: int):
    """``(gpus, precision, strategy, device name)``: memory growth on every GPU, the precision's Keras policy,
    the seed, and a MirroredStrategy over more than one GPU."""
    gpus = tf.config.list_physical_devices("GPU")
    for g in gpus:
        try:
            tf.config.experimental.set_memory_growth(g, True)
        except (ValueError, RuntimeError):
            pass
    precision = spec.get("precision", "auto")
    if precision == "auto":
        precision = "bf16" if gpus else "fp32"
    policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(precision, "float32")
    tf.keras.mixed_precision.set_global_policy(policy)
    tf.keras.utils.set_random_seed(seed)
    strategy = tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    dev_name = None
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        dev_name = details.get("device_name")
    return gpus, precision, strategy, dev_name


def _hyperparameters(C, cfg, mode: str, gbs: int, per: int, lr: float, end_lr: float, warm: int, total: int) -> dict:
    """The run's hyperparameters as MLPerf logs them."""
    return {
        C.GLOBAL_BATCH_SIZE: gbs,
        C.OPT_NAME: "sgd",
        C.OPT_BASE_LR: lr,
        "sgd_opt_base_learning_rate": lr,
        "sgd_opt_end_learning_rate": end_lr,
        "sgd_opt_learning_rate_decay_poly_power": 2,
        "sgd_opt_learning_rate_decay_steps": max(1, total - warm) if mode == "ttt" else 1,
        "sgd_opt_weight_decay": cfg["weight_decay"],
        "sgd_opt_momentum": cfg["momentum"],
        "opt_learning_rate_warmup_epochs": cfg["warmup_epochs"],
        "model_bn_span": per,
        "label_smoothing": cfg.get("label_smoothing", 0.0),
        "model_layers": list(cfg["layers"]),
        "model_width": cfg["width"],
        "image_size": cfg["image_size"],
        "framework": "tensorflow",
    }


def run_tf(spec, log, rank=0, world_size=1) -> dict:
    import tensorflow as tf
    from mlperf_logging.mllog import constants as C

    from runner.mllog import platform_name

    entry = spec["entry"]
    cfg = Settings(
        entry["scales"][spec["scale"]],
        declarations(entry.get("settings", {})),
        f"{spec['workload']} ({spec['scale']} scale)",
    )
    mode = spec["mode"]
    seed = int(spec["seed"])
    gpus, precision, strategy, dev_name = _devices(tf, spec, seed)
    replicas = strategy.num_replicas_in_sync
    # its full scale keeps the test scales' recipe (module docstring): never the closed division
    log.submission(
        entry["benchmark"], platform_name(max(1, len(gpus)), dev_name), spec["scale"], mode, reference_recipe=False
    )
    log.event(C.SEED, seed)

    per = cfg["batch_size"]
    if mode == "throughput":
        tp = cfg.get("throughput", {})
        per = int(spec.get("throughput_batch_size") or tp.get("batch_size") or cfg["batch_size"])
    gbs = per * replicas
    classes = cfg["classes"]
    data, n_train, n_eval = ttt_data(tf, spec, cfg, gbs, seed, strategy) if mode == "ttt" else (None, 0, 0)
    steps_per_epoch = max(1, n_train // gbs) if mode == "ttt" else 1
    lr = max(0.001, round(cfg["lr_per_256"] * gbs / 256 / 0.001) * 0.001)
    end_lr = cfg.get("end_lr", 0.0001)
    warm = int(round(cfg["warmup_epochs"] * steps_per_epoch))
    total = steps_per_epoch * cfg.get("decay_epochs", cfg["max_epochs"]) if mode == "ttt" else 10**9

    with strategy.scope():
        model = _model(tf, cfg, classes, cfg["weight_decay"])
        opt = tf.keras.optimizers.SGD(learning_rate=lr, momentum=cfg["momentum"])
        if precision == "fp16":
            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        loss_fn = tf.keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=cfg.get("label_smoothing", 0.0), reduction="none"
        )
    lr_at = _lr_schedule(tf, lr, end_lr, warm, total)
    train_step, eval_step = _steps(tf, spec, strategy, model, opt, loss_fn, lr_at, classes, gbs, precision, bool(gpus))
    log.hyperparameters(_hyperparameters(C, cfg, mode, gbs, per, lr, end_lr, warm, total))
    t_launch = float(spec.get("t_launch", time.time()))
    if mode == "throughput":
        return _throughput(tf, spec, cfg, log, C, train_step, per, replicas, precision, t_launch)
    return _ttt(spec, cfg, entry, log, C, train_step, eval_step, data, n_train, n_eval, precision, t_launch)


def _lr_schedule(tf, lr: float, end_lr: float, warm: int, total: int):
    """The learning rate at a step: linear warm-up over ``warm`` steps, then polynomial decay (power 2) to
    ``end_lr`` at ``total``."""

    def lr_at(step):
        step = tf.cast(step, tf.float32)
        t = tf.minimum(1.0, tf.maximum(0.0, (step - warm) / float(max(1, total - warm))))
        decay = end_lr + (lr - end_lr) * (1.0 - t) ** 2
        return tf.where(step < warm, lr * (step + 1) / max(1, warm), decay) if warm > 0 else decay

    return lr_at


def _steps(tf, spec, strategy, model, opt, loss_fn, lr_at, classes: int, gbs: int, precision: str, on_gpus: bool):
    """(train_step, eval_step) as tf.functions over ``strategy``'s replicas: a training step (XLA on GPUs
    unless --no-compile) that counts the steps the schedule reads, and the correct predictions of a batch."""
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_ex = loss_fn(tf.one_hot(y, classes), logits)
            loss = tf.nn.compute_average_loss(per_ex, global_batch_size=gbs)
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            scaled = opt.get_scaled_loss(loss) if precision == "fp16" else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        if precision == "fp16":
            grads = opt.get_unscaled_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function(jit_compile=on_gpus and spec.get("compile") is not False)
    def train_step(x, y):
        opt.learning_rate.assign(lr_at(step_var))
        strategy.run(replica_step, args=(x, y))
        return step_var.assign_add(1)

    @tf.function
    def eval_step(x, y):
        def one(x, y):
            pred = tf.argmax(model(x, training=False), axis=1, output_type=tf.int32)
            return tf.reduce_sum(tf.cast(tf.equal(pred, tf.cast(y, tf.int32)), tf.float32))

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(one, args=(x, y)), axis=None)

    return train_step, eval_step


def _ttt(spec, cfg, entry, log, C, train_step, eval_step, data, n_train, n_eval, precision, t_launch):
    train, val = data
    target = cfg["target"]
    max_epochs = int(spec.get("max_epochs") or cfg["max_epochs"])
    every = cfg.get("eval_every", 1)
    log.event(C.TRAIN_SAMPLES, n_train)
    log.event(C.EVAL_SAMPLES, n_eval)
    log.end(C.INIT_STOP)
    log.start(C.RUN_START)
    t0 = time.time()
    first = None
    quality, epoch = None, 0
    for block in range(1, max_epochs + 1, every):
        count = min(every, max_epochs - block + 1)
        log.start(C.BLOCK_START, metadata={C.FIRST_EPOCH_NUM: block, C.EPOCH_COUNT: count})
        for epoch in range(block, block + count):
            log.start(C.EPOCH_START, metadata={C.EPOCH_NUM: epoch})
            for x, y in train:
                train_step(x, y)
                if first is None:
                    first = time.time()
            log.end(C.EPOCH_STOP, metadata={C.EPOCH_NUM: epoch})
        log.start(C.EVAL_START, metadata={C.EPOCH_NUM: epoch})
        correct = sum(float(eval_step(x, y)) for x, y in val)
        quality = correct / max(1, n_eval)
        log.event(C.EVAL_ACCURACY, quality, metadata={C.EPOCH_NUM: epoch})
        log.end(C.EVAL_STOP, metadata={C.EPOCH_NUM: epoch})
        log.end(C.BLOCK_STOP, metadata={C.FIRST_EPOCH_NUM: block})
        if quality >= target:
            ttt = time.time() - t0
            log.end(C.RUN_STOP, metadata={"status": C.SUCCESS})
            return {
                "outcome": "success",
                "precision": precision,
                "reason": f"reached top1 {quality:.4f} (target {target}) at epoch {epoch}",
                "result": _result(epoch, quality, target, ttt, n_train, first, t_launch),
            }
    ttt = time.time() - t0
    log.end(C.RUN_STOP, metadata={"status": C.ABORTED})
    return {
        "outcome": "target_missed",
        "precision": precision,
        "reason": f"top1 {quality:.4f} after {epoch} epochs (the limit) is below the target {target}",
        "result": _result(epoch, quality, target, ttt, n_train, first, t_launch),
    }


def _result(epochs, quality, target, ttt, n_train, first, t_launch):
    res = {
        "epochs": epochs,
        "quality": quality,
        "target": target,
        "time_to_train_s": round(ttt, 3),
        "samples_per_s": round(n_train * epochs / ttt, 3) if ttt > 0 else None,
    }
    if first is not None:
        res["time_to_first_step_s"] = round(first - t_launch, 3)
    return res


def _throughput(tf, spec, cfg, log, C, train_step, per, replicas, precision, t_launch):
    tp = cfg.get("throughput", {})
    warmup = int(spec.get("warmup_steps") or tp.get("warmup_steps", 5))
    measure_s = float(spec.get("measure_s") or tp.get("measure_s", 10.0))
    min_steps = int(tp.get("min_steps", 5))
    size, classes = cfg["image_size"], cfg["classes"]
    gbs = per * replicas
    x = tf.random.stateless_normal((gbs, size, size, 3), seed=(int(spec["seed"]), 1))
    y = tf.random.stateless_uniform((gbs,), seed=(int(spec["seed"]), 2), maxval=classes, dtype=tf.int32)
    log.end(C.INIT_STOP)
    log.start(C.RUN_START)
    first = None
    for i in range(warmup):
        last = train_step(x, y)
        if i == 0:
            int(last.numpy())  # reading the step counter waits for the step
            first = time.time()
    int(last.numpy())
    t0 = time.time()
    steps = 0
    while steps < min_steps or time.time() - t0 < measure_s:
        for _ in range(5):
            last = train_step(x, y)
        steps += 5
        int(last.numpy())
    elapsed = time.time() - t0
    sps = steps * gbs / elapsed
    log.event("throughput", sps, metadata={"unit": "images/s", "steps": steps, "elapsed_s": round(elapsed, 3)})
    log.end(C.RUN_STOP, metadata={"status": C.SUCCESS})
    res = {
        "samples_per_s": round(sps, 3),
        "sample_unit": "images",
        "steps": steps,
        "warmup_steps": warmup,
        "measured_s": round(elapsed, 3),
        "batch_per_process": gbs,
        "world_size": 1,
    }
    if first is not None:
        res["time_to_first_step_s"] = round(first - t_launch, 3)
    return {
        "outcome": "success",
        "precision": precision,
        "reason": f"measured {sps:,.1f} images/s over {steps} steps ({elapsed:.1f} s)",
        "result": res,
    }
