"""Integration fixtures: a real ``nats-server`` per test module, isolated streams per test;
private MariaDB and PostgreSQL servers and a Jaeger (OTLP receiver), one per test module
that asks for them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stagekit import StageEnv, make_stage_env

from support.jaeger import Jaeger, jaeger_binary
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer, PostgresServer

_homes = itertools.count(1)


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """A real nats-server with JetStream on a free port, for the whole test module."""
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    with server:
        yield server


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


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """A real OTLP receiver (Jaeger v2, in-memory storage) on free ports of 127.0.0.1, for the
    tracing tests (tests/support/jaeger.py)."""
    binary = jaeger_binary()
    if binary is None:
        pytest.skip("jaeger not built: run scripts/setup with TIDELAKE_SETUP_TESTS=1")
    with Jaeger(binary, tmp_path_factory.mktemp("jaeger")) as server:
        yield server


@pytest.fixture
def stage_env_factory(nats_server: EmbeddedNats, tmp_path: Path) -> Callable[..., StageEnv]:
    """``stage_env_factory(bus={...}, stage={...})``: a provisioned, isolated StageEnv."""

    def make(**overrides: Any) -> StageEnv:
        return make_stage_env(nats_server, tmp_path / f"home{next(_homes)}", overrides)

    return make


@pytest.fixture
def stage_env(stage_env_factory: Callable[..., StageEnv]) -> StageEnv:
    """A provisioned StageEnv with default batching (max_age 0.5 s)."""
    return stage_env_factory()
