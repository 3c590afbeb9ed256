"""A nats-server per test (MariaDB and PostgreSQL come from tests/integration/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidelake.bus.server import EmbeddedNats

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A fresh nats-server per test: each test's CDC stream holds only its own messages."""
    with EmbeddedNats(tmp_path / "nats") as server:
        yield server
