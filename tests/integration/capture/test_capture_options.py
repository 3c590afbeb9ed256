"""Capture options on real servers: the PostgreSQL outbox, the settings check, verify's
reading of a live table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from capturekit import CaptureRun, stream_messages

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.dsn import parse_dsn
from tidelake.capture.mysql import MySQLSource
from tidelake.capture.runner import CaptureError
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.config import CaptureConfig
from tidelake.verify.source import verify_table

pytestmark = pytest.mark.integration


def test_outbox_events_are_routed_by_aggregate_type(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """With ``outbox: true`` the triggers write each change of a captured table to the outbox
    in the same transaction, and each outbox row is published to
    ``cdc.outbox.<aggregate_type>`` as an event keyed by the outbox id."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA ob")
        cur.execute("CREATE TABLE ob.accounts (id int PRIMARY KEY, owner text)")
        cur.execute("CREATE TABLE ob.invoices (id int PRIMARY KEY, total numeric(8,2))")
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["ob.*"],
        capture={"outbox": True, "slot": "tl_ob", "publication": "tl_ob", "heartbeat_s": 0.5},
    ).start()  # fmt: skip
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO ob.accounts VALUES (1, 'ada')")
        cur.execute("UPDATE ob.accounts SET owner = 'grace' WHERE id = 1")
        cur.execute("INSERT INTO ob.invoices VALUES (7, 12.50)")
        cur.execute("DELETE FROM ob.accounts WHERE id = 1")
        # The insert position: with the test server's synchronous_commit=off the write
        # position may still trail these commits (see test_postgres_capture._caught_up).
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        (lsn,) = cur.fetchone()
    conn.close()
    from tidelake.capture.pgoutput import parse_lsn

    run.wait_until(lambda s: int(s["lsn"]) >= parse_lsn(lsn), 60)
    messages = stream_messages(nats.url)
    routed = [(orjson.loads(p)) for _, _, p in messages]
    got = [(b["database"], b["table"], b["data"][0]["event_type"]) for b in routed]
    assert [
        ("outbox", "accounts", "INSERT"),
        ("outbox", "accounts", "UPDATE"),
        ("outbox", "invoices", "INSERT"),
        ("outbox", "accounts", "DELETE"),
    ] == got
    assert {"cdc.outbox.accounts", "cdc.outbox.invoices"} == {
        f"cdc.{b['database']}.{b['table']}" for b in routed
    }
    payload = orjson.loads(routed[1]["data"][0]["payload"])
    assert {"id": 1, "owner": "grace"} == payload
    assert "1" == routed[1]["data"][0]["aggregate_id"]
    assert ["id"] == routed[0]["pkNames"]
    run.process.stop()


def test_missing_binlog_setting_is_explained(mariadb: MariaDBServer) -> None:
    """A server with ``binlog_format=STATEMENT`` is refused before anything is read, with the
    setting, its value and the statement that fixes it."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL binlog_format = 'STATEMENT'")
    try:
        source = MySQLSource(CaptureConfig(), parse_dsn(mariadb.dsn))
        with pytest.raises(CaptureError) as info:
            source.check()
        assert "binlog_format is STATEMENT, needs ROW" in str(info.value)
        assert "SET GLOBAL binlog_format = 'ROW'" in str(info.value)
        source.close()
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL binlog_format = 'ROW'")
        conn.close()


def test_verify_reports_counts_and_first_missing_keys(
    mariadb: MariaDBServer, tmp_path: Path
) -> None:
    """Against a lake that lacks the table, verify reads every source row and names the first
    missing keys in key order; the source hash is computed, the lake's is empty."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE vf")
        cur.execute("CREATE TABLE vf.t (id int PRIMARY KEY, amount decimal(8,2), f float)")
        cur.execute("INSERT INTO vf.t VALUES (3, 1.50, 1.1), (1, 2.00, NULL), (2, NULL, 2.5)")
    conn.close()
    result = verify_table(mariadb.dsn, str(tmp_path / "lake"), "vf.t")
    assert None is result.error
    assert (3, 0, 3) == (result.rows_source, result.rows_lake, result.missing)
    assert result.samples[0] == "key ('1',) is in the source, not in the lake"
    assert result.hash_source != result.hash_lake


def test_verify_verb_exits_1_and_prints_json_when_tables_differ(
    mariadb: MariaDBServer, tmp_path: Path
) -> None:
    """``tidelake verify --json`` prints one line per table and exits 1 when the lake lacks
    rows (here: the lake is empty)."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE vc")
        cur.execute("CREATE TABLE vc.t (id int PRIMARY KEY, v varchar(8))")
        cur.execute("INSERT INTO vc.t VALUES (1, 'a'), (2, 'b')")
    conn.close()
    config = tmp_path / "config.yaml"
    config.write_text(f"home: {tmp_path / 'home'}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "verify", "-c", str(config), "--json",
         "--source", f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/", "--table", "vc.t"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TIDELAKE_CAPTURE__PASSWORD": mariadb.password},
    )  # fmt: skip
    line = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert (2, 0, 2, None) == (line["rows_source"], line["rows_lake"], line["mismatches"],
                               line["error"])  # fmt: skip
    assert 1 == proc.returncode


def test_purged_binlog_position_is_explained(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A saved position in a binlog file the server no longer has stops the capture with
    exit 1 and a message saying the changes since then are lost and how to start again."""
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        ["nothing.*"], password=mariadb.password,
    )  # fmt: skip
    position = run.config.capture_position_file
    position.parent.mkdir(parents=True)
    position.write_text(
        '{"source": "mysql", "phase": "streaming", "binlog": {"file": "binlog.000999", "pos": 4}}'
    )
    run.start()
    deadline = time.monotonic() + 60
    while run.process.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 1 == run.process.returncode()
    log = run.process.log_tail(20)
    assert "no longer holds the capture's position binlog.000999:4" in log
    assert "remove the position file" in log
