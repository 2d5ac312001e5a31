"""The gpulab test lab: real SSH hosts in network namespaces, a local apt repository of
stand-in NVIDIA packages and a wheelhouse, for the integration tests (see README.md)."""

from tests.testlab.aptrepo import ensure_repo, load_spec
from tests.testlab.image import ensure_pylayer, ensure_rootfs
from tests.testlab.lab import Host, Lab, cleanup_stale, lab_objects, missing_requirements
from tests.testlab.util import LabError

__all__ = [
    "Lab",
    "Host",
    "LabError",
    "cleanup_stale",
    "lab_objects",
    "missing_requirements",
    "ensure_rootfs",
    "ensure_pylayer",
    "ensure_repo",
    "load_spec",
]
