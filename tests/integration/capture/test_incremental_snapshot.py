"""Incremental snapshots on real servers: a table added to a running capture, a re-snapshot
request, ``kill -9`` mid-snapshot, all while a writer changes the table (capture/incremental.py).

The stream read back and folded by key in position order (what the lake's ingest does) must
equal the source table: no gap, no stale overwrite, whatever chunks were read twice.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from capturekit import (
    CaptureRun,
    Writer,
    decoded,
    fold,
    mariadb_caught_up,
    mysql_rows,
    postgres_rows,
    row_differences,
    stream_messages,
)

from tidelake.bus.server import EmbeddedNats
from tidelake.capture import pgoutput
from tidelake.capture.incremental import RESTART_GAP
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.pipeline.processes import tidelake_argv

pytestmark = pytest.mark.integration

ROWS = 10_000
#: Small chunks, several workers: ~500 chunks, read in parallel, many watermark windows.
CAPTURE = {"chunk_rows": 20, "snapshot_workers": 3}


def _table(state: dict[str, Any] | None, table: str) -> dict[str, Any]:
    return (((state or {}).get("incremental") or {}).get("tables") or {}).get(table) or {}


def _request(run: CaptureRun, table: str) -> None:
    """``tidelake capture snapshot TABLE`` as a user runs it."""
    env = {**os.environ, "TIDELAKE_CONFIG": str(run.config_path)}
    done = subprocess.run(
        [*tidelake_argv("capture"), "snapshot", table], env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout


def _snapshot_rows(events: list[Any], table: str) -> int:
    """Rows the incremental snapshot emitted: their sequence number (after the binlog file
    and offset, or the LSN) is at least RESTART_GAP."""
    return sum(
        1
        for e in events
        if e.table_id == table and any(p >= RESTART_GAP for p in e.position.parts[1:])
    )


def _postgres_caught_up(postgres: PostgresServer) -> Any:
    """Waits until a run's saved LSN reaches the server's WAL end as of the call."""

    def caught_up(run: CaptureRun) -> None:
        c = postgres.connect()
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            target = pgoutput.parse_lsn(cur.fetchone()[0])
        c.close()
        run.wait_until(lambda s: int(s["lsn"]) >= target, 60)

    return caught_up


def _postgres_writer_connection(postgres: PostgresServer) -> Any:
    c = postgres.connect()
    c.autocommit = False
    return c


def _add_kill_request_check(
    tmp_path: Path,
    make_run: Any,
    writer: Writer,
    table: str,
    caught_up: Any,
    source_rows: Any,
    nats: EmbeddedNats,
) -> None:
    """The scenario both servers go through (see the module doc)."""
    home = tmp_path / "capture"
    first_tables = [f"{table.split('.')[0]}.a"]
    first = make_run(home, first_tables).start()
    first.wait_until(lambda s: s["phase"] == "streaming", 60)
    writer.start()
    time.sleep(0.5)
    first.process.stop()
    # The table joins capture.tables: snapshotted incrementally while streaming goes on.
    run = make_run(home, [*first_tables, table]).start()
    run.wait_until(lambda s: _table(s, table).get("chunks_done", 0) >= 10, 120)
    assert _table(run.position(), table)["state"] == "running"
    run.process.kill()  # SIGKILL mid-snapshot
    time.sleep(0.5)  # changes while the capture is down
    run.start()
    run.wait_until(lambda s: _table(s, table).get("state") == "done", 120)
    # A re-snapshot asked for by the verb, picked up by the running capture.
    _request(run, table)
    request = run.config.stage_root + f"/_tidelake/capture/snapshot-requests/{table}.json"
    run.wait_until(
        lambda s: (
            _table(s, table).get("request") is not None and _table(s, table).get("state") == "done"
        ),
        120,
    )
    deadline = time.monotonic() + 10
    while Path(request).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(request).exists(), "the request record stays after the snapshot was saved"
    writer.stop.set()
    writer.join()
    assert writer.error is None
    assert writer.committed > 200
    caught_up(run)
    events = decoded(stream_messages(nats.url))
    # At least the table once, plus the part re-read after the kill and the re-snapshot.
    assert _snapshot_rows(events, table) > ROWS * 0.8
    assert "" == row_differences(source_rows(), fold(events, table))
    run.process.stop()


def test_mariadb_table_added_then_requested_under_writes_with_kill_9(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """MariaDB: a 10,000-row table added to ``capture.tables`` is snapshotted in parallel
    chunks while a writer updates, deletes, inserts and re-keys its rows; ``kill -9`` after chunk
    10 and a restart; then ``tidelake capture snapshot`` re-snapshots it (request record
    removed once saved). The stream folds to exactly the source table."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE inc")
        cur.execute("USE inc")
        cur.execute("CREATE TABLE inc.a (id int PRIMARY KEY, v varchar(8))")
        cur.execute("INSERT INTO inc.a VALUES (1, 'a')")
        cur.execute("CREATE TABLE inc.t (id bigint PRIMARY KEY, v varchar(32), n int)")
        cur.execute(f"INSERT INTO inc.t SELECT seq, concat('v', seq), 0 FROM seq_1_to_{ROWS}")
    conn.close()
    dsn = f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/"

    def make_run(home: Path, tables: list[str]) -> CaptureRun:
        return CaptureRun(home, nats.url, dsn, tables, password=mariadb.password,
                          capture=CAPTURE)  # fmt: skip

    writer = Writer(lambda: mariadb.connect(autocommit=False), "inc.t", ROWS, seed=7,
                    pause_s=0.003)  # fmt: skip
    _add_kill_request_check(
        tmp_path, make_run, writer, "inc.t", lambda run: mariadb_caught_up(mariadb, run),
        lambda: mysql_rows(mariadb.connect(), "inc.t"), nats,
    )  # fmt: skip


