"""A tiny target must need real learning: the untrained model is far below it."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from runner import workloads  # noqa: E402
from runner.mllog import MLLog  # noqa: E402
from runner.workloads import base  # noqa: E402

CATALOGUE = workloads.load()


def tiny_context(name, seed=0, mode="ttt"):
    entry = CATALOGUE[name]
    spec = {"workload": name, "scale": "tiny", "mode": mode, "seed": seed, "entry": entry}
    return base.Context(
        spec=spec,
        entry=entry,
        log=MLLog(None),
        device=torch.device("cpu"),
        rank=0,
        world_size=1,
        local_rank=0,
        precision="fp32",
    )


@pytest.mark.parametrize("name", sorted(n for n, w in CATALOGUE.items() if "pytorch" in w["frameworks"]))
def test_untrained_model_is_far_below_the_tiny_target(name):
    ctx = tiny_context(name)
    trainer = importlib.import_module(CATALOGUE[name]["module"]).build(ctx)
    q = trainer.evaluate(0)
    target = ctx.cfg["target"]
    if isinstance(target, dict):
        for k, t in target.items():
            assert q[k] < 0.5 * t, (k, q, t)
    else:
        assert q < 0.5 * target, (q, target)
