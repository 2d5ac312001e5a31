"""Fixtures of the validation tests (the snapshots: snapshots.py)."""

from __future__ import annotations

import copy
import json

import pytest
from snapshots import healthy_path

from lab.validate import fleet


@pytest.fixture(scope="session")
def h200_doc() -> dict:
    return json.loads(healthy_path().read_text())


@pytest.fixture
def snap(h200_doc) -> dict:
    """A fresh copy of the healthy H200 burn-in document."""
    return copy.deepcopy(h200_doc)


@pytest.fixture(scope="session")
def refs() -> dict:
    return fleet.load_references()
