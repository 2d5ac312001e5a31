"""The bwtools role's data with plain data: the profiles' tool pins, the one tools folder shared
with the runner, the build recipes, and how the audit reads the built tools back (version markers,
binaries checked against their sums)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import yaml

from lab.core.errors import ConfigError
from lab.hosts import readback, stacks
from tests.testlab import sourcetars
from tests.unit.test_provision_summary import REPO, facts_module
from tests.unit.test_stacks import edit, stacks_dir  # noqa: F401  (fixture)

ROLE = REPO / "playbooks" / "roles" / "bwtools"


def test_the_role_installs_where_the_runner_looks(monkeypatch):
    monkeypatch.delenv("GPULAB_TOOLS_DIR", raising=False)
    import importlib

    from runner import bwtools

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["bwtools_bin_dir"] == str(importlib.reload(bwtools).TOOLS_DIR) == "/opt/gpulab/tools/bin"
    assert "bwtools" in yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text())[0]["roles"][10].values()


def test_profiles_pin_the_releases_and_invent_no_sums():
    for name in ("current", "cuda12"):
        tools = stacks.load(name).data["tools"]
        assert {n: (t["version"], t["url"]) for n, t in tools.items()} == {
            "nccl-tests": ("2.19.6", "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.19.6.tar.gz"),
            "nvbandwidth": ("0.8", "https://github.com/NVIDIA/nvbandwidth/archive/refs/tags/v0.8.tar.gz"),
        }
        # the real tarballs' sums could not be taken where the profiles were written: none is given
        assert all(t["sha256"] is None for t in tools.values())
        assert "never invent one" in (REPO / "inventory" / "stacks" / f"{name}.yml").read_text()
    assert "tools" not in stacks.load("mlperf-v0.5").data
    recipes = yaml.safe_load((ROLE / "vars" / "recipes.yml").read_text())["bwtools_recipes"]
    assert set(recipes) == set(stacks.load("current").data["tools"])  # a recipe for every tool a profile may name
    assert yaml.safe_load((ROLE / "vars" / "Debian.yml").read_text())["bwtools_build_packages"] == [
        "build-essential",
        "cmake",
        "libboost-program-options-dev",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["tools"]["nccl-tests"].update(sha256="abc"), r"tools.*nccl-tests.*sha256"),
        (lambda d: d["tools"]["nvbandwidth"].pop("sha256"), r"tools.*nvbandwidth.*sha256"),
        (
            lambda d: d["tools"].update(hpl={"version": "1.0", "url": "https://x.org/a.tar.gz", "sha256": None}),
            r"tools.*hpl",
        ),
        (lambda d: d["tools"]["nccl-tests"].update(url="https://github.com/NVIDIA/nccl-tests.zip"), r"tools.*url"),
    ],
)
def test_bad_tool_pins_are_one_line(stacks_dir, change, message):  # noqa: F811
    edit(stacks_dir, "current", change)
    with pytest.raises(ConfigError, match=message) as err:
        stacks.load("current", stacks_dir)
    assert "\n" not in str(err.value)


def _marker(root, tool, version, binaries):
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    installed = {}
    for name, data in binaries.items():
        (bin_dir / name).write_bytes(data)
        installed[name] = hashlib.sha256(data).hexdigest()
    (root / f"{tool}.json").write_text(
        json.dumps(
            {
                "tool": tool,
                "version": version,
                "bin_dir": str(bin_dir),
                "sha256": "ab" * 32,
                "url": "u",
                "installed": installed,
            }
        )
    )


def test_the_audit_reads_the_built_tools_back(tmp_path):
    mod = facts_module()
    _marker(tmp_path, "nccl-tests", "2.19.6", {"all_reduce_perf": b"one"})
    _marker(tmp_path, "nvbandwidth", "0.8", {"nvbandwidth": b"two"})
    (tmp_path / "notes.txt").write_text("not a marker")
    tools = mod.gpulab_tools.built_tools(str(tmp_path))
    assert {n: (t["version"], t["problem"]) for n, t in tools.items()} == {
        "nccl-tests": ("2.19.6", None),
        "nvbandwidth": ("0.8", None),
    }
    base = {
        "driver": {"version": "1"},
        "gpus": None,
        "cuda": {"default": None},
        "cudnn": {"versions": []},
        "nccl": {"version": None},
        "python": {},
        "tools": tools,
    }
    assert mod.drift(base, {"nccl-tests": "2.19.6", "nvbandwidth": "0.8"}, "auto", "auto") == []
    assert readback.found_versions(base)["nccl-tests"] == "2.19.6"
    # a binary replaced by hand, one removed, a marker that does not parse, a tool never built
    (tmp_path / "bin" / "all_reduce_perf").write_bytes(b"other")
    os.unlink(tmp_path / "bin" / "nvbandwidth")
    tools = mod.gpulab_tools.built_tools(str(tmp_path))
    assert tools["nccl-tests"]["problem"] == "all_reduce_perf changed since its build"
    assert tools["nvbandwidth"]["problem"] == "nvbandwidth missing"
    assert mod.drift({**base, "tools": tools}, {"nccl-tests": "2.19.6", "nvbandwidth": "0.8"}, "auto", "auto") == [
        {"component": "nccl-tests", "expected": "2.19.6", "found": "2.19.6 (all_reduce_perf changed since its build)"},
        {"component": "nvbandwidth", "expected": "0.8", "found": "0.8 (nvbandwidth missing)"},
    ]
    (tmp_path / "nvbandwidth.json").write_text("{not json")
    assert mod.gpulab_tools.built_tools(str(tmp_path))["nvbandwidth"] == {
        "version": None,
        "source": str(tmp_path / "nvbandwidth.json"),
        "problem": "unreadable version marker",
        "sha256": None,
        "url": None,
    }
    assert mod.drift({**base, "tools": {}}, {"nvbandwidth": "0.8"}, "auto", "auto") == [
        {"component": "nvbandwidth", "expected": "0.8", "found": "not built"}
    ]
    assert mod.gpulab_tools.built_tools(str(tmp_path / "nowhere")) == {}


def test_stand_in_tarballs_are_reproducible_with_their_sums(tmp_path):
    tools = stacks.load("current").data["tools"]
    sums = sourcetars.build(tmp_path / "a", tools)
    assert sums == sourcetars.build(tmp_path / "b", tools)
    tar = tmp_path / "a" / "NVIDIA" / "nccl-tests" / "archive" / "refs" / "tags" / "v2.19.6.tar.gz"
    assert hashlib.sha256(tar.read_bytes()).hexdigest() == sums["nccl-tests"]
    assert (tar.parent / "v2.19.6.tar.gz.sha256").read_text() == f"{sums['nccl-tests']}  v2.19.6.tar.gz\n"
