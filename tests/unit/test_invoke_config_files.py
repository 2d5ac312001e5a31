"""A config file Invoke reads before tasks.py loads (~/.invoke.yaml and its .yml/.json/.py kin) that is not
readable or not a mapping is one line naming the file, exit 2, under ``gpulab`` (lab/core/program.py).

``gpulab`` is gpulab's Program (pyproject's console script, lab.core.program:main): its Config is gpulab's from
the start, so the files Invoke reads before tasks.py loads go through gpulab's loaders. It runs here as
``python -m lab.core.program`` from the checkout, as a plain ``pip install`` gives it (no other set-up: no
``.pth`` line, nothing .ci/setup adds). HOME points at a temporary folder. Where .venv has the ``gpulab`` script
(a `.ci/setup` checkout; CI sets GPULAB_REQUIRE_LAB and must have it), that script is run as well. Under Invoke's
own ``invoke`` these two files are read before any gpulab code runs (README "Settings").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
GPULAB = [sys.executable, "-m", "lab.core.program"]
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


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
def test_a_user_config_file_that_cannot_be_used_is_one_line(tmp_path, what):
    name, content = BAD[what]
    home = tmp_path / "home"
    home.mkdir()
    path = home / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_exit_2(run_invoke(GPULAB, home, "--list"), path)


def test_a_folder_in_the_files_place_is_one_line(tmp_path):
    home = tmp_path / "home"
    (home / ".invoke.yaml").mkdir(parents=True)
    line = one_line_exit_2(run_invoke(GPULAB, home, "--list"), home / ".invoke.yaml")
    assert "cannot be read" in line


@FEW
@given(
    doc=st.one_of(
        st.lists(st.integers() | st.text(max_size=5), max_size=3),
        st.text(min_size=1, max_size=10),
        st.integers(),
        st.floats(allow_nan=False),
        st.booleans(),
    )
)
def test_any_file_that_is_not_a_mapping_is_one_line(tmp_path, doc):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".invoke.yaml").write_text(yaml.safe_dump(doc))
    if isinstance(yaml.safe_load((home / ".invoke.yaml").read_text()), dict | type(None)):
        return  # "a: b" as text, or an empty document: a mapping, or nothing
    one_line_exit_2(run_invoke(GPULAB, home, "--list"), home / ".invoke.yaml")


def test_a_good_or_missing_user_file_is_read_as_before(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    r = run_invoke(GPULAB, home, "--list")
    assert r.returncode == 0 and "sweep" in r.stdout, r.stderr
    (home / ".invoke.yaml").write_text("gpulab: {workloads: gnmt}\n")
    r = run_invoke(GPULAB, home, "sweep", "--dry-run", "--device", "cpu")
    assert "Traceback" not in r.stderr and "ncf" not in r.stdout, r.stdout + r.stderr


def test_the_checkouts_own_gpulab_script_and_no_pth_line(tmp_path):
    """.ci/setup is `pip install -e .`: the console script is there and no .pth line of gpulab's (there was one)."""
    site = Path(
        subprocess.run(
            [str(ROOT / ".venv" / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    script = ROOT / ".venv" / "bin" / "gpulab"
    if not script.is_file():
        if os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0"):
            pytest.fail(
                f"{script} is missing: `pip install -e .` (pyproject's [project.scripts]) makes it", pytrace=False
            )
        pytest.skip(".venv was not made by .ci/setup from this pyproject (no gpulab script)")
    assert not (site / "gpulab-invoke.pth").exists()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".invoke.yaml").write_text("gpulab: [unclosed\n")
    one_line_exit_2(run_invoke([str(script)], home, "--list"), home / ".invoke.yaml")
    (home / ".invoke.yaml").write_text("gpulab: {workloads: gnmt}\n")
    r = run_invoke([str(script)], home, "--list")
    assert r.returncode == 0 and "sweep" in r.stdout and r.stdout.startswith("Available tasks:"), r.stdout + r.stderr
