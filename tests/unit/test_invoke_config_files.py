"""A config file Invoke reads before tasks.py loads (~/.invoke.yaml and its .yml/.json/.py kin) that is not
readable or not a mapping is one line naming the file, exit 2 (lab/core/invokeguard.py).

The real `python -m invoke` runs in a virtual environment made here the way
`.ci/setup` makes .venv's: this environment's packages, plus the
``gpulab-invoke.pth`` that `python lab/core/invokeguard.py SITE` writes. HOME
points at a temporary folder. Where .venv has the .pth (a `.ci/setup`
checkout; CI sets GPULAB_REQUIRE_LAB and must have it), .venv's own `invoke`
script is run as well.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
GUARD = ROOT / "lab" / "core" / "invokeguard.py"
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv whose site-packages holds a path line to this interpreter's packages and gpulab-invoke.pth."""
    root = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    py = root / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    (Path(site) / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), str(GUARD), site], check=True, timeout=60)
    assert (Path(site) / "gpulab-invoke.pth").is_file()
    return py


def run_invoke(argv: list[str], home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVOKE_")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run([*argv, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)


def one_line_exit_2(p: subprocess.CompletedProcess, path: Path) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith(f"gpulab: config file {path}: ") and len(lines[0]) < 300, lines[0]
    return lines[0]


BAD = {
    "not YAML": (".invoke.yaml", "gpulab: [unclosed\n"),
    "a list": (".invoke.yaml", "- a\n- b\n"),
    "a string": (".invoke.yaml", "just words\n"),
    "a number": (".invoke.yml", "42\n"),
    "nested too deep": (".invoke.yaml", "gpulab: " + "[" * 20_000 + "]" * 20_000 + "\n"),
    "a tab": (".invoke.yaml", "gpulab:\n\tworkloads: ncf\n"),
    "not JSON": (".invoke.json", '{"gpulab": '),
    "a JSON list": (".invoke.json", "[1, 2]"),
    "Python that raises": (".invoke.py", "raise RuntimeError('boom')\n"),
    "Python that is not Python": (".invoke.py", "def (:\n"),
    "not UTF-8": (".invoke.yaml", b"gpulab: {workloads: \xff\xfe}\n"),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_a_user_config_file_that_cannot_be_used_is_one_line(venv, tmp_path, what):
    name, content = BAD[what]
    home = tmp_path / "home"
    home.mkdir()
    path = home / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_exit_2(run_invoke([str(venv), "-m", "invoke"], home, "--list"), path)


def test_a_folder_in_the_files_place_is_one_line(venv, tmp_path):
    home = tmp_path / "home"
    (home / ".invoke.yaml").mkdir(parents=True)
    line = one_line_exit_2(run_invoke([str(venv), "-m", "invoke"], home, "--list"), home / ".invoke.yaml")
    assert "cannot be read" in line


@FEW
@given(doc=st.one_of(st.lists(st.integers() | st.text(max_size=5), max_size=3), st.text(min_size=1, max_size=10),
                     st.integers(), st.floats(allow_nan=False), st.booleans()))
def test_any_file_that_is_not_a_mapping_is_one_line(venv, tmp_path, doc):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".invoke.yaml").write_text(yaml.safe_dump(doc))
    if isinstance(yaml.safe_load((home / ".invoke.yaml").read_text()), dict | type(None)):
        return   # "a: b" as text, or an empty document: a mapping, or nothing
    one_line_exit_2(run_invoke([str(venv), "-m", "invoke"], home, "--list"), home / ".invoke.yaml")


def test_a_good_or_missing_user_file_is_read_as_before(venv, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    r = run_invoke([str(venv), "-m", "invoke"], home, "--list")
    assert r.returncode == 0 and "sweep" in r.stdout, r.stderr
    (home / ".invoke.yaml").write_text("gpulab: {workloads: gnmt}\n")
    r = run_invoke([str(venv), "-m", "invoke"], home, "sweep", "--dry-run", "--device", "cpu")
    assert "Traceback" not in r.stderr and "ncf" not in r.stdout, r.stdout + r.stderr


def test_the_checkouts_own_invoke_has_the_guard(tmp_path):
    site = Path(subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, timeout=60).stdout.strip())
    if not (site / "gpulab-invoke.pth").is_file():
        if os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0"):
            pytest.fail(f"{site}/gpulab-invoke.pth is missing: .ci/setup writes it", pytrace=False)
        pytest.skip(".venv was not made by .ci/setup (no gpulab-invoke.pth)")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".invoke.yaml").write_text("gpulab: [unclosed\n")
    one_line_exit_2(run_invoke([str(ROOT / ".venv" / "bin" / "invoke")], home, "--list"), home / ".invoke.yaml")
