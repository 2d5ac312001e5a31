#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module of gpulab: read the GPU software stack a host REALLY has.

Nothing here is taken from the stack profile: versions come from the package
database (dpkg-query / rpm), nvidia-smi (or the loaded kernel module, or the
installed NVML library when no driver is loaded), CUDA's version.json /
version.txt behind /usr/local/cuda, the cuDNN and NCCL headers, and the Python
environment's own imports; DCGM from `dcgmi --version`, Fabric Manager from
`nv-fabricmanager --version` and its service's state (systemd's, or whether its
process runs where there is no systemd), each else from its package; the standard bandwidth tools
(nccl-tests, nvbandwidth) from the version markers the bwtools role writes beside them, each binary's
SHA256 checked against its marker. Given ``expected`` versions and the inventory's GPU
model and count, it also returns the drift: [{component, expected, found}],
judged by gpulab's one version rule (lab/core/versions.py, shipped to the host as
module_utils). Where the headers, libraries and version files are and how a
version is read from each are the runner probe's rules (runner/stackread.py,
shipped as module_utils too). Where the system has no cuDNN, NCCL or CUDA toolkit of its own,
the Python environment's NVIDIA wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13...,
and the CUDA release PyTorch was built with) stand for them, as they do for a
PyTorch installed from PyPI. Read-only: it supports check mode and changes nothing.
"""

DOCUMENTATION = r"""
---
module: gpulab_stack_facts
short_description: Read the installed GPU software stack and compare it with expected versions
description:
  - Reads driver, CUDA, cuDNN, NCCL and Python framework versions from the host itself
    (package database, nvidia-smi, version files, headers, imports) and the GPUs nvidia-smi lists.
  - Returns them as C(stack) and the differences from O(expected) as C(drift). Changes nothing.
options:
  expected:
    description: Component name to expected version (driver, cuda, cudnn, nccl, dcgm, fabricmanager, nccl-tests,
      nvbandwidth, frameworks, runner). A driver version V(550.*) matches any version of that branch. V(fabricmanager_service) names the
      state the nvidia-fabricmanager service must be in (V(active)).
    type: dict
    default: {}
  python_env:
    description: Python environment whose frameworks are read (its bin/python imports them).
    type: path
  python:
    description: Interpreter whose frameworks are read; when given, it replaces O(python_env)/bin/python.
    type: path
  frameworks:
    description: Python modules to import in O(python_env) (torch, tensorflow, runner...).
    type: list
    elements: str
    default: []
  gpu_model:
    description: GPU model the inventory names (V(auto) skips the check).
    type: str
    default: auto
  gpu_count:
    description: GPU count the inventory names (V(auto) skips the check).
    type: str
    default: auto
  tools_dir:
    description: Folder of the built tools' version markers (V(<tool>.json), written by the bwtools role).
    type: path
    default: /opt/gpulab/tools
  stack:
    description: Name of the stack profile, recorded in the result.
    type: str
    default: ""
author: gpulab
"""

RETURN = r"""
stack:
  description: What the host reports (versions, GPUs, packages).
  type: dict
  returned: always
drift:
  description: List of {component, expected, found} where the host differs.
  type: list
  returned: always
