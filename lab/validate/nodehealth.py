"""``python -m lab.validate.nodehealth``: the node side of gpulab's health in Slurm, run by slurmd as
``HealthCheckProgram`` (and, with ``--prolog``, as a prolog).

It runs this node's ``python -m runner health`` (the runner the sweep or the provisioning put here:
``--runner-python``, ``--runner-path``), judges the document with the sweep gate's judge
(lab.validate.health: validate's own checks, the actions of lab/data/actions.yml) and, on FAIL,
drains this node with ``gpulab: <check>: <reason> -> <action>`` (lab.hosts.slurm.drain): a node an
admin drained with a reason of their own is left as it is. It never resumes a node: that takes a
passing ``invoke validate`` and ``invoke quarantine.release`` (README "On a Slurm cluster").

Exit status: 0 when the node passed, or failed and was drained (slurmd ignores a health program's
status); ``--prolog``: 1 on FAIL, so that Slurm requeues the job that was about to start. One line on
stdout says what was found and done; a document the judge cannot read is a FAIL of its own, and a node
whose GPUs Slurm's listing does not say (no record of it, a Gres count that is no number) is not judged:
one line, never a PASS.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys

from lab.core import plaindata
from lab.core.errors import ConfigError, GpulabError, excerpt, printable
from lab.hosts import capped, slurm
from lab.validate import health

TIMEOUT_S = 120
OUTPUT_CHARS = 4 << 20  # the health document is a few kB


def gather(python: str, path: str | None) -> dict:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path
    try:  # each stream read up to limits.OUTPUT_BYTES: a runner printing without end is stopped (lab.hosts.capped)
        res = capped.run([python, "-m", "runner", "health"], timeout=TIMEOUT_S, env=env)
    except capped.TooMuch as exc:
        return {"_error": f"runner health printed more than {capped.size(exc.limit)} on {exc.stream} and was stopped"}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"_error": f"runner health did not run: {type(exc).__name__}: {exc}"[:300]}
    # what the node printed is hostile: bytes that are not UTF-8, nesting, NaN, a lone surrogate are its error
    stdout, stderr = (b.decode(errors="replace") for b in (res.stdout, res.stderr))
    if res.returncode != 0:
        return {"_error": f"runner health exited {res.returncode}: {(stderr.strip().splitlines() or [''])[-1]}"[:300]}
    try:
        return plaindata.loads(stdout, finite=True, limit=OUTPUT_CHARS)
    except ValueError as exc:
        return {"_error": f"runner health printed no usable JSON document ({exc})"[:300]}


MIG = re.compile(r"(?:^|_)[0-9]+g\.[0-9]+gb$")  # a MIG instance's Gres type (1g.10gb, nvidia_a100_3g.20gb)


def gres_gpus(node: slurm.Node | None, whole: bool = False) -> int:
    """GPUs Slurm schedules on this node (its Gres ``gpu:N`` or ``gpu:type:N``; ``whole``: not counting MIG
    instances, several to one GPU); ConfigError for a gpu entry whose count is no number: the GPUs expected
    decide whether NVML must answer, never guessed."""
    total = 0
    for item in (node.gres if node else "").split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) < 2 or not re.fullmatch(r"[0-9]{1,4}", parts[-1]):
            raise ConfigError(f"slurm: node {node.name}: Gres {excerpt(repr(item), 60)} holds no GPU count")
        total += 0 if whole and len(parts) == 3 and MIG.search(parts[1]) else int(parts[-1])
    return total


def verdict(doc: dict, expect_gpus: bool, gpus: int = 0) -> tuple[str, str, str | None] | None:
    """None when the node passes; else (check, reason, action) of its first failure. ``gpus``: the GPUs Slurm
    hands out on the node (its Gres), each of which NVML must list (indices 0 to gpus - 1)."""
    if isinstance(doc, dict) and "_error" in doc:
        return "health", doc["_error"], None
    bad = health.check_document(doc)
    if bad:
        return "health", f"runner health: {bad}", None
    judged = health.judge(doc, expect_gpus=expect_gpus or gpus > 0, used=range(gpus))
    if judged.ok:
        return None
    first = judged.failures[0]
    check, _, why = first.reason.partition(": ")
    where = "" if first.gpu is None or why.startswith(f"GPU {first.gpu} ") else f"GPU {first.gpu} "
    more = f" (+{len(judged.failures) - 1} more)" if len(judged.failures) > 1 else ""
    return check, f"{where}{why}{more}", first.action


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.validate.nodehealth", description=__doc__.split("\n\n")[0])
    ap.add_argument("--node", help="this node's Slurm name (default: SLURMD_NODENAME, else the host name)")
    ap.add_argument("--runner-python", default=sys.executable, help="the Python that runs `-m runner`")
    ap.add_argument("--runner-path", default=None, help="PYTHONPATH of the runner (its install folder)")
    ap.add_argument("--prolog", action="store_true", help="exit 1 on FAIL (Slurm requeues the job)")
    args = ap.parse_args(argv)
    name = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    shown = excerpt(printable(name), 64)  # the one line names it, whatever the name is (check_node says)
    try:
        slurm.check_node(name)
        node = slurm.nodes().get(name)
        if node is None:  # its Gres says whether NVML must answer: a GPU node is never judged a CPU host
            raise ConfigError(f"slurm: no node {name} in this cluster (scontrol show node)")
        doc = gather(args.runner_python, args.runner_path)
        failed = verdict(doc, expect_gpus=gres_gpus(node) > 0, gpus=gres_gpus(node, whole=True))
        if failed is None:
            print(f"gpulab health {shown}: PASS")
            return 0
        reason = slurm.reason_line(*failed)
        done = slurm.drain(name, reason)
    except GpulabError as exc:
        print(f"gpulab health {shown}: {exc.message}")
        return 1 if args.prolog else 0
    print(f"gpulab health {shown}: FAIL: {reason}: {done}")
    return 1 if args.prolog else 0


if __name__ == "__main__":
    raise SystemExit(main())
