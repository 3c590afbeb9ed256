"""A PostgreSQL table dropped and another renamed reach the lake (Spark + Hudi) through the
capture's DDL log (``capture.ddl_log: true``): the real capture's stream, staged and ingested,
leaves the lake equal to the source."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lakekit import Lake

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.pgoutput import parse_lsn
from tidelake.capture.servers import PostgresServer
from tidelake.events import ChangeEvent, Op

sys.path.insert(0, str(Path(__file__).parents[1] / "capture"))
from capturekit import CaptureRun, decoded, postgres_rows, stream_messages

pytestmark = pytest.mark.integration


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """The test's own nats-server: its stream holds only this capture's messages."""
    with EmbeddedNats(tmp_path / "nats") as server:
        yield server


def _caught_up(server: PostgresServer, run: CaptureRun) -> None:
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        lsn = parse_lsn(cur.fetchone()[0])
    conn.close()
    run.wait_until(lambda s: s["phase"] == "streaming" and int(s["lsn"]) >= lsn, 60)


def _stage_as_the_stager(lake: Lake, events: list[ChangeEvent]) -> None:
    """Staged batches cut after each DDL event, as the stager cuts them (stage/batch.py: a
    DDL is a barrier, the last event of its batch)."""
    batch: list[ChangeEvent] = []
    for event in sorted(events, key=lambda e: e.seq):
        batch.append(event)
        if event.op is Op.DDL:
            lake.stage(batch)
            batch = []
    if batch:
        lake.stage(batch)


def test_dropped_and_renamed_tables_end_so_in_the_lake(
    postgres: PostgresServer, nats: EmbeddedNats, lake: Lake, tmp_path: Path
) -> None:
    """Snapshot, then rows, a DROP TABLE, an ALTER TABLE ... RENAME TO with rows after it, and
    a DROP followed by a CREATE of the same name with other columns: the dropped table is gone
    from the lake (files and catalog), the renamed one holds the source's rows under its new
    name only, the re-created one holds only its new rows and columns, the untouched one
    equals the source."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE SCHEMA lk; "
            "CREATE TABLE lk.keep (id int PRIMARY KEY, v text); "
            "CREATE TABLE lk.dropme (id int PRIMARY KEY, v text); "
            "CREATE TABLE lk.old_name (id int PRIMARY KEY, v text); "
            "CREATE TABLE lk.again (id int PRIMARY KEY, v text); "
            "INSERT INTO lk.again SELECT g, 'a' || g FROM generate_series(1, 20) g; "
            "INSERT INTO lk.keep SELECT g, 'k' || g FROM generate_series(1, 20) g; "
            "INSERT INTO lk.dropme SELECT g, 'd' || g FROM generate_series(1, 20) g; "
            "INSERT INTO lk.old_name SELECT g, 'r' || g FROM generate_series(1, 20) g"
        )
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["lk.*"],
        capture={"slot": "tl_lk", "publication": "tl_lk", "heartbeat_s": 0.5, "ddl_log": True},
    ).start()  # fmt: skip
    _caught_up(postgres, run)
    with conn.cursor() as cur:
        cur.execute("UPDATE lk.dropme SET v = 'changed' WHERE id < 5")
        cur.execute("UPDATE lk.old_name SET v = 'before rename' WHERE id < 5")
    _caught_up(postgres, run)
    first = decoded(stream_messages(nats.url))
    lake.stage(first)
    assert {} == lake.ingest().refused
    assert 20 == len(lake.rows("lk.dropme"))

    with conn.cursor() as cur:
        cur.execute("DROP TABLE lk.dropme")
        cur.execute("ALTER TABLE lk.old_name RENAME TO new_name")
        cur.execute("UPDATE lk.new_name SET v = 'after rename' WHERE id > 15")
        cur.execute("DELETE FROM lk.new_name WHERE id = 10")
        cur.execute("INSERT INTO lk.keep VALUES (21, 'k21')")
        cur.execute("DROP TABLE lk.again")
        cur.execute("CREATE TABLE lk.again (id int PRIMARY KEY, amount numeric(10,2))")
        cur.execute("INSERT INTO lk.again VALUES (100, 1.50), (101, 2.25)")
    _caught_up(postgres, run)
    run.process.stop()
    rest = [e for e in decoded(stream_messages(nats.url)) if e.seq > max(e.seq for e in first)]
    assert [
        "DROP TABLE lk.dropme",
        "ALTER TABLE lk.old_name RENAME TO new_name",
        "DROP TABLE lk.again",
        "CREATE TABLE lk.again (id integer, amount numeric(10,2), PRIMARY KEY (id))",
    ] == [e.ddl for e in rest if e.op is Op.DDL]
    _stage_as_the_stager(lake, rest)
    assert {} == lake.ingest().refused

    for table in ("lk.dropme", "lk.old_name"):
        assert not Path(lake.path(table)).exists(), table
        assert not lake.spark.catalog.tableExists(table), table
    for table in ("lk.keep", "lk.new_name"):
        source = postgres_rows(conn, table, ["id"])
        in_lake = {(str(r["id"]),): {"id": str(r["id"]), "v": r["v"]} for r in lake.rows(table)}
        assert source == in_lake, table
    again = lake.rows("lk.again")
    assert [(100, "1.50"), (101, "2.25")] == [(r["id"], str(r["amount"])) for r in again]
    assert "v" not in again[0]
    conn.close()
