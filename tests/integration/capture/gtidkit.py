"""A MariaDB primary + GTID replica, and the failover scenario the GTID tests share.

The capture reads the primary with the replica as its ``capture.failover_sources``; a writer
changes ``fo.t`` on the primary; the primary is SIGKILLed and the replica promoted; the
writer goes on there; the still-running capture resumes on the replica by GTID.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capturekit import CaptureRun, Writer, decoded, stream_messages

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.gtid import epoch_of
from tidelake.capture.mysql import point_key
from tidelake.capture.position import PositionStore
from tidelake.capture.servers import MariaDBServer

ROWS = 2_000


@contextlib.contextmanager
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


def setup_table(primary: MariaDBServer, replica: MariaDBServer) -> None:
    """``fo.t`` with :data:`ROWS` rows on the primary, applied by the replica."""
    conn = primary.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE fo")
        cur.execute("CREATE TABLE fo.t (id bigint PRIMARY KEY, v varchar(32), n int)")
        cur.execute("USE fo")
        cur.execute(f"INSERT INTO fo.t SELECT seq, concat('v', seq), 0 FROM seq_1_to_{ROWS}")
        # The primary's binlog file numbers run ahead of the replica's (FLUSH BINARY LOGS is
        # never replicated: https://mariadb.com/kb/en/flush/), so positions of the new server
        # would sort below the old one's without the server epoch: the tests would see it.
        for _ in range(3):
            cur.execute("FLUSH BINARY LOGS")
    conn.close()
    replica.wait_for_gtid(primary.gtid_binlog_pos())


def capture_run(
    tmp: Path,
    nats: EmbeddedNats,
    primary: MariaDBServer,
    replica: MariaDBServer,
    timeout_s: float = 30,
) -> CaptureRun:
    """The capture of ``fo.*`` on the primary, the replica as its failover source
    (``capture.failover_timeout_s`` = ``timeout_s``)."""
    return CaptureRun(
        tmp / "capture",
        nats.url,
        f"mysql://{primary.user}@127.0.0.1:{primary.port}/",
        ["fo.*"],
        password=primary.password,
        capture={
            "failover_sources": [f"mysql://127.0.0.1:{replica.port}/"],
            "failover_timeout_s": timeout_s,
        },
    )


def run_writer(server: MariaDBServer, seed: int, seconds: float, next_id: int) -> Writer:
    """Random single-row transactions on ``fo.t`` for ``seconds``; new ids from ``next_id``."""
    writer = Writer(lambda: server.connect(autocommit=False), "fo.t", ROWS, seed, pause_s=0.003)
    writer.next_id = next_id
    writer.start()
    time.sleep(seconds)
    writer.stop.set()
    writer.join()
    assert writer.error is None
    return writer


@dataclass
class Failover:
    """What the scenario left: the capture (still running) and the two writers."""

    run: CaptureRun
    first: Writer
    second: Writer


def fail_over(
    tmp: Path, nats: EmbeddedNats, primary: MariaDBServer, replica: MariaDBServer
) -> Failover:
    """The scenario of the module docstring; returns once the capture saved the promoted
    server's last GTID."""
    setup_table(primary, replica)
    run = capture_run(tmp, nats, primary, replica).start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    first = run_writer(primary, seed=7, seconds=2.0, next_id=ROWS + 1)
    # The replica has applied everything the primary committed (else the capture, which may
    # have read more, refuses the replica: test_gtid_failover.py), then the primary dies.
    replica.wait_for_gtid(primary.gtid_binlog_pos())
    primary.kill()
    replica.promote()
    second = run_writer(replica, seed=8, seconds=2.0, next_id=first.next_id + 1_000)
    target = replica.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 60)
    return Failover(run, first, second)


@dataclass
class CrashFailover:
    """What :func:`crash_then_fail_over` left: the capture (still running), the state it
    resumed from, and how many events it had published past that state on the old primary."""

    run: CaptureRun
    resumed_from: dict[str, Any]
    republished: int


def crash_then_fail_over(
    tmp: Path, nats: EmbeddedNats, primary: MariaDBServer, replica: MariaDBServer
) -> CrashFailover:
    """The capture dies (SIGKILL) having published transactions its saved position does not
    cover yet (the position file is put back to an earlier save: the crash came between
    JetStream's acks and the next save); the primary dies, the replica is promoted and
    written to; the capture restarts with ``capture.source`` still the dead primary, fails
    over to the replica by GTID and publishes those transactions again, under new positions
    (server epoch 1), then the new ones. Returns once it saved the replica's last GTID."""
    setup_table(primary, replica)
    run = capture_run(tmp, nats, primary, replica).start()
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    first = run_writer(primary, seed=11, seconds=1.0, next_id=ROWS + 1)
    target = primary.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 30)
    earlier = run.position()
    assert earlier is not None
    second = run_writer(primary, seed=12, seconds=1.0, next_id=first.next_id + 1_000)
    target = primary.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 30)
    run.process.kill()
    PositionStore(run.config.capture_position_file).save(earlier)
    replica.wait_for_gtid(primary.gtid_binlog_pos())
    primary.kill()
    replica.promote()
    run_writer(replica, seed=13, seconds=1.0, next_id=second.next_id + 1_000)
    run.start()
    target = replica.gtid_binlog_pos()
    run.wait_until(lambda s: s.get("gtid") == target, 60)
    saved = point_key((earlier["binlog"]["file"], earlier["binlog"]["pos"]))
    republished = sum(
        1
        for e in decoded(stream_messages(nats.url))
        if e.table_id == "fo.t"
        and epoch_of(e.position.parts) == 0
        and e.position.parts[:2] >= saved
    )
    return CrashFailover(run, earlier, republished)
