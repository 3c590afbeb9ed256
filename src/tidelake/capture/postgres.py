"""Change capture from PostgreSQL through logical replication (pgoutput, psycopg2).

A publication (``capture.publication``, created when missing) names the captured tables and a
logical replication slot (``capture.slot``) keeps the WAL the capture has not confirmed.
Positions (docs/architecture.md §2): ``(commit LSN, index in the transaction)``; the commit LSN is
known from the BEGIN message already, so rows are published as they arrive. The flushed LSN is
confirmed to the server only after the PubAcks of the whole transaction (the runner calls
:meth:`PostgresSource.confirm` once the position file holds it).

Schema changes: pgoutput carries no DDL. Before the first change of a table after its schema
changed, the server sends a new Relation message; the capture compares it with the relation it
knew (kept in the position file, so the comparison survives restarts) and emits an
ALTER-equivalent DDL event (``ADD COLUMN``, ``DROP COLUMN``, ``ALTER COLUMN ... TYPE``,
``RENAME COLUMN``, ``RENAME TO``) just before that change. The DDL therefore arrives in order
with the rows around it, positioned at the first change that uses the new schema.

TRUNCATE becomes a TRUNCATE DDL event. An idle captured database would keep the slot's WAL
forever; every ``capture.heartbeat_s`` an idle capture writes a transactional logical message
(``pg_logical_emit_message``), receives it back as a transaction and confirms its end LSN.

Values are the text of each type's output function, with the session settings fixed
(``DateStyle=ISO``, ``TimeZone=UTC``, ``extra_float_digits=3``, ``bytea_output=hex``) on both
the replication and the snapshot connection, so a snapshot row and a streamed row read the
same. ``bytea`` stays in PostgreSQL's ``\\x`` hex form, which the lake decodes by type.
"""

from __future__ import annotations

import select as selectlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions
import psycopg2.extras
import structlog
from psycopg2 import sql

from tidelake.capture import pgoutput
from tidelake.capture.canal import CanalEncoder
from tidelake.capture.dsn import SourceDsn
from tidelake.capture.pgoutput import RelationInfo
from tidelake.capture.runner import CaptureError, Sink, SourceUnavailableError
from tidelake.capture.snapshot import SnapshotBar, SnapshotProgress, read_chunks
from tidelake.capture.tables import TableFilter
from tidelake.config import CaptureConfig
from tidelake.events import Position

log = structlog.get_logger(__name__)

#: Session settings that make every value's text the same on every connection.
SESSION_OPTIONS = (
    "-c datestyle=ISO,YMD -c timezone=UTC -c extra_float_digits=3 -c bytea_output=hex "
    "-c intervalstyle=postgres"
)
HEARTBEAT_PREFIX = "tidelake.heartbeat"
CATCH_UP_PREFIX = "tidelake.catch-up"
#: Seconds the reader waits for the server before looking at stop, feedback and heartbeat.
POLL_S = 0.2
OUTBOX_SCHEMA = "tidelake"
OUTBOX_TABLE = "outbox"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _simple(name: str) -> str:
    """An identifier as DDL text: bare when it needs no quotes (both dialects read it)."""
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return quote_ident(name)


def output_text(cursor: Any, type_oids: Iterable[int]) -> None:
    """Make ``cursor`` return values of these types as the server's text, unconverted.

    That text is the type's output function under the session settings (SESSION_OPTIONS):
    exactly what pgoutput streams for the same value. Types psycopg2 does not convert are
    text already; the ones it does (numbers, dates, json, arrays ...) get a pass-through
    caster on this cursor only.
    """
    oids = tuple(sorted(set(type_oids)))
    if oids:
        caster = psycopg2.extensions.new_type(oids, "TIDELAKE_TEXT", _as_is)
        psycopg2.extensions.register_type(caster, cursor)


def _as_is(value: str | None, _cursor: Any) -> str | None:
    return value


