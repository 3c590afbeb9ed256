"""Change capture from MySQL/MariaDB through the binlog replication protocol.

python-mysql-replication registers as a replica (``capture.server_id``) and reads row events;
every row change and every DDL statement of a captured table becomes one canal-json message
(``capture/canal.py``) in binlog order, which is commit order.

Positions (docs/architecture.md §2): ``(binlog file number, transaction offset, row index)``. The
transaction offset is where the transaction begins: the end of the previous transaction's
commit event, which is also the resume point saved once that commit is acknowledged, so a
restart computes exactly the same positions (and message ids) again. A DDL statement is its
own transaction: ``(file, offset, 0)``.

GTID positions and failover (``capture/gtid.py``, docs/capture.md "Positions and failover"):
the saved state also holds the GTID position at that boundary, the server it was read on
and a server epoch. On another server of the topology (``capture.failover_sources``, or
``capture.source`` pointed at a new primary) the stream resumes by GTID after checking the
server has every transaction published; positions read there lead with ``2^32 + epoch`` so
they sort after every earlier one.

Server settings checked before anything is read: ``log_bin`` ON, ``binlog_format=ROW``,
``binlog_row_image=FULL`` (full before and after images: a lake upsert needs the whole row)
and ``binlog_row_metadata=FULL`` (column names, signedness and primary key in the binlog
itself, so old events decode with the schema they were written with).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
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

from tidelake.capture import binlog_rows, binlog_table_maps
from tidelake.capture import gtid as gtids
from tidelake.capture.canal import CanalEncoder, classify_ddl
from tidelake.capture.dsn import SourceDsn, parse_dsn
from tidelake.capture.incremental import (
    IncrementalSnapshots,
    SnapshotHooks,
    message_batches,
    snapshotted_at_start,
)
from tidelake.capture.keys import TableShape, resolve_key
from tidelake.capture.mysql_chunks import MySQLChunks
from tidelake.capture.mysql_values import binlog_type, column_type, render, snapshot_select
from tidelake.capture.runner import CaptureError, Sink, SourceUnavailableError
from tidelake.capture.snapshot import SnapshotBar, SnapshotProgress, read_chunks
from tidelake.capture.tables import TableFilter
from tidelake.config import CaptureConfig
from tidelake.events import Position

log = structlog.get_logger(__name__)
# Repeated binlog table maps are decoded once, common column types read directly
# (capture/binlog_table_maps.py, capture/binlog_rows.py).
binlog_table_maps.install()
binlog_rows.install()

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


@lru_cache(maxsize=1024)  # called at every commit of the stream: one regex per file name
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


class MySQLSource(SnapshotHooks):
    """Snapshot + binlog streaming of one MySQL/MariaDB server."""

    kind = "mysql"

    def __init__(self, cfg: CaptureConfig, dsn: SourceDsn) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.filter = TableFilter(cfg.tables)
        self.encoder = CanalEncoder("mysql", f"mysql:{dsn.host}:{dsn.port}")
        self._tables: dict[tuple[str, str], TableInfo | None] = {}
        #: Rendered column types by binlog column list (``_emit_rows``).
        self._event_types: dict[int, tuple[Any, dict[str, str], dict[str, str]]] = {}
        self._ctl: pymysql.connections.Connection[Any] | None = None
        self._warned: set[str] = set()
        self._skipped: dict[str, str] = {}
        self.rows = 0
        self.ddl = 0
        # GTID positions and failover (capture/gtid.py, docs/capture.md "Positions and
        # failover"): the servers to try, the one in use, and the GTID position at the last
        # transaction boundary streamed.
        self.candidates = [dsn, *(_failover_dsn(text, dsn) for text in cfg.failover_sources)]
        self.flavor = "mariadb"
        self.gtid_mode = False
        self.server: dict[str, Any] = {}
        self.epoch = 0
        self._gtid: str | None = None
        self._pending_gtid: str | None = None
        self._known_gtid: dict[BinlogPoint, str] = {}
        self._executed: gtids.MySQLExecuted | None = None
        self._base: BinlogPoint | None = None
        # Incremental snapshots (capture/incremental.py): the engine, the mark of the
        # transaction being streamed, the staging store holding snapshot requests.
        self._snap: IncrementalSnapshots | None = None
        self._chunks: MySQLChunks | None = None
        self._txn_mark: tuple[int, int] = (0, 0)
        self._snap_epoch = 0
        self._snap_floor: tuple[int, int] = (0, 0)
        self._staging: Any = None

    # -- connections ------------------------------------------------------------------------

    def connect(
        self, *, at: SourceDsn | None = None, **kwargs: Any
    ) -> pymysql.connections.Connection[Any]:
        dsn = at or self.dsn
        opts: dict[str, Any] = {
            "host": dsn.host,
            "port": dsn.port,
            "user": dsn.user,
            "password": dsn.password or "",
            "charset": "utf8mb4",
            "autocommit": True,
            "init_command": "SET time_zone = '+00:00'",
            "connect_timeout": 10,
        }
        opts.update(kwargs)
        try:
            return pymysql.connect(**opts)
        except pymysql.err.OperationalError as exc:
            raise SourceUnavailableError(f"cannot connect to {dsn.redacted()}: {exc}") from exc

    def _control(self) -> pymysql.connections.Connection[Any]:
        if self._ctl is None or not self._ctl.open:
            self._ctl = self._connect_any()
        return self._ctl

    def _connect_any(self) -> pymysql.connections.Connection[Any]:
        """A connection to the server in use, else to the first reachable of
        ``capture.source`` and ``capture.failover_sources``; that server is then in use."""
        order = [self.dsn, *(d for d in self.candidates if d != self.dsn)]
        errors = []
        for dsn in order:
            try:
                conn = self.connect(at=dsn)
            except SourceUnavailableError as exc:
                errors.append(str(exc))
                continue
            if dsn != self.dsn:
                log.warning("capture source switched", was=self.dsn.redacted(), now=dsn.redacted())
                self.dsn = dsn
            return conn
        raise SourceUnavailableError("; ".join(errors))

    def probe(self) -> None:
        """Learn the server in use: flavour, identity, whether positions carry GTIDs."""
        with self._control().cursor() as cur:
            cur.execute("SELECT VERSION(), @@server_id")
            version, server_id = cur.fetchone()
            self.flavor = "mariadb" if "mariadb" in str(version).lower() else "mysql"
            server: dict[str, Any] = {
                "address": f"{self.dsn.host}:{self.dsn.port}",
                "server_id": int(server_id),
            }
            # MariaDB writes a GTID for every event group (https://mariadb.com/kb/en/gtid/).
            mode, gtid_on = "ON", True
            if self.flavor == "mysql":
                cur.execute("SELECT @@server_uuid, @@gtid_mode")
                uuid, mode = cur.fetchone()
                server["uuid"] = str(uuid)
                gtid_on = str(mode).upper() == "ON"
        if self.cfg.position_mode == "gtid" and not gtid_on:
            raise CaptureError(
                f"capture.position_mode is gtid but {self.dsn.redacted()} has gtid_mode={mode}: "
                "set enforce_gtid_consistency=ON and gtid_mode=ON, or use position_mode auto"
            )
        self.gtid_mode = self.cfg.position_mode != "file" and gtid_on
        self.server = server

    def close(self) -> None:
        if self._snap is not None:
            self._snap.close()
        if self._chunks is not None:
            self._chunks.close()
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
        self.probe()

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
            self._skipped.pop(f"{database}.{table}", None)  # dropped: nothing to skip
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
        # A table skipped before (saved state) and gone since is no longer reported.
        for gone in set(self._skipped) - {f"{d}.{t}" for d, t in names}:
            self._skipped.pop(gone, None)
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
        if len(row) > 4 and row[4]:  # MySQL's Executed_Gtid_Set, read with the point
            self._known_gtid[(str(row[0]), int(row[1]))] = str(row[4])
        return str(row[0]), int(row[1])

    def confirm(self, state: dict[str, Any]) -> None:
        """Nothing to tell a MySQL server: the binlog is kept by its own retention."""

    def lag(self, conn: Any, state: dict[str, Any] | None) -> dict[str, Any]:
        """Binlog bytes (and GTIDs) from the acknowledged ``state`` to the server's end, on
        the lag probe's own connection ``conn`` (capture/lag.py)."""
        from tidelake.capture.lag import binlog_lag

        return binlog_lag(conn, state)

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        # First of all: the server to read (table metadata included) is the saved one's.
        self._prefer_saved_server(state)
        # Skipped tables are reported from the start: those saved with the position (a table
        # met only by its binlog rows) and every table the filter takes now (capture/keys.py).
        self._skipped.update((state or {}).get("skipped") or {})
        self.captured_tables()
        if not self.server:
            self.probe()
        if state is not None:
            self.epoch = int(state.get("epoch") or 0)
            self._gtid = state.get("gtid") if self.gtid_mode else None
        self._start_incremental(state)
        if state is not None and state.get("phase") == "streaming":
            start = (str(state["binlog"]["file"]), int(state["binlog"]["pos"]))
            gtid_start = None
            if not _same_server(state.get("server"), self.server):
                try:
                    gtid_start = self._switch_server(state.get("server"))
                except ServerBehindError:
                    # Another server may have everything (or the saved one come back).
                    gtid_start = self._reconnect(stop, state.get("server"))
                    if stop.is_set():
                        return
            self._stream_failover(start, sink, stop, gtid_start)
            return
        if state is not None and not _same_server(state.get("server"), self.server):
            raise CaptureError(
                f"the saved capture position was taken on {state['server'].get('address')} "
                f"during the initial snapshot; {self.dsn.redacted()} is another server: a "
                "snapshot cannot be resumed elsewhere. Empty the lake tables and remove the "
                "position file to start again with a snapshot"
            )
        if state is None and self.cfg.snapshot != "initial":
            # never, or incremental: the tables queued by _start_incremental are read in
            # chunks beside the stream.
            point = self.master_status()
            self._gtid = self._gtid_at(point)
            sink.resume({**_streaming_state(point), **self._position_fields()}, flush_after_s=0)
            self._stream_failover(point, sink, stop)
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
        self._gtid = self._gtid_at(point)
        sink.resume({**_streaming_state(point), **self._position_fields()}, flush_after_s=0)
        self._stream_failover(point, sink, stop)

    # -- GTID positions and failover (capture/gtid.py) -----------------------------------------

    def _position_fields(self) -> dict[str, Any]:
        """What a saved state holds besides the binlog point: the GTID position there (when
        the server has GTIDs), the server it was read on and the server epoch."""
        out: dict[str, Any] = {"epoch": self.epoch, "server": self.server, "flavor": self.flavor}
        if self._snap is not None:
            out["incremental"] = self._snap.state()
        if self.gtid_mode and self._gtid is not None:
            out["gtid"] = self._gtid
        return out

    def _where(self) -> dict[str, Any]:
        """The server a snapshot state was taken on: its binlog point means nothing on
        another (``run`` refuses to continue such a snapshot elsewhere)."""
        return {"server": self.server, "epoch": self.epoch}

    def _gtid_at(self, point: BinlogPoint) -> str | None:
        """The GTID position at a binlog point of the server in use (None: unknown)."""
        if not self.gtid_mode:
            return None
        if self.flavor == "mysql":
            # MySQL names no GTID set for a file/offset: only SHOW MASTER STATUS read with the
            # point gives it (master_status, open_snapshot).
            return self._known_gtid.get(point)
        with self._control().cursor() as cur:
            # https://mariadb.com/kb/en/binlog_gtid_pos/: the GTID position at a binlog offset.
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (point[0], point[1]))
            row = cur.fetchone()
        return str(row[0]) if row and row[0] is not None else None

    def _advance_gtid(self) -> None:
        """The transaction whose GTID event came last is committed: add it to the position."""
        pending, self._pending_gtid = self._pending_gtid, None
        if pending is None or not self.gtid_mode or self._gtid is None:
            return
        if self.flavor == "mysql":
            # Parsed once, then grown in place: this runs at every commit.
            if self._executed is None or str(self._executed) != self._gtid:
                self._executed = gtids.MySQLExecuted(self._gtid)
            self._executed.add(pending)
            self._gtid = str(self._executed)
        else:
            domain = pending.split("-", 1)[0] + "-"
            kept = [g for g in self._gtid.split(",") if g and not g.startswith(domain)]
            self._gtid = ",".join(sorted([*kept, pending], key=lambda g: int(g.split("-")[0])))

    def _switch_server(self, previous: dict[str, Any] | None) -> str:
        """Checks before resuming on another server than the saved position's; the GTID
        position to resume from. Refuses (CaptureError) when the position has no GTID or the
        server lacks a transaction the capture already published."""
        where = self.dsn.redacted()
        was = (previous or {}).get("address", "another server")
        if not self.gtid_mode:
            raise CaptureError(
                f"the capture position was read on {was}; {where} is another server and "
                "positions carry no GTID (capture.position_mode=file or MySQL gtid_mode OFF): "
                "binlog file offsets of one server mean nothing on another"
            )
        if self._gtid is None:
            raise CaptureError(
                f"the capture position was read on {was} and holds no GTID (saved before GTID "
                f"positions, or by a MySQL capture started without one): it cannot be resumed "
                f"on {where}. Point capture.source back at {was}, or empty the lake tables and "
                "remove the position file to start again with a snapshot"
            )
        with self._control().cursor() as cur:
            if self.flavor == "mysql":
                cur.execute("SELECT @@GLOBAL.gtid_executed, @@GLOBAL.gtid_purged")
                executed, purged = (str(v or "") for v in cur.fetchone())
                lacking = gtids.mysql_missing_on(self._gtid, executed)
                gone = gtids.mysql_missing_on(purged, self._gtid)
                if gone:
                    raise CaptureError(
                        f"{where} purged transactions the capture has not read ({gone}): "
                        "they are lost to the capture; empty the lake tables and remove the "
                        "position file to start again with a snapshot"
                    )
            else:
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                have = str(cur.fetchone()[0] or "")
                missing = gtids.MariaPos.parse(self._gtid).missing_on(gtids.MariaPos.parse(have))
                lacking = "; ".join(missing)
        if lacking:
            raise ServerBehindError(
                f"{where} lacks transactions the capture already published from {was} "
                f"({lacking}): it is behind or diverged. Resuming there would lose them in the "
                "lake (or keep rows the source no longer has); refused. Wait until it has "
                "applied them, or point capture.source at a server that has them (MariaDB: "
                "its binlog needs log_slave_updates=ON)"
            )
        self.epoch += 1
        log.warning(
            "capture resumes on another server by GTID",
            was=was, server=where, gtid=self._gtid, epoch=self.epoch,
        )  # fmt: skip
        return self._gtid

    def _stream_failover(
        self, start: BinlogPoint, sink: Sink, stop: threading.Event, gtid_start: str | None = None
    ) -> None:
        """Stream; when the server is lost, reconnect (the same server, else the next of
        ``capture.failover_sources``) within ``capture.failover_timeout_s`` and go on from
        the last transaction boundary: by binlog point on the same server, by GTID on
        another."""
        while True:
            self._base = None
            try:
                self._stream(start, sink, stop, _streaming_state, gtid_start=gtid_start)
                return
            except (pymysql.err.OperationalError, SourceUnavailableError) as exc:
                if stop.is_set() or not _connection_lost(exc):
                    raise
                log.warning("binlog connection lost", error=str(exc))
            if self._base is not None:
                start, gtid_start = self._base, None
            switched = self._reconnect(stop, self.server)
            if stop.is_set():
                return
            if switched is not None:
                gtid_start = switched

    def _prefer_saved_server(self, state: dict[str, Any] | None) -> None:
        """After a failover the saved state names the server it moved to: a restarted
        capture goes back there first (``capture.source`` may be the old primary, come back
        without the transactions written since)."""
        address = ((state or {}).get("server") or {}).get("address")
        if not address or address == f"{self.dsn.host}:{self.dsn.port}":
            return
        for dsn in self.candidates:
            if f"{dsn.host}:{dsn.port}" == address:
                try:
                    conn = self.connect(at=dsn)
                except SourceUnavailableError:
                    return
                if self._ctl is not None:
                    with contextlib.suppress(Exception):
                        self._ctl.close()
                self._ctl, self.dsn = conn, dsn
                self.probe()
                return

    def _reconnect(self, stop: threading.Event, previous: dict[str, Any] | None) -> str | None:
        """Find a server to go on from: the one in use, else ``capture.source`` and the
        failover sources in order, round after round up to ``capture.failover_timeout_s``.
        The server ``previous`` itself: None (resume by binlog point). Another one: the GTID
        position to resume from, once it has every transaction published (one behind may
        catch up, or the old server come back: a blip must not end the capture). Raises the
        last reason when time is up."""
        if self._ctl is not None:
            with contextlib.suppress(Exception):
                self._ctl.close()
            self._ctl = None
        deadline = time.monotonic() + self.cfg.failover_timeout_s
        home = self.dsn
        problem: Exception = SourceUnavailableError("no server to try")
        while not stop.is_set():
            for dsn in [home, *(d for d in self.candidates if d != home)]:
                try:
                    self._ctl = self.connect(at=dsn)
                    if dsn != self.dsn:
                        log.warning("capture source switched", was=self.dsn.redacted(),
                                    now=dsn.redacted())  # fmt: skip
                        self.dsn = dsn
                    self.probe()
                    if _same_server(previous, self.server):
                        return None
                    return self._switch_server(previous)
                except (SourceUnavailableError, ServerBehindError) as exc:
                    problem = exc
                except pymysql.err.OperationalError as exc:  # gone between connect and probe
                    problem = SourceUnavailableError(f"{dsn.redacted()}: {exc}")
                if self._ctl is not None:
                    with contextlib.suppress(Exception):
                        self._ctl.close()
                    self._ctl = None
            if time.monotonic() >= deadline:
                raise problem
            stop.wait(0.5)
        return None

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
        if len(row) > 4 and row[4]:  # MySQL's Executed_Gtid_Set at the snapshot point
            self._known_gtid[(str(row[0]), int(row[1]))] = str(row[4])
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
        # Snapshot rows sort just before the hand-off point's first transaction.
        snap_txn = gtids.txn_prefix(self.epoch, file_no, point[1] - 1)
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
                                    position=Position((*snap_txn, progress.rows)),
                                    commit_ts_ms=int(time.time() * 1000),
                                )
                            )
                            progress.rows += 1
                        progress.after = [data[c] for c in info.pk]
                        sink.resume({**_snapshot_state(point, progress), **self._where()})
                        bar.advance(info.table_id, len(chunk))
                        if stop.is_set():
                            return False
                    progress.done.append(info.table_id)
                    progress.table, progress.after = None, None
                    sink.resume({**_snapshot_state(point, progress), **self._where()})
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
        gtid_start: str | None = None,
    ) -> None:
        """Stream from ``start`` (a transaction boundary) until ``stop`` or ``until``; with
        ``gtid_start``, from the transaction after that GTID position instead (its binlog
        point on this server is learnt from the first GTID event)."""
        where: dict[str, Any] = {"log_file": start[0], "log_pos": start[1], "resume_stream": True}
        if gtid_start is not None:
            where = {"auto_position": gtid_start, "is_mariadb": self.flavor == "mariadb"}
        elif self._gtid is None:
            self._gtid = self._gtid_at(start)
        reader = BinLogStreamReader(
            connection_settings={
                "host": self.dsn.host,
                "port": self.dsn.port,
                "user": self.dsn.user,
                "passwd": self.dsn.password or "",
            },
            server_id=self.cfg.server_id,
            blocking=True,
            slave_heartbeat=HEARTBEAT_S,
            only_events=_EVENTS,
            enable_logging=False,
            **where,
        )
        log.info("binlog streaming", start=start, until=until, gtid=gtid_start)
        base = start
        # Resuming by GTID: the first transaction's point is where its GTID event begins.
        base_unknown = gtid_start is not None
        file_no = file_number(start[0])
        row_index = 0
        explicit = False  # inside BEGIN ... COMMIT
        commit_ms = 0
        stop_key = point_key(until) if until else None
        try:
            while not stop.is_set():
                if stop_key is not None and point_key(base) >= stop_key:
                    return
                event = _fetch(reader, start, gtid_start)
                if event is None:
                    continue
                if isinstance(event, HeartbeatLogEvent | RotateEvent):
                    if until is None and self._snapshot_tick(sink, base, reader):
                        sink.resume(self._boundary(state_for, base))
                    sink.flush()
                    continue
                if isinstance(event, MariadbGtidEvent | GtidEvent):
                    if base_unknown:
                        base = (reader.log_file, int(event.packet.log_pos) - int(event.event_size))
                        file_no = file_number(base[0])
                        base_unknown = False
                    self._pending_gtid = str(event.gtid)
                    self._txn_mark = (file_number(reader.log_file), int(reader.log_pos))
                    row_index = 0
                    commit_ms = int(event.timestamp) * 1000
                    flags = int(getattr(event, "flags", 0) or 0)
                    explicit = isinstance(event, MariadbGtidEvent) and not flags & _FL_STANDALONE
                    continue
                if isinstance(event, XidEvent):
                    base = (reader.log_file, reader.log_pos)
                    file_no = file_number(base[0])
                    explicit = False
                    if until is None:
                        self._snapshot_tick(sink, base, reader)
                    sink.resume(self._boundary(state_for, base))
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
                        if until is None:
                            self._snapshot_tick(sink, base, reader)
                        sink.resume(self._boundary(state_for, base))
                        continue
                    statements = classify_ddl(query, _text(event.schema))
                    if explicit and not statements:
                        continue  # SAVEPOINT and the like inside a transaction
                    position = Position((*gtids.txn_prefix(self.epoch, file_no, base[1]), 0))
                    for ddl_type, database, table in statements:
                        self._emit_ddl(sink, query, ddl_type, database, table, position,
                                       int(event.timestamp) * 1000)  # fmt: skip
                    base = (reader.log_file, reader.log_pos)
                    file_no = file_number(base[0])
                    explicit = False
                    if until is None:
                        self._snapshot_tick(sink, base, reader)
                    sink.resume(self._boundary(state_for, base))
                    continue
                txn = gtids.txn_prefix(self.epoch, file_no, base[1])
                row_index = self._emit_rows(event, sink, txn, row_index, commit_ms)
        finally:
            sink.flush()
            reader.close()

    def _boundary(
        self, state_for: Callable[[BinlogPoint], dict[str, Any]], base: BinlogPoint
    ) -> dict[str, Any]:
        """The state at a transaction boundary just streamed (GTID position included)."""
        self._advance_gtid()
        self._base = base
        return {**state_for(base), **self._position_fields()}

    # -- incremental snapshots (capture/incremental.py) -------------------------------------

    def _start_incremental(self, state: dict[str, Any] | None) -> None:
        self._chunks = MySQLChunks(self, MySQLSource(self.cfg, self.dsn), file_number)
        tables = {t.table_id for t in self.captured_tables()}
        self._snap = IncrementalSnapshots(
            self._chunks,
            workers=self.cfg.snapshot_workers,
            chunk_rows=self.cfg.chunk_rows,
            captured=self._is_captured,
        )
        self._snap.storage = self._staging
        self._snap.load(
            (state or {}).get("incremental"),
            tables,
            fresh=snapshotted_at_start(state, self.cfg.snapshot),
        )
        self._snap_epoch = self.epoch
        # Chunks are emitted only from the binlog's end as of now on: every position an
        # earlier run published (before a kill -9, unsaved) lies below it.
        self._snap_floor = point_key(self.master_status())

    def _is_captured(self, table: str) -> bool:
        database, _, name = table.partition(".")
        if not name or not self.filter(database, name):
            return False
        info = self.table_info(database, name, refresh=True)
        return info is not None and bool(info.pk)

    def _snapshot_tick(self, sink: Sink, base: BinlogPoint, reader: Any) -> bool:
        """At a transaction boundary ``base`` (or idle): emit the chunks the stream passed,
        positioned just below the next transaction's position (the module doc of
        capture/incremental.py); True when something was emitted."""
        snap = self._snap
        if snap is None:
            return False
        if self.epoch != self._snap_epoch:
            # Another server now (failover): chunk points of the old one compare with
            # nothing here; what was read and not emitted is read again on this one.
            self._snap_epoch = self.epoch
            snap.reread_all()
        ready = snap.tick(
            (file_number(reader.log_file), int(reader.log_pos)),
            emit=point_key(base) >= self._snap_floor,
        )
        if not ready:
            return False
        prefix = gtids.txn_prefix(self.epoch, file_number(base[0]), base[1] - 1)
        now = int(time.time() * 1000)
        for result in ready:
            info = result.meta
            for rows in message_batches(result.rows):
                sink.put(
                    self.encoder.inserts(
                        database=info.database, table=info.table, pk=info.pk, rows=rows,
                        types=info.types, position=Position((*prefix, snap.next_seq())),
                        commit_ts_ms=now,
                    )
                )  # fmt: skip
            snap.emitted(result)
        return True

    def _record_change(
        self,
        database: str,
        table: str,
        pk: tuple[str, ...],
        data: dict[str, str | None],
        old: dict[str, str | None] | None,
    ) -> None:
        """A streamed change of a table being snapshotted: its key(s), for the chunks."""
        assert self._snap is not None
        table_id = f"{database}.{table}"
        self._snap.changed(table_id, tuple(data.get(c) for c in pk), self._txn_mark)
        if old is not None:
            self._snap.changed(table_id, tuple(old.get(c) for c in pk), self._txn_mark)

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
        self, event: Any, sink: Sink, txn: tuple[int, ...], row_index: int, commit_ms: int
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
        # The same table map (capture/binlog_table_maps.py) and schema give the same types:
        # computed once, and one mapping object lets the encoder reuse its sqlType too.
        columns = event.columns
        known = self._event_types.get(id(columns))
        if known is not None and known[0] is columns and known[1] is schema_types:
            types = known[2]
        else:
            types = {c.name: column_type(schema_types.get(c.name), binlog_type(c)) for c in columns}
            if len(self._event_types) >= 1024:
                self._event_types.clear()
            self._event_types[id(columns)] = (columns, schema_types, types)
        snap = self._snap
        recording = snap is not None and f"{database}.{table}" in snap.active
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
            if recording:
                self._record_change(database, table, pk, data, old)
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


