"""How far the capture is behind its source: bytes, transactions and seconds.

What an on-call engineer watches first (issue 22). A :class:`LagProbe` thread asks the source
every ``capture.lag_interval_s`` on a connection of its own (never the reader's replication
connection nor the source's control connection, which the reader thread uses: a pymysql or
psycopg2 connection is not thread-safe), and keeps the last answer for the heartbeat
(``"lag"`` key, read by ``serve``/``status``) and the capture's ``/metrics``.

PostgreSQL (:func:`pg_slot_lag`), from the server's view ``pg_replication_slots``
(https://www.postgresql.org/docs/15/view-pg-replication-slots.html):

* ``bytes`` = ``pg_current_wal_lsn() - confirmed_flush_lsn``: WAL the capture has not
  confirmed ("the address up to which the logical slot's consumer has confirmed receiving
  data"); the capture confirms only what JetStream acknowledged and the position file holds;
* ``retained_wal_bytes`` = ``pg_current_wal_lsn() - restart_lsn``: "the address of oldest WAL
  which still might be required by the consumer of this slot and thus won't be
  automatically removed during checkpoints" — the disk the slot holds on the server;
* ``wal_status`` (``reserved``/``extended``/``unreserved``/``lost``) and ``safe_wal_size``
  ("the number of bytes that can be written to WAL such that this slot is not in danger of
  getting in state lost"; NULL unless ``max_slot_wal_keep_size`` is set), PostgreSQL 13+.
  ``pg_wal_lsn_diff`` does the LSN arithmetic on the server
  (https://www.postgresql.org/docs/15/functions-admin.html).

MySQL/MariaDB (:func:`binlog_lag`): ``bytes`` = binlog bytes from the capture's acknowledged
position (the saved state's ``binlog`` file and offset) to the server's end (``SHOW MASTER
STATUS``), across files: the rest of the acknowledged file and every later file's size from
``SHOW BINARY LOGS`` (``File_size``,
https://mariadb.com/kb/en/show-binary-logs/). ``gtid_behind`` = transactions the server has
logged that the saved state's GTID position does not cover, when the state has one:

* MariaDB GTIDs are ``domain-server-sequence`` and the position is one GTID per domain;
  sequence numbers grow within a domain (https://mariadb.com/kb/en/gtid/), so the distance is
  the sum over domains of the server's sequence (``@@global.gtid_binlog_pos``) minus ours;
* MySQL GTIDs are ``source_uuid:transaction_id`` and a position is a GTID *set*
  (``uuid:1-5:7,uuid2:1-3``, https://dev.mysql.com/doc/refman/8.0/en/replication-gtids-concepts.html):
  the distance is the size of ``@@global.gtid_executed`` minus our set.

``seconds`` is computed by the runner, not probed: 0 while the reader has nothing more to read
(its last hand-over was empty) and everything it read is acknowledged, otherwise now minus the
source commit time of the newest message published (:func:`lag_seconds`).

A probe that fails (the source is down) keeps no stale numbers: the report says ``error`` and
its values are null, so a dashboard shows "unknown" rather than an old "0 bytes".
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: Default seconds between two probes (``capture.lag_interval_s``).
LAG_INTERVAL_S = 5.0
#: An empty hand-over at most this old means the reader is caught up (``lag_seconds``).
IDLE_WITHIN_S = 2.0

#: The keys of the heartbeat's ``"lag"`` record every source fills (null when unknown).
LAG_KEYS = ("bytes", "retained_wal_bytes", "seconds", "gtid_behind")


def empty_report() -> dict[str, Any]:
    return dict.fromkeys(LAG_KEYS)


# -- PostgreSQL ------------------------------------------------------------------------------

#: The server's WAL end: ``pg_current_wal_lsn()`` on a primary; a standby (logical slots on
#: standbys: PostgreSQL 16+) refuses WAL control functions during recovery, and its end is
#: the last WAL replayed (https://www.postgresql.org/docs/16/functions-admin.html).
_WAL_END = (
    "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END"
)
#: One row for the slot: lag, retained WAL, and (PG 13+) wal_status / safe_wal_size.
PG_SLOT_LAG_SQL = (
    f"SELECT pg_wal_lsn_diff({_WAL_END}, confirmed_flush_lsn)::bigint, "
    f"pg_wal_lsn_diff({_WAL_END}, restart_lsn)::bigint, "
    "wal_status, safe_wal_size, active "
    "FROM pg_replication_slots WHERE slot_name = %s"
)


def pg_slot_lag(conn: Any, slot: str) -> dict[str, Any]:
    """Slot lag and retained WAL of ``slot`` (psycopg2 connection ``conn``)."""
    with conn.cursor() as cur:
        cur.execute(PG_SLOT_LAG_SQL, (slot,))
        row = cur.fetchone()
    report = empty_report()
    if row is None:  # the slot is gone: nothing retained, nothing known
        report["slot_missing"] = True
        return report
    lag, retained, wal_status, safe, active = row
    report.update(
        bytes=None if lag is None else max(0, int(lag)),
        retained_wal_bytes=None if retained is None else max(0, int(retained)),
        wal_status=wal_status,
        safe_wal_size=None if safe is None else int(safe),
        slot_active=bool(active),
    )
    return report


# -- MySQL / MariaDB -------------------------------------------------------------------------


def _file_number(name: str) -> int:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else -1


def binlog_bytes_behind(
    logs: Sequence[tuple[str, int]], end: tuple[str, int], acked: tuple[str, int]
) -> int | None:
    """Bytes from ``acked`` (file, offset) to ``end`` (file, offset), across the binlog files
    ``logs`` (name, size) of ``SHOW BINARY LOGS``; None when ``acked`` is in a file the server
    no longer has (purged: the distance is unknown, and the capture cannot resume there)."""
    acked_no, end_no = _file_number(acked[0]), _file_number(end[0])
    if acked_no == end_no:
        return max(0, end[1] - acked[1])
    if acked_no > end_no:
        return 0  # a newer file than the server's end: another server's numbering
    sizes = {_file_number(name): int(size) for name, size in logs}
    if acked_no not in sizes:
        return None
    behind = max(0, sizes[acked_no] - acked[1]) + end[1]
    behind += sum(size for no, size in sizes.items() if acked_no < no < end_no)
    return behind


def mariadb_gtids(text: str) -> dict[int, int]:
    """``0-1-100,1-2-7`` → ``{domain: sequence}`` (one GTID per domain)."""
    out: dict[int, int] = {}
    for part in text.replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        domain, _server, seq = part.split("-")
        out[int(domain)] = max(out.get(int(domain), 0), int(seq))
    return out


def mariadb_gtid_behind(server: str, acked: str) -> int:
    """Transactions logged on the server after ``acked``, summed over replication domains."""
    ours = mariadb_gtids(acked)
    return sum(max(0, seq - ours.get(domain, 0)) for domain, seq in mariadb_gtids(server).items())


def mysql_gtid_set(text: str) -> dict[str, list[tuple[int, int]]]:
    """``uuid:1-5:7,uuid2:1-3`` → ``{uuid: [(1, 5), (7, 7)]}`` (inclusive intervals)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for part in text.replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        uuid, *ranges = part.split(":")
        for r in ranges:
            if not r or not r[0].isdigit():
                continue  # a tag (MySQL 8.3 tagged GTIDs) names no interval
            lo, _, hi = r.partition("-")
            out.setdefault(uuid.lower(), []).append((int(lo), int(hi or lo)))
    return out


