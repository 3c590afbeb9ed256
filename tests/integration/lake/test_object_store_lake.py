"""Staging and lake on a real MinIO server: the ingest reads S3 manifests and writes s3a:// Hudi
tables; hudi-rs and Spark read them back; a restarted ingest resumes from the S3 commits."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from lakekit import event, lake_env
from pyspark.sql import SparkSession

from tidelake.config import Config, load_config
from tidelake.events import ChangeEvent
from tidelake.lake.ingest import Ingestor
from tidelake.lake.spark import apply_s3_credentials, register_lake_tables, s3a_conf
from tidelake.pipeline.object_store import MinioServer
from tidelake.runtime.storage import S3Storage, open_storage
from tidelake.stage.manifest import Manifest, TableFile, table_file_path, write_manifest
from tidelake.verify.lake import read_table

_buckets = itertools.count(1)


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO server on 127.0.0.1 for the module."""
    with MinioServer(tmp_path_factory.mktemp("minio") / "data") as server:
        yield server


@pytest.fixture
def s3_config(minio: MinioServer, tmp_path: Path, spark: SparkSession) -> Config:
    """A config with staging and lake in a fresh bucket; the shared session speaks to MinIO."""
    bucket = f"lake{next(_buckets)}"
    minio.create_bucket(bucket)
    environ = lake_env(
        tmp_path / "home",
        TIDELAKE_STAGE__ROOT=f"s3://{bucket}/staging",
        TIDELAKE_LAKE__ROOT=f"s3a://{bucket}/lake",
        TIDELAKE_STORAGE__S3__ENDPOINT=minio.endpoint,
        TIDELAKE_STORAGE__S3__PATH_STYLE="true",
        **minio.credentials_env(),
    )
    cfg = load_config(None, environ=environ)
    # The shared session was built for local lakes: give it this config's S3A settings.
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(cfg.storage.s3).items():
        hadoop_conf.set(key.removeprefix("spark.hadoop."), value)
    apply_s3_credentials(spark, cfg.storage.s3)
    return cfg


def _stage(
    storage: S3Storage, batch_id: str, events: list[ChangeEvent], first: int, last: int
) -> None:
    path = table_file_path(batch_id, "shop", "orders")
    storage.put(path, b"".join(e.to_json() + b"\n" for e in events))
    write_manifest(
        storage,
        Manifest(
            batch_id=batch_id,
            seq_first=first,
            seq_last=last,
            created_at_ms=0,
            tables=(TableFile("shop", "orders", path, len(events)),),
            received=len(events),
            staged=len(events),
        ),
    )


def test_ingest_from_s3_staging_into_an_s3a_lake_and_resume(
    s3_config: Config, spark: SparkSession
) -> None:
    """Manifests on MinIO become Hudi commits on MinIO; both readers agree; a second ingestor
    (a restart) finds the checkpoint in the S3 commit and applies only what is new."""
    storage = open_storage(s3_config.stage_root, s3_config.storage.s3)
    assert isinstance(storage, S3Storage)
    _stage(
        storage,
        "b1",
        [
            event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"}),
            event("insert", 2, 11, 2, values={"status": "new", "amount": "2.00"}),
            event("update", 1, 12, 3, values={"status": "paid", "amount": "1.00"}),
        ],
        1,
        3,
    )
    first = Ingestor(s3_config, spark).run_once()
    assert (1, 3) == (first.commits, first.events)

    _stage(
        storage,
        "b2",
        [
            # A redelivered copy of seq 3 and one new delete: only the delete applies.
            event("update", 1, 12, 3, values={"status": "paid", "amount": "1.00"}),
            event("delete", 2, 13, 4, values={"status": "new", "amount": "2.00"}),
        ],
        3,
        4,
    )
    second = Ingestor(s3_config, spark).run_once()
    assert (1, 1, 1) == (second.commits, second.events, second.duplicates)

    rows = read_table(s3_config.lake_root, "shop.orders", s3_config.storage.s3).to_pylist()
    assert [("1", "paid")] == [(str(r["id"]), r["status"]) for r in rows]
    assert ["shop.orders"] == register_lake_tables(spark, s3_config.lake_root)
    spark_rows = spark.sql("SELECT id, status FROM shop.orders").collect()
    assert [(1, "paid")] == [(r["id"], r["status"]) for r in spark_rows]

    # The table is on MinIO; the ingest's own state stays local (lake.state_dir default).
    lake_objects = open_storage(s3_config.lake_root, s3_config.storage.s3).list("shop/orders")
    assert any(p.endswith("/hoodie.properties") for p in lake_objects)
    assert 2 == len((s3_config.home / "state" / "commits.jsonl").read_text().splitlines())
