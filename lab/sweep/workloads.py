"""The workload catalogue as the runner publishes it: ``python -m runner list --json`` of this checkout.

The controller checks every workload of a plan against it before a host is
touched (an unknown workload is bad input, exit 2, not a run that fails on
each host). It asks the runner through its command line, the contract between
the two, and never reads the runner's own files.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from lab.core import limits, plaindata
from lab.core.errors import ConfigError, RunError

REPO = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[str, dict]:
    """name -> the runner's entry (``declared``: the settings ``run --set`` may name; ``settings``: per scale)."""
    p = subprocess.run(
        [sys.executable, "-m", "runner", "list", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    try:
        doc = plaindata.loads(p.stdout, limit=limits.JSON_BYTES) if p.returncode == 0 else None
        found = {str(e["name"]): e for e in doc}
    except (TypeError, ValueError, KeyError):
        detail = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()[-1]
        raise RunError(f"`python -m runner list --json` failed: {detail}") from None
    return found


def names() -> tuple[str, ...]:
    """The registered workload names, in catalogue order."""
    return tuple(catalogue())


def scale_settings(workload: str, scale: str) -> dict:
    """The settings of one scale of a registered workload, as the runner's catalogue has them."""
    known([workload], "workload")
    return dict((catalogue()[workload].get("settings") or {}).get(scale) or {})


def declared(workload: str) -> set[str]:
    """The settings ``runner run --set`` may name for ``workload``."""
    known([workload], "workload")
    return set(catalogue()[workload].get("declared") or ())


def known(workloads: list[str], what: str = "--workloads") -> list[str]:
    """``workloads`` when every one is registered; ConfigError naming the first that is not."""
    known = names()
    for w in workloads:
        if w not in known:
            raise ConfigError(f"{what}: unknown workload {w!r} (known: {', '.join(known)})")
    return workloads