def _covered(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> int:
    """How many of ``lo..hi`` the (possibly overlapping) ``intervals`` cover."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return sum(max(0, min(b, hi) - max(a, lo) + 1) for a, b in merged)


def mysql_gtid_behind(executed: str, acked: str) -> int:
    """Transactions in the server's ``gtid_executed`` set that the ``acked`` set lacks."""
    ours = mysql_gtid_set(acked)
    behind = 0
    for uuid, intervals in mysql_gtid_set(executed).items():
        for lo, hi in intervals:
            behind += (hi - lo + 1) - _covered(ours.get(uuid, []), lo, hi)
    return behind


def gtid_behind(server: str, acked: str) -> int:
    """The distance between GTID positions of either flavour (MySQL sets hold ``:``)."""
    if ":" in server or ":" in acked:
        return mysql_gtid_behind(server, acked)
    return mariadb_gtid_behind(server, acked)


def acked_gtid(state: Mapping[str, Any] | None) -> str | None:
    """The GTID position of a saved capture state, when it has one (GTID engineer's
    ``state["gtid"]``: a string, or ``{"pos": str}``)."""
    gtid = (state or {}).get("gtid")
    if isinstance(gtid, Mapping):
        gtid = gtid.get("pos") or gtid.get("position") or gtid.get("set")
    return gtid if isinstance(gtid, str) and gtid.strip() else None


def binlog_lag(conn: Any, state: Mapping[str, Any] | None) -> dict[str, Any]:
    """Binlog lag of a capture whose acknowledged state is ``state`` (pymysql ``conn``)."""
    report = empty_report()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        if not row:
            return report
        end = (str(row[0]), int(row[1]))
        cur.execute("SHOW BINARY LOGS")
        logs = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
        binlog = (state or {}).get("binlog")
        if isinstance(binlog, Mapping) and binlog.get("file"):
            acked = (str(binlog["file"]), int(binlog.get("pos") or 0))
            report["bytes"] = binlog_bytes_behind(logs, end, acked)
        # Retained binlog: what the server keeps on disk (its own retention, not ours).
        report["retained_binlog_bytes"] = sum(size for _, size in logs)
        ours = acked_gtid(state)
        if ours is not None:
            cur.execute("SELECT @@version")
            version = str(cur.fetchone()[0])
            variable = "gtid_binlog_pos" if "mariadb" in version.lower() else "gtid_executed"
            cur.execute(f"SELECT @@global.{variable}")
            server = str(cur.fetchone()[0] or "")
            report["gtid_behind"] = gtid_behind(server, ours)
    return report


# -- seconds ---------------------------------------------------------------------------------


def lag_seconds(now_s: float, newest_commit_ms: int | None, *, caught_up: bool) -> float | None:
    """Seconds the capture is behind: 0 when it is caught up (nothing left to read, all of it
    acknowledged), else now minus the source commit time of the newest message published;
    None before anything was published while there is something to read."""
    if caught_up:
        return 0.0
    if newest_commit_ms is None:
        return None
    return max(0.0, now_s - newest_commit_ms / 1000)


# -- the probe -------------------------------------------------------------------------------


def measure_once(source: Any, state: Mapping[str, Any] | None) -> dict[str, Any]:
    """The lag of ``source`` (a capture source with ``connect()`` and ``lag(conn, state)``)
    against the saved ``state``, now, on a connection opened and closed here: what
    ``tidelake capture lag`` prints, also while the capture is stopped (its slot still holds
    WAL). ``seconds`` is not measured here (it needs the running capture)."""
    conn = source.connect()
    try:
        return {
            **source.lag(conn, dict(state) if state else None),
            "at_ms": int(time.time() * 1000),
        }
    finally:
        conn.close()


class LagProbe:
    """A daemon thread measuring the source's lag every ``interval_s`` on its own connection.

    ``connect()`` opens that connection (again after a failure, or when ``server()``, the
    server the capture reads, changed: a failover moved it), ``measure(conn)`` returns the
    report (:data:`LAG_KEYS` and extras); :meth:`latest` is what the heartbeat shows.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        measure: Callable[[Any], dict[str, Any]],
        *,
        interval_s: float = LAG_INTERVAL_S,
        server: Callable[[], object] = lambda: None,
    ) -> None:
        self._connect = connect
        self._server = server
        self._conn_server: object = None
        self._measure = measure
        self.interval_s = interval_s
        self._conn: Any = None
        self._report: dict[str, Any] = empty_report()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def latest(self) -> dict[str, Any]:
        return dict(self._report)

    def probe(self) -> dict[str, Any]:
        """Measure once (the thread's step; also callable directly)."""
        try:
            if self._conn is not None and self._server() != self._conn_server:
                self._close_conn()  # the capture reads another server now
            if self._conn is None:
                self._conn_server = self._server()
                self._conn = self._connect()
            report = {**self._measure(self._conn), "at_ms": int(time.time() * 1000)}
            self._failed = False
        except Exception as exc:  # the source is down: say so, keep no stale numbers
            if not self._failed:
                log.warning("capture lag not measured", error=str(exc))
            self._failed = True
            self._close_conn()
            report = {**empty_report(), "error": str(exc), "at_ms": int(time.time() * 1000)}
        self._report = report
        return report

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe()
            self._stop.wait(self.interval_s)

    def start(self) -> LagProbe:
        self._thread = threading.Thread(target=self._run, name="capture-lag", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._close_conn()

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception as exc:
                log.debug("lag connection close failed", error=str(exc))