"""

import glob
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import gpulab_stackread as stackread
from ansible.module_utils import gpulab_tools
from ansible.module_utils.gpulab_versions import agrees

PACKAGE_PATTERNS = re.compile(
    r"^(nvidia-driver|nvidia-utils|libnvidia-compute|cuda-drivers|cuda-toolkit|cuda-[0-9]|"
    r"libcudnn|libnccl|kmod-nvidia|datacenter-gpu-manager|nvidia-fabric-?manager)"
)
DCGM_PACKAGE = re.compile(r"^datacenter-gpu-manager(-[0-9]+-core)?$")
FM_PACKAGE = re.compile(r"^nvidia-fabric-?manager(-[0-9]{3})?$")
FM_SERVICE = "nvidia-fabricmanager"
FM_COMM = "nv-fabricmanager"[:15]  # the kernel keeps 15 characters of a process name
PACKAGE_VERSION = re.compile(r"^(?:[0-9]+:)?([0-9]+(?:\.[0-9]+)+)")


def packages(module):
    """Installed GPU stack packages: {name: version}."""
    out = {}
    if module.get_bin_path("dpkg-query"):
        rc, stdout, _ = module.run_command(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"])
        for line in stdout.splitlines() if rc == 0 else []:
            parts = line.split("\t")
            if len(parts) == 3 and parts[2].startswith("ii") and PACKAGE_PATTERNS.match(parts[0]):
                out[parts[0]] = parts[1]
    elif module.get_bin_path("rpm"):
        rc, stdout, _ = module.run_command(["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"])
        for line in stdout.splitlines() if rc == 0 else []:
            parts = line.split("\t")
            if len(parts) == 2 and PACKAGE_PATTERNS.match(parts[0]):
                out[parts[0]] = parts[1]
    return out


def upstream(version):
    m = PACKAGE_VERSION.match(version or "")
    return m.group(1) if m else version


def driver_facts(module, root="/"):
    """Driver version and GPUs: nvidia-smi, else the loaded module, else the installed NVML library."""
    facts = {"version": None, "source": None, "loaded": False, "gpus": None, "error": None}
    smi = module.get_bin_path("nvidia-smi")
    if smi:
        rc, out, err = module.run_command([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"])
        if rc == 0:
            gpus = []
            for line in out.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 3:
                    gpus.append({"index": int(parts[0]), "name": parts[1]})
                    facts["version"] = parts[2]
            facts.update(gpus=gpus, loaded=True, source="nvidia-smi")
        elif rc == 6:  # "No devices were found": driver loaded, no GPU
            facts.update(gpus=[], loaded=True)
        else:
            facts["error"] = " ".join((out or err or "nvidia-smi exit %d" % rc).split())[:300]
    else:
        facts["error"] = "nvidia-smi not found"
    if facts["version"] is None:
        text = stackread.read(os.path.join(root, "sys/module/nvidia/version"))
        if text and text.strip():
            facts.update(version=text.strip(), source="/sys/module/nvidia/version", loaded=True)
    if facts["version"] is None:
        found = [v for _, v in stackread.libraries(root, "libnvidia-ml")]
        if found:
            facts.update(version=sorted(found)[-1], source="installed libnvidia-ml (driver not loaded)")
    return facts


def cuda_facts(root="/"):
    home = os.path.join(root, stackread.CUDA_HOME)
    versions = {}
    for path in sorted(glob.glob(home + "-*")):
        v = stackread.cuda_version(path)[0]
        if v:
            versions[os.path.basename(path)] = v
    exists = os.path.exists(home)
    return {
        "default": stackread.cuda_version(os.path.realpath(home))[0] if exists else None,
        "default_path": os.path.realpath(home) if exists else None,
        "installed": versions,
    }


def cudnn_facts(pkgs, root="/"):
    headers = dict(
        (os.path.realpath(path), v)
        for path, v in stackread.headers(root, stackread.CUDNN_HEADERS, stackread.CUDNN_DEFINES)
    )
    from_pkgs = sorted({upstream(v) for n, v in pkgs.items() if re.match(r"^libcudnn[0-9]+(-cuda-[0-9]+)?$", n)})
    versions = list(from_pkgs)
    for v in sorted(set(headers.values())):  # tar installs: header only
        if not any(p == v or p.startswith(v + ".") for p in versions):
            versions.append(v)
    return {"versions": versions, "headers": headers}


def nccl_facts(pkgs, root="/"):
    for path, v in stackread.headers(root, stackread.NCCL_HEADERS, stackread.NCCL_DEFINES):
        return {"version": v, "header": path}
    from_pkgs = sorted({upstream(v) for n, v in pkgs.items() if n in ("libnccl2", "libnccl")})
    return {"version": from_pkgs[-1] if from_pkgs else None, "header": None}


def tool_version(module, argv, pattern):
    """The version a tool prints (`dcgmi --version`, `nv-fabricmanager --version`), or None."""
    path = module.get_bin_path(argv[0])
    if not path:
        return None
    rc, out, err = module.run_command([path] + argv[1:])
    m = re.search(pattern, (out or "") + (err or "")) if rc == 0 else None
    return m.group(1) if m else None


def dcgm_facts(module, pkgs):
    """DCGM: the version dcgmi prints, else its package's."""
    from_pkg = sorted(upstream(v) for n, v in pkgs.items() if DCGM_PACKAGE.match(n))
    found = tool_version(module, ["dcgmi", "--version"], r"dcgmi\s+version:\s*([0-9][0-9.]*)")
    if found:
        return {"version": found, "source": "dcgmi --version", "packages": from_pkg}
    return {
        "version": from_pkg[-1] if from_pkg else None,
        "source": "package" if from_pkg else None,
        "packages": from_pkg,
    }


