"""pytest fixtures of the test lab (imported by tests/conftest.py).

``testlab``: session-scoped factory, ``testlab(n=2)`` or ``testlab(names=[...], groups=...,
host_vars=..., group_vars=..., all_vars=...)`` returns a running ``Lab``; every lab it made is
torn down at the end of the session (a test may call ``lab.down()`` earlier).
Without root or the tools the lab tests are skipped with the reason, except when
GPULAB_REQUIRE_LAB=1 (CI), where they fail.
"""

from __future__ import annotations

import os

import pytest

from tests.testlab.lab import Lab, _read_entries, cleanup_stale, missing_requirements


def lab_required() -> bool:
    return os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0")


def require_lab() -> None:
    why = missing_requirements()
    if why is None:
        return
    if lab_required():
        pytest.fail(f"GPULAB_REQUIRE_LAB is set but the test lab cannot run here: {why}", pytrace=False)
    pytest.skip(f"test lab unavailable: {why}")


def clean_leftovers_at_start() -> None:
    """Remove what crashed runs left behind (labs whose owner process is dead); quiet when impossible."""
    if os.geteuid() != 0 or missing_requirements() is not None:
        return
    removed = cleanup_stale()
    if removed:
        print(f"[testlab] removed leftovers of crashed runs: {' '.join(removed)}")


@pytest.fixture(scope="session")
def testlab_images():
    """Build (or take from the cache) the rootfs, the python layer and the apt repository."""
    require_lab()
    from tests.testlab import aptrepo, image

    rootfs = image.ensure_rootfs()
    pylayer, wheelhouse = image.ensure_pylayer()
    repo = aptrepo.ensure_repo()
    in_use = {name for entry in _read_entries() for name in entry.get("layers", [])}
    image.prune({rootfs.name, pylayer.name, repo.name}, in_use)
    return {"rootfs": rootfs, "pylayer": pylayer, "wheelhouse": wheelhouse, "apt_repo": repo}


SLURM_LAB_VARS = {"gpulab_gpu_model": "cpu", "gpulab_gpu_count": 0, "gpulab_stack": "current"}


@pytest.fixture(scope="session")
def slurmlab(testlab):
    """One Slurm lab per session (tests/testlab/slurm.py): two compute hosts node-01, node-02 (CPU hosts of the
    inventory) and the controller host; ``lab.cluster`` is its Slurm (``.env``: SLURM_CONF for the commands
    of this machine). Tests that change nodes or queue call ``lab.cluster.reset()`` first."""
    import shutil

    missing = [t for t in ("sbatch", "sinfo", "scontrol", "scancel", "squeue", "munged") if shutil.which(t) is None]
    if missing:
        why = f"the Slurm lab needs {' '.join(missing)} here (tests/testlab/install-deps.sh: slurm-client, munge)"
        if lab_required():
            pytest.fail(f"GPULAB_REQUIRE_LAB is set but {why}", pytrace=False)
        pytest.skip(why)
    return testlab(names=["node-01", "node-02"], prefix="sl", slurm=True, all_vars=SLURM_LAB_VARS)


@pytest.fixture(scope="session")
def testlab(testlab_images):
    labs: list[Lab] = []

    def make(n: int = 2, names=None, prefix: str = "lab", **kwargs) -> Lab:
        names = list(names) if names else [f"{prefix}-{i:02d}" for i in range(1, n + 1)]
        lab = Lab(names, **kwargs)
        labs.append(lab)
        return lab.up()

    yield make
    errors = []
    for lab in reversed(labs):
        try:
            lab.down()
        except Exception as exc:  # tear the others down all the same
            errors.append(f"{lab.id}: {exc}")
    if errors:
        raise RuntimeError("test lab teardown failed: " + "; ".join(errors))