def relation_ddl(
    old: RelationInfo, new: RelationInfo, defaults: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """``[(ddl type, statement)]`` turning ``old`` into ``new``: the ALTER-equivalent DDL.

    Written in PostgreSQL syntax with the new relation's qualified name. A column whose name
    changed at the same place with the same type, while the old name is gone, is a rename.
    An added column carries its ``DEFAULT`` from ``defaults`` (the catalog's expression): it
    is the value the rows that existed before the ALTER hold, which the lake must fill in.
    """
    defaults = defaults or {}
    out: list[tuple[str, str]] = []
    table = f"{_simple(new.namespace)}.{_simple(new.name)}"
    if (old.namespace, old.name) != (new.namespace, new.name):
        out.append(
            ("RENAME", f"ALTER TABLE {_simple(old.namespace)}.{_simple(old.name)} "
                       f"RENAME TO {_simple(new.name)}")
        )  # fmt: skip
    old_cols = {c[0]: c for c in old.columns}
    new_cols = {c[0]: c for c in new.columns}
    renamed: dict[str, str] = {}
    if len(old.columns) == len(new.columns):
        for o, n in zip(old.columns, new.columns, strict=True):
            if o[0] != n[0] and o[1:] == n[1:] and o[0] not in new_cols and n[0] not in old_cols:
                renamed[o[0]] = n[0]
    for o_name, n_name in renamed.items():
        out.append(
            ("ALTER", f"ALTER TABLE {table} RENAME COLUMN {_simple(o_name)} TO {_simple(n_name)}")
        )
    for name in old_cols:
        if name not in new_cols and name not in renamed:
            out.append(("ALTER", f"ALTER TABLE {table} DROP COLUMN {_simple(name)}"))
    for name, col in new_cols.items():
        if name in renamed.values():
            continue
        if name not in old_cols:
            default = f" DEFAULT {defaults[name]}" if name in defaults else ""
            out.append(
                ("ALTER",
                 f"ALTER TABLE {table} ADD COLUMN {_simple(name)} {new.types[name]}{default}")
            )  # fmt: skip
        elif old_cols[name][1:] != col[1:]:
            out.append(
                ("ALTER", f"ALTER TABLE {table} ALTER COLUMN {_simple(name)} "
                          f"TYPE {new.types[name]}")
            )  # fmt: skip
    return out


class PostgresSource:
    """Snapshot + pgoutput streaming of one PostgreSQL database."""

    kind = "postgres"

    def __init__(self, cfg: CaptureConfig, dsn: SourceDsn) -> None:
        self.cfg = cfg
        self.dsn = dsn
        self.filter = TableFilter(cfg.tables)
        self.encoder = CanalEncoder("postgres", f"postgres:{dsn.host}:{dsn.port}:{dsn.database}")
        self._ctl: Any = None
        self._types: dict[tuple[int, int], str] = {}
        self._relations: dict[int, RelationInfo] = {}
        self._relations_version: tuple[tuple[int, int], ...] = ()
        self._relations_saved: dict[str, Any] = {}
        self._confirmed = 0
        self._lock = threading.Lock()
        self.rows = 0
        self.ddl = 0

    # -- connections ------------------------------------------------------------------------

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "host": self.dsn.host,
            "port": self.dsn.port,
            "user": self.dsn.user,
            "dbname": self.dsn.database,
            "options": SESSION_OPTIONS,
            "connect_timeout": 10,
            "application_name": "tidelake-capture",
        }
        if self.dsn.password:
            params["password"] = self.dsn.password
        return params

    def connect(self) -> Any:
        try:
            conn = psycopg2.connect(**self._params())
        except psycopg2.OperationalError as exc:
            raise SourceUnavailableError(f"cannot connect to {self.dsn.redacted()}: {exc}") from exc
        conn.autocommit = True
        return conn

    def replication_connection(self) -> Any:
        try:
            return psycopg2.connect(
                **self._params(), connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
        except psycopg2.OperationalError as exc:
            raise SourceUnavailableError(
                f"cannot open a replication connection to {self.dsn.redacted()}: {exc}"
            ) from exc

    def _control(self) -> Any:
        if self._ctl is None or self._ctl.closed:
            self._ctl = self.connect()
        return self._ctl

    def _query(self, text: Any, params: Any = None) -> list[tuple[Any, ...]]:
        with self._control().cursor() as cur:
            cur.execute(text, params)
            return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        if self._ctl is not None and not self._ctl.closed:
            self._ctl.close()

    # -- settings ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`CaptureError` listing every server setting capture needs."""
        settings = dict(
            self._query(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('wal_level', 'max_replication_slots', 'max_wal_senders')"
            )
        )
        problems = []
        if settings.get("wal_level") != "logical":
            problems.append(
                f"wal_level is {settings.get('wal_level')}, needs logical: "
                "ALTER SYSTEM SET wal_level = logical, then restart the server"
            )
        for name in ("max_replication_slots", "max_wal_senders"):
            if int(settings.get(name, 0)) < 1:
                problems.append(f"{name} is 0: capture needs one slot and one WAL sender")
        rows = self._query(
            "SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user"
        )
        if not rows or not rows[0][0]:
            problems.append(
                f"role {self.dsn.user} lacks REPLICATION: ALTER ROLE {self.dsn.user} REPLICATION"
            )
        if problems:
            raise CaptureError(
                f"{self.dsn.redacted()} is not ready for capture:\n  - " + "\n  - ".join(problems)
            )

    # -- catalog ----------------------------------------------------------------------------

    def type_name(self, oid: int, modifier: int) -> str:
        key = (oid, modifier)
        if key not in self._types:
            self._types[key] = str(self._query("SELECT format_type(%s, %s)", key)[0][0])
        return self._types[key]

    def primary_key(self, relid: int) -> tuple[str, ...]:
        rows = self._query(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY "
            "AS k(attnum, n) ON true JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
            (relid,),
        )
        return tuple(str(r[0]) for r in rows)

    def column_defaults(self, relid: int) -> dict[str, str]:
        """Column → default expression, as the catalog holds it now."""
        rows = self._query(
            "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
            "JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %s AND NOT a.attisdropped",
            (relid,),
        )
        return {str(name): str(expr) for name, expr in rows}

    def catalog_relation(self, cur: Any, relid: int) -> RelationInfo:
        """A relation as the catalog describes it (inside the snapshot: as of the snapshot)."""
        cur.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = %s",
            (relid,),
        )
        namespace, name = cur.fetchone()
        cur.execute(
            "SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod) "
            "FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum",
            (relid,),
        )
        cols = cur.fetchall()
        return RelationInfo(
            relid,
            str(namespace),
            str(name),
            [(str(c[0]), int(c[1]), int(c[2])) for c in cols],
            {str(c[0]): str(c[3]) for c in cols},
            self.primary_key(relid),
        )

    def publication_tables(self, cur: Any) -> list[int]:
        cur.execute(
            "SELECT c.oid FROM pg_publication_tables p JOIN pg_namespace n ON n.nspname = "
            "p.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
            "WHERE p.pubname = %s ORDER BY p.schemaname, p.tablename",
            (self.cfg.publication,),
        )
        return [int(r[0]) for r in cur.fetchall()]

    def ensure_publication(self) -> None:
        """Create the publication when missing (an existing one is used as it is)."""
        if self._query("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.cfg.publication,)):
            return
        name = sql.Identifier(self.cfg.publication)
        if self.cfg.outbox:
            target = sql.SQL("FOR TABLE {}.{}").format(
                sql.Identifier(OUTBOX_SCHEMA), sql.Identifier(OUTBOX_TABLE)
            )
        elif not self.filter.patterns:
            target = sql.SQL("FOR ALL TABLES")
        else:
            schemas = [p[:-2] for p in self.filter.patterns if p.endswith(".*")]
            tables = [
                (str(n), str(t))
                for n, t in self._query(
                    "SELECT schemaname, tablename FROM pg_tables "
                    "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
                )
                if self.filter(str(n), str(t)) and str(n) not in schemas
            ]
            parts = [sql.SQL("TABLES IN SCHEMA {}").format(sql.Identifier(s)) for s in schemas]
            parts += [
                sql.SQL("TABLE {}.{}").format(sql.Identifier(n), sql.Identifier(t))
                for n, t in tables
            ]
            if not parts:
                raise CaptureError(f"capture.tables {self.filter.patterns} match no table")
            target = sql.SQL("FOR ") + sql.SQL(", ").join(parts)
        self._query(sql.SQL("CREATE PUBLICATION {} ").format(name) + target)
        log.info("publication created", publication=self.cfg.publication)

    def _slot_lsn(self) -> int | None:
        rows = self._query(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (self.cfg.slot,),
        )
        if not rows:
            return None
        return pgoutput.parse_lsn(rows[0][0]) if rows[0][0] else 0

    # -- the capture ------------------------------------------------------------------------

    def confirm(self, state: dict[str, Any]) -> None:
        lsn = int(state.get("lsn", 0))
        with self._lock:
            self._confirmed = max(self._confirmed, lsn)

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        if self.cfg.outbox:
            from tidelake.capture.outbox import install_outbox

            install_outbox(self._control(), self.filter)
        self.ensure_publication()
        if state is not None:
            self._relations = {
                int(k): RelationInfo.from_dict(int(k), v)
                for k, v in (state.get("relations") or {}).items()
            }
        if state is not None and state.get("phase") == "streaming":
            if self._slot_lsn() is None:
                raise CaptureError(
                    f"replication slot {self.cfg.slot} is gone but {self.cfg.slot} has a saved "
                    "position: changes since then are lost to the capture; remove the position "
                    "file to start again with a snapshot"
                )
            self._stream(int(state["lsn"]), sink, stop)
            return
        if state is not None:
            self._resume_snapshot(state, sink, stop)
            return
        if self._slot_lsn() is not None:
            # A slot without a saved position holds nothing we can resume from.
            self._query("SELECT pg_drop_replication_slot(%s)", (self.cfg.slot,))
            log.info("stale replication slot dropped", slot=self.cfg.slot)
        repl = self.replication_connection()
        try:
            with repl.cursor() as cur:
                export = (
                    "EXPORT_SNAPSHOT" if self.cfg.snapshot == "initial" else "NOEXPORT_SNAPSHOT"
                )
                slot = quote_ident(self.cfg.slot)
                cur.execute(f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput {export}")
                _slot, point_text, snapshot_name, _plugin = cur.fetchone()
            point = pgoutput.parse_lsn(point_text)
            log.info("replication slot created", slot=self.cfg.slot, lsn=point_text)
            # The exported snapshot lives while ``repl`` stays idle: read it now.
            if self.cfg.snapshot == "initial" and not self._snapshot(
                snapshot_name, point, SnapshotProgress(), sink, stop
            ):
                return
        finally:
            repl.close()
        sink.resume(self._state("streaming", point), flush_after_s=0)
        self._stream(point, sink, stop)

    def _resume_snapshot(self, state: dict[str, Any], sink: Sink, stop: threading.Event) -> None:
        """An interrupted snapshot: catch up the slot to a new snapshot, then read the rest.

        A temporary slot exports a snapshot at its consistent point P2. The capture's slot is
        streamed from the saved point up to P2 (a logical message written after P2 marks the
        end) and the transactions committed before P2 are published; then the remaining rows
        are read at P2 and streaming continues from P2. Every snapshot row thus sorts after the
        changes that preceded it, and nothing between the two attempts is lost.
        """
        progress = SnapshotProgress.from_dict(state.get("snapshot"))
        start = int(state["lsn"])
        repl = self.replication_connection()
        try:
            with repl.cursor() as cur:
                tmp = f"{self.cfg.slot}_resume"
                cur.execute(
                    f"CREATE_REPLICATION_SLOT {quote_ident(tmp)} TEMPORARY LOGICAL pgoutput "
                    "EXPORT_SNAPSHOT"
                )
                _slot, point_text, snapshot_name, _plugin = cur.fetchone()
            point = pgoutput.parse_lsn(point_text)
            log.info(
                "snapshot resumed: catching up", since=pgoutput.lsn_text(start), until=point_text
            )
            if start < point:
                self._query("SELECT pg_logical_emit_message(false, %s, '')", (CATCH_UP_PREFIX,))
                self._stream(start, sink, stop, until=point, progress=progress)
                if stop.is_set():
                    return
            if not self._snapshot(snapshot_name, point, progress, sink, stop):
                return
        finally:
            repl.close()
        sink.resume(self._state("streaming", point), flush_after_s=0)
        self._stream(point, sink, stop)

    def _relations_state(self) -> dict[str, Any]:
        """The known relations as saved with each resume point; rebuilt only on a change."""
        version = tuple((k, id(r)) for k, r in self._relations.items())
        if version != self._relations_version:
            self._relations_version = version
            self._relations_saved = {str(k): r.to_dict() for k, r in self._relations.items()}
        return self._relations_saved

    def _state(
        self, phase: str, lsn: int, progress: SnapshotProgress | None = None
    ) -> dict[str, Any]:
        state: dict[str, Any] = {
            "source": "postgres",
            "phase": phase,
            "lsn": lsn,
            "lsn_text": pgoutput.lsn_text(lsn),
            "slot": self.cfg.slot,
            "relations": self._relations_state(),
        }
        if progress is not None:
            state["snapshot"] = progress.to_dict()
        return state

    def _snapshot(
        self,
        snapshot_name: str,
        point: int,
        progress: SnapshotProgress,
        sink: Sink,
        stop: threading.Event,
    ) -> bool:
        """Publish every row of the publication's tables as of ``point``."""
        conn = self.connect()
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                relations = [self.catalog_relation(cur, r) for r in self.publication_tables(cur)]
                for rel in relations:
                    self._relations[rel.relid] = rel
                todo = [
                    r for r in relations if r.table_id not in progress.done and not self.cfg.outbox
                ]
                cur.execute(
                    "SELECT coalesce(sum(greatest(reltuples, 0)), 0)::bigint FROM pg_class "
                    "WHERE oid = ANY(%s)",
                    ([r.relid for r in todo],),
                )
                bar = SnapshotBar(int(cur.fetchone()[0]))
                try:
                    for rel in todo:
                        if not rel.pk:
                            log.warning("table without a primary key is not captured",
                                        table=rel.table_id)  # fmt: skip
                            continue
                        if not self._snapshot_table(cur, rel, point, progress, sink, bar, stop):
                            return False
                finally:
                    bar.close()
            conn.rollback()
        finally:
            conn.close()
        return True

    def _snapshot_table(
        self,
        cur: Any,
        rel: RelationInfo,
        point: int,
        progress: SnapshotProgress,
        sink: Sink,
        bar: SnapshotBar,
        stop: threading.Event,
    ) -> bool:
        after = progress.after if progress.table == rel.table_id else None
        progress.table, progress.after = rel.table_id, after
        table_sql = f"{quote_ident(rel.namespace)}.{quote_ident(rel.name)}"
        # A cursor of the same transaction that returns each value as its type's output text,
        # the text pgoutput streams: a ``::text`` cast is not that text for every type
        # (``character(n)`` loses its padding, ``inet`` gains a /32, ``boolean`` says true).
        with cur.connection.cursor() as rows:
            output_text(rows, {c[1] for c in rel.columns})
            if not self._snapshot_chunks(rows, rel, table_sql, after, point, progress, sink,
                                         bar, stop):  # fmt: skip
                return False
        progress.done.append(rel.table_id)
        progress.table, progress.after = None, None
        sink.resume(self._state("snapshot", point, progress))
        return True

    def _snapshot_chunks(
        self,
        cur: Any,
        rel: RelationInfo,
        table_sql: str,
        after: list[str | None] | None,
        point: int,
        progress: SnapshotProgress,
        sink: Sink,
        bar: SnapshotBar,
        stop: threading.Event,
    ) -> bool:
        names = [c[0] for c in rel.columns]
        for chunk in read_chunks(
            cur, quote_ident, table_sql, names, rel.pk, self.cfg.chunk_rows, after
        ):
            data: dict[str, str | None] = {}
            for values in chunk:
                data = dict(zip(names, values, strict=True))
                sink.put(
                    self.encoder.row(
                        database=rel.namespace,
                        table=rel.name,
                        pk=rel.pk,
                        kind="INSERT",
                        data=data,
                        old=None,
                        types=rel.types,
                        position=Position((point - 1, progress.rows)),
                        commit_ts_ms=int(time.time() * 1000),
                    )
                )
                progress.rows += 1
            progress.after = [data[c] for c in rel.pk]
            sink.resume(self._state("snapshot", point, progress))
            bar.advance(rel.table_id, len(chunk))
            if stop.is_set():
                return False
        return True

    def _stream(
        self,
        start: int,
        sink: Sink,
        stop: threading.Event,
        *,
        until: int | None = None,
        progress: SnapshotProgress | None = None,
    ) -> None:
        """Stream the slot from ``start``; with ``until``: only the transactions committed
        before it, ending at the catch-up marker."""
        conn = self.replication_connection()
        cur = conn.cursor()
        options = {"proto_version": "1", "publication_names": self.cfg.publication,
                   "messages": "true"}  # fmt: skip
        cur.start_replication(
            slot_name=self.cfg.slot, decode=False, start_lsn=start, options=options
        )
        log.info("pgoutput streaming", slot=self.cfg.slot, start=pgoutput.lsn_text(start))
        txn = _Txn()
        sent = self._confirmed
        settled = start  # the last resume point emitted
        last_beat = time.monotonic()
        try:
            while not stop.is_set():
                msg = cur.read_message()
                if msg is None:
                    sink.flush()
                    with self._lock:
                        confirmed = self._confirmed
                    if confirmed > sent:
                        cur.send_feedback(flush_lsn=confirmed)
                        sent = confirmed
                    idle = not txn.open and confirmed >= settled
                    if (
                        idle
                        and until is None
                        and time.monotonic() - last_beat > self.cfg.heartbeat_s
                    ):
                        self._query("SELECT pg_logical_emit_message(true, %s, '')",
                                    (HEARTBEAT_PREFIX,))  # fmt: skip
                        last_beat = time.monotonic()
                    selectlib.select([conn], [], [], POLL_S)
                    continue
                message = pgoutput.decode(msg.payload)
                if isinstance(message, pgoutput.Commit):
                    txn.open = False
                    if until is not None and txn.final_lsn >= until:
                        continue  # streamed again from ``until`` once the snapshot is read
                    settled = message.end_lsn
                    state = (
                        self._state("streaming", settled)
                        if until is None
                        else self._state("snapshot", settled, progress)
                    )
                    sink.resume(state)
                    continue
                if isinstance(message, pgoutput.Begin):
                    txn = _Txn(True, message.final_lsn, message.commit_ts_ms)
                    continue
                if isinstance(message, pgoutput.LogicalMessage):
                    if (
                        until is not None
                        and message.prefix == CATCH_UP_PREFIX
                        and not message.transactional
                    ):
                        return
                    continue
                if until is not None and txn.final_lsn >= until:
                    continue
                self._handle(message, txn, sink)
        finally:
            sink.flush()
            conn.close()

    def _handle(self, message: pgoutput.Message, txn: _Txn, sink: Sink) -> None:
        if isinstance(message, pgoutput.Relation):
            self._relation(message, txn, sink)
            return
        if isinstance(message, pgoutput.Truncate):
            for relid in message.relids:
                rel = self._relations.get(relid)
                if rel is None or not self._captured(rel):
                    continue
                sink.put(
                    self.encoder.ddl(
                        database=rel.namespace,
                        table=rel.name,
                        sql=f"TRUNCATE TABLE {_simple(rel.namespace)}.{_simple(rel.name)}",
                        ddl_type="TRUNCATE",
                        position=txn.next_position(),
                        commit_ts_ms=txn.commit_ms,
                        types=rel.types,
                        pk=rel.pk,
                    )
                )
                self.ddl += 1
            return
        if isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
            rel = self._relations.get(message.relid)
            if rel is None:
                raise CaptureError(f"pgoutput: change of unknown relation {message.relid}")
            if self.cfg.outbox:
                from tidelake.capture.outbox import route_outbox

                out = route_outbox(self.encoder, rel, message, txn.next_position(), txn.commit_ms)
                if out is not None:
                    sink.put(out)
                    self.rows += 1
                return
            if not self._captured(rel):
                return
            sink.put(self._row(rel, message, txn))
            self.rows += 1

    def _captured(self, rel: RelationInfo) -> bool:
        return bool(rel.pk) and self.filter(rel.namespace, rel.name)

    def _relation(self, message: pgoutput.Relation, txn: _Txn, sink: Sink) -> None:
        new = RelationInfo(
            message.relid,
            message.namespace,
            message.name,
            [(c.name, c.type_oid, c.type_modifier) for c in message.columns],
            {c.name: self.type_name(c.type_oid, c.type_modifier) for c in message.columns},
            (),
        )
        old = self._relations.get(message.relid)
        same = old is not None and (old.namespace, old.name, old.columns) == (
            new.namespace, new.name, new.columns,
        )  # fmt: skip
        if same and old is not None:
            return
        new.pk = self.primary_key(message.relid) or tuple(c.name for c in message.columns if c.key)
        self._relations[message.relid] = new
        if old is None or not self._captured(new):
            return
        for ddl_type, statement in relation_ddl(old, new, self.column_defaults(new.relid)):
            position = txn.next_position()
            sink.put(
                self.encoder.ddl(
                    database=new.namespace,
                    table=new.name,
                    sql=statement,
                    ddl_type=ddl_type,
                    position=position,
                    commit_ts_ms=txn.commit_ms,
                    types=new.types,
                    pk=new.pk,
                )
            )
            self.ddl += 1
            log.info("ddl derived from a relation change", table=new.table_id, ddl=statement,
                     at=str(position))  # fmt: skip

    def _row(
        self,
        rel: RelationInfo,
        message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
        txn: _Txn,
    ) -> Any:
        names = [c[0] for c in rel.columns]
        old_values: dict[str, Any] | None = None
        if isinstance(message, pgoutput.Delete | pgoutput.Update) and message.old is not None:
            old_values = dict(zip(names, message.old, strict=True))
            if message.old_kind == "K":
                # Only the replica identity was sent: the other columns are unknown, not NULL.
                old_values = {c: v for c, v in old_values.items() if c in rel.pk}
        if isinstance(message, pgoutput.Delete):
            kind = "DELETE"
            data = old_values or {}
            old = None
        else:
            kind = "INSERT" if isinstance(message, pgoutput.Insert) else "UPDATE"
            data = dict(zip(names, message.new, strict=True))
            old = old_values
            for col, value in data.items():
                if value is pgoutput.UNCHANGED:
                    full = old_values if isinstance(message, pgoutput.Update) else None
                    if full is None or col not in full or full[col] is pgoutput.UNCHANGED:
                        raise CaptureError(
                            f"{rel.table_id}: an UPDATE left the TOASTed column {col} unchanged "
                            "and pgoutput did not send it; the lake needs whole rows: "
                            f"ALTER TABLE {rel.table_id} REPLICA IDENTITY FULL"
                        )
                    data[col] = full[col]
        return self.encoder.row(
            database=rel.namespace,
            table=rel.name,
            pk=rel.pk,
            kind=kind,
            data=data,
            old=old,
            types=rel.types,
            position=txn.next_position(),
            commit_ts_ms=txn.commit_ms,
        )


@dataclass
class _Txn:
    """The transaction being received: its commit LSN and the index of its next change."""

    open: bool = False
    final_lsn: int = 0
    commit_ms: int = 0
    index: int = 0

    def next_position(self) -> Position:
        position = Position((self.final_lsn, self.index))
        self.index += 1
        return position
