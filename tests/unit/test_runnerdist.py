"""One way to put the runner on a host (lab.hosts.runnerdist over runner.source): the sweep's tarball,
provisioning's wheel and the datasets tree hold the same files, and the runner each of them starts
reports the source digest that the controller computes and that names the wheel's folder. A change
to any runner file changes all of them together. The wheel ships ``runner`` and never ``lab``."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from lab.hosts import runnerdist
from runner import source

REPO = Path(__file__).resolve().parents[2]


def reported(pythonpath: Path) -> str:
    """What ``python -m runner --version`` says when the runner is the one under ``pythonpath``."""
    p = subprocess.run(
        [sys.executable, "-m", "runner", "--version"],
        cwd=pythonpath,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath)},
        check=True,
    )
    return p.stdout.strip()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return runnerdist.build_wheel(tmp_path_factory.mktemp("wheels"))


def test_every_carrier_reports_the_digest_the_controller_computes(wheel, tmp_path):
    want = runnerdist.local_version()
    digest = runnerdist.digest()
    assert want.endswith(f" src={digest}") and len(digest) == 12

    staged = runnerdist.stage(tmp_path)  # the datasets role's file: the sweep's tarball, byte for byte
    assert staged.read_bytes() == runnerdist.tarball()
    with tarfile.open(staged, mode="r:gz") as tar:
        tar.extractall(tmp_path / "tar", filter="data")
    assert reported(tmp_path / "tar") == want

    assert wheel.parent.name == runnerdist.wheel_id() and wheel.parent.name.split("-")[0] == digest
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "wheel")
    assert reported(tmp_path / "wheel") == want


def test_the_wheel_holds_the_runner_files_and_no_lab(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if ".dist-info/" not in n]
    assert sorted(names) == sorted(
        f"runner/{p.relative_to(runnerdist.RUNNER_DIR).as_posix()}" for p in runnerdist.files()
    )
    assert not [n for n in names if n.startswith("lab/")]


def test_a_changed_runner_file_changes_every_hash(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    with tarfile.open(fileobj=io.BytesIO(runnerdist.tarball()), mode="r:gz") as tar:
        tar.extractall(repo, filter="data")
    shutil.copyfile(REPO / "pyproject.toml", repo / "pyproject.toml")
    monkeypatch.setattr(runnerdist, "REPO", repo)
    monkeypatch.setattr(runnerdist, "RUNNER_DIR", repo / "runner")
    before = (runnerdist.digest(), runnerdist.wheel_id(), runnerdist.tarball(), reported(repo))
    assert before[0] == source.digest()  # the copy is the checkout's runner

    catalogue = repo / "runner" / "workloads" / "workloads.yml"
    catalogue.write_text(catalogue.read_text() + "# one more line\n")
    after = (runnerdist.digest(), runnerdist.wheel_id(), runnerdist.tarball(), reported(repo))
    assert [a != b for a, b in zip(before, after)] == [True] * 4
    assert after[1].startswith(after[0] + "-") and after[3].endswith(f"src={after[0]}")

    (repo / "runner" / "workloads" / "__pycache__").mkdir(exist_ok=True)
    (repo / "runner" / "workloads" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert runnerdist.digest() == after[0]  # compiled files are not the runner's source


def test_a_cut_or_planted_wheel_in_the_cache_is_never_shipped(tmp_path):
    """The cache's wheel was copied in place (an interrupted copy left it cut) and whatever matched its name was
    used as found: a cut wheel went to every host at every provisioning, a link planted in the cache sent its
    target (/etc/hostname here). Now a cut one is built again, written whole, and a link is refused in one line."""
    from lab.core.errors import ConfigError

    built = runnerdist.build_wheel(tmp_path)
    whole = built.read_bytes()
    built.write_bytes(whole[: len(whole) // 2])
    assert runnerdist.build_wheel(tmp_path) == built and zipfile.ZipFile(built).testzip() is None
    built.unlink()
    built.symlink_to("/etc/hostname")
    with pytest.raises(ConfigError, match="is a symbolic link; gpulab does not write through links"):
        runnerdist.build_wheel(tmp_path)


def test_a_cut_or_planted_health_bundle_is_never_shipped(tmp_path):
    """The Slurm health bundle was used whenever its name existed: a cut file or a planted link went to the nodes."""
    from lab.core.errors import ConfigError

    bundle = runnerdist.health_bundle(tmp_path)
    whole = bundle.read_bytes()
    bundle.write_bytes(whole[:100])
    assert runnerdist.health_bundle(tmp_path) == bundle and bundle.read_bytes() == whole
    bundle.unlink()
    bundle.symlink_to("/etc/hostname")
    with pytest.raises(ConfigError, match="is a symbolic link"):
        runnerdist.health_bundle(tmp_path)
