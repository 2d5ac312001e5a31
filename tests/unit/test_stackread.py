"""One owner of the rules that read a host's stack from its files (runner/stackread.py): the runner's
probe and the audit's Ansible module, each over the same fake stack tree, find the same CUDA toolkit,
cuDNN headers and NCCL header versions; the module ships that very file as its module_utils."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner import probe
from tests.unit.test_provision_summary import REPO, facts_module


def write(root: Path, rel: str, text: str = "") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def defines(prefix: str, names: tuple[str, str, str], version: str) -> str:
    return "".join(f"#define {prefix}_{n} {v}\n" for n, v in zip(names, version.split(".")))


def debian_image(root: Path) -> None:
    """A CUDA 12.4 toolkit linked as /usr/local/cuda, cuDNN 9 behind the alternatives link, NCCL in usr/include."""
    write(root, "usr/local/cuda-12.4/version.json", '{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}')
    os.symlink("cuda-12.4", root / "usr/local/cuda")
    write(
        root,
        "usr/include/x86_64-linux-gnu/cudnn_version_v9.h",
        defines("CUDNN", ("MAJOR", "MINOR", "PATCHLEVEL"), "9.1.0"),
    )
    os.symlink("x86_64-linux-gnu/cudnn_version_v9.h", root / "usr/include/cudnn_version.h")
    write(root, "usr/include/nccl.h", defines("NCCL", ("MAJOR", "MINOR", "PATCH"), "2.21.5"))
    write(root, "usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0")


def legacy_host(root: Path) -> None:
    """mlperf-v0.5 era: version.txt, cuDNN 7 in cudnn.h, NCCL's header in the multiarch folder."""
    write(root, "usr/local/cuda/version.txt", "CUDA Version 10.0.130\n")
    write(root, "usr/include/cudnn.h", defines("CUDNN", ("MAJOR", "MINOR", "PATCHLEVEL"), "7.4.1"))
    write(root, "usr/include/x86_64-linux-gnu/nccl.h", defines("NCCL", ("MAJOR", "MINOR", "PATCH"), "2.3.7"))


def bare_toolkit(root: Path) -> None:
    """A toolkit with no version files (cuda.h only) and no cuDNN or NCCL headers."""
    write(root, "usr/local/cuda/include/cuda.h", "#define CUDA_VERSION 13000\n")


@pytest.mark.parametrize(
    "build, cuda, cudnn, nccl",
    [
        (debian_image, "12.4.1", ["9.1.0"], "2.21.5"),
        (legacy_host, "10.0.130", ["7.4.1"], "2.3.7"),
        (bare_toolkit, "13.0", [], None),
    ],
)
def test_probe_and_audit_module_read_the_same_stack(tmp_path, monkeypatch, build, cuda, cudnn, nccl):
    build(tmp_path)
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    monkeypatch.setattr(probe, "dist_version", lambda name: None)  # no NVIDIA wheels in this tree
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    mod = facts_module()

    from_probe = (
        (probe.cuda_toolkit_version() or {}).get("version"),
        sorted({f["version"] for f in probe.cudnn_versions() if f["source"].startswith("header ")}),
        [f["version"] for f in probe.nccl_versions() if f["source"].startswith("header ")][:1] or [None],
    )
    from_module = (
        mod.cuda_facts(str(tmp_path))["default"],
        mod.cudnn_facts({}, str(tmp_path))["versions"],
        [mod.nccl_facts({}, str(tmp_path))["version"]],
    )
    assert from_probe == from_module == (cuda, cudnn, [nccl])


def test_the_module_ships_this_very_file():
    shipped = REPO / "playbooks" / "module_utils" / "gpulab_stackread.py"
    assert shipped.resolve() == (REPO / "runner" / "stackread.py").resolve()
    assert "from __future__" not in shipped.read_text().split('"""', 2)[2]  # runs on Python 3.6 hosts
