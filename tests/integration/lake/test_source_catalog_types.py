"""TiCDC-default canal-json typed from a source catalog: a real MariaDB holds the table's
definition, the stream holds bare ``mysqlType`` names (``decimal``, ``enum``, ``set``, ``bit``:
pingcap/tiflow ``pkg/sink/codec/utils/mysql_types.go`` ``GetMySQLType`` without
content-compatible) and no CREATE TABLE (the table predates the changefeed). Published to a
real nats-server, staged by the real stager process, ingested into Hudi.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession
from stagekit import make_stage_env, run, stop_process

from tidelake.bus import dlq
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer
from tidelake.config import load_config
from tidelake.lake.ingest import Ingestor
from tidelake.verify.lake import read_table

pytestmark = pytest.mark.integration

TYPES = {"id": "bigint", "amount": "decimal", "status": "enum", "tags": "set", "bits": "bit",
         "note": "varchar", "extra": "decimal"}  # fmt: skip


def _insert(row: dict[str, Any], commit_ts: int) -> bytes:
    """A TiCDC canal-json INSERT with default settings (bare mysqlType, the TiDB extension)."""
    return orjson.dumps(
        {
            "id": 0, "database": "shop", "table": "amounts", "pkNames": ["id"], "isDdl": False,
            "type": "INSERT", "es": commit_ts >> 18, "ts": (commit_ts >> 18) + 4, "sql": "",
            "sqlType": {"id": -5, "amount": 3, "status": 4, "tags": -7, "bits": -7, "note": 12,
                        "extra": 3},
            "mysqlType": {k: v for k, v in TYPES.items() if k in row},
            "data": [row], "old": None, "_tidb": {"commitTs": commit_ts},
        }
    )  # fmt: skip


def test_ticdc_default_values_are_typed_exactly_from_the_source_catalog(
    mariadb: MariaDBServer, nats_server: EmbeddedNats, spark: SparkSession, tmp_path: Path
) -> None:
    """DECIMAL(12,2) 12.37 lands as 12.37 (not 12.00), the ENUM index and SET mask as their
    labels, BIT(12) as its number; a column the catalog does not know, whose message type is
    a bare ``decimal``, sends its row to the dead-letter stream with a reason naming table,
    column and value — the other rows land."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS shop")
        cur.execute(
            "CREATE TABLE shop.amounts (id BIGINT PRIMARY KEY, amount DECIMAL(12,2), "
            "status ENUM('new','paid','it''s'), tags SET('a','b','c'), bits BIT(12), "
            "note VARCHAR(20))"
        )
    conn.close()
    env = make_stage_env(
        nats_server,
        tmp_path / "home",
        {
            "lake": {
                "spark": {"master": "local[2]", "driver_memory": "1g"},
                "source_catalog": {"dsn": mariadb.dsn},
            }
        },
    )
    subject = env.subject("shop", "amounts")
    ts = 1_714_929_186_000 << 18
    rows = [
        {"id": "1", "amount": "12.37", "status": "3", "tags": "5", "bits": "2049", "note": "a"},
        {"id": "2", "amount": "-0.05", "status": "1", "tags": "0", "bits": "0", "note": None},
        {"id": "3", "amount": "1.00", "status": "2", "tags": "2", "bits": "1", "note": "c",
         "extra": "7.5"},
    ]  # fmt: skip
    run(env.publish([(subject, _insert(r, ts + i)) for i, r in enumerate(rows)]))
    proc = env.spawn_stager(once=True)
    try:
        assert 0 == proc.wait(300), env.log_text()
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise
    cfg = load_config(env.config_path, environ={})
    stats = Ingestor(cfg, spark).run_once()
    assert {} == stats.refused

    lake = sorted(read_table(cfg.lake_root, "shop.amounts").to_pylist(), key=lambda r: r["id"])
    expected = [
        {"id": 1, "amount": Decimal("12.37"), "status": "it's", "tags": "a,c", "bits": 2049,
         "note": "a"},
        {"id": 2, "amount": Decimal("-0.05"), "status": "new", "tags": "", "bits": 0,
         "note": None},
    ]  # fmt: skip
    assert expected == [{k: r[k] for k in expected[0]} for r in lake]
    letters = run(env.dlq_messages())
    assert 1 == len(letters)
    headers = letters[0].headers or {}
    reason = headers[dlq.HEADER_REASON]
    assert "shop.amounts: value '7.5' of column extra cannot be stored exactly" in reason
    assert "the message says only 'decimal'" in reason
    assert "ingest" == headers["Tidelake-Stage"]
    assert _insert(rows[2], ts + 2) == bytes(letters[0].data)
