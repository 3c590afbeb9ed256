"""MariaDB primary failover: the capture resumes on the promoted replica by GTID (issue 22).

Two private MariaDB servers (``capture/servers.py``): a primary and a replica replicating
from it by GTID (``MASTER_USE_GTID=slave_pos``, ``log_slave_updates=ON``); the scenario is
``gtidkit.fail_over``. The CDC stream, folded by key in position order as the ingest applies
it (``capturekit.fold``), must equal the promoted server's table row by row; the lake form
is tests/integration/lake/test_gtid_failover_lake.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from capturekit import decoded, fold, mysql_rows, row_differences, stream_messages
from gtidkit import ROWS, capture_run, fail_over, run_writer, setup_table, topology

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.gtid import EPOCH_BASE, MariaPos, epoch_of
from tidelake.capture.position import PositionStore
from tidelake.capture.servers import MariaDBServer
from tidelake.events import Op

pytestmark = pytest.mark.integration


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[MariaDBServer, MariaDBServer]]:
    """A MariaDB primary and its GTID replica (gtidkit.topology)."""
    with topology(tmp_path) as pair:
        yield pair


def test_primary_killed_capture_resumes_on_promoted_replica_by_gtid(
    servers: tuple[MariaDBServer, MariaDBServer], nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Workload on the primary with the capture streaming; the primary is SIGKILLed and the
    replica promoted; the workload goes on there. The running capture moves to the replica
    by GTID (saved state: its address, server epoch 1, its GTID position) and the stream folds
    to exactly the promoted server's rows; every position read there sorts above every
    position read on the old primary. Then the old primary comes back (without what was
    written since) and the capture restarts: it goes back to the server it had moved to, in
    the same epoch, and the stream still folds to the source."""
    primary, replica = servers
    done = fail_over(tmp_path, nats, primary, replica)
    state = done.run.position()
    assert state is not None
    assert state["server"]["address"] == f"127.0.0.1:{replica.port}"
    assert state["epoch"] == 1
    assert done.first.committed > 50
    assert done.second.committed > 50

    events = decoded(stream_messages(nats.url))
    rows = [e for e in events if e.op is not Op.DDL and e.table_id == "fo.t"]
    before = [e.position for e in rows if epoch_of(e.position.parts) == 0]
    after = [e.position for e in rows if epoch_of(e.position.parts) == 1]
    assert before
    assert after
    assert max(before) < min(after)
    assert all(p.parts[0] == EPOCH_BASE + 1 for p in after)
    # Without the epoch they would sort below: the replica's binlog files number lower.
    assert max(p.parts[1] for p in after) < max(p.parts[0] for p in before)
    assert "" == row_differences(mysql_rows(replica.connect(), "fo.t"), fold(events, "fo.t"))
    # The heartbeat (read by serve/status) names the server now read and its epoch.
    beat_file = Path(done.run.config.stage_root) / "_tidelake" / "capture.heartbeat.json"
    deadline = time.monotonic() + 20
    server: dict[str, object] = {}
    while time.monotonic() < deadline and server.get("epoch") != 1:
        time.sleep(0.5)
        server = orjson.loads(beat_file.read_bytes()).get("server") or {}
    assert (server.get("address"), server.get("epoch")) == (f"127.0.0.1:{replica.port}", 1)

    done.run.process.stop()
    primary.start()  # the old primary is back, still named by capture.source
    third = run_writer(replica, seed=10, seconds=1.0, next_id=done.second.next_id + 1_000)
    done.run.start()
    target = replica.gtid_binlog_pos()
    done.run.wait_until(lambda s: s.get("gtid") == target, 60)
    state = done.run.position()
    assert state is not None
    assert (state["server"]["address"], state["epoch"]) == (f"127.0.0.1:{replica.port}", 1)
    assert third.committed > 10
    events = decoded(stream_messages(nats.url))
    assert "" == row_differences(mysql_rows(replica.connect(), "fo.t"), fold(events, "fo.t"))
    done.run.process.stop()


def test_replica_lacking_published_transactions_is_refused(
    servers: tuple[MariaDBServer, MariaDBServer], nats: EmbeddedNats, tmp_path: Path
) -> None:
    """The replica stops applying; the primary commits more, which the capture publishes;
    the primary dies and the replica is promoted. The capture must not resume there (it would
    lose what it already published): it waits ``capture.failover_timeout_s`` for a server
    that has them (none comes), then stops with an error naming the missing GTIDs."""
    primary, replica = servers
    setup_table(primary, replica)
    run = capture_run(tmp_path, nats, primary, replica, timeout_s=3).start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    replica.pause_replication()
    run_writer(primary, seed=9, seconds=1.0, next_id=ROWS + 1)
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
    assert state["gtid"] == published  # nothing saved past it


