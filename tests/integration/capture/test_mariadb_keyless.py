"""MariaDB tables without a primary key: skipped and reported (saved state, heartbeat,
``tidelake status``) by default, captured by a configured key (``capture.keys``) or by the
whole row (``capture.keyless: full_row``) and then folding from the stream to the source,
key-column updates and deletes included (docs/capture.md, "Tables without a primary key").

The binlog carries every column in both images with ``binlog_row_image=FULL`` (MariaDB docs,
``binlog_row_image``; checked by the capture at start), so any column set can key a row.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from capturekit import (
    CaptureRun,
    decoded,
    fold,
    mariadb_caught_up,
    row_differences,
    stream_messages,
)

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.mysql_values import render
from tidelake.capture.servers import MariaDBServer
from tidelake.runtime.processes import tidelake_argv

pytestmark = pytest.mark.integration


def _sql(server: MariaDBServer, *statements: str) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _rows(server: MariaDBServer, table: str, key: list[str]) -> dict[Any, dict[str, Any]]:
    """The live table as canal text keyed by ``key`` (rows equal in it collapse, as in the
    lake)."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            database, name = table.split(".")
            cur.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (database, name),
            )
            cols = cur.fetchall()
            cur.execute(f"SELECT * FROM {table}")
            data = cur.fetchall()
    finally:
        conn.close()
    out = {}
    for values in data:
        row = {c[0]: render(v, c[1]) for c, v in zip(cols, values, strict=True)}
        out[tuple(row[c] for c in key)] = row
    return out


def _heartbeat(run: CaptureRun, want: set[str], pid: int | None = None) -> dict[str, Any]:
    """The capture's heartbeat once it names ``want`` as skipped (and comes from ``pid``)."""
    path = Path(run.config.stage_root) / "_tidelake" / "capture.heartbeat.json"
    deadline = time.monotonic() + 30
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        if path.exists():
            record = orjson.loads(path.read_bytes())
            if set(record.get("skipped") or {}) == want and pid in (None, record.get("pid")):
                return record
        time.sleep(0.3)
    raise AssertionError(f"heartbeat {record} never named {want}:\n{run.process.log_tail(30)}")


def test_keyless_table_skipped_and_visible_and_configured_key_follows_the_source(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A keyless table is skipped with its reason in the saved state, the heartbeat (also
    after a restart) and ``tidelake status`` (state skipped, not stale); a keyless table
    with ``capture.keys`` is snapshotted and streamed by that key, and the stream folds to
    the source after updates of other columns and of the key column, deletes and inserts."""
    _sql(
        mariadb,
        "CREATE DATABASE kl",
        "CREATE TABLE kl.keyed (id int PRIMARY KEY, v varchar(8))",
        "CREATE TABLE kl.nokey (a int, b varchar(8))",
        "CREATE TABLE kl.cfg (a int NOT NULL, b varchar(8) NOT NULL, n int)",
        "INSERT INTO kl.keyed VALUES (1, 'x'), (2, 'y')",
        "INSERT INTO kl.nokey VALUES (1, 'x'), (1, 'x')",
        "INSERT INTO kl.cfg VALUES (1, 'x', 0), (2, 'y', 0), (3, 'z', 0)",
    )
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        ["kl.*"], password=mariadb.password, capture={"keys": {"kl.cfg": ["a", "b"]}},
    ).start()  # fmt: skip
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        _sql(
            mariadb,
            "UPDATE kl.cfg SET n = n + 5 WHERE a = 1",
            "UPDATE kl.cfg SET a = 10 WHERE a = 2",
            "DELETE FROM kl.cfg WHERE a = 3",
            "INSERT INTO kl.cfg VALUES (4, 'w', 1)",
            "UPDATE kl.nokey SET b = 'changed'",
            "DELETE FROM kl.nokey LIMIT 1",
            "UPDATE kl.keyed SET v = 'z' WHERE id = 2",
        )
        mariadb_caught_up(mariadb, run)
        state = run.position()
        assert state is not None
        assert set(state["skipped"]) == {"kl.nokey"}
        assert "no primary key" in state["skipped"]["kl.nokey"]
        first = _heartbeat(run, {"kl.nokey"})
        events = decoded(stream_messages(nats.url))
        assert "kl.nokey" not in {e.table_id for e in events}
        assert {e.pk for e in events if e.table_id == "kl.cfg"} == {("a", "b")}
        assert "" == row_differences(_rows(mariadb, "kl.cfg", ["a", "b"]), fold(events, "kl.cfg"))
        assert "" == row_differences(_rows(mariadb, "kl.keyed", ["id"]), fold(events, "kl.keyed"))
        # A restart keeps reporting it, before any row of it is seen again.
        run.process.stop()
        run.start()
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        pid = run.process.pid
        assert pid is not None
        assert pid != first["pid"]
        _heartbeat(run, {"kl.nokey"}, pid=pid)
        status = subprocess.run(
            [*tidelake_argv("status", "--json"), "-c", str(run.config_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        tables = {t["table"]: t for t in json.loads(status.stdout)["tables"]}
        assert tables["kl.nokey"]["state"] == "skipped"
        assert "no primary key" in tables["kl.nokey"]["skipped_reason"]
        plain = subprocess.run(
            [*tidelake_argv("status"), "-c", str(run.config_path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert "skipped kl.nokey: no primary key" in plain.stdout, plain.stdout
    finally:
        run.process.stop()


def test_full_row_identity_collapses_identical_rows_and_follows_the_source(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """``keyless: full_row`` keys a keyless table by all its columns: updates (a key change
    each) and deletes fold to the source's distinct rows; two identical rows are one lake row
    (documented); a keyless table with a nullable column is skipped, naming the fix."""
    _sql(
        mariadb,
        "CREATE DATABASE fr",
        "CREATE TABLE fr.whole (a int NOT NULL, b varchar(8) NOT NULL)",
        "CREATE TABLE fr.nullable (a int NOT NULL, b varchar(8))",
        "INSERT INTO fr.whole VALUES (1, 'x'), (2, 'y'), (3, 'z')",
    )
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        ["fr.*"], password=mariadb.password, capture={"keyless": "full_row"},
    ).start()  # fmt: skip
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        _sql(
            mariadb,
            "UPDATE fr.whole SET b = 'changed' WHERE a = 1",
            "DELETE FROM fr.whole WHERE a = 2",
            "INSERT INTO fr.whole VALUES (8, 'd'), (8, 'd')",
            "UPDATE fr.whole SET a = 30 WHERE a = 3",
        )
        mariadb_caught_up(mariadb, run)
        state = run.position()
        assert state is not None
        assert set(state["skipped"]) == {"fr.nullable"}
        assert "MODIFY b" in state["skipped"]["fr.nullable"]
        events = decoded(stream_messages(nats.url))
        lake = fold(events, "fr.whole")
        source = _rows(mariadb, "fr.whole", ["a", "b"])
        assert "" == row_differences(source, lake)
        assert len(lake) == 3  # (1, changed), (30, z), (8, d): the two (8, d) rows are one
    finally:
        run.process.stop()