def process_running(comm, root="/"):
    """Whether a process of that name runs (the kernel's 15-character name in /proc/<pid>/comm)."""
    for path in glob.glob(os.path.join(root, "proc", "[0-9]*", "comm")):
        text = stackread.read(path)
        if text is not None and text.strip() == comm:
            return True
    return False


def service_state(module, unit, comm, root="/"):
    """(state, how it was read): systemd's word for the unit where systemd runs, else whether its process runs."""
    systemctl = module.get_bin_path("systemctl")
    if systemctl and os.path.isdir(os.path.join(root, "run/systemd/system")):
        _, out, _ = module.run_command([systemctl, "is-active", unit])
        return (out or "").strip() or "unknown", "systemctl is-active %s" % unit
    return ("active" if process_running(comm, root) else "inactive"), "process %s (no systemd)" % comm


def fabric_manager_facts(module, pkgs):
    """Fabric Manager: its version (nv-fabricmanager, else its package) and its service's state."""
    from_pkg = sorted(upstream(v) for n, v in pkgs.items() if FM_PACKAGE.match(n))
    found = tool_version(module, ["nv-fabricmanager", "--version"], r"Fabric Manager version is\s*:\s*([0-9][0-9.]*)")
    version = found or (from_pkg[-1] if from_pkg else None)
    out = {
        "version": version,
        "source": "nv-fabricmanager --version" if found else ("package" if from_pkg else None),
        "packages": from_pkg,
        "service": None,
        "service_source": None,
    }
    if version:
        out["service"], out["service_source"] = service_state(module, FM_SERVICE, FM_COMM)
    return out


PROBE = r"""
import importlib, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
        out[name] = str(getattr(mod, "__version__", "unknown"))
    except Exception as exc:
        out[name] = None
libs = {}
torch = sys.modules.get("torch")
try:
    libs["cuda"] = torch.version.cuda if torch is not None else None
except Exception:
    pass
try:
    from importlib import metadata
except ImportError:
    metadata = None
dists = json.loads(%r)
for comp in ("cudnn", "nccl", "cuda"):
    if libs.get(comp):
        continue
    for dist in dists[comp]:
        try:
            libs[comp] = metadata.version(dist)
            libs[comp + "_dist"] = dist
            break
        except Exception:
            pass
print(json.dumps({"frameworks": out, "libraries": libs}))
""" % json.dumps(stackread.DISTS)


def python_facts(module, env, python, names):
    """({framework: version}, {cuda, cudnn, nccl: version the environment carries}) of one interpreter."""
    if not python and env:
        python = os.path.join(env, "bin", "python")
    if not python or not names:
        return {}, {}
    if not os.path.exists(python):
        return dict((n, None) for n in names), {}
    rc, out, err = module.run_command([python, "-c", PROBE] + list(names), environ_update={"PYTHONNOUSERSITE": "1"})
    if rc != 0:
        return dict((n, None) for n in names), {}
    try:
        doc = json.loads(out.strip().splitlines()[-1])
        return dict(doc["frameworks"]), dict(doc.get("libraries") or {})
    except (ValueError, IndexError, KeyError, TypeError):
        return dict((n, None) for n in names), {}


