"""The checkout's state as git sees it, for tests that assert a refused command wrote nothing there."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def state() -> set[str]:
    """git status of the whole checkout, ignored and untracked files too, without Python's and Hypothesis'
    caches (a refused value must write nothing there either). Tests that use it are marked ``checkout``: under
    --processes never beside the test lab's tests (tests/sharing.py)."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    return {line for line in out.splitlines() if "__pycache__" not in line and ".hypothesis" not in line}
