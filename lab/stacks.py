"""Stack profiles: inventory/stacks/<name>.yml, validated when loaded.

A profile names the versions of a software stack (driver, CUDA, cuDNN, NCCL,
Python frameworks), the OS releases it is built for (``supports``) and, per
OS family, the packages and repositories that install it. Everything is
checked before any host is touched: an unknown stack, a profile that misses a
field or names an OS family it has no packages for, a host whose OS
(``gpulab_os``, e.g. ``Ubuntu 22.04``) its profile does not cover. Each is one
ConfigError line (exit 2).

The host's OS comes from the inventory variable ``gpulab_os`` so that it is
known without connecting; the playbook then asserts that the gathered facts
agree (``provision_verify_os``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab import schema
from lab.errors import ConfigError

STACKS_DIR = Path(__file__).resolve().parent.parent / "inventory" / "stacks"

FAMILY = {"Ubuntu": "Debian", "Debian": "Debian",
          "RedHat": "RedHat", "CentOS": "RedHat", "Rocky": "RedHat", "AlmaLinux": "RedHat"}

COMPONENTS = ("driver", "cuda", "cudnn", "nccl")


def os_family(os_name: str) -> str:
    """'Ubuntu 18.04' -> 'Debian', 'Rocky 9' -> 'RedHat'."""
    try:
        return FAMILY[os_name.split()[0]]
    except (IndexError, KeyError):
        raise ConfigError(f"unknown OS {os_name!r} (known distributions: {', '.join(FAMILY)})") from None


def repo_dist(os_name: str) -> str:
    """NVIDIA's repository name for an OS release: ubuntu1804, debian12, rhel9."""
    dist, version = os_name.split()
    if FAMILY[dist] == "RedHat":
        return f"rhel{version.split('.')[0]}"
    return dist.lower() + version.replace(".", "")


@dataclass(frozen=True)
class Stack:
    name: str
    path: Path
    data: dict[str, Any]

    @property
    def supports(self) -> list[str]:
        return list(self.data["supports"])

    def expected(self) -> dict[str, str]:
        """What a host on this stack must report: component -> version (driver: branch.* without an exact one)."""
        d = self.data
        out = {"driver": d["driver"].get("version") or f"{d['driver']['branch']}.*",
               "cuda": d["cuda"]["version"], "cudnn": d["cudnn"]["version"], "nccl": d["nccl"]["version"]}
        for fw, version in d["python"]["frameworks"].items():
            out[fw] = version
        return out

    def covers(self, os_name: str) -> bool:
        return os_name in self.data["supports"]


def load(name: str, stacks_dir: Path | str | None = None) -> Stack:
    """Load and check one profile; ConfigError for an unknown or malformed one."""
    stacks_dir = Path(stacks_dir) if stacks_dir else STACKS_DIR
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name or ""):
        raise ConfigError(f"stack {name!r}: not a valid stack name")
    path = stacks_dir / f"{name}.yml"
    if not path.is_file():
        known = ", ".join(available(stacks_dir)) or "none"
        raise ConfigError(f"unknown stack '{name}': no {path} (stacks: {known})")
    data = schema.load_yaml(path, "stack")
    if data["name"] != name:
        raise ConfigError(f"{path}: name: '{data['name']}' does not match the file name '{name}'")
    for os_name in data["supports"]:
        family = FAMILY[os_name.split()[0]]
        for section in ("packages", "repositories"):
            if family not in data[section]:
                raise ConfigError(f"{path}: supports: '{os_name}' is a {family}-family OS but {section} "
                                  f"has no {family} entry")
    return Stack(name, path, data)


def available(stacks_dir: Path | str | None = None) -> list[str]:
    stacks_dir = Path(stacks_dir) if stacks_dir else STACKS_DIR
    return sorted(p.stem for p in stacks_dir.glob("*.yml"))


@dataclass(frozen=True)
class HostPlan:
    host: str
    stack: Stack
    os: str

    @property
    def family(self) -> str:
        return os_family(self.os)


def plan(hosts, stack: str | None = None, stacks_dir: Path | str | None = None,
         inventory: Path | str | None = None) -> list[HostPlan]:
    """Each host with its profile (``stack`` overrides every host's gpulab_stack) and OS, all checked."""
    where = f"{inventory}: " if inventory else ""
    cache: dict[str, Stack] = {}
    plans = []
    for h in hosts:
        name = stack or h.stack
        if name not in cache:
            cache[name] = load(name, stacks_dir)
        prof = cache[name]
        os_name = (h.vars or {}).get("gpulab_os")
        if not os_name:
            raise ConfigError(f"{where}host {h.name}: gpulab_os is not set (the OS release, e.g. 'Ubuntu 22.04'; "
                              f"stack '{name}' supports {', '.join(prof.supports)})")
        if not prof.covers(os_name):
            raise ConfigError(f"{where}host {h.name}: OS '{os_name}' is not supported by stack '{name}' "
                              f"(it supports {', '.join(prof.supports)})")
        plans.append(HostPlan(h.name, prof, os_name))
    return plans
