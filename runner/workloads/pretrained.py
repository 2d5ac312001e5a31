"""Loading the published backbone weights a detection workload starts from at full scale.

The scale's ``pretrained`` entry (workloads.yml; runner/artifacts.py checks the
file's published sum before the run starts) names the file and its format:

- ``torchvision``: a ``torch.save`` state dict in torchvision's ResNet names
  (SSD's ResNet-34, ``resnet34-333f7ec4.pth``), read with ``weights_only``;
- ``detectron-pkl``: Detectron's pickled Caffe2 blobs (Mask R-CNN's MSRA
  ResNet-50, ``R-50.pkl``): ``conv1_w``, ``res_conv1_bn_{s,b}``,
  ``res<stage>_<block>_branch2{a,b,c}_w`` and ``..._bn_{s,b}``, ``..._branch1_*``
  for the projection. Read with an unpickler that builds numpy arrays and
  nothing else. The BN blobs are the scale and shift of the frozen affine
  layer (the statistics are folded in): they become a FrozenBatchNorm2d's
  weight and bias with mean 0 and variance 1. The MSRA network reads BGR
  input; conv1's input channels are reversed here so that RGB input gives the
  same result.

Loading is strict: every convolution and normalisation tensor of the backbone
must come from the file with its shape, or the run fails naming what is
missing. Nothing here falls back to random initialisation.
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import torch
import torch.nn as nn

from runner import artifacts
from runner.workloads.base import WorkloadError

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts, strings and numpy arrays; any other global is refused."""

    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name}: only numpy arrays are expected")
        if module == "_codecs":
            import codecs

            return codecs.encode
        mod = np
        if name in ("_reconstruct", "scalar"):
            mod = getattr(np, "_core", None) or np.core
            mod = mod.multiarray
        return getattr(mod, name)


def read_detectron_pkl(path) -> dict:
    """The blobs of a Detectron pickle: ``{name: numpy array}``."""
    try:
        with open(path, "rb") as f:
            data = _ArraysOnly(f, encoding="latin1").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise WorkloadError(f"{path}: not a Detectron weights pickle ({exc})".splitlines()[0]) from None
    blobs = data.get("blobs", data) if isinstance(data, dict) else None
    if not isinstance(blobs, dict):
        raise WorkloadError(f"{path}: not a Detectron weights pickle (no dict of blobs)")
    return {str(k): v for k, v in blobs.items() if isinstance(v, np.ndarray)}


def detectron_name(key: str) -> str | None:
    """The Detectron blob that holds a ResNetTrunk tensor (torchvision names), or None."""
    if key == "conv1.weight":
        return "conv1_w"
    m = re.fullmatch(r"bn1\.(weight|bias)", key)
    if m:
        return "res_conv1_bn_" + ("s" if m.group(1) == "weight" else "b")
    m = re.fullmatch(r"layer(\d)\.(\d+)\.(conv|bn)(\d)\.(weight|bias)", key)
    if m:
        stage, block, kind, j, what = m.groups()
        base = f"res{int(stage) + 1}_{block}_branch2{'abc'[int(j) - 1]}"
        return base + ("_w" if kind == "conv" else "_bn_s" if what == "weight" else "_bn_b")
    m = re.fullmatch(r"layer(\d)\.(\d+)\.downsample\.([01])\.(weight|bias)", key)
    if m:
        stage, block, part, what = m.groups()
        base = f"res{int(stage) + 1}_{block}_branch1"
        return base + ("_w" if part == "0" else "_bn_s" if what == "weight" else "_bn_b")
    return None


def load_detectron_pkl(module: nn.Module, path) -> int:
    """Load MSRA blobs into a ResNetTrunk whose norms are frozen; returns the tensors loaded."""
    blobs = read_detectron_pkl(path)
    own = module.state_dict()
    state = {}
    for key, t in own.items():
        if key.endswith("running_mean"):
            state[key] = torch.zeros_like(t)
            continue
        if key.endswith("running_var"):
            state[key] = torch.ones_like(t)
            continue
        name = detectron_name(key)
        if name is None:
            raise WorkloadError(f"{path}: the backbone tensor {key} has no Detectron blob name")
        if name not in blobs:
            raise WorkloadError(f"{path}: no blob {name} (for {key}): not the MSRA ResNet this scale loads")
        v = torch.from_numpy(np.ascontiguousarray(blobs[name])).to(t.dtype)
        if key == "conv1.weight":
            v = v.flip(1)  # BGR filters on RGB input
        if tuple(v.shape) != tuple(t.shape):
            raise WorkloadError(f"{path}: blob {name} has shape {tuple(v.shape)}, {key} needs {tuple(t.shape)}")
        state[key] = v
    module.load_state_dict(state, strict=True)
    return len(state)


def load_torchvision(module: nn.Module, path) -> int:
    """Load a torchvision-layout state dict; every tensor of ``module`` must be in it."""
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged or foreign file: one line
        raise WorkloadError(f"{path}: not a torch state dict ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    take = {}
    for key, t in module.state_dict().items():
        if key.endswith("num_batches_tracked"):
            continue  # not in checkpoints of that time; the count does not enter the computation
        v = state.get(key) if isinstance(state, dict) else None
        if not isinstance(v, torch.Tensor):
            raise WorkloadError(f"{path}: no tensor {key}: not the torchvision ResNet this scale loads")
        if tuple(v.shape) != tuple(t.shape):
            raise WorkloadError(f"{path}: {key} has shape {tuple(v.shape)}, the model needs {tuple(t.shape)}")
        take[key] = v
    module.load_state_dict(take, strict=False)
    return len(take)


LOADERS = {"torchvision": load_torchvision, "detectron-pkl": load_detectron_pkl}


def load_backbone(ctx, module: nn.Module) -> str:
    """Load the scale's published backbone into ``module``; returns a line for the run's log."""
    entry = ctx.cfg["pretrained"]
    p = artifacts.path(entry, ctx.data)
    if not p.is_file():
        raise WorkloadError(f"{p}: missing: {entry['title']} (fetch it with `invoke datasets`)")
    n = LOADERS[entry["format"]](module, p)
    return f"backbone initialized from {p} ({n} tensors: {entry['title']})"
