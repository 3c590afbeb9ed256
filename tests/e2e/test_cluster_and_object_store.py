"""Beyond one machine, on this machine: a Spark standalone cluster (master + one 1-core worker
from the installed PySpark) and a private MinIO server holding staging and lake."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from sparkcluster import SparkCluster
from tidelake.events import ChangeEvent, Op, Position
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, TableFile, table_file_path, write_manifest
from tidelake.verify.lake import read_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TIDELAKE = (sys.executable, "-m", "tidelake.cli")

#: The driver stays small on a 2-core machine; executors fit the 1 GB worker.
SMALL_SPARK = {
    "TIDELAKE_LAKE__SPARK__DRIVER_MEMORY": "1g",
    "TIDELAKE_LAKE__SPARK__SHUFFLE_PARTITIONS": "2",
    "TIDELAKE_LAKE__SPARK__CONF": "{spark.executor.memory: 768m}",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and one worker (1 core, 1 GB) on 127.0.0.1."""
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


def _apps(cluster: SparkCluster, name: str) -> list[dict[str, object]]:
    state = cluster.state()
    return [a for a in state["activeapps"] + state["completedapps"] if a["name"] == name]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    return {**env, **SMALL_SPARK, **extra}


def test_demo_with_minio_on_the_standalone_cluster_equals_the_source(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    """`demo --object-store minio --json` with the ingest's Spark on the cluster: staging and
    lake on MinIO, executors on the worker, and the lake equals the source row by row."""
    before = len(_apps(cluster, "tidelake-ingest"))
    proc = subprocess.run(
        [
            *TIDELAKE,
            "demo",
            "--object-store",
            "minio",
            "--events",
            "2000",
            "--rate",
            "2000",
            "--json",
            "--home",
            str(tmp_path / "demo"),
        ],
        env=_clean_env(TIDELAKE_LAKE__SPARK__MASTER=cluster.master_url),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    expected = {"mismatches": 0, "dlq": 0, "tables": 3, "lake": "s3a://tidelake/lake"}
    assert expected == {k: summary[k] for k in expected}, summary
    assert summary["rows_in_lake"] == summary["rows_expected"] > 0
    assert 0 == proc.returncode
    ran = _apps(cluster, "tidelake-ingest")
    assert len(ran) == before + 1, cluster.state()
    assert ran[-1]["cores"] == 1


def _event(op: Op, key: int, seq: int, status: str) -> ChangeEvent:
    row = {"id": str(key), "status": status}
    return ChangeEvent(
        source="test",
        database="shop",
        table="orders",
        op=op,
        position=Position((seq, 0)),
        pk=("id",),
        key={"id": str(key)},
        before=row if op is Op.DELETE else None,
        after=None if op is Op.DELETE else row,
        commit_ts_ms=1_714_929_186_000 + seq,
        column_types={"id": "bigint", "status": "varchar(16)"},
        seq=seq,
    )


def test_ingest_under_spark_submit_on_the_cluster(cluster: SparkCluster, tmp_path: Path) -> None:
    """`tidelake submit --master spark://… -- ingest --once`: spark-submit runs the ingest as
    an application of the cluster; the staged batch lands in the lake."""
    home = tmp_path / "home"
    config = tmp_path / "tidelake.yaml"
    config.write_text(yaml.safe_dump({"home": str(home)}))
    events = [
        _event(Op.INSERT, 1, 1, "new"),
        _event(Op.INSERT, 2, 2, "new"),
        _event(Op.UPDATE, 1, 3, "paid"),
        _event(Op.DELETE, 2, 4, "new"),
    ]
    storage = LocalStorage(home / "staging")
    path = table_file_path("b1", "shop", "orders")
    storage.put(path, b"".join(e.to_json() + b"\n" for e in events))
    table = TableFile("shop", "orders", path, len(events))
    write_manifest(storage, Manifest("b1", 1, 4, 0, (table,), received=4, staged=4))
    before = len(_apps(cluster, "tidelake-ingest"))

    proc = subprocess.run(
        [
            *TIDELAKE,
            "submit",
            "--config",
            str(config),
            "--master",
            cluster.master_url,
            "--",
            "ingest",
            "--once",
        ],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr[-3000:]
    # spark-submit hands the Python driver's stderr to its stdout.
    assert "ingest: 1 commits, 4 events" in proc.stdout + proc.stderr
    rows = read_table(str(home / "lake"), "shop.orders").to_pylist()
    assert [(1, "paid")] == [(r["id"], r["status"]) for r in rows]
    assert len(_apps(cluster, "tidelake-ingest")) == before + 1, cluster.state()
