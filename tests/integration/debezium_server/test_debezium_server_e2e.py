"""The real Debezium Server feeding tidelake: PostgreSQL and MariaDB → nats-jetstream → lake.

Debezium Server 3.6.0.Final (``scripts/setup``) captures a private PostgreSQL (pgoutput, JSON
converter *without* schemas: column types come from ``lake.source_catalog``) and a private
MariaDB (MariaDbConnector, JSON converter *with* schemas), each publishing through its own
``nats-jetstream`` sink into tidelake's CDC stream; the sink sends no key, so primary keys
come from ``lake.tables``. The stager runs as a child process, the ingest in this process
with batches far smaller than the PostgreSQL snapshot. Debezium Server is stopped, the
sources change while it is down, and it is started again. Then every table is compared with
its source value by value by ``tidelake verify``'s comparison (``verify/source.py``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from pprint import pformat
from typing import Any

import dbzkit
import pytest
import yaml
from pyspark.sql import SparkSession

from tidelake.bus.connection import connect
from tidelake.bus.dlq import HEADER_REASON
from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.config import Config, load_config
from tidelake.lake.ingest import Ingestor
from tidelake.pipeline.debezium_server import DebeziumServer
from tidelake.pipeline.processes import StageProcess, tidelake_argv
from tidelake.runtime.storage import LocalStorage
from tidelake.verify.source import verify_table

pytestmark = pytest.mark.timeout(480)

SNAPSHOT_CUSTOMERS = 12_000
#: Far below the snapshot: it spans many stager batches and many ingest commits.
STAGE_MAX_EVENTS = 1_000
INGEST_MAX_BATCH_EVENTS = 3_000

PG_TABLES = {
    "public.customers": ["id"],
    "public.all_types": ["id"],
    "public.toasted": ["id"],
    "public.composite": ["b", "a"],
}
MARIADB_TABLES = {
    "shop.customers": ["id"],
    "shop.all_types": ["id"],
    "shop.composite": ["b", "a"],
}

#: Changes written while Debezium Server runs (after its snapshot).
PG_PHASE1 = [
    *dbzkit.PG_STREAMING_SQL[:3],
    "UPDATE public.customers SET balance = balance + 0.01 WHERE id % 97 = 0",
    "DELETE FROM public.customers WHERE id % 101 = 0",
    # primary-key changes of many rows in one statement (delete + create at one position each)
    "UPDATE public.customers SET id = id + 1000000 WHERE id % 211 = 0",
    "UPDATE public.toasted SET n = n + 1 WHERE id = 1",
    "UPDATE public.composite SET b = 'z' WHERE a = 2 AND b = 'x'",
]
#: Changes written while Debezium Server is stopped: it must pick them up on restart.
PG_PHASE2 = [
    "INSERT INTO public.customers SELECT g, 'late ' || g, g * 0.5"
    " FROM generate_series(30001, 30500) g",
    "UPDATE public.customers SET name = name || ' (2)' WHERE id % 89 = 0",
    "UPDATE public.customers SET id = id + 2000000 WHERE id BETWEEN 30001 AND 30010",
    "UPDATE public.toasted SET n = n + 10 WHERE id = 1",
    "UPDATE public.all_types SET c_text = 'after restart', c_numeric_free = 7.000001 WHERE id = 1",
    "DELETE FROM public.composite WHERE a = 1 AND b = 'y'",
]
MARIADB_PHASE1 = [
    *dbzkit.MARIADB_STREAMING_SQL[:3],
    "UPDATE shop.customers SET balance = balance + 0.01 WHERE id % 7 = 0",
    "UPDATE shop.customers SET id = id + 100000 WHERE id % 13 = 0",
    "UPDATE shop.composite SET b = 'z' WHERE a = 2 AND b = 'x'",
]
MARIADB_PHASE2 = [
    "DELETE FROM shop.customers WHERE id % 11 = 0",
    "UPDATE shop.all_types SET c_text = 'after restart', c_set = 'b' WHERE id = 1",
    "DELETE FROM shop.composite WHERE a = 1 AND b = 'y'",
]


def _config_doc(home: Path, nats_url: str, postgres: PostgresServer) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {
        t: {"primary_key": pk} for t, pk in {**PG_TABLES, **MARIADB_TABLES}.items()
    }
    # Debezium's Connect schema of a MySQL TIME carries no fsp (MicroTime, trailing zeros
    # dropped): the column's declared type gives the lake its fraction digits.
    tables["shop.all_types"]["columns"] = {"c_time": "time(6)"}
    return {
        "home": str(home),
        "bus": {"url": nats_url},
        "stage": {"max_events": STAGE_MAX_EVENTS, "max_age_s": 0.5},
        "ingest": {"max_batch_events": INGEST_MAX_BATCH_EVENTS, "parallel_tables": 2},
        "lake": {
            "tables": tables,
            # the schemaless PostgreSQL stream is typed from the source's catalog
            "source_catalog": {"dsn": f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres"},
            "spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2},
        },
    }


async def _bus_state(cfg: Config) -> tuple[int, int, int, int]:
    """(last stream sequence, consumer's delivered stream sequence, pending, ack pending)."""
    nc = await connect(cfg.bus)
    try:
        js = nc.jetstream()
        stream = await js.stream_info(cfg.bus.stream.name)
        consumer = await js.consumer_info(cfg.bus.stream.name, cfg.bus.consumer.durable)
        return (
            int(stream.state.last_seq),
            int(consumer.delivered.stream_seq),
            int(consumer.num_pending),
            int(consumer.num_ack_pending),
        )
    finally:
        await nc.close()


async def _dead_letters(cfg: Config) -> list[str]:
    nc = await connect(cfg.bus)
    try:
        js = nc.jetstream()
        info = await js.stream_info(cfg.bus.dlq.name)
        total = int(info.state.messages)
        if total == 0:
            return []
        sub = await js.pull_subscribe(f"{cfg.bus.dlq.subject_prefix}.>", stream=cfg.bus.dlq.name)
        msgs = await sub.fetch(min(total, 20), timeout=5)
        return [f"{total} dead letters; first:"] + [
            f"{m.subject}: {(m.headers or {}).get(HEADER_REASON, '')[:300]}" for m in msgs[:5]
        ]
    finally:
        await nc.close()


def _wait_staged(cfg: Config, stager: StageProcess, quiet_s: float, timeout_s: float) -> int:
    """Wait until the producers went quiet and the stager has acked everything."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, int, int, int] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        assert stager.alive(), f"the stager died:\n{stager.log_tail()}"
        state = asyncio.run(_bus_state(cfg))
        if state != last:
            last, since = state, time.monotonic()
        caught_up = state[0] > 0 and state[1] == state[0] and state[2] == 0 and state[3] == 0
        if caught_up and time.monotonic() - since >= quiet_s:
            return state[0]
        time.sleep(0.5)
    raise AssertionError(f"not staged in {timeout_s}s: {last}\n{stager.log_tail()}")


def _execute(conn: Any, statements: list[str], params: dict[str, str] | None = None) -> None:
    """Run each statement in its own transaction; parameters only where one is named (a
    statement with parameters would read its modulo ``%`` as a placeholder)."""
    with conn.cursor() as cur:
        for sql in statements:
            if params is not None and "%(" in sql:
                cur.execute(sql, params)
            else:
                cur.execute(sql)


def _start_streaming(*servers: DebeziumServer) -> None:
    for s in servers:
        s.start()
    for s in servers:
        s.wait_for_log(dbzkit.STREAMING_STARTED, timeout_s=180)


def test_debezium_server_snapshot_restart_and_every_type_land_value_for_value(
    nats_server: EmbeddedNats,
    postgres: PostgresServer,
    mariadb: MariaDBServer,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    """A 12,000-row PostgreSQL snapshot over many batches, a TOASTed column left unchanged,
    key changes, every common PostgreSQL and MariaDB type, and a Debezium Server restart with
    changes written while it was down: every lake table equals its source, value by value,
    and nothing is dead-lettered."""
    home = tmp_path / "home"
    home.mkdir()
    config_path = home / "config.yaml"
    config_path.write_text(yaml.safe_dump(_config_doc(home, nats_server.url, postgres)))
    cfg = load_config(config_path, environ={})
    asyncio.run(provision(cfg.bus))

    pg = postgres.connect()
    notes = {"note1": dbzkit.long_text(1), "note2": dbzkit.long_text(2)}
    _execute(pg, [dbzkit.PG_SCHEMA])
    _execute(pg, dbzkit.PG_SNAPSHOT_SQL, notes)
    _execute(
        pg,
        [
            "INSERT INTO public.customers SELECT g, 'customer ' || g, (g % 1000) * 1.25 + 0.01"
            f" FROM generate_series(6, {SNAPSHOT_CUSTOMERS}) g"
        ],
    )
    maria = mariadb.connect()
    _execute(maria, dbzkit.MARIADB_SCHEMA + dbzkit.MARIADB_SNAPSHOT_SQL)
    _execute(
        maria,
        [
            "INSERT INTO shop.customers SELECT seq, CONCAT('c', seq), seq * 0.25"
            " FROM shop.seq_6_to_2000"
        ],
    )

    pg_props = dbzkit.pg_properties(
        pg_port=postgres.port,
        nats_url=nats_server.url,
        prefix="cdc.pg",
        slot="tidelake_e2e",
        schemas=False,
        http_port=dbzkit.http_port(),
    )
    # An interval's months are made 365.25/12 days by the default (MicroDuration): keep text.
    pg_props["debezium.source.interval.handling.mode"] = "string"
    maria_props = dbzkit.mariadb_properties(
        port=mariadb.port,
        nats_url=nats_server.url,
        prefix="cdc.maria",
        server_id=5501,
        schemas=True,
        http_port=dbzkit.http_port(),
    )
    # BIGINT UNSIGNED above 2^63 wraps to a negative long by default.
    maria_props["debezium.source.bigint.unsigned.handling.mode"] = "precise"
    # The schema-change topic carries DROP TABLE/DATABASE statements of the snapshot.
    maria_props["debezium.source.include.schema.changes"] = False
    dbz_pg = DebeziumServer(tmp_path / "dbz-pg", pg_props)
    dbz_maria = DebeziumServer(tmp_path / "dbz-maria", maria_props)

    stager = StageProcess(
        "stager",
        tidelake_argv("stage"),
        {"TIDELAKE_CONFIG": str(config_path)},
        home / "stager.log",
    )
    stager.start()
    ingestor = Ingestor(cfg, spark, LocalStorage(cfg.stage_root))
    try:
        _start_streaming(dbz_pg, dbz_maria)
        _execute(pg, PG_PHASE1, notes)
        _execute(maria, MARIADB_PHASE1)
        _wait_staged(cfg, stager, quiet_s=4, timeout_s=180)
        first = ingestor.run_once()

        # Stopped cleanly: the offsets are saved; the changes below wait in the WAL / binlog.
        dbz_pg.stop()
        dbz_maria.stop()
        _execute(pg, PG_PHASE2)
        _execute(maria, MARIADB_PHASE2)
        _start_streaming(dbz_pg, dbz_maria)
        _wait_staged(cfg, stager, quiet_s=4, timeout_s=180)
        second = ingestor.run_once()
    finally:
        dbz_pg.stop()
        dbz_maria.stop()
        stager.stop()

    lake_root = str(cfg.lake_root)
    maria_dsn = f"mysql://{mariadb.user}:{mariadb.password}@127.0.0.1:{mariadb.port}/"
    pg_dsn = f"postgresql://postgres@127.0.0.1:{postgres.port}/postgres"
    results = {t: verify_table(pg_dsn, lake_root, t) for t in PG_TABLES} | {
        t: verify_table(maria_dsn, lake_root, t) for t in MARIADB_TABLES
    }
    problems = {
        table: {
            "error": v.error,
            "rows (source, lake)": (v.rows_source, v.rows_lake),
            "missing/unexpected/different": (v.missing, v.unexpected, v.different),
            "first": v.samples[:3],
        }
        for table, v in results.items()
        if not v.ok
    }
    dead = asyncio.run(_dead_letters(cfg))
    report = f"ingest runs: {first}, {second}\n{pformat(problems, width=100)}\n{dead}"
    assert ({}, []) == (problems, dead), report
    # The snapshot really spanned many ingest batches (and the comparison compared rows).
    assert results["public.customers"].rows_source > 4 * INGEST_MAX_BATCH_EVENTS
