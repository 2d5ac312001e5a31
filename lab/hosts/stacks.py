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
agree (``stack_profile_verify_os``). A host driven without SSH
(``ansible_connection: local``, the embedded default) may leave it out: its OS
is this machine's, read from /etc/os-release the way the playbook's facts name
it (``Debian 12``, ``Ubuntu 24.04``, ``Rocky 9``).

A profile may pin DCGM (``dcgm: {version, required}``, with ``packages.<family>.dcgm``)
and say that its hosts have NVSwitches (``nvswitch: true``): then every family's
``fabricmanager`` packages must be exactly the driver's version (``driver.version``
required). ``Stack.tools()`` is what `invoke validate` expects of both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.hosts import osfamily
from lab.core import schema, versions
from lab.core.errors import ConfigError

STACKS_DIR = Path(__file__).resolve().parents[2] / "inventory" / "stacks"

COMPONENTS = ("driver", "cuda", "cudnn", "nccl")


def os_family(os_name: str) -> str:
    """'Ubuntu 18.04' -> 'Debian', 'Rocky 9' -> 'RedHat'."""
    try:
        return osfamily.family(os_name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


OS_RELEASE_IDS = {
    "ubuntu": "Ubuntu",
    "debian": "Debian",
    "rhel": "RedHat",
    "centos": "CentOS",
    "rocky": "Rocky",
    "almalinux": "AlmaLinux",
}


def local_os(os_release: Path | str = "/etc/os-release") -> str:
    """This machine's OS release as gpulab_os names it; ConfigError when it cannot be told."""
    path = Path(os_release)
    try:
        text = path.read_text(errors="replace")[:16384]
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read it to detect this machine's OS ({exc.strerror}): set gpulab_os for the local host"
        ) from None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"').strip("'")
    dist = OS_RELEASE_IDS.get(fields.get("ID", "").lower())
    version = fields.get("VERSION_ID", "")
    if not dist or not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version):
        raise ConfigError(
            f"{path}: ID={fields.get('ID', '')!r} VERSION_ID={version!r} is not an OS gpulab knows "
            f"({', '.join(OS_RELEASE_IDS)}): set gpulab_os for the local host"
        )
    if dist != "Ubuntu":  # Debian and the RedHat family are named by their major release
        version = version.split(".")[0]
    return f"{dist} {version}"


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
        out = {
            "driver": d["driver"].get("version") or f"{d['driver']['branch']}.*",
            "cuda": d["cuda"]["version"],
            "cudnn": d["cudnn"]["version"],
            "nccl": d["nccl"]["version"],
        }
        for fw, version in d["python"]["frameworks"].items():
            out[fw] = version
        return out

    def tools(self) -> dict[str, Any]:
        """What `invoke validate` expects of DCGM and Fabric Manager on this stack's hosts."""
        d = self.data
        return {
            "dcgm": dict(d["dcgm"]) if "dcgm" in d else None,
            "nvswitch": bool(d.get("nvswitch", False)),
            "driver": d["driver"].get("version"),
        }

    def covers(self, os_name: str) -> bool:
        return os_name in self.data["supports"]


def load(name: str, stacks_dir: Path | str | None = None) -> Stack:
    """Load and check one profile; ConfigError for an unknown or malformed one."""
    stacks_dir = Path(stacks_dir) if stacks_dir else STACKS_DIR
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", name):
        raise ConfigError(f"stack {name!r}: not a valid stack name")
    path = stacks_dir / f"{name}.yml"
    if not path.is_file():
        known = ", ".join(available(stacks_dir)) or "none"
        raise ConfigError(f"unknown stack '{name}': no {path} (stacks: {known})")
    data = schema.load_yaml(path, "stack")
    if data["name"] != name:
        raise ConfigError(f"{path}: name: '{data['name']}' does not match the file name '{name}'")
    for os_name in data["supports"]:
        family = os_family(os_name)
        for section in ("packages", "repositories"):
            if family not in data[section]:
                raise ConfigError(
                    f"{path}: supports: '{os_name}' is a {family}-family OS but {section} has no {family} entry"
                )
    _check_tools(path, data)
    return Stack(name, path, data)


def _check_tools(path: Path, data: dict) -> None:
    """DCGM needs its packages in every family; NVSwitch hosts need Fabric Manager at exactly the driver's version."""
    for family, pkgs in data["packages"].items():
        if "dcgm" in data and "dcgm" not in pkgs:
            raise ConfigError(f"{path}: dcgm: packages.{family} has no dcgm entry")
        if not data.get("nvswitch"):
            continue
        driver = data["driver"].get("version")
        if not driver:
            raise ConfigError(
                f"{path}: nvswitch: true needs driver.version (Fabric Manager must be exactly the driver's version)"
            )
        if "fabricmanager" not in pkgs:
            raise ConfigError(f"{path}: nvswitch: true but packages.{family} has no fabricmanager entry")
        for p in pkgs["fabricmanager"]:
            if versions.release(p["version"]) != versions.release(driver):
                raise ConfigError(
                    f"{path}: packages.{family}.fabricmanager: {p['name']} {p['version']} is not "
                    f"the driver's version {driver}"
                )


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


def plan(
    hosts, stack: str | None = None, stacks_dir: Path | str | None = None, inventory: Path | str | None = None
) -> list[HostPlan]:
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
        if not os_name and getattr(h, "is_local", False):
            os_name = local_os()
        if not os_name:
            raise ConfigError(
                f"{where}host {h.name}: gpulab_os is not set (the OS release, e.g. 'Ubuntu 22.04'; "
                f"stack '{name}' supports {', '.join(prof.supports)}; only a local host's "
                f"is detected)"
            )
        if not prof.covers(os_name):
            raise ConfigError(
                f"{where}host {h.name}: OS '{os_name}' is not supported by stack '{name}' "
                f"(it supports {', '.join(prof.supports)})"
            )
        plans.append(HostPlan(h.name, prof, os_name))
    return plans
