"""Fixtures of the service tests: a throwaway PostgreSQL server and fresh databases on it.

Without PostgreSQL binaries the tests that use them are skipped, unless
``DPKIT_REQUIRE_POSTGRES=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import os
import socket
import threading
import time
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


@pytest.fixture(scope="module")
def live_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """The demo service under Uvicorn on a free loopback port, in a thread: (base URL, keys)."""
    import uvicorn

    from dpkit.service.app import create_app
    from dpkit.service.demo import build_demo

    config, keys = build_demo(tmp_path_factory.mktemp("live-demo"), rows=2000)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # the port stays ours: no race with other processes
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", keys
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