def test_a_diverged_server_is_refused_by_its_own_gtid_check(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A saved position read on another server whose last GTID (``0-7-3``) this server's
    binlog does not hold, although it has higher sequence numbers (a diverged history): the
    per-domain check passes, the server itself refuses the GTID start in strict mode (MariaDB
    10.11 here: error 1236 "... not in the master's binlog ... diverged"), and the capture
    stops saying so instead of streaming from elsewhere."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS dv")
        cur.execute("CREATE TABLE dv.t (id int PRIMARY KEY)")
        cur.execute("INSERT INTO dv.t VALUES (1), (2), (3), (4)")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    conn.close()
    assert not MariaPos.parse("0-7-3").missing_on(MariaPos.parse(mariadb.gtid_binlog_pos()))
    run = capture_run(tmp_path, nats, mariadb, mariadb)
    PositionStore(run.config.capture_position_file).save(
        {
            "source": "mysql",
            "phase": "streaming",
            "binlog": {"file": file, "pos": pos},
            "gtid": "0-7-3",
            "server": {"address": "127.0.0.1:1", "server_id": 7},
            "epoch": 0,
            "flavor": "mariadb",
        }
    )
    run.start()
    deadline = time.monotonic() + 60
    while run.process.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run.process.alive()
    log = run.process.log_tail(80)
    assert "refused to resume after GTID position 0-7-3" in log
    assert "not in the master's binlog" in log


def test_source_pointed_at_another_server_resumes_there_by_gtid(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A saved position read on another server (the old primary, now gone from the config)
    and ``capture.source`` naming this one: the capture checks this server has the saved
    GTID, resumes right after it (server epoch 1), and publishes exactly the rows written
    after that transaction — none before it."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS fo")
        cur.execute("CREATE TABLE fo.rp (id int PRIMARY KEY, v int)")
        cur.execute("INSERT INTO fo.rp VALUES (1, 1), (2, 2)")
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        saved_gtid = mariadb.gtid_binlog_pos()
        cur.execute("INSERT INTO fo.rp VALUES (3, 3)")
        cur.execute("UPDATE fo.rp SET v = 20 WHERE id = 2")
    run = capture_run(tmp_path, nats, mariadb, mariadb)
    PositionStore(run.config.capture_position_file).save(
        {
            "source": "mysql",
            "phase": "streaming",
            "binlog": {"file": "binlog.000042", "pos": 4},  # the old server's: meaningless here
            "gtid": saved_gtid,
            "server": {"address": "127.0.0.1:1", "server_id": 9},
            "epoch": 2,
            "flavor": "mariadb",
        }
    )
    run.start()
    with conn.cursor() as cur:
        cur.execute("DELETE FROM fo.rp WHERE id = 1")
    target = mariadb.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 30)
    state = run.position()
    assert state is not None
    assert (state["epoch"], state["server"]["address"]) == (3, f"127.0.0.1:{mariadb.port}")
    assert state["binlog"]["file"] == file
    assert state["binlog"]["pos"] > pos
    run.process.stop()
    events = [e for e in decoded(stream_messages(nats.url)) if e.table_id == "fo.rp"]
    assert [(e.op, (e.key or {}).get("id")) for e in events] == [
        (Op.INSERT, "3"),
        (Op.UPDATE, "2"),
        (Op.DELETE, "1"),
    ]
    assert {epoch_of(e.position.parts) for e in events} == {3}
    conn.close()


def test_an_initial_snapshot_is_not_continued_on_another_server(
    mariadb: MariaDBServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A capture stopped part way through its initial snapshot on another server (the
    saved snapshot state names it): its hand-off binlog point means nothing here, so the
    capture stops and says to start again with a snapshot."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS fo")
        cur.execute("CREATE TABLE IF NOT EXISTS fo.sn (id int PRIMARY KEY)")
    conn.close()
    run = capture_run(tmp_path, nats, mariadb, mariadb)
    PositionStore(run.config.capture_position_file).save(
        {
            "source": "mysql",
            "phase": "snapshot",
            "binlog": {"file": "binlog.000001", "pos": 4},
            "snapshot": {"done": [], "table": "fo.sn", "after": None, "rows": 0},
            "server": {"address": "127.0.0.1:1", "server_id": 9},
            "epoch": 0,
        }
    )
    run.start()
    deadline = time.monotonic() + 60
    while run.process.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run.process.alive()
    assert "a snapshot cannot be resumed elsewhere" in run.process.log_tail(80)
