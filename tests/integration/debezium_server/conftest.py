"""Debezium Server fixtures: one Spark session (PostgreSQL and MariaDB come from
tests/integration/conftest.py).

The nats-server comes from ``tests/integration/conftest.py`` (one per module). Debezium
Server itself is started by the test: it is stopped and started again mid-run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tidelake.config import load_config
from tidelake.lake.spark import build_spark_session
from tidelake.pipeline import debezium_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration/debezium_server" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if not debezium_server.available():
                item.add_marker(
                    pytest.mark.skip(
                        reason="Debezium Server or Java 21+ missing: run scripts/setup"
                    )
                )


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One SparkSession (local[2], 1 GB driver) for the module's in-process ingests."""
    home: Path = tmp_path_factory.mktemp("spark-home")
    environ = {
        "TIDELAKE_HOME": str(home),
        "TIDELAKE_LAKE__SPARK__MASTER": "local[2]",
        "TIDELAKE_LAKE__SPARK__DRIVER_MEMORY": "1g",
        "TIDELAKE_LAKE__SPARK__SHUFFLE_PARTITIONS": "2",
    }
    session = build_spark_session(load_config(None, environ=environ), app_name="tidelake-dbz")
    yield session
    session.stop()
