"""Capture lag on real servers (issue 22, "lag and health"): PostgreSQL slot lag and retained
WAL, MariaDB binlog bytes behind — they grow while the capture is stopped and writes go on,
fall once it has caught up, and reach the heartbeat (what ``status`` shows) and the capture's
own /metrics."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from capturekit import CaptureRun

from support.scrape import get as _get
from support.scrape import samples as _samples
from tidelake.api.metrics import render
from tidelake.api.monitor import Monitor, status_json
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.lag import binlog_lag, pg_slot_lag
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.runtime.processes import free_port, tidelake_argv

pytestmark = pytest.mark.integration

#: Rows written while the capture is stopped: about a MB of WAL / binlog.
ROWS = 5_000
#: Binlog bytes a caught-up capture may be "behind": events that are no transaction.
TAIL_BYTES = 1024


def _heartbeat_lag(run: CaptureRun, since_ms: int) -> dict[str, Any]:
    """The ``lag`` of the running capture's heartbeat (as serve and status read it), when
    probed after ``since_ms`` (a stopped run's last record holds its last values)."""
    path = Path(run.config.stage_root) / "_tidelake" / "capture.heartbeat.json"
    try:
        record = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    lag = dict(record.get("lag") or {})
    if record.get("state") != "running" or int(lag.get("at_ms") or 0) < since_ms:
        return {}
    return lag


def _wait_lag(run: CaptureRun, ok: Any, timeout_s: float = 90, what: str = "lag") -> dict[str, Any]:
    since_ms = int(time.time() * 1000)
    deadline = time.monotonic() + timeout_s
    lag: dict[str, Any] = {}
    while time.monotonic() < deadline:
        lag = _heartbeat_lag(run, since_ms)
        if lag and ok(lag):
            return lag
        if not run.process.alive():
            raise AssertionError(f"capture exited:\n{run.process.log_tail(60)}")
        time.sleep(0.2)
    raise AssertionError(f"{what} never reached; last {lag}\n{run.process.log_tail(30)}")


async def _snapshot(cfg: Any) -> Any:
    monitor = Monitor(cfg)
    try:
        return await monitor.snapshot()
    finally:
        await monitor.close()


def _metrics(port: int) -> dict[str, float]:
    return _samples(_get(f"http://127.0.0.1:{port}/metrics")[1])


def test_postgres_slot_lag_grows_while_stopped_and_falls_after_catching_up(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Slot lag (current WAL minus confirmed_flush_lsn) and retained WAL (minus restart_lsn) of
    pg_replication_slots: small while the capture keeps up; with the capture stopped and
    ROWS rows written, both exceed the WAL those rows took (also as `tidelake capture lag`
    prints them); restarted, the capture's
    heartbeat, its /metrics and serve's status and /metrics report the lag back down and 0
    seconds behind."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA lagpg")
        cur.execute("CREATE TABLE lagpg.t (id bigint PRIMARY KEY, v text)")
    port = free_port()
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["lagpg.*"],
        capture={"slot": "tl_lagpg", "publication": "tl_lagpg", "heartbeat_s": 0.5,
                 "lag_interval_s": 0.5},
    )  # fmt: skip
    run.process.env["TIDELAKE_METRICS__PORT"] = str(port)
    try:
        run.start()
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        settled = _wait_lag(run, lambda lag: lag.get("seconds") == 0.0, what="caught up")
        assert settled["retained_wal_bytes"] is not None
        assert settled["wal_status"] in ("reserved", "extended")
        run.process.stop()

        with conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            before = cur.fetchone()[0]
            cur.execute(
                "INSERT INTO lagpg.t SELECT g, repeat('x', 100) FROM generate_series(1, %s) g",
                (ROWS,),
            )
            cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (before,))
            written = int(cur.fetchone()[0])
        # The test server runs with synchronous_commit=off: pg_current_wal_lsn() (the write
        # position) reaches the insert position once the WAL writer has run.
        deadline = time.monotonic() + 15
        stopped = pg_slot_lag(conn, "tl_lagpg")
        while stopped["bytes"] < written * 0.9 and time.monotonic() < deadline:
            time.sleep(0.2)
            stopped = pg_slot_lag(conn, "tl_lagpg")
        assert written > 500_000  # the rows took about a MB of WAL
        assert stopped["bytes"] >= written * 0.9, (stopped, written)
        assert stopped["retained_wal_bytes"] >= stopped["bytes"]
        assert stopped["slot_active"] is False
        # `tidelake capture lag` measures it with the capture stopped (the on-call's question:
        # how much WAL does the slot hold now?).
        cli = subprocess.run(
            [*tidelake_argv("capture", "lag", "--json", "-c", str(run.config_path))],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert 0 == cli.returncode, cli.stderr
        printed = orjson.loads(cli.stdout)
        assert "postgres" == printed["source"]
        assert printed["bytes"] >= stopped["bytes"]
        assert printed["retained_wal_bytes"] >= printed["bytes"]

        run.start()
        caught_up = _wait_lag(
            run,
            lambda lag: lag.get("seconds") == 0.0 and (lag.get("bytes") or 0) < written / 10,
            what="slot lag back down",
        )
        assert caught_up["bytes"] < stopped["bytes"] / 10
        samples = _metrics(port)
        assert samples["tidelake_capturer_slot_lag_bytes"] < written / 10
        assert samples["tidelake_capturer_retained_wal_bytes"] >= 0
        assert samples['tidelake_capturer_slot_wal_status{status="lost"}'] == 0
        assert samples["tidelake_capturer_lag_probe_ok"] == 1
        assert samples["tidelake_capturer_behind_seconds"] == 0
        # serve and status read the same from the heartbeat in the staging store.
        snap = asyncio.run(_snapshot(run.config))
        status = status_json(snap)["capture"]
        assert ("postgres", "streaming") == (status["source"], status["phase"])
        assert status["lag"]["bytes"] < written / 10
        assert "tidelake_capture_retained_wal_bytes " in render(snap).decode()
    finally:
        run.process.stop()
        with conn.cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot('tl_lagpg')")
        conn.close()


def test_mariadb_binlog_lag_grows_while_stopped_and_falls_after_catching_up(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Binlog bytes from the capture's saved position to the server's end (SHOW MASTER
    STATUS, across files by SHOW BINARY LOGS): with the capture stopped, ROWS rows written
    and the binlog rotated (FLUSH BINARY LOGS) the distance covers every file and the GTID
    distance counts every transaction; restarted, the heartbeat and /metrics report no
    transaction, at most a few bytes and 0 seconds behind."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE laglag")
        cur.execute("CREATE TABLE laglag.t (id bigint PRIMARY KEY, v text)")
    conn.commit()
    port = free_port()
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        ["laglag.*"], password=mariadb.password, capture={"lag_interval_s": 0.5},
    )  # fmt: skip
    run.process.env["TIDELAKE_METRICS__PORT"] = str(port)
    try:
        run.start()
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        _wait_lag(run, lambda lag: (lag.get("bytes") or 0) < TAIL_BYTES and lag.get("seconds") == 0)
        run.process.stop()
        saved = run.position()

        with conn.cursor() as cur:
            for start in range(0, ROWS, 1000):
                cur.executemany(
                    "INSERT INTO laglag.t VALUES (%s, REPEAT('x', 100))",
                    [(i,) for i in range(start + 1, start + 1001)],
                )
                conn.commit()
                if start == 2000:
                    cur.execute("FLUSH BINARY LOGS")  # the lag spans two files
        stopped = binlog_lag(conn, saved)
        assert stopped["bytes"] > ROWS * 100, stopped
        # MariaDB positions carry the GTID position (capture/gtid.py): one event group per
        # row written (the connection autocommits each INSERT; executemany sends one INSERT
        # per row for a VALUES list holding an expression), in domain 0
        # (https://mariadb.com/kb/en/gtid/).
        assert saved is not None
        assert saved.get("gtid"), saved
        assert ROWS == stopped["gtid_behind"], stopped
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            assert len(cur.fetchall()) >= 2

        run.start()
        # Caught up: no transaction behind. A few bytes may stay: events after the last
        # transaction that are none (MariaDB's binlog checkpoint event in the new file) move
        # the server's end but no position the capture saves.
        _wait_lag(
            run,
            lambda lag: (
                lag.get("gtid_behind") == 0
                and (lag.get("bytes") or 0) < TAIL_BYTES
                and lag.get("seconds") == 0.0
            ),
            what="binlog lag back to 0",
        )
        samples = _metrics(port)
        assert samples["tidelake_capturer_binlog_lag_bytes"] < TAIL_BYTES
        assert samples["tidelake_capturer_gtid_transactions_behind"] == 0
        assert samples["tidelake_capturer_behind_seconds"] == 0
        assert samples["tidelake_capturer_lag_probe_ok"] == 1
        assert "tidelake_capturer_slot_lag_bytes" not in samples  # no slot on MariaDB
    finally:
        run.process.stop()
        conn.close()
