"""Change capture from MySQL/MariaDB through the binlog replication protocol.

python-mysql-replication registers as a replica (``capture.server_id``) and reads row events;
every row change and every DDL statement of a captured table becomes one canal-json message
(``capture/canal.py``) in binlog order, which is commit order.

Positions (docs/architecture.md §2): ``(binlog file number, transaction offset, row index)``. The
transaction offset is where the transaction begins: the end of the previous transaction's
commit event, which is also the resume point saved once that commit is acknowledged, so a
restart computes exactly the same positions (and message ids) again. A DDL statement is its
own transaction: ``(file, offset, 0)``.

Server settings checked before anything is read: ``log_bin`` ON, ``binlog_format=ROW``,
``binlog_row_image=FULL`` (full before and after images: a lake upsert needs the whole row)
and ``binlog_row_metadata=FULL`` (column names, signedness and primary key in the binlog
itself, so old events decode with the schema they were written with).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
import structlog
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    RowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from tidelake.capture.canal import CanalEncoder, classify_ddl
from tidelake.capture.dsn import SourceDsn
from tidelake.capture.keys import TableShape, resolve_key
from tidelake.capture.mysql_values import binlog_type, column_type, render, snapshot_select
from tidelake.capture.runner import CaptureError, Sink, SourceUnavailableError
from tidelake.capture.snapshot import SnapshotBar, SnapshotProgress, read_chunks
from tidelake.capture.tables import TableFilter
from tidelake.config import CaptureConfig
from tidelake.events import Position

log = structlog.get_logger(__name__)

#: Seconds between server heartbeats while the binlog is idle (lets the reader flush and stop).
HEARTBEAT_S = 0.25
#: MariaDB GTID flag: the event group is one statement without BEGIN/COMMIT (DDL).
_FL_STANDALONE = 1

BinlogPoint = tuple[str, int]
#: The events the reader needs: transaction boundaries, DDL, rows, heartbeats, rotation.
_EVENTS = [
    MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent,
    WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
]  # fmt: skip


def file_number(name: str) -> int:
    """``binlog.000042`` → 42."""
    match = re.search(r"(\d+)$", name)
    if not match:
        raise CaptureError(f"binlog file name without a number: {name!r}")
    return int(match.group(1))


def point_key(point: BinlogPoint) -> tuple[int, int]:
    return file_number(point[0]), point[1]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass
class TableInfo:
    """A captured table as information_schema describes it now."""

    database: str
    table: str
    columns: list[str]
    types: dict[str, str]
    pk: tuple[str, ...]

    @property
    def table_id(self) -> str:
        return f"{self.database}.{self.table}"


class MySQLSource:
    """Snapshot + binlog streaming of one MySQL/MariaDB server."""

    kind = "mysql"

    def __init__(self, cfg: CaptureConfig, dsn: SourceDsn) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.filter = TableFilter(cfg.tables)
        self.encoder = CanalEncoder("mysql", f"mysql:{dsn.host}:{dsn.port}")
        self._tables: dict[tuple[str, str], TableInfo | None] = {}
        self._ctl: pymysql.connections.Connection[Any] | None = None
        self._warned: set[str] = set()
        self._skipped: dict[str, str] = {}
        self.rows = 0
        self.ddl = 0

    # -- connections ------------------------------------------------------------------------

    def connect(self, **kwargs: Any) -> pymysql.connections.Connection[Any]:
        opts: dict[str, Any] = {
            "host": self.dsn.host,
            "port": self.dsn.port,
            "user": self.dsn.user,
            "password": self.dsn.password or "",
            "charset": "utf8mb4",
            "autocommit": True,
            "init_command": "SET time_zone = '+00:00'",
            "connect_timeout": 10,
        }
        opts.update(kwargs)
        try:
            return pymysql.connect(**opts)
        except pymysql.err.OperationalError as exc:
            raise SourceUnavailableError(f"cannot connect to {self.dsn.redacted()}: {exc}") from exc

    def _control(self) -> pymysql.connections.Connection[Any]:
        if self._ctl is None or not self._ctl.open:
            self._ctl = self.connect()
        return self._ctl

    def close(self) -> None:
        if self._ctl is not None and self._ctl.open:
            self._ctl.close()

    # -- settings ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`CaptureError` listing every server setting capture needs."""
        with self._control().cursor() as cur:
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
                "'binlog_row_image', 'binlog_row_metadata', 'server_id')"
            )
            have = {str(k).lower(): str(v) for k, v in cur.fetchall()}
        problems = []
        wants = [
            ("log_bin", "ON", "the binary log is off: start the server with --log-bin"),
            ("binlog_format", "ROW", "row events are needed: SET GLOBAL binlog_format = 'ROW'"),
            ("binlog_row_image", "FULL",
             "a lake upsert needs whole rows: SET GLOBAL binlog_row_image = 'FULL'"),
            ("binlog_row_metadata", "FULL",
             "column names and keys must travel in the binlog (MySQL 8.0.14+, MariaDB 10.5+): "
             "SET GLOBAL binlog_row_metadata = 'FULL'"),
        ]  # fmt: skip
        for name, want, why in wants:
            value = have.get(name)
            if value is None:
                problems.append(f"{name} is not supported by this server: {why}")
            elif value.upper() != want:
                problems.append(f"{name} is {value}, needs {want}: {why}")
        if have.get("server_id") == str(self.cfg.server_id):
            problems.append(
                f"capture.server_id {self.cfg.server_id} equals the source's own server_id"
            )
        if problems:
            raise CaptureError(
                f"{self.dsn.redacted()} is not ready for capture:\n  - " + "\n  - ".join(problems)
            )

    # -- table metadata ---------------------------------------------------------------------

    def table_info(self, database: str, table: str, *, refresh: bool = False) -> TableInfo | None:
        key = (database, table)
        if refresh or key not in self._tables:
            self._tables[key] = self._load_table(database, table)
        return self._tables[key]

    def _load_table(self, database: str, table: str) -> TableInfo | None:
        with self._control().cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY, IS_NULLABLE "
                "FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (database, table),
            )
            cols = cur.fetchall()
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
                "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' "
                "ORDER BY ORDINAL_POSITION",
                (database, table),
            )
            pk = tuple(str(r[0]) for r in cur.fetchall())
        if not cols:
            return None
        names = [str(c[0]) for c in cols]
        # The key the table is captured with (capture/keys.py); () = skipped, reason noted.
        shape = TableShape(
            f"{database}.{table}", tuple(names), pk,
            frozenset(str(c[0]) for c in cols if str(c[3]).upper() == "NO"),
        )  # fmt: skip
        choice = resolve_key(self.cfg, shape)
        if self.filter(database, table):
            self._note_skip(shape.table_id, choice.skipped)
        return TableInfo(database, table, names, {str(c[0]): str(c[1]) for c in cols}, choice.key)

    def captured_tables(self) -> list[TableInfo]:
        """Base tables the filter takes, with a primary key (the others are named in a log)."""
        with self._control().cursor() as cur:
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME"
            )
            names = [(str(d), str(t)) for d, t in cur.fetchall()]
        out = []
        for database, table in names:
            if not self.filter(database, table):
                continue
            info = self.table_info(database, table, refresh=True)
            if info is None:
                continue
            if not info.pk:
                continue  # skipped: _load_table noted why
            out.append(info)
        return out

    def _note_skip(self, table_id: str, reason: str | None) -> None:
        if reason is None:
            self._skipped.pop(table_id, None)
            return
        if table_id not in self._warned:
            self._warned.add(table_id)
            log.warning("table not captured", table=table_id, reason=reason)
        self._skipped[table_id] = reason

    def skipped_tables(self) -> dict[str, str]:
        """``db.table`` → why the capture does not take it (heartbeat ``"skipped"``)."""
        return dict(self._skipped)

    # -- the capture ------------------------------------------------------------------------

    def master_status(self) -> BinlogPoint:
        with self._control().cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        if not row:
            raise CaptureError("SHOW MASTER STATUS is empty: the binary log is off")
        return str(row[0]), int(row[1])

    def confirm(self, state: dict[str, Any]) -> None:
        """Nothing to tell a MySQL server: the binlog is kept by its own retention."""

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        # Skipped tables are reported from the start: those saved with the position (a table
        # met only by its binlog rows) and every table the filter takes now (capture/keys.py).
        self._skipped.update((state or {}).get("skipped") or {})
        self.captured_tables()
        if state is not None and state.get("phase") == "streaming":
            start = (str(state["binlog"]["file"]), int(state["binlog"]["pos"]))
            self._stream(start, sink, stop, _streaming_state)
            return
        if state is None and self.cfg.snapshot == "never":
            point = self.master_status()
            sink.resume(_streaming_state(point), flush_after_s=0)
            self._stream(point, sink, stop, _streaming_state)
            return
        conn, point = self.open_snapshot()
        try:
            progress = SnapshotProgress.from_dict(state.get("snapshot") if state else None)
            if state is not None:
                # An interrupted snapshot: first publish what changed since its hand-off point,
                # so every later snapshot row sorts after those changes (docs/capture.md).
                start = (str(state["binlog"]["file"]), int(state["binlog"]["pos"]))
                if point_key(start) < point_key(point):
                    log.info("snapshot resumed: catching up", since=start, until=point)

                    def catch_up_state(p: BinlogPoint) -> dict[str, Any]:
                        return _snapshot_state(p, progress)

                    self._stream(start, sink, stop, catch_up_state, until=point)
                    if stop.is_set():
                        return
            if not self._snapshot(conn, point, progress, sink, stop):
                return
        finally:
            conn.close()
        sink.resume(_streaming_state(point), flush_after_s=0)
        self._stream(point, sink, stop, _streaming_state)

    def open_snapshot(self) -> tuple[pymysql.connections.Connection[Any], BinlogPoint]:
        """A transaction seeing exactly the state at a binlog point, and that point."""
        conn = self.connect(autocommit=False)
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            # MariaDB names the binlog point of the snapshot without any lock.
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            if status.get("binlog_snapshot_file"):
                point = (status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
                return conn, point
            # MySQL: hold a global read lock for the instant it takes to start the snapshot.
            conn.rollback()
            cur.execute("FLUSH TABLES WITH READ LOCK")
            try:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute("SHOW MASTER STATUS")
                row = cur.fetchone()
            finally:
                cur.execute("UNLOCK TABLES")
        if not row:
            conn.close()
            raise CaptureError("SHOW MASTER STATUS is empty: the binary log is off")
        return conn, (str(row[0]), int(row[1]))

    def _snapshot(
        self,
        conn: pymysql.connections.Connection[Any],
        point: BinlogPoint,
        progress: SnapshotProgress,
        sink: Sink,
        stop: threading.Event,
    ) -> bool:
        """Publish every captured row as of ``point``; False when stopped part way."""
        tables = [t for t in self.captured_tables() if t.table_id not in progress.done]
        file_no = file_number(point[0])
        with conn.cursor() as cur:
            estimate = 0
            for t in tables:
                cur.execute(
                    "SELECT TABLE_ROWS FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (t.database, t.table),
                )
                row = cur.fetchone()
                estimate += int(row[0] or 0) if row else 0
            bar = SnapshotBar(estimate)
            try:
                for info in tables:
                    after = progress.after if progress.table == info.table_id else None
                    progress.table, progress.after = info.table_id, after
                    table_sql = f"{quote(info.database)}.{quote(info.table)}"
                    types = info.types
                    select = snapshot_select(quote, info.columns, types)
                    for chunk in read_chunks(
                        cur, quote, table_sql, info.columns, info.pk, self.cfg.chunk_rows, after,
                        select,
                    ):  # fmt: skip
                        data: dict[str, str | None] = {}
                        for values in chunk:
                            data = {
                                c: render(v, types[c])
                                for c, v in zip(info.columns, values, strict=True)
                            }
                            sink.put(
                                self.encoder.row(
                                    database=info.database,
                                    table=info.table,
                                    pk=info.pk,
                                    kind="INSERT",
                                    data=data,
                                    old=None,
                                    types=types,
                                    position=Position((file_no, point[1] - 1, progress.rows)),
                                    commit_ts_ms=int(time.time() * 1000),
                                )
                            )
                            progress.rows += 1
                        progress.after = [data[c] for c in info.pk]
                        sink.resume(_snapshot_state(point, progress))
                        bar.advance(info.table_id, len(chunk))
                        if stop.is_set():
                            return False
                    progress.done.append(info.table_id)
                    progress.table, progress.after = None, None
                    sink.resume(_snapshot_state(point, progress))
            finally:
                bar.close()
        conn.rollback()
        return True

    def _stream(
        self,
        start: BinlogPoint,
        sink: Sink,
        stop: threading.Event,
        state_for: Callable[[BinlogPoint], dict[str, Any]],
        *,
        until: BinlogPoint | None = None,
    ) -> None:
        """Stream from ``start`` (a transaction boundary) until ``stop`` or ``until``."""
        reader = BinLogStreamReader(
            connection_settings={
                "host": self.dsn.host,
                "port": self.dsn.port,
                "user": self.dsn.user,
                "passwd": self.dsn.password or "",
            },
            server_id=self.cfg.server_id,
            log_file=start[0],
            log_pos=start[1],
            resume_stream=True,
            blocking=True,
            slave_heartbeat=HEARTBEAT_S,
            only_events=_EVENTS,
            enable_logging=False,
        )
        log.info("binlog streaming", start=start, until=until)
        base = start
        file_no = file_number(start[0])
        row_index = 0
        explicit = False  # inside BEGIN ... COMMIT
        commit_ms = 0
        stop_key = point_key(until) if until else None
        try:
            while not stop.is_set():
                if stop_key is not None and point_key(base) >= stop_key:
                    return
                event = _fetch(reader, start)
                if event is None:
                    continue
                if isinstance(event, HeartbeatLogEvent | RotateEvent):
                    sink.flush()
                    continue
                if isinstance(event, MariadbGtidEvent | GtidEvent):
                    row_index = 0
                    commit_ms = int(event.timestamp) * 1000
                    flags = int(getattr(event, "flags", 0) or 0)
                    explicit = isinstance(event, MariadbGtidEvent) and not flags & _FL_STANDALONE
                    continue
                if isinstance(event, XidEvent):
                    base = (reader.log_file, reader.log_pos)
                    file_no = file_number(base[0])
                    explicit = False
                    sink.resume(state_for(base))
                    continue
                if isinstance(event, QueryEvent):
                    query = _text(event.query).strip()
                    word = query.split(None, 1)[0].upper() if query else ""
                    if word == "BEGIN":
                        explicit, row_index = True, 0
                        commit_ms = int(event.timestamp) * 1000
                        continue
                    if word == "COMMIT" or word == "XA":
                        base = (reader.log_file, reader.log_pos)
                        file_no = file_number(base[0])
                        explicit = False
                        sink.resume(state_for(base))
                        continue
                    statements = classify_ddl(query, _text(event.schema))
                    if explicit and not statements:
                        continue  # SAVEPOINT and the like inside a transaction
                    position = Position((file_no, base[1], 0))
                    for ddl_type, database, table in statements:
                        self._emit_ddl(sink, query, ddl_type, database, table, position,
                                       int(event.timestamp) * 1000)  # fmt: skip
                    base = (reader.log_file, reader.log_pos)
                    file_no = file_number(base[0])
                    explicit = False
                    sink.resume(state_for(base))
                    continue
                row_index = self._emit_rows(event, sink, (file_no, base[1]), row_index, commit_ms)
        finally:
            sink.flush()
            reader.close()

    def _emit_ddl(
        self,
        sink: Sink,
        sql: str,
        ddl_type: str,
        database: str,
        table: str,
        position: Position,
        commit_ms: int,
    ) -> None:
        info = self.table_info(database, table, refresh=True)
        if not self.filter(database, table):
            return
        self.ddl += 1
        sink.put(
            self.encoder.ddl(
                database=database,
                table=table,
                sql=sql,
                ddl_type=ddl_type,
                position=position,
                commit_ts_ms=commit_ms,
                types=info.types if info else None,
                pk=info.pk if info else (),
            )
        )
        log.info("ddl captured", table=f"{database}.{table}", ddl_type=ddl_type, at=str(position))

    def _emit_rows(
        self, event: Any, sink: Sink, txn: tuple[int, int], row_index: int, commit_ms: int
    ) -> int:
        database, table = str(event.schema), str(event.table)
        rows = event.rows
        if not self.filter(database, table):
            return row_index + len(rows)
        info = self.table_info(database, table)
        binlog_pk = event.primary_key
        # The library gives one key column as a string, several as a tuple, none as "".
        pk: tuple[str, ...] = (
            tuple(binlog_pk) if not isinstance(binlog_pk, str) else (binlog_pk,) * bool(binlog_pk)
        )
        if info is not None and (not pk or f"{database}.{table}" in self.cfg.keys):
            pk = info.pk  # the resolved key: configured, primary or full row (capture/keys.py)
        if not pk:
            if info is None:
                self._note_skip(f"{database}.{table}", "no primary key and the table is gone")
            return row_index + len(rows)
        schema_types = info.types if info else {}
        types = {
            c.name: column_type(schema_types.get(c.name), binlog_type(c)) for c in event.columns
        }
        if isinstance(event, WriteRowsEvent):
            kind = "INSERT"
        elif isinstance(event, UpdateRowsEvent):
            kind = "UPDATE"
        else:
            kind = "DELETE"
        for row in rows:
            position = Position((*txn, row_index))
            row_index += 1
            if kind == "UPDATE":
                data = _rendered(row["after_values"], types, row.get("after_none_sources"))
                old = _rendered(row["before_values"], types, row.get("before_none_sources"))
            else:
                data, old = _rendered(row["values"], types, row.get("none_sources")), None
            sink.put(
                self.encoder.row(
                    database=database,
                    table=table,
                    pk=pk,
                    kind=kind,
                    data=data,
                    old=old,
                    types=types,
                    position=position,
                    commit_ts_ms=commit_ms,
                )
            )
            self.rows += 1
        return row_index


#: ER_MASTER_FATAL_ERROR_READING_BINLOG: the requested binlog file or position is gone.
_BINLOG_GONE = 1236


def _fetch(reader: BinLogStreamReader, start: BinlogPoint) -> Any:
    try:
        return reader.fetchone()
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == _BINLOG_GONE:
            raise CaptureError(
                f"the binlog no longer holds the capture's position {start[0]}:{start[1]} "
                f"({exc.args[1]}); changes since then are lost to the capture: empty the lake "
                "tables and remove the position file to start again with a snapshot"
            ) from exc
        raise


def _rendered(
    values: dict[str, Any], types: dict[str, str], none_sources: dict[str, str] | None = None
) -> dict[str, str | None]:
    out = {c: render(v, types.get(c, "text")) for c, v in values.items()}
    # The binlog reader gives an empty SET as None and says why; it is '', not NULL (a
    # SELECT reads it as '').
    for column, why in (none_sources or {}).items():
        if why == NONE_SOURCE.EMPTY_SET and column in out:
            out[column] = ""
    return out


def _read_time2(event: Any, column: Any) -> dt.timedelta:
    """A TIME(fsp) value of a row event, in place of python-mysql-replication's reader, which
    gets negative values with a fraction wrong (``-01:02:03.456789`` as ``-01:02:03.543211``).

    The layout is MySQL's, as ``my_time_packed_from_binary`` in ``mysys/my_time.c`` (MySQL)
    and ``sql/compat56.cc`` (MariaDB) read it: 3 big-endian bytes of the integer part offset
    by 0x800000, then 0, 1, 2 or 3 bytes of fraction by precision (1-2: hundredths in one
    unsigned byte, 3-4: 1/10000 in two, 5-6: the six bytes together form the packed value
    offset by 0x800000000000). A negative value with a fraction keeps the fraction's
    complement, so the integer part is one lower. The packed value is ``int << 24 | frac``
    and the integer part is ``hour << 12 | minute << 6 | second``
    (``TIME_from_longlong_time_packed``).
    """
    fsp = int(getattr(column, "fsp", 0) or 0)
    if fsp >= 5:
        packed = int.from_bytes(event.packet.read(6), "big") - 0x800000000000
    else:
        intpart = int.from_bytes(event.packet.read(3), "big") - 0x800000
        frac = 0
        if fsp >= 1:
            size = 1 if fsp <= 2 else 2
            frac = int.from_bytes(event.packet.read(size), "big")
            if intpart < 0 and frac:
                intpart += 1
                frac -= 1 << (8 * size)
            frac *= 10000 if size == 1 else 100
        packed = (intpart << 24) + frac
    sign = -1 if packed < 0 else 1
    packed = abs(packed)
    hms, micros = packed >> 24, packed % (1 << 24)
    value = dt.timedelta(
        hours=(hms >> 12) % (1 << 10), minutes=(hms >> 6) % 64, seconds=hms % 64,
        microseconds=micros,
    )  # fmt: skip
    return value * sign


# Installed on the library's row-event class under its private (name-mangled) name, the one
# its column reader calls; a library without it fails here, at import, not with wrong values.
if not hasattr(RowsEvent, "_RowsEvent__read_time2"):  # pragma: no cover - version guard
    raise ImportError("python-mysql-replication: RowsEvent.__read_time2 not found to replace")
RowsEvent._RowsEvent__read_time2 = _read_time2


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value or "")


def _streaming_state(point: BinlogPoint) -> dict[str, Any]:
    return {"source": "mysql", "phase": "streaming", "binlog": {"file": point[0], "pos": point[1]}}


def _snapshot_state(point: BinlogPoint, progress: SnapshotProgress) -> dict[str, Any]:
    return {
        "source": "mysql",
        "phase": "snapshot",
        "binlog": {"file": point[0], "pos": point[1]},
        "snapshot": progress.to_dict(),
    }
