"""Integration fixtures: a real ``nats-server`` per test module, isolated streams per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from stagekit import StageEnv, make_stage_env

from tidelake.bus.server import EmbeddedNats

_homes = itertools.count(1)


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """A real nats-server with JetStream on a free port, for the whole test module."""
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    with server:
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
