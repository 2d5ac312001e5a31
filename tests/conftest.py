"""Shared fixtures. The test lab (real SSH hosts in network namespaces): tests/testlab/."""

from tests.crashguard import pytest_addoption, pytest_cmdline_main  # noqa: F401  (crash guard, --processes)
from tests.testlab.fixtures import clean_leftovers_at_start, slurmlab, testlab, testlab_images  # noqa: F401


def pytest_sessionstart(session):
    clean_leftovers_at_start()
