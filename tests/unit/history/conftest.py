"""The history tests run against both backends: a SQLite file and a real PostgreSQL server (pgserver.py).

Without PostgreSQL installed the PostgreSQL cases are skipped, except in CI
(GPULAB_REQUIRE_LAB=1), where they fail: `.ci/setup --test` installs it there.
"""

from __future__ import annotations

import os

import pytest
from pgserver import PgServer, pg_bin


def _required() -> bool:
    return os.environ.get("GPULAB_REQUIRE_LAB", "") not in ("", "0")


@pytest.fixture(scope="session")
def pg_server():
    bindir = pg_bin()
    if bindir is None:
        msg = "PostgreSQL is not installed (.ci/setup --test installs Debian's postgresql as root)"
        if _required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    server = PgServer(bindir).start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return request.getfixturevalue("pg_server").new_database()
