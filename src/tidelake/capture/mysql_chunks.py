"""MySQL/MariaDB chunk reads of incremental snapshots (the engine: ``capture/incremental.py``).

Each worker thread reads a chunk in a transaction of its own on its own connection:

``START TRANSACTION WITH CONSISTENT SNAPSHOT`` then ``SHOW STATUS LIKE 'binlog_snapshot_%'``.
MariaDB names the binlog point that transaction's read view corresponds to exactly
(``Binlog_snapshot_file`` / ``Binlog_snapshot_position``: "the binary log file and position
of the consistent snapshot", MariaDB KB "Enhancements for START TRANSACTION WITH CONSISTENT
SNAPSHOT"; it is what ``mariadb-dump --single-transaction --master-data`` uses without
``FLUSH TABLES WITH READ LOCK``): every transaction before that point is in the chunk and none
after it. So the watermark is that point ``P``, and

- a streamed transaction is *seen* by the chunk when it lies before ``P``: its *mark* is the
  binlog point right after its GTID event (inside the transaction; ``P`` is a transaction
  boundary, so a transaction lies wholly before or after it);
- the stream has *passed* the chunk when its own binlog point reached ``P`` (at a transaction
  boundary, or at a heartbeat of an idle server: the heartbeat carries the server's current
  binlog offset, python-mysql-replication ``BinLogStreamReader(slave_heartbeat=)``, and the
  reader takes every event's ``log_pos``);
- the read is *valid* when ``P`` is not below the stream's point at dispatch (a transaction
  streamed before dispatch but not yet in the read view would otherwise go unrecorded).

No lock, no write: a user with SELECT on the table (plus the capture's REPLICATION grants)
is enough. MySQL has no ``binlog_snapshot_*`` status: there the point is ``SHOW MASTER
STATUS`` read just before the transaction starts (a transaction in the binlog but not yet
committed in InnoDB at that instant would be missed by the chunk and not dropped: the
documented limit of a read-only incremental snapshot on MySQL; MariaDB has none).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pymysql

from tidelake.capture.incremental import ChunkResult, ChunkSpec, Plan, range_plan
from tidelake.capture.mysql_values import render, snapshot_select
from tidelake.capture.snapshot import keyset_params, keyset_query

#: Integer column types: a table keyed by one of these is cut into ranges read in parallel.
_INTEGER = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")

Point = tuple[int, int]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class MySQLChunks:
    """:class:`~tidelake.capture.incremental.ChunkSource` of a ``MySQLSource``.

    ``source`` connects (``connect(autocommit=False)``) and names the server in use
    (``dsn``); ``meta`` is a second ``MySQLSource`` whose ``table_info`` reads table metadata
    (the key capture/keys.py resolves) on a connection of its own, not the stream thread's;
    ``file_number`` turns a binlog file name into its number.
    """

    def __init__(self, source: Any, meta: Any, file_number: Callable[[str], int]) -> None:
        self.source = source
        self._meta = meta
        self._file_number = file_number
        self._meta_lock = threading.Lock()
        self._local = threading.local()

    def _conn(self) -> pymysql.connections.Connection[Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None or not conn.open:
            conn = self.source.connect(autocommit=False)
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            self._local.conn = conn
        return conn

    def close_worker(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.open:
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        self._meta.close()

    def info(self, table: str) -> Any:
        """The ``TableInfo`` of ``table`` (``db.table``) as it is now."""
        database, name = table.split(".", 1)
        with self._meta_lock:
            self._meta.dsn = self.source.dsn
            info = self._meta.table_info(database, name, refresh=True)
        if info is None or not info.pk:
            raise LookupError(f"{table}: no such table, or it has no key the capture can use")
        return info

    # -- ChunkSource ------------------------------------------------------------------------

    def plan_table(self, table: str, chunk_rows: int) -> Plan:
        info = self.info(table)
        first = info.pk[0]
        table_sql = f"{_quote(info.database)}.{_quote(info.table)}"
        conn = self._conn()
        with conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_ROWS FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (info.database, info.table),
            )
            row = cur.fetchone()
            estimate = int(row[0] or 0) if row else 0
            if info.types[first].split("(")[0].split()[0].lower() not in _INTEGER:
                conn.rollback()
                return Plan("keyset", rows_total=estimate)
            cur.execute(f"SELECT MIN({_quote(first)}), MAX({_quote(first)}) FROM {table_sql}")
            lo, hi = cur.fetchone()
        conn.rollback()
        return range_plan(
            None if lo is None else int(lo), None if hi is None else int(hi), estimate, chunk_rows
        )

    def read_chunk(self, spec: ChunkSpec, chunk_rows: int) -> ChunkResult:
        info = self.info(spec.table)
        table_sql = f"{_quote(info.database)}.{_quote(info.table)}"
        select = snapshot_select(_quote, info.columns, info.types)
        key = [f"{table_sql}.{_quote(c)}" for c in info.pk]
        params: list[Any] = []
        if spec.keyset:
            sql = keyset_query(
                _quote, table_sql, info.columns, info.pk, after=spec.after is not None,
                limit=chunk_rows, select=select,
            )  # fmt: skip
            params = keyset_params(spec.after) if spec.after is not None else []
        else:
            where = []
            if spec.lo is not None:
                where.append(f"{key[0]} >= %s")
                params.append(spec.lo)
            if spec.hi is not None:
                where.append(f"{key[0]} < %s")
                params.append(spec.hi)
            sql = f"SELECT {', '.join(select)} FROM {table_sql}"
            if where:
                sql += " WHERE " + " AND ".join(where)
        conn = self._conn()
        with conn.cursor() as cur:
            fallback: Point | None = None
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
            if not cur.fetchall():  # MySQL: the point just before the transaction starts
                fallback = self._master_point(cur)
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            point = fallback
            if point is None:
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                point = (
                    self._file_number(status["binlog_snapshot_file"]),
                    int(status["binlog_snapshot_position"]),
                )
            cur.execute(sql, params or None)
            raw = cur.fetchall()
        conn.rollback()
        types = info.types
        rows = []
        for values in raw:
            data = {c: render(v, types[c]) for c, v in zip(info.columns, values, strict=True)}
            rows.append((tuple(data[c] for c in info.pk), data))
        last = list(rows[-1][0]) if rows else None
        return ChunkResult(
            spec, rows, point, last=last, final=spec.keyset and len(rows) < chunk_rows,
            meta=info,
        )  # fmt: skip

    def _master_point(self, cur: Any) -> Point:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        return self._file_number(str(row[0])), int(row[1])

    def sees(self, watermark: Any, mark: Any) -> bool:
        return bool(mark < watermark)

    def passed(self, watermark: Any, point: Any) -> bool:
        return bool(point >= watermark)

    def valid(self, watermark: Any, floor: Any) -> bool:
        return floor is None or bool(watermark >= floor)