def _fetch(reader: BinLogStreamReader, start: BinlogPoint, gtid_start: str | None = None) -> Any:
    try:
        return reader.fetchone()
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == _BINLOG_GONE and gtid_start is not None:
            raise CaptureError(
                f"the server refused to resume after GTID position {gtid_start} "
                f"({exc.args[1]}): its binlog no longer holds, or never held, the capture's "
                "last transaction. Point capture.source at a server that has it, or empty the "
                "lake tables and remove the position file to start again with a snapshot"
            ) from exc
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


class ServerBehindError(CaptureError):
    """The server lacks transactions the capture already published (behind or diverged)."""


#: Client error codes of a server gone: cannot connect, server gone away, lost connection.
_LOST = frozenset({2003, 2006, 2013})


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, SourceUnavailableError):
        return True
    return bool(exc.args) and exc.args[0] in _LOST


def _same_server(saved: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Is the server a saved state was read on the server in use? A state saved before
    server identities were kept is taken as read here (what the capture always assumed)."""
    if not saved:
        return True
    keys = ("address", "server_id", "uuid")
    return all(saved.get(k) == now.get(k) for k in keys if k in saved or k in now)


def _failover_dsn(text: str, primary: SourceDsn) -> SourceDsn:
    """A ``capture.failover_sources`` entry; user and password default to the source's."""
    dsn = parse_dsn(text)
    if dsn.kind != "mysql":
        raise CaptureError(f"capture.failover_sources: {dsn.redacted()} is not a mysql:// DSN")
    named_user = "@" in text.split("://", 1)[-1].split("/", 1)[0]
    return SourceDsn(
        kind="mysql",
        host=dsn.host,
        port=dsn.port,
        user=dsn.user if named_user else primary.user,
        password=dsn.password if dsn.password is not None else primary.password,
        database=dsn.database,
    )


def _streaming_state(point: BinlogPoint) -> dict[str, Any]:
    return {"source": "mysql", "phase": "streaming", "binlog": {"file": point[0], "pos": point[1]}}


def _snapshot_state(point: BinlogPoint, progress: SnapshotProgress) -> dict[str, Any]:
    return {
        "source": "mysql",
        "phase": "snapshot",
        "binlog": {"file": point[0], "pos": point[1]},
        "snapshot": progress.to_dict(),
    }
