"""Filters of gpulab's playbooks.

``gpulab_os_family`` and ``gpulab_repo_dist`` are the OS-family rule of
lab/hosts/osfamily.py (its one owner, shared with lab.hosts.stacks), loaded from that file
by its path in this checkout, so that the playbooks need no ``lab`` on the
controller's import path.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path


def _load_osfamily():
    path = Path(__file__).resolve().parents[2] / "lab" / "hosts" / "osfamily.py"
    spec = importlib.util.spec_from_file_location("gpulab_osfamily", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_osfamily = _load_osfamily()


def gpulab_mirror_url(url, mirror):
    """Replace scheme and host of ``url`` by ``mirror`` (unchanged when no mirror is set)."""
    if not url or not mirror:
        return url
    return re.sub(r"^[a-z][a-z0-9+.-]*://[^/]+", str(mirror).rstrip("/"), str(url))


class FilterModule:
    def filters(self):
        return {
            "gpulab_mirror_url": gpulab_mirror_url,
            "gpulab_os_family": _osfamily.family,
            "gpulab_repo_dist": _osfamily.repo_dist,
        }
