"""A lifecycle view rebuilt by replaying the stream equals the one the ingest kept round by
round (view/replay.py, ``LifecycleView.rebuild``), on real components: TiCDC canal-json
messages published to a real JetStream stream, a ``tidelake stage --once`` child and
``tidelake ingest --once`` children (Spark + Hudi) keeping the view, then ``ViewKeeper.rebuild``
in this process. An update the lake dead-letters (a fraction its DECIMAL would round) is left
out of both; a view broken by a round it missed is whole again after the rebuild."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from lakekit import lake_env
from pyspark.sql import SparkSession
from stagekit import StageEnv, run

from tidelake.config import load_config
from tidelake.view.keeper import ViewKeeper, broken_path
from tidelake.view.table import ViewTable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VIEW = "life"
TYPES = {"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"}
SQL_TYPES = {"id": -5, "status": 12, "amount": 3}
_T0 = 1_790_000_000_000


def _message(kind: str, oid: int, status: str, amount: str, ms: int, old: Any = None) -> bytes:
    """One TiCDC canal-json row message (pingcap/tiflow pkg/sink/codec/canal/canal_json_*:
    ``data`` the row, ``old`` the changed columns' old values, ``_tidb.commitTs`` a TSO)."""
    return orjson.dumps(
        {
            "id": 0,
            "database": "shop",
            "table": "orders",
            "pkNames": ["id"],
            "isDdl": False,
            "type": kind,
            "es": _T0 + ms,
            "ts": _T0 + ms + 5,
            "sql": "",
            "sqlType": SQL_TYPES,
            "mysqlType": TYPES,
            "data": [{"id": str(oid), "status": status, "amount": amount}],
            "old": old,
            "_tidb": {"commitTs": (_T0 + ms) << 18},
        }
    )


def _publish(env: StageEnv, rows: list[bytes]) -> None:
    subject = env.subject("shop", "orders")
    run(env.publish([(subject, r) for r in rows]))


def _stage_and_ingest(env: StageEnv) -> None:
    stager = env.spawn_stager(once=True)
    assert 0 == stager.wait(120), env.log_text()
    ingest = env.run_cli("ingest", "--once", env=lake_env(Path(env.cfg.home)))
    assert 0 == ingest.returncode, ingest.stderr[-3000:]


def _rows(spark: SparkSession, keeper: ViewKeeper) -> set[tuple[Any, ...]]:
    frame = ViewTable(keeper.config, spark, VIEW).read()
    kept = [c for c in frame.columns if not c.startswith("_hoodie")]
    return {tuple(r[c] for c in kept) for r in frame.select(*kept).collect()}


def test_a_replay_rebuilds_the_lifecycle_the_ingest_kept(
    stage_env_factory: Callable[..., StageEnv], spark: SparkSession
) -> None:
    env = stage_env_factory(
        stage={"max_age_s": 0.5, "max_events": 4},
        views={VIEW: {"kind": "lifecycle", "table": "shop.orders", "state_column": "status"}},
    )
    _publish(
        env,
        [
            _message("INSERT", 1, "new", "5.00", 0),
            _message("INSERT", 2, "new", "7.00", 1),
            _message("UPDATE", 1, "paid", "5.00", 60_000, [{"status": "new"}]),
            _message("UPDATE", 1, "paid", "6.00", 61_000, [{"amount": "5.00"}]),
            # Dead-lettered by the ingest: 1.555 does not fit DECIMAL(10,2). Order 2 stays new.
            _message("UPDATE", 2, "void", "1.555", 62_000, [{"status": "new"}]),
            _message("INSERT", 3, "new", "1.00", 63_000),
        ],
    )
    _stage_and_ingest(env)
    _publish(
        env,
        [
            _message("UPDATE", 1, "shipped", "6.00", 120_000, [{"status": "paid"}]),
            _message("UPDATE", 3, "paid", "1.00", 121_000, [{"status": "new"}]),
            _message("DELETE", 3, "paid", "1.00", 180_000),
            _message("UPDATE", 1, "paid", "6.00", 181_000, [{"status": "shipped"}]),
        ],
    )
    _stage_and_ingest(env)
    dead = run(env.dlq_messages())
    assert len(dead) == 1, [m.headers for m in dead]

    config = load_config(env.config_path, environ=lake_env(Path(env.cfg.home)))
    keeper = ViewKeeper(config, spark)
    kept = _rows(spark, keeper)
    assert keeper.verify(VIEW).ok
    states = {(r[1], r[2]) for r in kept}  # (id, state)
    assert (2, "void") not in states
    assert {(1, "new"), (1, "paid"), (1, "shipped"), (2, "new"), (3, "new"), (3, "paid")} == states

    # A round the view missed (as when it failed or was paused) breaks it; a replay mends it.
    keeper._break(VIEW, "a round's events were not applied (test)")
    assert keeper.step(VIEW).outcome == "failed"
    rebuilt = keeper.rebuild(VIEW)
    assert rebuilt.outcome == "rebuild", rebuilt
    assert rebuilt.records == 9  # the ten row events but the dead-lettered one
    assert not broken_path(config, VIEW).exists()
    assert _rows(spark, keeper) == kept
    assert keeper.verify(VIEW).ok
    assert keeper.step(VIEW).outcome == "current"
