"""GPU snapshots for the validation tests.

fixtures/h200-x8-standard.handmade.json is HAND-MADE from published H200
facts (see its "_fixture" field), not recorded. When a recording of
`python -m runner burnin --level standard --json` on an H200 host is
committed as fixtures/h200-*.recorded.json, the tests use it instead: they
derive every variant from the healthy snapshot and use only what any H200
burn-in document has (so a 1-GPU recording works as well as an 8-GPU one).
"""

from __future__ import annotations

from pathlib import Path

from lab.validate import fleet

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def healthy_path() -> Path:
    recorded = sorted(FIXTURES.glob("h200-*.recorded.json"))
    return recorded[0] if recorded else FIXTURES / "h200-x8-standard.handmade.json"


def inventory_for(doc: dict, name: str = "h200-01", **over) -> dict:
    probe = doc.get("probe", doc)
    host = {
        "name": name,
        "gpu_model": "H200",
        "gpu_count": probe["gpu_count"],
        "pcie": {"gen": 5, "width": 16},
        "stack": "current",
    }
    host.update(over)
    return host


def stack_of(doc: dict) -> dict:
    """The expected versions that agree with the snapshot (what provisioning would have put there)."""
    probe = doc.get("probe", doc)
    s = probe["stack"]
    want = {
        "driver": s["driver"],
        "cuda": s["cuda_toolkit"],
        "cudnn": fleet.installed_version(s, "cudnn"),
        "nccl": fleet.installed_version(s, "nccl"),
    }
    if probe["frameworks"].get("torch"):
        want["torch"] = probe["frameworks"]["torch"].split("+")[0]
    return {"current": {k: v for k, v in want.items() if v}}


def run(docs: dict, refs: dict, hosts=None, stacks=None):
    first = next(d for d in docs.values() if isinstance(d, dict))
    hosts = hosts if hosts is not None else [inventory_for(first, n) for n in docs]
    return fleet.evaluate(docs, hosts, refs, stacks if stacks is not None else stack_of(first))


def checks_of(verdicts, host="h200-01", gpu=None) -> dict:
    h = verdicts.hosts[host]
    src = h["checks"] if gpu is None else h["gpus"][str(gpu)]["checks"]
    return {c["check"]: c for c in src}


# WARNs a healthy recording may carry because of where it was recorded (a
# virtualised GPU host whose NVML does not report the PCIe link): (check name,
# start of the reason). A kernel log that cannot be read is no such WARN: its
# XIDs were not checked, the host's "kernel log" check FAILs.
ENVIRONMENT_WARNS = (("PCIe link", "PCIe link not readable"),)


def findings(host: dict) -> list[str]:
    """The host's non-PASS checks, less the WARNs the recording environment explains."""
    out = []
    checks = [(None, c) for c in host["checks"]] + [(i, c) for i, g in host["gpus"].items() for c in g["checks"]]
    for gpu, c in checks:
        if c["verdict"] == "PASS":
            continue
        if c["verdict"] == "WARN" and any(c["check"] == n and c["reason"].startswith(r) for n, r in ENVIRONMENT_WARNS):
            continue
        out.append(f"{'GPU ' + gpu + ' ' if gpu is not None else ''}{c['check']}: {c['verdict']}: {c['reason']}")
    return out
