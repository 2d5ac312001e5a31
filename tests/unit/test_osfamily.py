"""One OS-family rule (lab/hosts/osfamily.py) on both sides: for every OS a stack profile supports, the
stack_profile role's own expressions, rendered with the playbooks' filter plugin, give the family and
NVIDIA repository name that lab.hosts.stacks gives; an unknown OS is refused on both sides."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jinja2
import pytest
import yaml

from lab.hosts import osfamily
from lab.hosts import stacks
from lab.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def playbook_filters() -> dict:
    spec = importlib.util.spec_from_file_location("gpulab_filters", REPO / "playbooks/filter_plugins/gpulab.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def role_rule(os_name: str) -> tuple[str, str]:
    """(family, repository name) as the stack_profile role derives them for ``gpulab_os``."""
    tasks = yaml.safe_load((REPO / "playbooks/roles/stack_profile/tasks/main.yml").read_text())
    derive = next(t for t in tasks if t["name"].startswith("Derive the OS family"))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update(playbook_filters())
    values = {"stack_profile_os": os_name}
    return tuple(env.from_string(derive["vars"][k]).render(values).strip() for k in ("_family", "_dist"))


SUPPORTED = sorted({os_name for name in stacks.available() for os_name in stacks.load(name).supports})


def test_every_supported_os_is_covered():
    assert len(SUPPORTED) >= 10 and {"Ubuntu 18.04", "Debian 12", "Rocky 9", "CentOS 7"} <= set(SUPPORTED)


@pytest.mark.parametrize("os_name", SUPPORTED)
def test_the_playbooks_and_the_controller_agree(os_name):
    assert role_rule(os_name) == (stacks.os_family(os_name), osfamily.repo_dist(os_name))


def test_an_unknown_os_is_refused_on_both_sides():
    with pytest.raises(ConfigError, match="unknown OS 'Gentoo 2'"):
        stacks.os_family("Gentoo 2")
    with pytest.raises(ValueError, match="unknown OS 'Gentoo 2'"):
        role_rule("Gentoo 2")
