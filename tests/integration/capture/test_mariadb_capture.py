"""MariaDB binlog capture on a real server: snapshot hand-off, kill -9 resume, DDL in order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from capturekit import (
    CaptureRun,
    Writer,
    decoded,
    fold,
    mariadb_caught_up,
    mysql_rows,
    row_differences,
    stream_count,
    stream_messages,
)

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import MariaDBServer
from tidelake.events import Op

pytestmark = pytest.mark.integration

ROWS = 100_000


def _setup(server: MariaDBServer, database: str, rows: int) -> None:
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(
            f"CREATE TABLE {database}.t (id bigint PRIMARY KEY, v varchar(32), n int, "
            "amount decimal(12,2), at datetime(3))"
        )
        if rows:
            # The Sequence engine (seq_1_to_N, in the current database) fills the table at once.
            cur.execute(f"USE {database}")
            cur.execute(
                f"INSERT INTO {database}.t SELECT seq, concat('v', seq), seq % 97, seq / 8, "
                f"'2024-05-05 12:00:00.125' FROM seq_1_to_{rows}"
            )
    conn.close()


def _capture(tmp: Path, nats: EmbeddedNats, server: MariaDBServer, database: str) -> CaptureRun:
    return CaptureRun(
        tmp / "capture", nats.url, f"mysql://{server.user}@127.0.0.1:{server.port}/",
        [f"{database}.*"], password=server.password, capture={"chunk_rows": 5000},
    )  # fmt: skip


def _writer(server: MariaDBServer, database: str, seed: int, **kw: float) -> Writer:
    return Writer(lambda: server.connect(autocommit=False), f"{database}.t", ROWS, seed, **kw)


def test_snapshot_of_100k_rows_under_concurrent_writes_equals_source(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A 100,000-row table is snapshotted while a writer changes it; the stream (snapshot rows
    then binlog changes from the hand-off point) folds to exactly the final source table."""
    _setup(mariadb, "snap", ROWS)
    # About 3,000 transactions spread over the snapshot's duration.
    writer = _writer(mariadb, "snap", seed=1, limit=3_000, pause_s=0.01)
    writer.start()
    run = _capture(tmp_path, nats, mariadb, "snap").start()
    run.wait_until(lambda s: s["phase"] == "streaming", 180)
    time.sleep(1.0)  # some changes after the snapshot too
    writer.stop.set()
    writer.join()
    assert writer.error is None
    mariadb_caught_up(mariadb, run, 120)
    messages = stream_messages(nats.url)
    events = decoded(messages)
    source = mysql_rows(mariadb.connect(), "snap.t")
    lake = fold(events, "snap.t")
    # Snapshot rows share the hand-off prefix (file, point - 1) and come first.
    prefix = events[0].position.parts[:2]
    snapshot_rows = sum(1 for e in events if e.position.parts[:2] == prefix)
    assert writer.committed > 100
    assert len(source) == len(lake)
    assert "" == row_differences(source, lake)
    assert ROWS * 0.9 <= snapshot_rows <= ROWS * 1.1
    run.process.stop()