def from_python_env(stack, libs):
    """Let the Python environment's NVIDIA wheels stand for a cuDNN, NCCL or CUDA the system lacks."""
    if not stack["cudnn"]["versions"] and libs.get("cudnn"):
        stack["cudnn"]["versions"] = [libs["cudnn"]]
        stack["cudnn"]["source"] = "python package %s" % libs.get("cudnn_dist")
    if not stack["nccl"]["version"] and libs.get("nccl"):
        stack["nccl"].update(version=libs["nccl"], source="python package %s" % libs.get("nccl_dist"))
    if not stack["cuda"]["default"] and libs.get("cuda"):
        source = "python package %s" % libs["cuda_dist"] if libs.get("cuda_dist") else "torch.version.cuda"
        stack["cuda"].update(default=libs["cuda"], source=source)


def drift(stack, expected, gpu_model, gpu_count):
    out = []
    checks = {
        "driver": stack["driver"]["version"],
        "cuda": stack["cuda"]["default"],
        "nccl": stack["nccl"]["version"],
        "dcgm": (stack.get("dcgm") or {}).get("version"),
        "fabricmanager": (stack.get("fabricmanager") or {}).get("version"),
    }
    for comp, exp in sorted(expected.items()):
        exp = str(exp)
        if comp == "fabricmanager_service":
            found = (stack.get("fabricmanager") or {}).get("service")
            if found != exp:
                out.append({"component": comp, "expected": exp, "found": found or "not installed"})
            continue
        if comp in gpulab_tools.TOOL_NAMES:
            found = gpulab_tools.found((stack.get("tools") or {}).get(comp))
            if found != exp:
                out.append({"component": comp, "expected": exp, "found": found or "not built"})
            continue
        if comp == "cudnn":
            found = stack["cudnn"]["versions"]
            if not (len(found) == 1 and agrees(found[0], exp)):
                out.append({"component": "cudnn", "expected": exp, "found": ", ".join(found) or "none"})
            continue
        found = checks[comp] if comp in checks else stack["python"].get(comp)
        if not agrees(found, exp):
            out.append({"component": comp, "expected": exp, "found": found or "none"})
    gpus = stack["gpus"]
    if str(gpu_count) != "auto":
        found = "unknown (%s)" % stack["driver"]["error"] if gpus is None else str(len(gpus))
        if found != str(gpu_count):
            out.append({"component": "gpu_count", "expected": str(gpu_count), "found": found})
    if gpu_model != "auto" and gpus:
        wrong = sorted({g["name"] for g in gpus if gpu_model.lower() not in g["name"].lower()})
        if wrong:
            out.append({"component": "gpu_model", "expected": gpu_model, "found": ", ".join(wrong)})
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            expected=dict(type="dict", default={}),
            python_env=dict(type="path"),
            python=dict(type="path"),
            frameworks=dict(type="list", elements="str", default=[]),
            gpu_model=dict(type="str", default="auto"),
            gpu_count=dict(type="str", default="auto"),
            stack=dict(type="str", default=""),
            tools_dir=dict(type="path", default="/opt/gpulab/tools"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    pkgs = packages(module)
    drv = driver_facts(module)
    frameworks, libs = python_facts(module, p["python_env"], p["python"], p["frameworks"])
    stack = {
        "schema": 1,
        "stack": p["stack"],
        "driver": {k: drv[k] for k in ("version", "source", "loaded", "error")},
        "gpus": drv["gpus"],
        "cuda": cuda_facts(),
        "cudnn": cudnn_facts(pkgs),
        "nccl": nccl_facts(pkgs),
        "python": dict(frameworks, env=p["python"] or p["python_env"]),
        "packages": pkgs,
        "dcgm": dcgm_facts(module, pkgs),
        "fabricmanager": fabric_manager_facts(module, pkgs),
        "tools": gpulab_tools.built_tools(p["tools_dir"]),
    }
    from_python_env(stack, libs)
    module.exit_json(changed=False, stack=stack, drift=drift(stack, p["expected"], p["gpu_model"], p["gpu_count"]))


if __name__ == "__main__":
    main()
