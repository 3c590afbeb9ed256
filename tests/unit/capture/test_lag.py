"""The lag arithmetic of ``capture/lag.py`` and the probe's failure handling (no server).

The servers' side (real PostgreSQL and MariaDB) is in tests/integration/capture/test_lag.py.
"""

from __future__ import annotations

import time
from typing import Any

from tidelake.capture.lag import (
    LagProbe,
    acked_gtid,
    binlog_bytes_behind,
    gtid_behind,
    lag_seconds,
    mariadb_gtid_behind,
    mysql_gtid_behind,
)

LOGS = [("mysql-bin.000001", 1000), ("mysql-bin.000002", 500), ("mysql-bin.000003", 300)]


def test_binlog_bytes_behind_within_one_file_and_across_files() -> None:
    """Same file: the offset difference. Across files: the rest of ours, every file between,
    and the server's offset in its current file (SHOW BINARY LOGS sizes)."""
    assert 50 == binlog_bytes_behind(LOGS, ("mysql-bin.000003", 300), ("mysql-bin.000003", 250))
    assert (1000 - 400) + 500 + 120 == binlog_bytes_behind(
        LOGS, ("mysql-bin.000003", 120), ("mysql-bin.000001", 400)
    )
    assert 0 == binlog_bytes_behind(LOGS, ("mysql-bin.000003", 300), ("mysql-bin.000003", 300))


def test_binlog_bytes_behind_a_purged_file_is_unknown() -> None:
    """A position in a file the server no longer lists has no distance (and no resume)."""
    assert binlog_bytes_behind(LOGS[1:], ("mysql-bin.000003", 10), ("mysql-bin.000001", 4)) is None


def test_mariadb_gtid_distance_is_summed_over_domains() -> None:
    """MariaDB positions hold one GTID per domain; a domain we never saw counts whole."""
    assert 7 == mariadb_gtid_behind("0-1-105,1-2-12", "0-1-100,1-2-10")
    assert 5 + 3 == mariadb_gtid_behind("0-1-105,2-3-3", "0-1-100")
    assert 0 == mariadb_gtid_behind("0-1-100", "0-1-100")
    assert 7 == gtid_behind("0-1-105,1-2-12", "0-1-100,1-2-10")


def test_mysql_gtid_distance_counts_the_executed_set_minus_ours() -> None:
    """MySQL positions are GTID sets: missing intervals and unknown server UUIDs count."""
    a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "4e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert 5 + 3 == mysql_gtid_behind(f"{a}:1-10,{b}:1-3", f"{a}:1-5")
    assert 1 == mysql_gtid_behind(f"{a}:1-10", f"{a}:1-3:6-10:4")  # only 5 is missing
    assert 0 == mysql_gtid_behind(f"{a}:1-10", f"{a.upper()}:1-10")
    assert 8 == gtid_behind(f"{a}:1-10,{b}:1-3", f"{a}:1-5")


def test_acked_gtid_reads_a_string_or_a_mapping_state() -> None:
    """The saved state's GTID position, in either shape; none without one."""
    assert "0-1-5" == acked_gtid({"gtid": "0-1-5"})
    assert "0-1-5" == acked_gtid({"gtid": {"pos": "0-1-5"}})
    assert acked_gtid({"binlog": {"file": "x.1", "pos": 4}}) is None
    assert acked_gtid(None) is None


def test_lag_seconds_is_zero_when_caught_up_else_the_newest_commit_age() -> None:
    """Caught up: 0 whatever the last commit's age (an idle source is not behind);
    behind: now minus the newest published change's commit time; unknown before any."""
    assert 0.0 == lag_seconds(1000.0, 1_000, caught_up=True)
    assert 40.0 == lag_seconds(1000.0, 960_000, caught_up=False)
    assert lag_seconds(1000.0, None, caught_up=False) is None


class _Conn:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_failed_probe_reports_the_error_without_stale_numbers_and_reconnects() -> None:
    """The source down: the report holds ``error`` and null values (never the last good
    numbers), the connection is dropped; the next probe opens a new one and answers."""
    conns: list[_Conn] = []
    answers: list[Any] = [{"bytes": 10}, RuntimeError("server gone"), {"bytes": 3}]

    def connect() -> _Conn:
        conns.append(_Conn())
        return conns[-1]

    def measure(conn: Any) -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return {"bytes": answer["bytes"], "retained_wal_bytes": None}

    probe = LagProbe(connect, measure, interval_s=60)
    assert 10 == probe.probe()["bytes"]
    failed = probe.probe()
    assert ("server gone", None) == (failed["error"], failed["bytes"])
    assert conns[0].closed
    assert 3 == probe.probe()["bytes"]
    assert 2 == len(conns)
    assert "error" not in probe.latest()


def test_the_probe_thread_measures_at_once_and_stops() -> None:
    """Started, the thread probes right away (the heartbeat has a value within one beat);
    stopped, it closes its connection."""
    conn = _Conn()
    probe = LagProbe(lambda: conn, lambda c: {"bytes": 1}, interval_s=60).start()
    deadline = time.monotonic() + 5
    while probe.latest().get("bytes") is None and time.monotonic() < deadline:
        time.sleep(0.01)
    probe.stop()
    assert (1, True) == (probe.latest()["bytes"], conn.closed)


def test_the_probe_reconnects_when_the_capture_moved_to_another_server() -> None:
    """After a failover the source reads another server: the probe's connection to the old
    one is closed and the next probe measures on a connection to the new one."""
    server = ["primary"]
    opened: list[tuple[str, _Conn]] = []

    def connect() -> _Conn:
        opened.append((server[0], _Conn()))
        return opened[-1][1]

    probe = LagProbe(connect, lambda conn: {"bytes": 0}, interval_s=60, server=lambda: server[0])
    probe.probe()
    probe.probe()
    server[0] = "replica"
    probe.probe()
    assert ["primary", "replica"] == [name for name, _ in opened]
    assert opened[0][1].closed
