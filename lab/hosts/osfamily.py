"""The OS-family rule: the family (Debian, RedHat) of an OS as gpulab_os names it ('Ubuntu 22.04',
'Rocky 9'), and the name of NVIDIA's repository for that OS (ubuntu2204, debian12, rhel9).

One owner for both sides: the controller (lab.hosts.stacks, which turns an unknown OS into a
ConfigError line) and the playbooks, whose filters ``gpulab_os_family`` and ``gpulab_repo_dist``
(playbooks/filter_plugins/gpulab.py) load this very file. Standard library only.
"""

FAMILY = {
    "Ubuntu": "Debian",
    "Debian": "Debian",
    "RedHat": "RedHat",
    "CentOS": "RedHat",
    "Rocky": "RedHat",
    "AlmaLinux": "RedHat",
}


def family(os_name):
    """'Ubuntu 18.04' -> 'Debian', 'Rocky 9' -> 'RedHat'; ValueError for an OS of no known distribution."""
    dist = str(os_name).split()[0] if str(os_name).split() else ""
    if dist not in FAMILY:
        raise ValueError(f"unknown OS {os_name!r} (known distributions: {', '.join(FAMILY)})")
    return FAMILY[dist]


def repo_dist(os_name):
    """NVIDIA's repository name for an OS release: ubuntu1804, debian12, rhel9 (every RedHat-family
    release by its major version)."""
    if family(os_name) == "RedHat":
        return "rhel" + str(os_name).split()[1].split(".")[0]
    dist, version = str(os_name).split()
    return dist.lower() + version.replace(".", "")
