"""View fixtures: the lake tests' Spark session and test lakes (tests/integration/lake)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The lake tests' helpers (lakekit) are imported by their top-level name, as there.
_LAKE_TESTS = str(Path(__file__).resolve().parents[1] / "lake")
if _LAKE_TESTS not in sys.path:
    sys.path.insert(0, _LAKE_TESTS)

from integration.lake.conftest import _fresh_catalog, lake, lake_factory, spark  # noqa: E402

__all__ = ["_fresh_catalog", "lake", "lake_factory", "spark"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration/view" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
