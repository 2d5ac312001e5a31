"""The GPU machine has torch, pytest, jinja2 and PyYAML but not the test lab's other packages:
tests/conftest.py (which every test run loads) must import there. Only the lab tests need jsonschema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "jsonschema" or name.startswith("jsonschema."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Block())
import tests.conftest
print("imported")
"""


def test_the_shared_conftest_imports_without_jsonschema():
    res = subprocess.run([sys.executable, "-c", BLOCK], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "imported", res.stderr[-2000:]


def test_the_blocker_itself_works():
    """The check above proves something only if the blocker really stops an import of jsonschema."""
    code = BLOCK.replace("import tests.conftest", "import jsonschema")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "blocked by the test" in res.stderr