def test_kill_9_mid_stream_resumes_without_gap(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """``kill -9`` of the capture while changes stream, then a restart: the stream folds to the
    source (no gap), and JetStream stored each position once (republished ids dropped)."""
    _setup(mariadb, "crash", 2_000)
    run = _capture(tmp_path, nats, mariadb, "crash").start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    writer = _writer(mariadb, "crash", seed=2)
    writer.id_space = 2_000
    writer.start()
    time.sleep(2.0)
    saved_before = run.position()
    run.process.kill()  # SIGKILL
    time.sleep(1.0)  # changes while the capture is down
    run.start()
    time.sleep(1.5)
    writer.stop.set()
    writer.join()
    assert writer.error is None
    mariadb_caught_up(mariadb, run, 120)
    messages = stream_messages(nats.url)
    ids = [mid for _, mid, _ in messages]
    assert len(ids) == len(set(ids))
    assert fold(decoded(messages), "crash.t") == mysql_rows(mariadb.connect(), "crash.t")
    assert saved_before is not None
    assert run.process.starts == 2
    run.process.stop()


def test_added_column_arrives_as_ddl_in_order(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """An ALTER TABLE ADD COLUMN between two inserts arrives as an ALTER DDL event after the
    first row (old columns) and before the second (new column), positions increasing."""
    _setup(mariadb, "ddl", 0)
    run = _capture(tmp_path, nats, mariadb, "ddl").start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("INSERT INTO ddl.t (id, v, n) VALUES (1, 'before', 1)")
        cur.execute("ALTER TABLE ddl.t ADD COLUMN note varchar(20) DEFAULT 'x'")
        cur.execute("INSERT INTO ddl.t (id, v, n, note) VALUES (2, 'after', 2, 'hello')")
    conn.close()
    mariadb_caught_up(mariadb, run, 120)
    events = decoded(stream_messages(nats.url))
    kinds = [(e.op, e.key) for e in events]
    assert [(Op.INSERT, {"id": "1"}), (Op.DDL, None), (Op.INSERT, {"id": "2"})] == kinds
    first, ddl, second = events
    assert "note" not in (first.after or {})
    assert ("ALTER", "ddl.t") == (ddl.ddl_type, ddl.table_id)
    assert "ADD COLUMN note" in (ddl.ddl or "")
    assert "hello" == (second.after or {})["note"]
    assert "varchar(20)" == second.column_types["note"]
    assert first.position < ddl.position < second.position
    run.process.stop()


def test_kill_9_mid_snapshot_resumes_without_gap_or_ghost(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A capture killed part way through its snapshot, with writes (deletes included) before
    and after the kill, resumes the snapshot at a new point after catching up the binlog:
    the stream folds to the source, so no deleted row comes back and no change is lost."""
    _setup(mariadb, "resnap", 20_000)
    run = _capture(tmp_path, nats, mariadb, "resnap")
    run.capture["chunk_rows"] = 500
    run.__post_init__()
    writer = Writer(
        lambda: mariadb.connect(autocommit=False), "resnap.t", 20_000, 3, limit=2_000,
        pause_s=0.005,
    )  # fmt: skip
    writer.start()
    run.start()
    run.wait_until(lambda s: s.get("snapshot", {}).get("rows", 0) >= 3_000, 120)
    run.process.kill()  # SIGKILL mid-snapshot
    interrupted = run.position()
    time.sleep(1.0)
    run.start()
    writer.join()
    assert writer.error is None
    mariadb_caught_up(mariadb, run, 120)
    assert interrupted is not None
    assert "snapshot" == interrupted["phase"]
    messages = stream_messages(nats.url)
    assert fold(decoded(messages), "resnap.t") == mysql_rows(mariadb.connect(), "resnap.t")
    run.process.stop()


def test_large_transaction_killed_mid_publish_is_republished_whole(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """One 30,000-row transaction, the capture killed while publishing it: the position saved
    before it is where the restart begins, the rows already stored are dropped as duplicates
    (same positions, same message ids) and the table folds to the source."""
    _setup(mariadb, "big", 0)
    run = _capture(tmp_path, nats, mariadb, "big").start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    before = run.position()
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("USE big")
        cur.execute(
            "INSERT INTO big.t SELECT seq, concat('v', seq), seq % 7, seq / 4, "
            "'2024-05-05 12:00:00.5' FROM seq_1_to_30000"
        )
    conn.close()
    stored = 0
    deadline = time.monotonic() + 60
    while stored < 2_000 and time.monotonic() < deadline:
        time.sleep(0.05)
        stored = stream_count(nats.url)
    run.process.kill()  # SIGKILL while the transaction is part published
    assert 2_000 <= stream_count(nats.url) < 30_000
    assert run.position() == before
    run.start()
    mariadb_caught_up(mariadb, run, 120)
    messages = stream_messages(nats.url)
    ids = [mid for _, mid, _ in messages]
    assert 30_000 == len(ids) == len(set(ids))
    events = decoded(messages)
    assert [e.position.parts[2] for e in events] == list(range(30_000))
    assert fold(events, "big.t") == mysql_rows(mariadb.connect(), "big.t")
    run.process.stop()
