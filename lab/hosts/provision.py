"""Provisioning and audit: bring hosts to their stack profile, and compare them with it.

``provision`` checks every host's profile and OS first (lab.hosts.stacks: one
ConfigError line, exit 2, before any host is touched), builds the runner wheel
of this checkout (lab.hosts.runnerdist) for the hosts' runner environment, runs playbooks/provision.yml
through lab.hosts.ansible and prints a per-host summary (what changed, a needed
reboot that was skipped, the versions the host reports) and the artifacts folder.

``audit`` runs playbooks/audit.yml (read-only) and prints the drift per host:
component, expected, found; ``as_json`` prints one JSON document instead.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.core.errors import printable
from lab.hosts import ansible
from lab.hosts import hostkeys
from lab.hosts import reach
from lab.hosts import readback

from lab.hosts import runnerdist
from lab.hosts import stacks

READ_TASK = "Read what is installed"
SLURM_TASK = "Report Slurm's node side"  # playbooks/roles/slurm_node/tasks/audit.yml
REBOOT_TASK = "Record the reboot state"


# ---- provision ---------------------------------------------------------------------


@dataclass
class HostOutcome:
    name: str
    stack: str
    state: str  # ok, changed, failed, unreachable
    changed: int
    reason: str = ""
    reboot: str = ""
    found: dict[str, Any] = field(default_factory=dict)
    drift: list[dict] = field(default_factory=list)


@dataclass
class ProvisionSummary:
    result: ansible.PlaybookResult
    hosts: list[HostOutcome]
    lines: list[str]
    datasets: Any = None  # lab.hosts.datasets.DatasetsResult when --datasets was given

    @property
    def ok(self) -> bool:
        # a host failed here with Ansible's run ok: its answer to READ_TASK could not be read (outcomes)
        failed = any(h.state == "failed" for h in self.hosts)
        return self.result.ok and not failed and (self.datasets is None or self.datasets.ok)

    @property
    def artifacts(self) -> Path:
        return self.result.artifacts


def explain_unreachable(result: ansible.PlaybookResult, hosts) -> None:
    """Give an unreachable host whose reason hides a host key refusal the plain reason."""
    for h in hosts:
        s = result.hosts.get(h.name)
        if not s or not s.unreachable or "host key" in s.reason or h.is_local:
            continue
        reason = hostkeys.probe_host_key(h.name, h.address, h.port, h.user, h.ssh_key, h.known_hosts)
        if reason and s.failures:
            s.failures[0] = ansible.TaskFailure(s.failures[0].task, reason)


def outcomes(
    result: ansible.PlaybookResult, plans: list[stacks.HostPlan], stack_override: str | None
) -> list[HostOutcome]:
    out = []
    for p in plans:
        s = result.hosts.get(p.host) or ansible.HostSummary(p.host)
        state = s.state if (s.ok or s.changed or s.failed or s.unreachable) else "not run"
        reason = s.reason
        try:
            read = readback.mapping(result.result(p.host, READ_TASK), "the read-back")
            found, drift = readback.found_versions(read.get("stack")), readback.drift(read.get("drift"))
        except readback.Malformed as exc:  # a host answered, but not as the facts module does: nothing of it is trusted
            found, drift = {}, []
            state, reason = "failed", f"{READ_TASK}: the host's answer cannot be read: {exc}"
        out.append(
            HostOutcome(
                name=p.host,
                stack=stack_override or p.stack.name,
                state=state,
                changed=s.changed,
                reason=reason,
                reboot=readback.fact(result.result(p.host, REBOOT_TASK), "reboot_state"),
                found=found,
                drift=drift + readback.slurm_drift(result.result(p.host, SLURM_TASK)),
            )
        )
    return out


def summary_lines(result: ansible.PlaybookResult, hosts: list[HostOutcome]) -> list[str]:
    lines = [
        f"provision{' (check mode: nothing changed)' if result.check else ''}: "
        f"{sum(h.state in ('ok', 'changed') for h in hosts)}/{len(hosts)} host(s) ok"
    ]
    for h in hosts:
        s = result.hosts.get(h.name)
        counts = f"ok={s.ok} changed={s.changed} failed={s.failed} unreachable={s.unreachable}" if s else ""
        lines.append(f"  {h.name:<16} {h.state:<11} stack {h.stack}  {counts}")
        if h.reason:
            lines.append(f"    reason: {h.reason}")
        if h.found:
            versions = ", ".join(f"{k} {v}" for k, v in h.found.items() if v is not None)
            lines.append(f"    installed: {versions}")
        if h.reboot.startswith("needed"):
            lines.append(f"    reboot: {h.reboot}")
        for d in h.drift:
            lines.append(f"    drift: {d['component']}: expected {d['expected']}, found {d['found']}")
    lines.append(f"  artifacts: {result.artifacts or 'none (no host could be reached; nothing written)'}")
    return [printable(line) for line in lines]  # what a host reported never reaches the terminal raw


def provision(
    hosts,
    *,
    inventory,
    stack: str | None = None,
    check: bool = False,
    diff: bool = False,
    datasets: str | None = None,
    datasets_catalogue: str | Path | None = None,
    artifacts: str | Path | None = "artifacts",
    extravars: dict | None = None,
    out: Callable[[str], None] = print,
    on_event: Callable[[dict], None] | None = None,
    stacks_dir: str | Path | None = None,
) -> ProvisionSummary:
    """Provision ``hosts`` (lab.hosts.inventory.Host) of ``inventory``; every input is checked first."""
    plans = stacks.plan(hosts, stack, stacks_dir=stacks_dir, inventory=inventory)
    data_plan = None
    if datasets:  # names, catalogue and sources are checked before any host is touched
        from lab.hosts import datasets as ds

        data_plan = ds.plan(hosts, datasets, inventory=inventory, catalogue=datasets_catalogue)
    artifacts = Path(artifacts or "artifacts")
    up, down = reach.split(hosts, inventory)  # an unreachable host fails; nothing is built or written for it
    if not up:
        return _none_reached("provision.yml", down, plans, stack, check, out)
    wheel = runnerdist.build_wheel(artifacts / "wheels")
    extra = {
        "gpulab_runner_wheel": str(wheel),
        "gpulab_runner_version": runnerdist.wheel_version(wheel),
        "gpulab_runner_wheel_id": wheel.parent.name,
        "stack_profile_dir": str(Path(stacks_dir or stacks.STACKS_DIR).resolve()),
    }
    if stack:
        extra["gpulab_stack"] = stack
    if any(h.vars.get("gpulab_slurm") is True for h in up):  # Slurm nodes: the health check's bundle
        extra["slurm_node_health_bundle"] = str(runnerdist.health_bundle(artifacts / "health"))
    extra.update(extravars or {})
    out(
        f"provision: {len(hosts)} host(s): " + ", ".join(f"{p.host} -> {stack or p.stack.name} ({p.os})" for p in plans)
    )
    result = ansible.run_playbook(
        "provision.yml",
        inventory,
        [h.name for h in up],
        extravars=extra,
        check=check,
        diff=diff,
        artifacts_root=artifacts,
        on_event=on_event,
        known_hosts={h.name: h.known_hosts for h in up},
    )
    explain_unreachable(result, up)
    reach.merged(result, down)
    hosts_out = outcomes(result, plans, stack)
    lines = summary_lines(result, hosts_out)
    for line in lines:
        out(line)
    data_result = None
    if data_plan is not None and result.ok:
        out(f"datasets: {', '.join(data_plan.names)}")
        data_result = ds.prepare(
            hosts, datasets, inventory=inventory, check=check, artifacts=artifacts, on_event=on_event, planned=data_plan
        )
        for line in data_result.lines:
            out("  " + line)
        lines += data_result.lines
    return ProvisionSummary(result, hosts_out, lines, data_result)


def _none_reached(playbook: str, down: dict, plans, stack: str | None, check: bool, out) -> "ProvisionSummary":
    result = reach.none_reached(playbook, down, check)
    hosts_out = outcomes(result, plans, stack)
    lines = summary_lines(result, hosts_out)
    for line in lines:
        out(line)
    return ProvisionSummary(result, hosts_out, lines)


# ---- audit -------------------------------------------------------------------------


@dataclass
class AuditReport:
    result: ansible.PlaybookResult
    hosts: list[HostOutcome]

    @property
    def ok(self) -> bool:
        return all(h.state in ("ok", "changed") and not h.drift for h in self.hosts)

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "artifacts": str(self.result.artifacts) if self.result.artifacts else None,
            "hosts": {
                h.name: {
                    "stack": h.stack,
                    "state": h.state,
                    "error": h.reason or None,
                    "drift": h.drift,
                    "installed": h.found,
                }
                for h in self.hosts
            },
        }

    def lines(self) -> list[str]:
        rows = []
        for h in self.hosts:
            if h.state not in ("ok", "changed"):
                rows.append(f"{h.name:<16} {h.stack:<12} NOT AUDITED ({h.state}): {h.reason}")
            elif not h.drift:
                rows.append(f"{h.name:<16} {h.stack:<12} no drift")
            for d in h.drift:
                rows.append(
                    f"{h.name:<16} {h.stack:<12} {d['component']:<11} expected {d['expected']:<14} found {d['found']}"
                )
        drifted = sum(1 for h in self.hosts if h.drift)
        unreached = sum(1 for h in self.hosts if h.state not in ("ok", "changed"))
        rows.append(
            f"audit: {len(self.hosts)} host(s), {drifted} with drift, {unreached} not audited; "
            f"artifacts: {self.result.artifacts or 'none (no host could be reached)'}"
        )
        return [printable(row) for row in rows]  # what a host reported never reaches the terminal raw


def _progress_to_stderr(line: dict) -> None:
    """One progress line of ``invoke audit --json`` on stderr."""
    print(f"  [{line['host']}] {line['status']:<11} {line['task']}", file=sys.stderr, flush=True)


def audit(
    hosts,
    *,
    inventory,
    as_json: bool = False,
    artifacts: str | Path | None = "artifacts",
    out: Callable[[str], None] = print,
    stacks_dir: str | Path | None = None,
) -> AuditReport:
    """Compare ``hosts`` with their profiles; prints the drift (or JSON with ``as_json``)."""
    plans = stacks.plan(hosts, None, stacks_dir=stacks_dir, inventory=inventory)
    progress = _progress_to_stderr if as_json else None  # stdout is the JSON document: progress goes to stderr
    up, down = reach.split(hosts, inventory)
    if up:
        result = ansible.run_playbook(
            "audit.yml",
            inventory,
            [h.name for h in up],
            extravars={"stack_profile_dir": str(Path(stacks_dir or stacks.STACKS_DIR).resolve())},
            artifacts_root=Path(artifacts or "artifacts"),
            on_event=progress,
            known_hosts={h.name: h.known_hosts for h in up},
        )
        explain_unreachable(result, up)
        reach.merged(result, down)
    else:
        result = reach.none_reached("audit.yml", down)
    report = AuditReport(result, outcomes(result, plans, None))
    if as_json:
        out(json.dumps(report.as_dict(), indent=2, sort_keys=True))
    else:
        for line in report.lines():
            out(line)
    return report
