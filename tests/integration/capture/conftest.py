"""Private MariaDB and PostgreSQL servers (one per test module) and a nats-server per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer, PostgresServer

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A private mariadbd with ROW binlog and full row metadata, on 127.0.0.1."""
    server = MariaDBServer(tmp_path_factory.mktemp("mariadb"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A private postgres with wal_level=logical, on 127.0.0.1."""
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A fresh nats-server per test: each test's CDC stream holds only its own messages."""
    with EmbeddedNats(tmp_path / "nats") as server:
        yield server
