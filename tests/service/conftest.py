"""Fixtures of the service tests: a throwaway PostgreSQL server and fresh databases on it.

Without PostgreSQL binaries the tests that use them are skipped, unless
``DPKIT_REQUIRE_POSTGRES=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from _postgres import Postgres, PostgresUnavailable


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("DPKIT_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"{reason} (DPKIT_REQUIRE_POSTGRES=1 requires PostgreSQL)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """One PostgreSQL server for the whole test session (Unix socket, no TCP)."""
    try:
        server = Postgres()
    except PostgresUnavailable as err:
        _unavailable(str(err))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: Postgres) -> str:
    """A ``postgresql+psycopg://`` URL of a database made fresh for this session."""
    return postgres_server.url(postgres_server.new_database())


@pytest.fixture
def fresh_postgres_url(postgres_server: Postgres) -> str:
    """A ``postgresql+psycopg://`` URL of a database made fresh for this test."""
    return postgres_server.url(postgres_server.new_database())
