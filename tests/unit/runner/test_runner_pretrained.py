"""Reading the published backbone files: Detectron's R-50.pkl (MSRA ResNet-50, Caffe2 blob
names, pickled numpy arrays) and torchvision's ResNet-34 state dict, strictly."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from runner.workloads import pretrained as P  # noqa: E402
from runner.workloads import vision as V  # noqa: E402
from runner.workloads.base import WorkloadError  # noqa: E402


def r50_blob_names():
    """The backbone blobs of Detectron's R-50.pkl, written out from Detectron's naming: the stem
    (conv1_w, res_conv1_bn_{s,b}) and res2..res5 with 3, 4, 6, 3 blocks, each with branch2a/b/c
    and, in its first block, the projection branch1."""
    names = {"conv1_w", "res_conv1_bn_s", "res_conv1_bn_b"}
    for stage, blocks in zip((2, 3, 4, 5), (3, 4, 6, 3)):
        for b in range(blocks):
            for br in (["branch1"] if b == 0 else []) + ["branch2a", "branch2b", "branch2c"]:
                names |= {f"res{stage}_{b}_{br}_w", f"res{stage}_{b}_{br}_bn_s", f"res{stage}_{b}_{br}_bn_b"}
    return names


def msra_trunk(layers=(3, 4, 6, 3), width=64):
    from runner.workloads.maskrcnn_model import MSRABottleneck, frozen_affine

    return V.ResNetTrunk(
        MSRABottleneck, list(layers), width, norm=frozen_affine, zero_init=False, return_stages=[0, 1, 2, 3]
    )


def test_every_tensor_of_the_r50_trunk_has_its_detectron_blob():
    trunk = msra_trunk()
    names = {P.detectron_name(k) for k in trunk.state_dict() if not k.endswith(("running_mean", "running_var"))}
    assert names == r50_blob_names() and len(names) == 159


def blobs_for(trunk, rng):
    out = {}
    for k, t in trunk.state_dict().items():
        name = P.detectron_name(k)
        if name:
            out[name] = rng.standard_normal(tuple(t.shape)).astype(np.float32)
    out["fc1000_w"] = np.zeros((10, 3), np.float32)  # the classifier is in the file and not used
    out["res2_0_branch2a_w_momentum"] = np.zeros(3, np.float32)
    return out


def test_a_detectron_pickle_loads_strictly_with_frozen_affine_norms(tmp_path):
    trunk = msra_trunk((1, 1, 1, 1), 8)
    blobs = blobs_for(trunk, np.random.default_rng(0))
    f = tmp_path / "R-50.pkl"
    f.write_bytes(pickle.dumps({"blobs": blobs}, protocol=2))
    n = P.load_detectron_pkl(trunk, f)
    assert n == len(trunk.state_dict())
    # conv1 filters are the BGR ones reversed: RGB input gives what BGR input gave
    assert torch.equal(trunk.conv1.weight, torch.from_numpy(blobs["conv1_w"]).flip(1))
    x = torch.randn(1, 3, 32, 32)
    bgr = torch.nn.functional.conv2d(x.flip(1), torch.from_numpy(blobs["conv1_w"]), stride=2, padding=3)
    assert torch.allclose(trunk.conv1(x), bgr, atol=1e-5)
    # the BN blobs are the affine's scale and shift: y = x * s + b exactly
    s, b = blobs["res3_0_branch2b_bn_s"], blobs["res3_0_branch2b_bn_b"]
    bn = trunk.layer2[0].bn2
    y = torch.randn(2, len(s), 3, 3)
    want = y * torch.from_numpy(s).view(1, -1, 1, 1) + torch.from_numpy(b).view(1, -1, 1, 1)
    assert torch.equal(bn(y), want)
    # the stride sits in the first 1x1 convolution of a stage (MSRA ResNet v1)
    assert trunk.layer2[0].conv1.stride == (2, 2) and trunk.layer2[0].conv2.stride == (1, 1)


def test_a_missing_or_misshapen_blob_fails_naming_it(tmp_path):
    trunk = msra_trunk((1, 1, 1, 1), 8)
    blobs = blobs_for(trunk, np.random.default_rng(1))
    del blobs["res4_0_branch1_bn_s"]
    f = tmp_path / "R-50.pkl"
    f.write_bytes(pickle.dumps(blobs, protocol=2))  # the blobs dict at the top also occurs
    with pytest.raises(WorkloadError, match=r"R-50\.pkl: no blob res4_0_branch1_bn_s \(for layer3\.0\.downsample"):
        P.load_detectron_pkl(trunk, f)
    blobs = blobs_for(trunk, np.random.default_rng(1))
    blobs["res5_0_branch2c_w"] = blobs["res5_0_branch2c_w"][:, :-1]
    f.write_bytes(pickle.dumps(blobs, protocol=2))
    with pytest.raises(WorkloadError, match=r"blob res5_0_branch2c_w has shape"):
        P.load_detectron_pkl(trunk, f)


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/gpulab-pwned",))


def test_a_pickle_with_anything_but_arrays_is_refused_unrun(tmp_path):
    f = tmp_path / "R-50.pkl"
    f.write_bytes(pickle.dumps({"blobs": {"conv1_w": _Evil()}}, protocol=2))
    with pytest.raises(WorkloadError, match=r"not a Detectron weights pickle \(refusing posix\.system"):
        P.read_detectron_pkl(f)
    f.write_bytes(b"\x80\x02garbage")
    with pytest.raises(WorkloadError, match="not a Detectron weights pickle"):
        P.read_detectron_pkl(f)


def test_torchvision_weights_load_strictly(tmp_path):
    src = V.ResNetTrunk(V.BasicBlock, [3, 4, 6, 3], 8, zero_init=False)
    state = {k: v for k, v in src.state_dict().items() if not k.endswith("num_batches_tracked")}
    state["fc.weight"] = torch.zeros(10, 64)  # the classifier is in the file and not used
    f = tmp_path / "resnet34.pth"
    torch.save(state, f)
    ssd_trunk = V.ResNetTrunk(V.BasicBlock, [3, 4, 6], 8, strides=(1, 2, 1), zero_init=False)
    assert P.load_torchvision(ssd_trunk, f) == len(
        [k for k in ssd_trunk.state_dict() if not k.endswith("num_batches_tracked")]
    )
    assert torch.equal(ssd_trunk.layer3[5].conv2.weight, src.layer3[5].conv2.weight)
    del state["layer2.1.bn1.running_var"]
    torch.save(state, f)
    with pytest.raises(WorkloadError, match=r"resnet34\.pth: no tensor layer2\.1\.bn1\.running_var"):
        P.load_torchvision(ssd_trunk, f)
    f.write_bytes(b"not a checkpoint")
    with pytest.raises(WorkloadError, match=r"resnet34\.pth: not a torch state dict"):
        P.load_torchvision(ssd_trunk, f)
