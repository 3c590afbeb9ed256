"""MariaDB primary failover: the capture resumes on the promoted replica by GTID (issue 22).

Two private MariaDB servers (``capture/servers.py``): a primary and a replica replicating
from it by GTID (``MASTER_USE_GTID=slave_pos``, ``log_slave_updates=ON``). The capture
reads the primary with the replica as its ``capture.failover_sources``; the primary is
killed (SIGKILL) and the replica promoted; the capture, still running, reconnects there and
resumes after the last GTID it read. The CDC stream, folded by key in position order as the
ingest applies it (``capturekit.fold``), must equal the promoted server's table row by row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from capturekit import (
    CaptureRun,
    Writer,
    decoded,
    fold,
    mysql_rows,
    row_differences,
    stream_messages,
)

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.gtid import EPOCH_BASE, MariaPos, epoch_of
from tidelake.capture.servers import MariaDBServer
from tidelake.events import Op

pytestmark = pytest.mark.integration

ROWS = 2_000


@pytest.fixture
def topology(tmp_path: Path) -> Iterator[tuple[MariaDBServer, MariaDBServer]]:
    """A primary (server_id 1) and a GTID replica of it (server_id 2), both stopped after."""
    primary = MariaDBServer(tmp_path / "primary", server_id=1)
    replica = MariaDBServer(tmp_path / "replica", server_id=2)
    try:
        primary.start()
        replica.start()
        replica.replicate_from(primary)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def _setup(primary: MariaDBServer, replica: MariaDBServer) -> None:
    conn = primary.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE fo")
        cur.execute("CREATE TABLE fo.t (id bigint PRIMARY KEY, v varchar(32), n int)")
        cur.execute("USE fo")
        cur.execute(f"INSERT INTO fo.t SELECT seq, concat('v', seq), 0 FROM seq_1_to_{ROWS}")
    conn.close()
    replica.wait_for_gtid(primary.gtid_binlog_pos())


def _capture(
    tmp: Path, nats: EmbeddedNats, primary: MariaDBServer, replica: MariaDBServer
) -> CaptureRun:
    return CaptureRun(
        tmp / "capture",
        nats.url,
        f"mysql://{primary.user}@127.0.0.1:{primary.port}/",
        ["fo.*"],
        password=primary.password,
        capture={
            "failover_sources": [f"mysql://127.0.0.1:{replica.port}/"],
            "failover_timeout_s": 30,
        },
    )


def _run_writer(server: MariaDBServer, seed: int, seconds: float, next_id: int) -> Writer:
    writer = Writer(lambda: server.connect(autocommit=False), "fo.t", ROWS, seed, pause_s=0.003)
    writer.next_id = next_id
    writer.start()
    time.sleep(seconds)
    writer.stop.set()
    writer.join()
    assert writer.error is None
    return writer


def test_primary_killed_capture_resumes_on_promoted_replica_by_gtid(
    topology: tuple[MariaDBServer, MariaDBServer], nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Workload on the primary with the capture streaming; the primary is SIGKILLed and the
    replica promoted; the workload goes on there. The running capture moves to the replica
    by GTID (saved state: its address, server epoch 1, its GTID position) and the stream folds
    to exactly the promoted server's rows; every position read there sorts above every
    position read on the old primary."""
    primary, replica = topology
    _setup(primary, replica)
    run = _capture(tmp_path, nats, primary, replica).start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    first = _run_writer(primary, seed=7, seconds=2.0, next_id=ROWS + 1)
    # The replica has applied everything the primary committed (else the capture, which may
    # have read it, refuses the replica: the other test), then the primary dies.
    replica.wait_for_gtid(primary.gtid_binlog_pos())
    primary.kill()
    replica.promote()
    second = _run_writer(replica, seed=8, seconds=2.0, next_id=first.next_id + 1_000)
    target = replica.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 60)
    state = run.position()
    assert state is not None
    assert state["server"]["address"] == f"127.0.0.1:{replica.port}"
    assert state["epoch"] == 1
    assert first.committed > 50
    assert second.committed > 50

    events = decoded(stream_messages(nats.url))
    rows = [e for e in events if e.op is not Op.DDL and e.table_id == "fo.t"]
    before = [e.position for e in rows if epoch_of(e.position.parts) == 0]
    after = [e.position for e in rows if epoch_of(e.position.parts) == 1]
    assert before
    assert after
    assert max(before) < min(after)
    assert all(p.parts[0] == EPOCH_BASE + 1 for p in after)
    source = mysql_rows(replica.connect(), "fo.t")
    assert "" == row_differences(source, fold(events, "fo.t"))
    run.process.stop()


def test_replica_lacking_published_transactions_is_refused(
    topology: tuple[MariaDBServer, MariaDBServer], nats: EmbeddedNats, tmp_path: Path
) -> None:
    """The replica stops applying; the primary commits more, which the capture publishes;
    the primary dies and the replica is promoted. The capture must not resume there (it would
    lose what it already published): it stops with an error naming the missing GTIDs."""
    primary, replica = topology
    _setup(primary, replica)
    run = _capture(tmp_path, nats, primary, replica).start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    replica.pause_replication()
    _run_writer(primary, seed=9, seconds=1.0, next_id=ROWS + 1)
    published = primary.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == published, 30)
    primary.kill()
    replica.promote()
    assert MariaPos.parse(published).missing_on(MariaPos.parse(replica.gtid_binlog_pos()))
    deadline = time.monotonic() + 60
    while run.process.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run.process.alive()
    log = run.process.log_tail(80)
    assert "lacks transactions the capture already published" in log
    assert published in log
    state = run.position()
    assert state is not None
    assert state["gtid"] == published
