"""NVIDIA's own tools in `invoke validate`: what lab.validate.dcgm (the diagnostic) and
lab.validate.fabric (Fabric Manager) gather on a host, after the burn-in and over the
same connection, and their records merged into the host's and its GPUs' checks.

``gather`` adds ``"dcgm"`` and ``"fabricmanager"`` to the host's burn-in document and
keeps DCGM's own output beside the fetched burn-in (``dcgm-diag.json``, or
``dcgm-diag.txt`` when dcgmi printed no document): the file NVIDIA support asks for.
``checks`` (pure) judges them with the host's stack profile (lab.hosts.stacks
``Stack.tools()``: DCGM's version and whether it is required, NVSwitches, the driver).
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.core import writes
from lab.core.errors import GpulabError
from lab.validate import dcgm, fabric
from lab.validate.verdict import worst


def gather(remote, dcgm_level: int, local_dir: Path | None = None, dcgm_timeout: float | None = None) -> dict:
    """{'fabricmanager': ..., 'dcgm': ...} of one host ('dcgm' None with level 0: not asked for). Both keys
    are always set, so that nothing of the same name in the host's own burn-in document is judged."""
    out = {"fabricmanager": fabric.gather(remote), "dcgm": None}
    if dcgm_level:
        found = dcgm.gather(remote, dcgm_level, dcgm_timeout)
        out["dcgm"] = found
        if local_dir is not None and found.get("stdout"):
            _save(local_dir, found)
    return out


def _save(local_dir: Path, found: dict) -> None:
    """DCGM's document (or dcgmi's text) beside the fetched burn-in; links are refused (lab.core.writes)."""
    try:
        text, name = json.dumps(dcgm.document(found["stdout"]), indent=2) + "\n", "dcgm-diag.json"
    except ValueError:
        text, name = found["stdout"], "dcgm-diag.txt"
    try:
        writes.folder(local_dir, "--out")
        writes.write_text(local_dir / name, text, "--out")
    except GpulabError as exc:  # the verdict stands without the copy; say why it is missing
        found["save_error"] = getattr(exc, "message", None) or str(exc)


def checks(snapshot: dict, probe: dict | None, expect: dict | None, gpus: dict) -> list[dict]:
    """The host's records of DCGM and Fabric Manager; DCGM's GPU results go into ``gpus`` (index -> GPU record)."""
    expect = expect or {}
    host, per_gpu = dcgm.checks(snapshot.get("dcgm"), list(gpus), expect.get("dcgm"))
    for g in (probe or {}).get("gpus") or []:  # each GPU's fabric registration (NVSwitch hosts)
        idx = str(g.get("index"))
        if idx in gpus and "error" not in g:
            per_gpu.setdefault(idx, []).extend(fabric.gpu_checks(g, bool(expect.get("nvswitch"))))
    for idx, recs in per_gpu.items():
        gpus[idx]["checks"] = gpus[idx]["checks"] + recs
        gpus[idx]["verdict"] = worst(c["verdict"] for c in gpus[idx]["checks"])
    driver = ((probe or {}).get("stack") or {}).get("driver") or expect.get("driver")
    return host + fabric.checks(snapshot.get("fabricmanager"), bool(expect.get("nvswitch")), driver)
