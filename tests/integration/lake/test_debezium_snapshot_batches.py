"""A Debezium snapshot many batches long, and a key change cut by a batch boundary, through a
real nats-server, the real stager process and the ingest.

Debezium gives every snapshot row of a table the same source position (PostgreSQL:
``source.sequence = [null, <LSN the snapshot started at>]``, ``PostgresSnapshotChangeEventSource``
/ ``SourceInfo`` in debezium/debezium; seen in tests/fixtures/debezium_server/), and a
primary-key change is a delete and a create at one position. The messages are shaped as
Debezium Server's NATS JetStream sink publishes them with ``schemas.enable=false``: the value
only, no key (the table's key and types come from ``lake.tables``).
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession
from stagekit import StageEnv, make_stage_env, run, stop_process

from tidelake.bus.server import EmbeddedNats
from tidelake.config import load_config
from tidelake.lake.ingest import Ingestor
from tidelake.verify.lake import read_table

pytestmark = pytest.mark.integration

ROWS = 40_000
BATCH = 3_600
SNAPSHOT_LSN = 22_116_704


def _message(op: str, row: dict[str, Any] | None, before: dict[str, Any] | None, lsn: int,
             last_commit: int | None, snapshot: str) -> bytes:  # fmt: skip
    source = {
        "version": "3.6.0.Final",
        "connector": "postgresql",
        "name": "cdc",
        "ts_ms": 1_795_530_171_906,
        "snapshot": snapshot,
        "db": "app",
        "sequence": orjson.dumps(
            [None if last_commit is None else str(last_commit), str(lsn)]
        ).decode(),
        "schema": "public",
        "table": "big",
        "txId": 771,
        "lsn": lsn,
        "xmin": None,
    }
    return orjson.dumps(
        {"before": before, "after": row, "source": source, "transaction": None, "op": op,
         "ts_ms": 1_795_530_172_000}
    )  # fmt: skip


def _amount(cents: int) -> str:
    """``numeric(12,2)`` as Debezium's precise decimal: base64 of the unscaled value's
    minimal big-endian two's complement (``JdbcValueConverters.convertDecimal``, Kafka
    ``Decimal.fromLogical`` → ``BigInteger.toByteArray``)."""
    size = (cents.bit_length() + 8) // 8
    return base64.b64encode(cents.to_bytes(size, "big", signed=True)).decode()


def _stage_and_ingest(env: StageEnv, spark: SparkSession) -> None:
    proc = env.spawn_stager(once=True)
    try:
        assert 0 == proc.wait(600), env.log_text()
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise AssertionError("the stager did not drain:\n" + env.log_text()[-3000:]) from None
    stats = Ingestor(load_config(env.config_path, environ={}), spark).run_once()
    assert {} == stats.refused


def test_a_snapshot_of_40k_rows_over_many_batches_and_a_split_key_change_land_whole(
    nats_server: EmbeddedNats, spark: SparkSession, tmp_path: Path
) -> None:
    """40,000 snapshot rows sharing one position, staged and ingested in batches of 3,600,
    all land; a key change whose delete and create are cut apart by a batch boundary (and an
    ingest restart) ends as old key gone, new key present."""
    env = make_stage_env(
        nats_server,
        tmp_path / "home",
        {
            "stage": {"max_events": BATCH},
            "ingest": {"max_batch_events": BATCH},
            "lake": {
                "spark": {"master": "local[2]", "driver_memory": "1g"},
                "tables": {
                    "public.big": {
                        "primary_key": ["id"],
                        "columns": {"id": "bigint", "v": "text", "amount": "numeric(12,2)"},
                    }
                },
            },
        },
    )
    subject = env.subject("public", "big")
    snapshot = [
        _message("r", {"id": i, "v": f"row {i}", "amount": _amount(i * 7 - 3)}, None,
                 SNAPSHOT_LSN, None, "true" if i < ROWS else "last")
        for i in range(1, ROWS + 1)
    ]  # fmt: skip
    run(env.publish([(subject, m) for m in snapshot]))
    _stage_and_ingest(env, spark)

    # UPDATE big SET id = 0 WHERE id = 5: Debezium sends d(5) then c(0) at one position.
    lsn = SNAPSHOT_LSN + 500
    gone = {"id": 5, "v": "row 5", "amount": _amount(32)}
    run(env.publish([(subject, _message("d", None, gone, lsn, SNAPSHOT_LSN + 400, "false"))]))
    _stage_and_ingest(env, spark)  # the batch is cut between the two halves
    moved = {"id": 0, "v": "row 5", "amount": _amount(32)}
    run(env.publish([(subject, _message("c", moved, None, lsn, SNAPSHOT_LSN + 400, "false"))]))
    _stage_and_ingest(env, spark)

    cfg = load_config(env.config_path, environ={})
    lake = {
        r["id"]: (r["v"], str(r["amount"]))
        for r in read_table(cfg.lake_root, "public.big").to_pylist()
    }
    expected = {i: (f"row {i}", f"{(i * 7 - 3) / 100:.2f}") for i in range(1, ROWS + 1) if i != 5}
    expected[0] = ("row 5", "0.32")
    assert len(expected) == len(lake)
    assert expected == lake
    commits = [
        orjson.loads(line)
        for line in (cfg.lake_state_dir / "commits.jsonl").read_bytes().splitlines()
    ]
    assert len([c for c in commits if c.get("upserts")]) >= ROWS // BATCH
    assert 0 == sum(c.get("skipped_stale", 0) for c in commits)
