"""Keyless PostgreSQL tables reach the lake (Spark + Hudi) by the key the capture uses: a
configured key (``capture.keys``) and the whole row (``capture.keyless: full_row``), both
with ``REPLICA IDENTITY FULL`` set as a user would (docs/capture.md, "Tables without a
primary key"). The Hudi record key is that key, the lake equals the source after key-column
updates and deletes, and ``tidelake verify`` (by the same key) agrees."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lakekit import Lake

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.pgoutput import parse_lsn
from tidelake.capture.servers import PostgresServer
from tidelake.lake.store import RECORD_KEY_PROPERTY
from tidelake.verify.source import verify_table

sys.path.insert(0, str(Path(__file__).parents[1] / "capture"))
from capturekit import CaptureRun, decoded, stream_messages

pytestmark = pytest.mark.integration

KEYS = {"kk.cfg": ["a", "b"]}


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


def _record_key(lake: Lake, table: str) -> str:
    props = (Path(lake.path(table)) / ".hoodie" / "hoodie.properties").read_text()
    for line in props.splitlines():
        if line.startswith(RECORD_KEY_PROPERTY + "="):
            return line.split("=", 1)[1]
    raise AssertionError(f"no {RECORD_KEY_PROPERTY} in {table}'s hoodie.properties")


def test_configured_key_and_full_row_tables_equal_the_source_in_the_lake(
    postgres: PostgresServer, nats: EmbeddedNats, lake: Lake, tmp_path: Path
) -> None:
    """Snapshot, then updates of a key column, of the whole row, deletes and identical rows:
    the lake tables are keyed by (a, b) and equal the source (its distinct rows for the
    full-row table); verify finds no mismatch and counts the collapsed identical row."""
    conn = postgres.connect()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "CREATE SCHEMA kk; "
            "CREATE TABLE kk.cfg (a int NOT NULL, b text NOT NULL, n int); "
            "ALTER TABLE kk.cfg REPLICA IDENTITY FULL; "
            "CREATE TABLE kk.whole (a int NOT NULL, b text NOT NULL); "
            "ALTER TABLE kk.whole REPLICA IDENTITY FULL; "
            "INSERT INTO kk.cfg SELECT g, 'b' || g, 0 FROM generate_series(1, 20) g; "
            "INSERT INTO kk.whole SELECT g, 'w' || g FROM generate_series(1, 20) g"
        )
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["kk.*"],
        capture={"slot": "tl_kk", "publication": "tl_kk", "heartbeat_s": 0.5, "keys": KEYS,
                 "keyless": "full_row"},
    ).start()  # fmt: skip
    try:
        _caught_up(postgres, run)
        with conn.cursor() as cur:
            cur.execute("UPDATE kk.cfg SET n = n + 1 WHERE a <= 5")
            cur.execute("UPDATE kk.cfg SET a = a + 100 WHERE a BETWEEN 6 AND 8")
            cur.execute("DELETE FROM kk.cfg WHERE a IN (9, 10)")
            cur.execute("UPDATE kk.whole SET b = 'changed' WHERE a <= 3")
            cur.execute("DELETE FROM kk.whole WHERE a IN (4, 5)")
            cur.execute("INSERT INTO kk.whole VALUES (50, 'dup'), (50, 'dup')")
        _caught_up(postgres, run)
    finally:
        run.process.stop()
    lake.stage(decoded(stream_messages(nats.url)))
    assert {} == lake.ingest().refused
    assert _record_key(lake, "kk.cfg") == "a,b"
    assert _record_key(lake, "kk.whole") == "a,b"
    for table in ("kk.cfg", "kk.whole"):
        result = verify_table(
            postgres.dsn, lake.config.lake_root, table, keys=KEYS, keyless="full_row"
        )
        assert result.error is None, result.error
        assert result.mismatches == 0, result.samples
        assert result.hash_source == result.hash_lake
    whole = verify_table(postgres.dsn, lake.config.lake_root, "kk.whole", keyless="full_row")
    assert (whole.rows_source, whole.rows_lake, whole.collapsed) == (19, 19, 1)
    conn.close()
