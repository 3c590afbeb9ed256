"""``DROP DATABASE`` applied end to end, on a local lake and on MinIO.

TiCDC's canal-json for ``tests/cases/ticdc_drop_database`` (a database of two tables, a table
in another database, one row each, then ``DROP DATABASE tmpdb``) is published to a real
nats-server, staged by a real ``tidelake stage --once`` process and ingested into Hudi by the
real ingest, in two rounds: everything before the drop, then the drop. After the first round
the database's tables are in the lake and the catalog; after the second they are gone from
both, and the other database's table keeps its row.

One source event names the database only, so the lake must find the database's tables itself:
on object storage that means listing the bucket, not a local directory.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from stagekit import StageEnv, make_stage_env, run, stop_process

from golden import CASES_DIR, load_case
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, load_config
from tidelake.lake.catalog import unregister_table
from tidelake.lake.ingest import Ingestor
from tidelake.lake.spark import apply_s3_credentials, s3a_conf
from tidelake.pipeline.object_store import MinioServer
from tidelake.runtime.storage import open_storage
from tidelake.verify.lake import read_table

pytestmark = pytest.mark.integration

CASE = load_case(CASES_DIR / "ticdc_drop_database")
DROPPED = ("tmpdb.a", "tmpdb.b")
_buckets = itertools.count(1)


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO server on 127.0.0.1 for the module."""
    with MinioServer(tmp_path_factory.mktemp("minio") / "data") as server:
        yield server


@pytest.fixture
def clean_catalog(spark: SparkSession) -> Iterator[None]:
    """Forget the case's catalog entries after the test, while its lake (perhaps a MinIO
    bucket) is still there: the session is shared, and an entry left pointing at a stopped
    MinIO would make every later catalog sync of the same name wait on S3A retries."""
    yield
    for table_id in (*DROPPED, "shop.kept"):
        unregister_table(spark, *table_id.split("."))
    spark.sql("DROP DATABASE IF EXISTS tmpdb")


def _overrides(where: str, minio: MinioServer | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Config overrides placing staging and lake locally or in a fresh MinIO bucket, and the
    environment holding the bucket's credentials (secrets never go into the config file)."""
    overrides: dict[str, Any] = {"lake": {"spark": {"master": "local[2]", "driver_memory": "1g"}}}
    if where == "local":
        return overrides, {}
    assert minio is not None
    bucket = f"dropdb{next(_buckets)}"
    minio.create_bucket(bucket)
    overrides["storage"] = {"s3": minio.settings()}
    overrides["stage"] = {"root": f"s3://{bucket}/staging"}
    overrides["lake"]["root"] = f"s3a://{bucket}/lake"
    return overrides, minio.credentials_env()


def _publish(env: StageEnv, messages: list[bytes]) -> None:
    """Publish ``messages`` in order on the case's subject and wait for every PubAck."""
    subject = env.cfg.bus.stream.subjects[0].removesuffix(">") + CASE.name
    run(env.publish([(subject, m) for m in messages]))


def _stage_and_ingest(env: StageEnv, secrets: dict[str, str], spark: SparkSession) -> Config:
    """One ``tidelake stage --once`` child process, then one ingest round in this process."""
    proc = env.spawn_stager(once=True, extra_env=secrets)
    try:
        assert 0 == proc.wait(300), env.log_text()
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise AssertionError("the stager did not drain:\n" + env.log_text()[-3000:]) from None
    cfg = load_config(env.config_path, environ=secrets)
    stats = Ingestor(cfg, spark).run_once()
    assert {} == stats.refused, stats.refused
    return cfg


def _lake_files(cfg: Config, table_id: str) -> list[str]:
    """Every file of the table's directory in the lake (local or object storage)."""
    database, table = table_id.split(".")
    return open_storage(cfg.lake_root, cfg.storage.s3).list(f"{database}/{table}")


def _in_catalog(spark: SparkSession) -> dict[str, bool]:
    """Which of the case's names the session's catalog holds."""
    found = {"tmpdb": spark.catalog.databaseExists("tmpdb")}
    for table_id in (*DROPPED, "shop.kept"):
        found[table_id] = spark.catalog.tableExists(table_id)
    return found


@pytest.mark.parametrize("where", ["local", "minio"])
def test_drop_database_removes_its_tables_from_the_lake_and_the_catalog(
    where: str,
    nats_server: EmbeddedNats,
    spark: SparkSession,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    clean_catalog: None,
) -> None:
    """Before the drop the database's tables have files and catalog entries; after it they
    have neither, the database is out of the catalog, and ``shop.kept`` still holds its row."""
    server: MinioServer | None = request.getfixturevalue("minio") if where == "minio" else None
    overrides, secrets = _overrides(where, server)
    env = make_stage_env(nats_server, tmp_path / "home", overrides)
    if server is not None:
        # The shared session was built for local lakes: give it this bucket's S3A settings.
        hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in s3a_conf(server.s3_config()).items():
            hadoop_conf.set(key.removeprefix("spark.hadoop."), value)
        apply_s3_credentials(spark, server.s3_config())
    drop = CASE.messages[-1]
    assert b"DROP DATABASE" in drop

    _publish(env, CASE.messages[:-1])
    cfg = _stage_and_ingest(env, secrets, spark)
    before = {t: bool(_lake_files(cfg, t)) for t in (*DROPPED, "shop.kept")}
    assert {"tmpdb.a": True, "tmpdb.b": True, "shop.kept": True} == before
    assert {"tmpdb": True, "tmpdb.a": True, "tmpdb.b": True, "shop.kept": True} == _in_catalog(
        spark
    )

    _publish(env, [drop])
    cfg = _stage_and_ingest(env, secrets, spark)
    after = {t: _lake_files(cfg, t) for t in DROPPED}
    assert {"tmpdb.a": [], "tmpdb.b": []} == after
    assert {"tmpdb": False, "tmpdb.a": False, "tmpdb.b": False, "shop.kept": True} == _in_catalog(
        spark
    )
    rows = read_table(cfg.lake_root, "shop.kept", cfg.storage.s3).to_pylist()
    assert [("1", "k")] == [(str(r["id"]), r["v"]) for r in rows]
