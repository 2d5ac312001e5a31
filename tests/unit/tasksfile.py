"""tasks.py loaded as a module of its own, for the tests that read its tasks and options in-process (the
documents' command lines, the short flags); nothing runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    """tasks.py as a fresh module called ``name`` (its namespace, ``ns``, is built from its own module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module