def test_postgres_table_added_then_requested_under_writes_with_kill_9(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """PostgreSQL: the same scenario as MariaDB's (table added, parallel chunks under a
    writer, ``kill -9`` mid-snapshot, re-snapshot by the verb): the stream folds to exactly
    the source table."""
    conn = postgres.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA incpg")
        cur.execute("CREATE TABLE incpg.a (id int PRIMARY KEY, v text)")
        cur.execute("INSERT INTO incpg.a VALUES (1, 'a')")
        cur.execute("CREATE TABLE incpg.t (id bigint PRIMARY KEY, v text, n int)")
        cur.execute(f"INSERT INTO incpg.t SELECT g, 'v' || g, 0 FROM generate_series(1, {ROWS}) g")
    conn.close()

    def make_run(home: Path, tables: list[str]) -> CaptureRun:
        return CaptureRun(home, nats.url, postgres.dsn, tables,
                          capture={**CAPTURE, "slot": "incpg", "publication": "incpg"})  # fmt: skip

    writer = Writer(lambda: _postgres_writer_connection(postgres), "incpg.t", ROWS, seed=8,
                    pause_s=0.003)  # fmt: skip
    _add_kill_request_check(
        tmp_path, make_run, writer, "incpg.t", _postgres_caught_up(postgres),
        lambda: postgres_rows(postgres.connect(), "incpg.t", ["id"]), nats,
    )  # fmt: skip


#: Rows of the text-keyed table a first start reads by keyset chunks.
KEYSET_ROWS = 2_000


def _first_start_incremental(
    tmp_path: Path,
    make_run: Any,
    writer: Writer,
    tables: tuple[str, str],
    caught_up: Any,
    source_rows: Any,
    nats: EmbeddedNats,
) -> None:
    """``capture.snapshot: incremental`` at a first start (no saved position): streaming
    begins at the log's end at once, and both existing tables (integer key: ranges; text
    key: keyset chunks) are read in parallel chunks beside it, under a writer, with
    ``kill -9`` mid-snapshot. No initial snapshot runs (no saved state ever has phase
    ``snapshot``), and the stream folds to both source tables."""
    ranged, keyset = tables
    run = make_run(tmp_path / "capture", [ranged, keyset]).start()
    writer.start()
    phases: set[str] = set()

    def mid_snapshot(s: dict[str, Any]) -> bool:
        phases.add(s["phase"])
        return _table(s, ranged).get("chunks_done", 0) >= 10

    run.wait_until(mid_snapshot, 120)
    assert _table(run.position(), ranged)["state"] == "running"
    run.process.kill()  # SIGKILL mid-snapshot
    time.sleep(0.5)
    run.start()

    def both_done(s: dict[str, Any]) -> bool:
        phases.add(s["phase"])
        return all(_table(s, t).get("state") == "done" for t in tables)

    run.wait_until(both_done, 180)
    writer.stop.set()
    writer.join()
    assert writer.error is None
    assert writer.committed > 200
    caught_up(run)
    run.process.stop()
    assert {"streaming"} == phases
    events = decoded(stream_messages(nats.url))
    assert _snapshot_rows(events, ranged) > ROWS * 0.8
    assert _snapshot_rows(events, keyset) >= KEYSET_ROWS
    for table in tables:
        assert "" == row_differences(source_rows(table), fold(events, table)), table


def test_mariadb_first_start_with_incremental_snapshot_under_writes_with_kill_9(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """MariaDB, ``capture.snapshot: incremental`` (the module's first-start scenario)."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE incfirst")
        cur.execute("USE incfirst")  # seq_1_to_N lives in the current database
        cur.execute("CREATE TABLE incfirst.t (id bigint PRIMARY KEY, v varchar(32), n int)")
        cur.execute(f"INSERT INTO incfirst.t SELECT seq, concat('v', seq), 0 FROM seq_1_to_{ROWS}")
        cur.execute("CREATE TABLE incfirst.k (code varchar(16) PRIMARY KEY, n int)")
        cur.execute(
            "INSERT INTO incfirst.k SELECT concat('k', lpad(seq, 6, '0')), seq "
            f"FROM seq_1_to_{KEYSET_ROWS}"
        )
    conn.close()
    dsn = f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/"

    def make_run(home: Path, tables: list[str]) -> CaptureRun:
        return CaptureRun(home, nats.url, dsn, tables, password=mariadb.password,
                          capture={**CAPTURE, "snapshot": "incremental"})  # fmt: skip

    writer = Writer(lambda: mariadb.connect(autocommit=False), "incfirst.t", ROWS, seed=9,
                    pause_s=0.003)  # fmt: skip
    _first_start_incremental(
        tmp_path, make_run, writer, ("incfirst.t", "incfirst.k"),
        lambda run: mariadb_caught_up(mariadb, run),
        lambda table: mysql_rows(mariadb.connect(), table), nats,
    )  # fmt: skip


def test_postgres_first_start_with_incremental_snapshot_under_writes_with_kill_9(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """PostgreSQL, ``capture.snapshot: incremental`` (the module's first-start scenario)."""
    conn = postgres.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA incfirstpg")
        cur.execute("CREATE TABLE incfirstpg.t (id bigint PRIMARY KEY, v text, n int)")
        cur.execute(
            f"INSERT INTO incfirstpg.t SELECT g, 'v' || g, 0 FROM generate_series(1, {ROWS}) g"
        )
        cur.execute("CREATE TABLE incfirstpg.k (code text PRIMARY KEY, n int)")
        cur.execute(
            "INSERT INTO incfirstpg.k SELECT 'k' || lpad(g::text, 6, '0'), g "
            f"FROM generate_series(1, {KEYSET_ROWS}) g"
        )
    conn.close()

    def make_run(home: Path, tables: list[str]) -> CaptureRun:
        return CaptureRun(home, nats.url, postgres.dsn, tables,
                          capture={**CAPTURE, "snapshot": "incremental", "slot": "incfirst",
                                   "publication": "incfirst"})  # fmt: skip

    keys = {"incfirstpg.t": ["id"], "incfirstpg.k": ["code"]}
    writer = Writer(lambda: _postgres_writer_connection(postgres), "incfirstpg.t", ROWS,
                    seed=10, pause_s=0.003)  # fmt: skip
    _first_start_incremental(
        tmp_path, make_run, writer, ("incfirstpg.t", "incfirstpg.k"),
        _postgres_caught_up(postgres),
        lambda table: postgres_rows(postgres.connect(), table, keys[table]), nats,
    )  # fmt: skip
