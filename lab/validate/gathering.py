"""Gathering for `invoke validate`: the burn-in on each host over SSH (lab.hosts.remote: install the
runner, ``python -m runner burnin --level L --json``, read back by lab.validate.burnindoc), then the
vendor tools (lab.validate.vendor), and what each host's stack profile expects (``stacks_for``).
Each burn-in level has a hard time limit (``LEVEL_TIMEOUT_S``); a host that does not finish in it
is reported, never waited for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from lab.core import limits as core_limits, settings
from lab.core.errors import GpulabError, RunError
from lab.validate import vendor
from lab.validate.burnindoc import read_burnin
from lab.validate.verdict import host_field

# gpulab.validate.time_limits: every external step's hard limit, in seconds (declared in lab.core.settings)
LEVEL_TIMEOUT_S = settings.default("validate.time_limits.burnin_s")


def time_limits(configured: dict | None = None) -> dict:
    """The hard time limits of validate's external steps: gpulab.validate.time_limits over the declared defaults
    (``burnin_s`` per validate level, ``dcgm_s`` per DCGM run level (int keys), ``tools_s`` for each standard
    tool inside the burn-in, ``burn_minutes``); a bad value is one ConfigError line naming the setting."""
    out = settings.group("validate.time_limits", configured)
    out["dcgm_s"] = {int(k): v for k, v in out["dcgm_s"].items()}
    return out


def burnin_argv(
    level: str, remote_dir: str, tools_s: float | None = None, burn_minutes: float | None = None
) -> list[str]:
    tail = ["--tool-timeout", f"{tools_s:g}"] if tools_s is not None else []
    if burn_minutes is not None and level == "burn-in":
        tail += ["--minutes", f"{burn_minutes:g}"]
    return ["burnin", "--level", level, "--out", remote_dir, "--json", *tail]


def gather_one(
    host,
    level: str,
    stamp: str,
    local_dir: Path | None = None,
    *,
    connect: Callable | None = None,
    dcgm_level: int = 0,
    limits: dict | None = None,
) -> dict:
    """Run the burn-in on one host, then DCGM's diagnostic at ``dcgm_level`` (0: none) and read Fabric
    Manager (lab.validate.vendor); return the burn-in document with theirs (raises HostError/RunError).
    ``limits``: ``time_limits()``; a burn-in that does not end in its limit is killed and reported."""
    from lab.hosts import remote as rem

    limits = limits or time_limits()
    connect = connect or rem.connect
    with connect(host) as r:
        inst = rem.ensure_runner(r)
        remote_dir = f"{r.expand(host.workdir.rstrip('/'))}/validate/{stamp}"
        limit = limits["burnin_s"][level]
        argv = burnin_argv(level, remote_dir, limits["tools_s"], limits.get("burn_minutes"))
        res = r.run(inst.argv(*argv), check=False, timeout=limit)
        if res.code == 124:
            raise RunError(
                f"{host.name}: runner burnin --level {level} did not end within {limit:g} s "
                "(gpulab.validate.time_limits.burnin_s) and was stopped"
            )
        if res.code not in (0, 1):
            last = (res.stderr.strip() or res.stdout.strip() or f"exit {res.code}").splitlines()[-1]
            raise RunError(f"{host.name}: runner burnin exited {res.code}: {last}")
        doc = read_burnin(res.stdout, host.name, res.code)
        if local_dir is not None:
            for name, cap in (("burnin.json", core_limits.JSON_BYTES), ("telemetry.csv", core_limits.TELEMETRY_BYTES)):
                try:  # a copy kept beside validate.json; past its cap (an endless file) it is left out
                    r.get(f"{remote_dir}/{name}", local_dir / host.name / name, cap)
                except GpulabError:
                    pass
        doc.update(
            vendor.gather(
                r,
                dcgm_level,
                local_dir / host.name if local_dir is not None else None,
                dcgm_timeout=limits["dcgm_s"].get(dcgm_level),
            )
        )
        return doc


def stacks_for(
    hosts: Iterable[Any],
    inventory: Path | str | None = None,
    stacks_dir: Path | str | None = None,
    what: str = "expected",
) -> dict:
    """Expected versions per stack name from lab.hosts.stacks profiles; {} when unavailable.
    ``what="tools"``: what each profile expects of DCGM and Fabric Manager instead (``Stack.tools()``).

    The profiles are those of ``stacks_dir`` (gpulab.stacks, as `invoke audit` reads them),
    else beside the inventory (inventory/stacks/) when there are any, else the checkout's.
    """
    try:
        from lab.hosts import stacks as st
    except ImportError:
        return {}
    out = {}
    sdir = Path(stacks_dir) if stacks_dir else (Path(inventory).parent / "stacks" if inventory else None)
    if sdir is None or not sdir.is_dir():
        sdir = None
    for h in hosts:
        name = host_field(h, "stack")
        if not name or name in out:
            continue
        try:
            prof = st.load(name, sdir)
        except GpulabError:
            continue
        # a branch-only driver ('550.*') agrees with any version of that branch (lab.core.versions)
        out[name] = getattr(prof, what)()
    return out
