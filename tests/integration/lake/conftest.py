"""Lake fixtures: one real Spark session with the Hudi bundle for every lake test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lakekit import Lake, lake_config, lake_env
from pyspark.sql import SparkSession

from tidelake.config import load_config
from tidelake.lake.spark import build_spark_session

_lakes = itertools.count(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration/lake" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one SparkSession (local[2], 1 GB driver) shared by all lake tests."""
    home = tmp_path_factory.mktemp("spark-home")
    session = build_spark_session(lake_config(home), app_name="tidelake-tests")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _fresh_catalog(request: pytest.FixtureRequest) -> None:
    """Each test that uses the shared session starts with an empty catalog.

    An earlier test's registrations would otherwise outlive it: ``shop.orders`` of the
    object-store test points at ``s3a://`` on a MinIO stopped with its module, and every later
    re-registration of that name (the ingest's catalog sync drops the entry first) waited
    out S3A's retries against the dead endpoint. The entries are forgotten through the
    session catalog, which touches no table data: Hudi's DROP TABLE would read the table
    first."""
    if not {"spark", "lake", "lake_factory"} & set(request.fixturenames):
        return
    session: SparkSession = request.getfixturevalue("spark")
    catalog = session._jsparkSession.sessionState().catalog()
    catalog.setCurrentDatabase("default")
    databases = catalog.listDatabases()  # a Scala Seq
    for database in [databases.apply(i) for i in range(databases.size())]:
        if database != "default":
            catalog.dropDatabase(database, True, True)  # ignore if missing, cascade
    catalog.invalidateAllCachedTables()
    session.catalog.clearCache()


@pytest.fixture
def lake_factory(spark: SparkSession, tmp_path: Path) -> Callable[..., Lake]:
    """``lake_factory(**env)``: a fresh staging root + lake (config env overrides allowed)."""

    def make(**env: Any) -> Lake:
        environ = lake_env(tmp_path / f"home{next(_lakes)}", **env)
        return Lake(load_config(None, environ=environ), spark, environ)

    return make


@pytest.fixture
def lake(lake_factory: Callable[..., Lake]) -> Lake:
    """A fresh staging root and lake with default settings."""
    return lake_factory()
