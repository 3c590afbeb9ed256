"""``tidelake capture`` with ``TIDELAKE_METRICS__PORT`` on a real MariaDB: its own /healthz
and /metrics, with every capture metric docs/metrics.md names and the counts of what it
published."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from capturekit import CaptureRun, stream_count

from support.scrape import get as _get
from support.scrape import samples as _samples
from tidelake.api.monitor import Monitor
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer
from tidelake.config import load_config
from tidelake.runtime.processes import free_port

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def test_capture_serves_its_own_metrics(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Rows inserted while the capture streams are counted as published on its own
    /metrics, the publish lag and last commit time are set, and every tidelake_capturer_*
    metric of docs/metrics.md has a sample; /healthz answers 200."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE cm")
        cur.execute("CREATE TABLE cm.t (id bigint PRIMARY KEY, v varchar(16))")
    port = free_port()
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        ["cm.*"], password=mariadb.password, capture={"lag_interval_s": 0.5},
    )  # fmt: skip
    run.process.env["TIDELAKE_METRICS__PORT"] = str(port)
    run.start()
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        with conn.cursor() as cur:
            for i in range(1, 6):
                cur.execute("INSERT INTO cm.t VALUES (%s, %s)", (i, f"v{i}"))
        conn.commit()
        deadline = time.monotonic() + 60
        while stream_count(nats.url) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        samples: dict[str, float] = {}
        while time.monotonic() < deadline:
            samples = _samples(_get(f"{base}/metrics")[1])
            published = samples.get("tidelake_capturer_changes_published_total", 0)
            # the lag is probed once a position is saved, then every lag_interval_s
            if published >= 5 and "tidelake_capturer_binlog_lag_bytes" in samples:
                break
            time.sleep(0.2)
        assert samples["tidelake_capturer_changes_published_total"] >= 5
        assert samples["tidelake_capturer_last_commit_timestamp_seconds"] > time.time() - 600
        assert 0 <= samples["tidelake_capturer_publish_lag_seconds"] < 600
        documented = set(re.findall(r"`(tidelake_capturer_[a-z_]+)`", DOC.read_text()))
        assert len(documented) >= 5
        # The lag families that do not apply here (a slot: PostgreSQL; GTIDs: a GTID
        # position; per-table snapshot progress: a snapshot listed in the heartbeat) are
        # exported without a sample (test_capture_lag.py has them where they apply).
        names = {key.split("{")[0] for key in samples}
        conditional = {
            f"tidelake_capturer_{name}"
            for name in (
                "slot_lag_bytes", "retained_wal_bytes", "safe_wal_size_bytes", "slot_wal_status",
                "gtid_transactions_behind", "snapshot_rows_done", "snapshot_rows_total",
                "snapshot_chunks_done", "snapshot_progress_timestamp_seconds", "snapshot_running",
            )
        }  # fmt: skip
        assert [] == sorted(documented - names - conditional)
        status, raw = _get(f"{base}/healthz")
        body = raw.decode()
        assert (200, '"status":"ok"') == (status, body[body.index('"status"') :][:13])
        # serve elsewhere (another container: its own home, the shared staging root) sees
        # the capture: its heartbeat is in the staging store, not beside its position file.
        serve_cfg = load_config(
            None,
            environ={
                "TIDELAKE_HOME": str(tmp_path / "serve"),
                "TIDELAKE_STAGE__ROOT": run.config.stage_root,
                "TIDELAKE_BUS__URL": nats.url,
            },
        )
        deadline = time.monotonic() + 15  # a beat every 2 s
        capture: dict[str, Any] = {}
        while time.monotonic() < deadline and capture.get("phase") != "streaming":
            capture = asyncio.run(Monitor(serve_cfg).snapshot()).capture or {}
            time.sleep(0.5)
        assert ("capture", "running", "streaming") == (
            capture.get("stage"),
            capture.get("state"),
            capture.get("phase"),
        )
    finally:
        conn.close()
        run.process.stop()
