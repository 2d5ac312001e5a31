"""What a host answers about its installed stack, read as the input it is.

The stack facts module (playbooks/library/gpulab_stack_facts.py) runs on the host and sends back ``stack``
(versions of the driver, CUDA, cuDNN, NCCL, frameworks, tools) and ``drift`` (component, expected, found).
A host with a broken Python or a changed module can send any JSON: every field is checked for the shape that
module writes, and anything else is ``Malformed`` naming the field (``stack.driver is a text, not a
mapping``), so that lab.hosts.provision fails that host with one reason instead of a traceback.
"""

from __future__ import annotations

from typing import Any


class Malformed(ValueError):
    """A host's read-back that is not what the stack facts module writes; the message names the field."""


_MAX_ENTRIES = 64  # frameworks, tools or drift entries a host may report; more is not a read-back of ours


def _kind(value) -> str:
    if isinstance(value, bool):
        return "true/false"
    return {dict: "a mapping", list: "a list", str: "a text"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else "not JSON"
    )


def mapping(value, where: str) -> dict:
    """``value`` where a mapping (or nothing) goes; Malformed otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{where} is {_kind(value)}, not a mapping")
    if len(value) > _MAX_ENTRIES:
        raise Malformed(f"{where} has {len(value)} entries (at most {_MAX_ENTRIES})")
    return value


def entries(value, where: str) -> list:
    """``value`` where a list (or nothing) goes; Malformed otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where} is {_kind(value)}, not a list")
    if len(value) > _MAX_ENTRIES:
        raise Malformed(f"{where} has {len(value)} entries (at most {_MAX_ENTRIES})")
    return value


def _version(value, where: str) -> str | None:
    """A reported version or state as text of at most 120 characters; a list or mapping is Malformed."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise Malformed(f"{where} is {_kind(value)}, not a version")
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "..."


def found_versions(stack: dict | None) -> dict[str, Any]:
    """The versions a host reported (the stack facts module's ``stack``), flat; Malformed naming the field
    where the host sent something else (a host's answer is input like any other)."""
    stack = mapping(stack, "stack")
    if not stack:
        return {}

    def part(name: str, key: str):
        return _version(mapping(stack.get(name), f"stack.{name}").get(key), f"stack.{name}.{key}")

    cudnn = entries(mapping(stack.get("cudnn"), "stack.cudnn").get("versions"), "stack.cudnn.versions")
    out = {
        "driver": part("driver", "version"),
        "cuda": part("cuda", "default"),
        "cudnn": ", ".join(_version(v, "stack.cudnn.versions") or "none" for v in cudnn) or None,
        "nccl": part("nccl", "version"),
    }
    for k, v in mapping(stack.get("python"), "stack.python").items():
        if k != "env":
            out[_version(k, "stack.python")] = _version(v, f"stack.python.{k}")
    gpus = entries(stack.get("gpus"), "stack.gpus")
    out["gpus"] = None if stack.get("gpus") is None else len(gpus)
    out.update(
        dcgm=part("dcgm", "version"),
        fabricmanager=part("fabricmanager", "version"),
        fabricmanager_service=part("fabricmanager", "service"),
    )
    for name, tool in sorted(mapping(stack.get("tools"), "stack.tools").items()):  # nccl-tests, nvbandwidth
        tool = mapping(tool, f"stack.tools.{name}")
        version = _version(tool.get("version"), f"stack.tools.{name}.version")
        problem = _version(tool.get("problem"), f"stack.tools.{name}.problem")
        out[_version(name, "stack.tools")] = f"{version} ({problem})" if problem else version
    return out


def drift(value, where: str = "drift") -> list[dict]:
    """The facts module's drift entries (component, expected, found), each checked; Malformed otherwise."""
    out = []
    for i, d in enumerate(entries(value, where)):
        d = mapping(d, f"{where}[{i}]")
        if missing := [k for k in ("component", "expected", "found") if d.get(k) is None]:
            raise Malformed(f"{where}[{i}] has no {missing[0]}")
        out.append({k: _version(d[k], f"{where}[{i}].{k}") for k in ("component", "expected", "found")})
    return out


def fact(res, key: str) -> str:
    """A text fact ``key`` of a task's result ``res``; '' where there is none or it is not a short text."""
    facts = res.get("ansible_facts") if isinstance(res, dict) else None
    value = facts.get(key) if isinstance(facts, dict) else None
    return value[:200] if isinstance(value, str) else ""


def slurm_drift(res: dict | None) -> list[dict]:
    """The slurm_node role's audit entries (what it would install and is missing), each checked as data."""
    facts = res.get("ansible_facts") if isinstance(res, dict) else None
    got = facts.get("slurm_node_drift") if isinstance(facts, dict) else None
    return [
        {k: str(d[k])[:200] for k in ("component", "expected", "found")}
        for d in (got if isinstance(got, list) else [])
        if isinstance(d, dict) and all(k in d for k in ("component", "expected", "found"))
    ][:10]
