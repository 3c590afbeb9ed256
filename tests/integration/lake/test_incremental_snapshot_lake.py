"""Issue 22's "must show": an incremental snapshot of a 1M-row table added to a running
capture during a ~1,000 changes/s workload, with ``kill -9`` of the capture mid-snapshot,
and the LAKE (Spark + Hudi) equal to the source row by row (``tidelake verify``'s
comparison).

Slow (minutes): ``pytest -m slow tests/integration/lake/test_incremental_snapshot_lake.py``.
``TIDELAKE_SNAPSHOT_E2E_ROWS`` sets the table size (default 1,000,000); the short form of
the same scenario, without the lake, is tests/integration/capture/test_incremental_snapshot.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lakekit import Lake

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.mysql import point_key
from tidelake.capture.servers import MariaDBServer
from tidelake.verify.source import verify_table

sys.path.insert(0, str(Path(__file__).parents[1] / "capture"))
from capturekit import CaptureRun, Writer, decoded, stream_messages

# The long form (about 5 minutes): `make e2e`, not `make test`; its short form is
# tests/integration/capture/test_incremental_snapshot.py (10,000 rows, kill -9, stream folded).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.long]

ROWS = int(os.environ.get("TIDELAKE_SNAPSHOT_E2E_ROWS", "1000000"))
#: Events staged and ingested at a time.
BATCH = 250_000


def _table(state: dict[str, Any] | None) -> dict[str, Any]:
    tables = ((state or {}).get("incremental") or {}).get("tables") or {}
    return tables.get("big.t") or {}


def test_1m_row_table_added_under_load_with_kill_9_lake_equals_source(
    mariadb: MariaDBServer, lake: Lake, tmp_path: Path
) -> None:
    """A table of ROWS rows joins ``capture.tables`` while a writer changes it at up to
    ~1,000 changes/s (updates, deletes, inserts, key changes); the capture is SIGKILLed when
    a quarter of the chunks are done and restarted; once the snapshot is done and the
    stream caught up, the staged and ingested stream gives a Hudi table equal to the source,
    row by row. Timings and rates are printed (docs/benchmarks.md)."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE big")
        cur.execute("USE big")
        cur.execute("CREATE TABLE big.a (id int PRIMARY KEY, v varchar(8))")
        cur.execute("INSERT INTO big.a VALUES (1, 'a')")
        cur.execute("CREATE TABLE big.t (id bigint PRIMARY KEY, v varchar(32), n int)")
        for lo in range(0, ROWS, 500_000):
            hi = min(ROWS, lo + 500_000)
            cur.execute(
                f"INSERT INTO big.t SELECT seq, concat('v', seq), 0 FROM seq_{lo + 1}_to_{hi}"
            )
            conn.commit()
    conn.close()
    dsn = f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/"
    with EmbeddedNats(tmp_path / "nats") as nats:

        def make_run(tables: list[str]) -> CaptureRun:
            return CaptureRun(tmp_path / "capture", nats.url, dsn, tables,
                              password=mariadb.password,
                              capture={"chunk_rows": 10_000, "snapshot_workers": 4})  # fmt: skip

        first = make_run(["big.a"]).start()
        first.wait_until(lambda s: s["phase"] == "streaming", 60)
        # Two connections: one alone reaches ~600 changes/s on the shared 2-core machine.
        writers = [
            Writer(lambda: mariadb.connect(autocommit=False), "big.t", ROWS, seed=22 + i,
                   pause_s=0.0005)
            for i in range(2)
        ]  # fmt: skip
        writers[1].next_id = ROWS * 10  # inserts of its own ids, not the other's
        for writer in writers:
            writer.start()
        time.sleep(1.0)
        first.process.stop()
        run = make_run(["big.a", "big.t"]).start()
        started = time.monotonic()
        run.wait_until(lambda s: _table(s).get("chunks_done", 0) >= 25, 900)
        assert _table(run.position())["state"] == "running"
        run.process.kill()  # SIGKILL mid-snapshot
        killed_at = _table(run.position())["chunks_done"]
        time.sleep(1.0)
        run.start()
        run.wait_until(lambda s: _table(s).get("state") == "done", 1800)
        snapshot_s = time.monotonic() - started
        writer_started = time.monotonic()
        committed_before = sum(w.committed for w in writers)
        time.sleep(5.0)
        committed = sum(w.committed for w in writers)
        rate = (committed - committed_before) / (time.monotonic() - writer_started)
        for writer in writers:
            writer.stop.set()
            writer.join()
            assert writer.error is None
        c = mariadb.connect()
        with c.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            end = cur.fetchone()[:2]
        c.close()
        run.wait_until(
            lambda s: point_key((s["binlog"]["file"], s["binlog"]["pos"])) >= point_key(end), 300
        )
        run.process.stop()
        events = [e for e in decoded(stream_messages(nats.url)) if e.table_id == "big.t"]
    print(
        f"\nsnapshot of {ROWS:,} rows under a writer at {rate:,.0f} changes/s: "
        f"{snapshot_s:.1f}s with kill -9 at {killed_at} chunks; writers committed "
        f"{committed:,} changes; {len(events):,} events in the stream"
    )
    # Staged and ingested in stream order, in batches of about the size a stager cuts (one
    # batch of everything overran the test Spark driver's 1 GB), cut between messages as the
    # stager does: the ingest resumes after a message's stream sequence, so a message split
    # across two batches would lose its second part.
    start = 0
    while start < len(events):
        end = min(len(events), start + BATCH)
        while end < len(events) and events[end].seq == events[end - 1].seq:
            end += 1
        lake.stage(events[start:end])
        assert {} == lake.ingest().refused
        start = end
    result = verify_table(dsn, lake.config.lake_root, "big.t", mariadb.password)
    assert result.error is None, result.error
    assert result.mismatches == 0, result.samples
    assert result.rows_source == result.rows_lake
