"""What the provisioning lab tests share: lab hosts made ready for `invoke provision`.

Lab hosts have no kernel of their own, no systemd and no reboot, so the steps
that need them are switched off by their opt-out variables (real hosts leave
them on). The lab's mirror serves the stand-in NVIDIA packages at NVIDIA's
path layout and stand-in framework wheels; the stand-in nvidia-smi reports the
GPUs of /etc/gpulab-testlab/fake-gpus.json.
"""

from __future__ import annotations

import json

from tests.testlab import wheels

GPUS = [{"name": "Tesla T4", "memory_mib": 15360}, {"name": "Tesla T4", "memory_mib": 15360}]
PROVISION_VARS = {
    "gpulab_gpu_model": "T4",
    "gpulab_gpu_count": 2,
    "gpulab_stack": "current",
    "gpulab_os": "Debian 12",
    "gpulab_mirror": lambda lab: lab.http_url,
    "kernel_prereqs_enabled": False,
    "nouveau_rebuild_initramfs": False,
    "nouveau_unload": False,
    "nvidia_driver_persistence_mode": False,
    "dcgm_service_enabled": False,
    "fabric_manager_service_enabled": False,
    "reboot_allowed": False,
    "nvidia_repo_trusted": True,
    "python_env_system_site_packages": True,
}


def prepare(lab, dists=("debian12",)) -> None:
    """Serve the apt repository under the mirror for these dists, build the wheels, give each host its GPUs."""
    www = lab.state_dir / "www"
    for dist in dists:
        d = www / "compute" / "cuda" / "repos" / dist
        d.mkdir(parents=True)
        (d / "x86_64").symlink_to((www / "apt").resolve())
    wheels.build(lab.wheels_dir)
    lab.refresh_index()
    for name in lab.names:
        lab.exec(
            name, f"mkdir -p /etc/gpulab-testlab && echo '{json.dumps(GPUS)}' > /etc/gpulab-testlab/fake-gpus.json"
        )
