"""Gathering for `invoke validate`: the burn-in on each host over SSH (lab.hosts.remote: install the
runner, ``python -m runner burnin --level L --json``, read back by lab.validate.burnindoc), then the
vendor tools (lab.validate.vendor), and what each host's stack profile expects (``stacks_for``).
Each burn-in level has a hard time limit (``LEVEL_TIMEOUT_S``); a host that does not finish in it
is reported, never waited for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from lab.core.errors import GpulabError, RunError
from lab.validate import vendor
from lab.validate.burnindoc import read_burnin
from lab.validate.verdict import _host_field

LEVEL_TIMEOUT_S = {"quick": 300, "standard": 3600, "burn-in": 6 * 3600}

def burnin_argv(level: str, remote_dir: str) -> list[str]:
    return ["burnin", "--level", level, "--out", remote_dir, "--json"]


def gather_one(host, level: str, stamp: str, local_dir: Path | None = None, *, connect: Callable | None = None,
               dcgm_level: int = 0) -> dict:
    """Run the burn-in on one host, then DCGM's diagnostic at ``dcgm_level`` (0: none) and read Fabric
    Manager (lab.validate.vendor); return the burn-in document with theirs (raises HostError/RunError)."""
    from lab.hosts import remote as rem

    connect = connect or rem.connect
    with connect(host) as r:
        inst = rem.ensure_runner(r)
        remote_dir = f"{r.expand(host.workdir.rstrip('/'))}/validate/{stamp}"
        res = r.run(inst.argv(*burnin_argv(level, remote_dir)), check=False, timeout=LEVEL_TIMEOUT_S[level])
        if res.code not in (0, 1):
            last = (res.stderr.strip() or res.stdout.strip() or f"exit {res.code}").splitlines()[-1]
            raise RunError(f"{host.name}: runner burnin exited {res.code}: {last}")
        doc = read_burnin(res.stdout, host.name, res.code)
        if local_dir is not None:
            for name in ("burnin.json", "telemetry.csv"):
                try:
                    r.get(f"{remote_dir}/{name}", local_dir / host.name / name)
                except GpulabError:
                    pass
        doc.update(vendor.gather(r, dcgm_level, local_dir / host.name if local_dir is not None else None))
        return doc


def stacks_for(hosts: Iterable[Any], inventory: Path | str | None = None,
               stacks_dir: Path | str | None = None, what: str = "expected") -> dict:
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
        name = _host_field(h, "stack")
        if not name or name in out:
            continue
        try:
            prof = st.load(name, sdir)
        except GpulabError:
            continue
        # a branch-only driver ('550.*') agrees with any version of that branch (lab.core.versions)
        out[name] = getattr(prof, what)()
    return out


