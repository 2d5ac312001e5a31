"""Filters of gpulab's playbooks."""

from __future__ import annotations

import re


def gpulab_mirror_url(url, mirror):
    """Replace scheme and host of ``url`` by ``mirror`` (unchanged when no mirror is set)."""
    if not url or not mirror:
        return url
    return re.sub(r"^[a-z][a-z0-9+.-]*://[^/]+", str(mirror).rstrip("/"), str(url))


class FilterModule:
    def filters(self):
        return {"gpulab_mirror_url": gpulab_mirror_url}
