"""API fixtures: one running pipeline (nats-server, stager, ingest, serve) per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from apikit import Pipeline, start_pipeline


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """A running pipeline whose ``tidelake serve`` answers at ``pipeline.url``."""
    p = start_pipeline(tmp_path_factory.mktemp("pipeline"))
    yield p
    p.stop()
