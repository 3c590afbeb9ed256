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
with the rows around it, positioned at the first change that uses the new schema. A dropped
table sends nothing: with ``capture.ddl_log`` event triggers log CREATE, DROP and RENAME of
tables into a table streamed with the rows (capture/pg_ddl.py, which says which path owns
which DDL).

TRUNCATE becomes a TRUNCATE DDL event. An idle captured database would keep the slot's WAL
forever; every ``capture.heartbeat_s`` an idle capture writes a transactional logical message
(``pg_logical_emit_message``), receives it back as a transaction and confirms its end LSN.

Values are the text of each type's output function, with the session settings fixed
(``DateStyle=ISO``, ``TimeZone=UTC``, ``extra_float_digits=3``, ``bytea_output=hex``) on both
the replication and the snapshot connection, so a snapshot row and a streamed row read the
same. ``bytea`` stays in PostgreSQL's ``\\x`` hex form, which the lake decodes by type.
"""

from __future__ import annotations

import dataclasses
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

from tidelake.capture import pg_ddl, pgoutput
from tidelake.capture.canal import CanalEncoder
from tidelake.capture.dsn import SourceDsn
from tidelake.capture.incremental import (
    IncrementalSnapshots,
    SnapshotHooks,
    message_batches,
    snapshotted_at_start,
)
from tidelake.capture.keys import KeyChoice, TableShape, resolve_key
from tidelake.capture.pgoutput import RelationInfo
from tidelake.capture.postgres_chunks import SNAPSHOT_PREFIX, PostgresChunks
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
#: The comment on a publication the capture created and keeps in sync with the captured tables.
MANAGED_COMMENT = "tidelake capture: holds exactly the captured tables (kept in sync)"
#: Seconds between two publication syncs while streaming (tables created, dropped, keyed).
PUBLICATION_SYNC_S = 2.0


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
            ("RENAME", pg_ddl.rename_statement(old.namespace, old.name, new.namespace, new.name))
        )
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


class PostgresSource(SnapshotHooks):
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
        self._skipped: dict[str, str] = {}
        self._skip_logged: set[str] = set()
        self._last_sync = 0.0
        self.rows = 0
        self.ddl = 0
        # Table DDL from the event triggers' log (capture/pg_ddl.py); not with the outbox,
        # whose publication holds the outbox table only.
        self._ddl_log = pg_ddl.DdlLog() if cfg.ddl_log and not cfg.outbox else None
        self._ddl_log_relid: int | None = None
        # Incremental snapshots (capture/incremental.py): the engine, its chunk reader, the
        # staging store holding snapshot requests, the xid of the transaction streamed.
        self._snap: IncrementalSnapshots | None = None
        self._chunks: PostgresChunks | None = None
        self._staging: Any = None
        self._txn_xid = 0
        self._snap_floor = 0
        self._last_marker_lsn = 0

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
        if self._snap is not None:
            self._snap.close()
        if self._chunks is not None:
            self._chunks.close()
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
            self.primary_key(relid)
            if self.cfg.outbox
            else self.key_of(relid, f"{namespace}.{name}"),
        )

    def publication_tables(self, cur: Any) -> list[int]:
        cur.execute(
            "SELECT c.oid FROM pg_publication_tables p JOIN pg_namespace n ON n.nspname = "
            "p.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename "
            "WHERE p.pubname = %s AND (p.schemaname, p.tablename) <> (%s, %s) "
            "ORDER BY p.schemaname, p.tablename",
            (self.cfg.publication, pg_ddl.SCHEMA, pg_ddl.LOG_TABLE),  # the DDL log is no table
        )
        return [int(r[0]) for r in cur.fetchall()]

    def table_shapes(self, only: int | None = None) -> dict[int, TableShape]:
        """relid → shape of every table ``capture.tables`` takes (``only``: of that table),
        what :func:`resolve_key` needs: columns, NOT NULL columns, primary key, replica
        identity and its columns."""
        rows = self._query(
            "SELECT c.oid, n.nspname, c.relname, c.relreplident, "
            "array(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid "
            "  AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), "
            "array(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid "
            "  AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull), "
            "array(SELECT a.attname::text FROM pg_index i, unnest(i.indkey) WITH ORDINALITY "
            "  AS k(attnum, n), pg_attribute a WHERE i.indrelid = c.oid AND i.indisprimary "
            "  AND a.attrelid = c.oid AND a.attnum = k.attnum ORDER BY k.n), "
            "array(SELECT a.attname::text FROM pg_index i, unnest(i.indkey) WITH ORDINALITY "
            "  AS k(attnum, n), pg_attribute a WHERE i.indrelid = c.oid AND i.indisreplident "
            "  AND a.attrelid = c.oid AND a.attnum = k.attnum ORDER BY k.n) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname !~ '^pg_'" + (" AND c.oid = %s" if only is not None else ""),
            (only,) if only is not None else None,
        )
        shapes: dict[int, TableShape] = {}
        for relid, nsp, name, ident, cols, not_null, pk, index_cols in rows:
            if not self.filter(str(nsp), str(name)):
                continue
            # The columns the old tuple of an UPDATE/DELETE carries (ALTER TABLE docs,
            # REPLICA IDENTITY): DEFAULT = the primary key, USING INDEX = that index's.
            identity = {"d": tuple(pk), "i": tuple(index_cols), "f": tuple(cols)}.get(ident, ())
            shapes[int(relid)] = TableShape(
                f"{nsp}.{name}", tuple(cols), tuple(pk), frozenset(not_null), str(ident),
                identity, f"{quote_ident(str(nsp))}.{quote_ident(str(name))}",
            )  # fmt: skip
        return shapes

    def key_of(self, relid: int, table_id: str) -> tuple[str, ...]:
        """The key ``relid`` is captured with; () and recorded as skipped when it is not."""
        shape = self.table_shapes_one(relid)
        if shape is None:
            return ()
        choice = resolve_key(self.cfg, shape)
        self._note_skip(table_id, choice.skipped)
        return choice.key

    def table_shapes_one(self, relid: int) -> TableShape | None:
        return self.table_shapes(relid).get(relid)

    def _note_skip(self, table_id: str, reason: str | None) -> None:
        if reason is None:
            self._skipped.pop(table_id, None)
            return
        if table_id not in self._skip_logged:
            self._skip_logged.add(table_id)
            log.warning("table not captured", table=table_id, reason=reason)
        self._skipped[table_id] = reason

    def skipped_tables(self) -> dict[str, str]:
        """``db.table`` → why the capture does not take it (heartbeat ``"skipped"``)."""
        return dict(self._skipped)

    def ensure_publication(self) -> None:
        """Make the publication hold exactly the captured tables (docs/capture.md, "What the
        capture changes on the source").

        PostgreSQL refuses UPDATE and DELETE on a table without a replica identity as soon
        as a publication that publishes them includes it (``CheckCmdReplicaIdentity`` in
        PostgreSQL's src/backend/executor/execReplication.c; docs "Logical Replication:
        Publication"), and ``FOR ALL TABLES`` / ``FOR TABLES IN SCHEMA`` include every table,
        also those created later. So the capture's own publication is an explicit ``FOR TABLE``
        list of the tables whose key resolves (:mod:`tidelake.capture.keys`), re-synced by
        :meth:`sync_publication` while streaming. A publication the capture did not create
        (no :data:`MANAGED_COMMENT`) is the user's: used as it is, never altered.
        """
        if self.cfg.outbox:
            if not self._query(
                "SELECT 1 FROM pg_publication WHERE pubname = %s", (self.cfg.publication,)
            ):
                self._query(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {}.{}").format(
                        sql.Identifier(self.cfg.publication),
                        sql.Identifier(OUTBOX_SCHEMA),
                        sql.Identifier(OUTBOX_TABLE),
                    )
                )
                log.info("publication created", publication=self.cfg.publication)
            return
        self.sync_publication(starting=True)

    def _publication_owner(self) -> tuple[bool, bool] | None:
        """(exists managed by the capture, publishes every table) or None when missing."""
        # FOR TABLES IN SCHEMA (and its catalog pg_publication_namespace) came in PostgreSQL 15.
        schemas = (
            "OR EXISTS (SELECT 1 FROM pg_publication_namespace s WHERE s.pnpubid = p.oid) "
            if int(self._query("SHOW server_version_num")[0][0]) >= 150000
            else ""
        )
        rows = self._query(
            "SELECT obj_description(p.oid, 'pg_publication'), p.puballtables "
            + schemas
            + "FROM pg_publication p WHERE p.pubname = %s",
            (self.cfg.publication,),
        )
        if not rows:
            return None
        return rows[0][0] == MANAGED_COMMENT, bool(rows[0][1])

    def sync_publication(self, *, starting: bool = False) -> None:
        """Bring the publication's table list in line with the captured tables (see
        :meth:`ensure_publication`); record every table left out, with its reason."""
        shapes = self.table_shapes()
        choices = {relid: resolve_key(self.cfg, shape) for relid, shape in shapes.items()}
        wanted = {relid for relid, c in choices.items() if c.skipped is None}
        name = sql.Identifier(self.cfg.publication)
        state = self._publication_owner()
        if state is None:
            self._query(sql.SQL("CREATE PUBLICATION {}").format(name))
            self._query(sql.SQL("COMMENT ON PUBLICATION {} IS %s").format(name), (MANAGED_COMMENT,))
            log.info("publication created", publication=self.cfg.publication)
            state = (True, False)
        published = {
            int(r[0])
            for r in self._query(
                "SELECT (quote_ident(schemaname) || '.' || quote_ident(tablename))::regclass::oid "
                "FROM pg_publication_tables WHERE pubname = %s",
                (self.cfg.publication,),
            )
        }
        managed, every_table = state
        if managed:
            # The DDL log (capture/pg_ddl.py) stays: its rows are the tables' DDL.
            for relid in sorted(published - wanted - {self._ddl_log_relid}):
                table = str(self._query("SELECT %s::regclass::text", (relid,))[0][0])
                self._alter_publication("DROP", relid, table)
            for relid in sorted(wanted - published):
                shape = shapes[relid]
                if self._alter_publication("ADD", relid, shape.sql_name or shape.table_id):
                    if not starting:
                        self._on_table_added(shape.table_id)
                else:
                    wanted.discard(relid)
        else:
            pub = self.cfg.publication
            for relid, shape in shapes.items():
                if relid in published and relid not in wanted and every_table:
                    # PostgreSQL now refuses UPDATE/DELETE on it: not our doing, but say so.
                    log.warning("the publication makes PostgreSQL refuse UPDATE and DELETE on a "
                                "table without a replica identity", publication=pub,
                                table=shape.table_id, fix=f"if an older tidelake created it: "
                                f"DROP PUBLICATION {pub} (the capture creates one holding only "
                                "the captured tables)")  # fmt: skip
                if relid not in published and relid in wanted:
                    wanted.discard(relid)
                    choices[relid] = KeyChoice(
                        (), "skipped",
                        f"not in publication {pub}, which the capture did not create and "
                        f"never changes: ALTER PUBLICATION {pub} ADD TABLE {shape.sql_name}",
                    )  # fmt: skip
        for relid, shape in shapes.items():
            choice = choices[relid]
            if choice.skipped is not None:
                self._note_skip(shape.table_id, choice.skipped)
            elif relid in wanted:
                self._note_skip(shape.table_id, None)
        # A table gone from the source is no longer skipped either.
        gone = set(self._skipped) - {s.table_id for s in shapes.values()}
        for table_id in gone:
            self._skipped.pop(table_id, None)
        self._last_sync = time.monotonic()

    def _alter_publication(self, verb: str, relid: int, table: str) -> bool:
        """``ALTER PUBLICATION ... ADD/DROP TABLE``; False (the table recorded as skipped)
        when the server refuses it (adding a table needs owning it: ALTER PUBLICATION docs)."""
        statement = sql.SQL("ALTER PUBLICATION {} " + verb + " TABLE {}").format(
            sql.Identifier(self.cfg.publication), sql.SQL(table)
        )
        try:
            self._query(statement)
        except psycopg2.Error as exc:
            if verb == "DROP":
                raise CaptureError(
                    f"cannot take {table} out of publication {self.cfg.publication}: "
                    f"{str(exc).strip()}"
                ) from exc
            shape = self.table_shapes_one(relid)
            self._note_skip(
                shape.table_id if shape else table,
                f"cannot add it to publication {self.cfg.publication}: {str(exc).strip()} "
                f"(the capture's role must own the table, or a superuser runs ALTER "
                f"PUBLICATION {self.cfg.publication} ADD TABLE {table})",
            )
            return False
        log.info("publication changed", publication=self.cfg.publication, change=verb,
                 table=table)  # fmt: skip
        return True

    def _on_table_added(self, table_id: str) -> None:
        """A table joined the publication while streaming: its rows written before that
        are not in the stream, so it is snapshotted incrementally."""
        if not self.queue_snapshot(table_id):
            log.warning("table added to the capture but not snapshotted: its earlier rows are "
                        "read only by `tidelake capture snapshot`", table=table_id)  # fmt: skip

    # -- incremental snapshots (capture/incremental.py) -------------------------------------

    def _captured_ids(self) -> set[str]:
        return {
            shape.table_id
            for shape in self.table_shapes().values()
            if resolve_key(self.cfg, shape).skipped is None
            and not pg_ddl.is_internal(*shape.table_id.split(".", 1))
        }

    def _start_incremental(self, state: dict[str, Any] | None) -> None:
        if self.cfg.outbox:
            return  # the outbox routes events; it has no tables to snapshot
        self._chunks = PostgresChunks(
            self, PostgresSource(self.cfg, self.dsn), output_text, quote_ident
        )
        self._snap = IncrementalSnapshots(
            self._chunks,
            workers=self.cfg.snapshot_workers,
            chunk_rows=self.cfg.chunk_rows,
            captured=lambda table: table in self._captured_ids(),
        )
        self._snap.storage = self._staging
        self._snap.load(
            (state or {}).get("incremental"),
            self._captured_ids(),
            fresh=snapshotted_at_start(state, self.cfg.snapshot),
        )
        # Chunks are emitted only at points past the WAL's end as of now: every position an
        # earlier run published (before a kill -9, unsaved) lies below it.
        end = self._query("SELECT pg_current_wal_insert_lsn()::text")[0][0]
        self._snap_floor = pgoutput.parse_lsn(str(end))

    def _snapshot_tick(self, sink: Sink, settled: int) -> bool:
        """At a transaction boundary (or idle), ``settled`` the end of the last commit
        streamed: emit the chunks the stream passed at ``(settled - 1, seq)``, after every
        commit streamed and before the next one (whose commit LSN is at least ``settled``);
        True when something was emitted (the module doc of capture/incremental.py)."""
        snap, chunks = self._snap, self._chunks
        if snap is None or chunks is None:
            return False
        # Right after the last commit streamed, or at the last chunk marker when that came
        # later (a marker's LSN lies between the commits before and after it).
        point = max(settled - 1, self._last_marker_lsn)
        ready = snap.tick(chunks.commits, emit=point >= self._snap_floor)
        if not ready:
            return False
        now = int(time.time() * 1000)
        for result in ready:
            rel = result.meta
            chunks.markers.discard(result.watermark.token)
            for rows in message_batches(result.rows):
                sink.put(
                    self.encoder.inserts(
                        database=rel.namespace, table=rel.name, pk=rel.pk, rows=rows,
                        types=rel.types, position=Position((point, snap.next_seq())),
                        commit_ts_ms=now,
                    )
                )  # fmt: skip
            snap.emitted(result)
        return True

    def _record_change(
        self, rel: RelationInfo, message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete
    ) -> None:
        """A streamed change of a table being snapshotted: its key(s), for the chunks."""
        assert self._snap is not None
        names = [c[0] for c in rel.columns]
        for values in (getattr(message, "new", None), getattr(message, "old", None)):
            if values is None:
                continue
            row = dict(zip(names, values, strict=True))
            if all(c in row and row[c] is not pgoutput.UNCHANGED for c in rel.pk):
                self._snap.changed(rel.table_id, tuple(row[c] for c in rel.pk), self._txn_xid)

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
            if self._ddl_log is not None:
                self._ddl_log.confirmed(lsn)

    def lag(self, conn: Any, state: dict[str, Any] | None) -> dict[str, Any]:
        """Slot lag and retained WAL of ``capture.slot``, on the lag probe's own connection
        ``conn`` (capture/lag.py); the slot holds the confirmed position, not ``state``."""
        from tidelake.capture.lag import pg_slot_lag

        return pg_slot_lag(conn, self.cfg.slot)

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        if self.cfg.outbox:
            from tidelake.capture.outbox import install_outbox

            install_outbox(self._control(), self.filter)
        if state is not None:
            self._skipped.update(state.get("skipped") or {})
        # The DDL log first: the publication sync must know it, or it would take the log out.
        self._install_ddl_log()
        self.ensure_publication()
        self._publish_ddl_log()
        self._start_incremental(state)
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

    def _install_ddl_log(self) -> None:
        """With ``capture.ddl_log``: the event triggers and their log table installed
        (capture/pg_ddl.py)."""
        if self._ddl_log is None:
            if not self.cfg.outbox:
                log.info(
                    "capture.ddl_log is off: a dropped table stays in the lake, a renamed one "
                    "is seen at its next change (docs/capture.md, PostgreSQL DDL)"
                )
            return
        try:
            pg_ddl.install(self._control())
        except pg_ddl.DdlLogError as exc:
            raise CaptureError(str(exc)) from exc
        self._ddl_log_relid = int(
            self._query("SELECT %s::regclass::oid", (f"{pg_ddl.SCHEMA}.{pg_ddl.LOG_TABLE}",))[0][0]
        )

    def _publish_ddl_log(self) -> None:
        """The DDL log in the publication, and the triggers told which tables join it."""
        if self._ddl_log is None:
            return
        owner = self._publication_owner()
        if owner is not None and not owner[0]:  # the user's publication: never altered
            published = self._query(
                "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
                "AND tablename = %s",
                (self.cfg.publication, pg_ddl.SCHEMA, pg_ddl.LOG_TABLE),
            )
            if not published:
                raise CaptureError(
                    f"capture.ddl_log: publication {self.cfg.publication} is not the capture's "
                    f"and lacks the DDL log: ALTER PUBLICATION {self.cfg.publication} ADD TABLE "
                    f"{pg_ddl.SCHEMA}.{pg_ddl.LOG_TABLE}"
                )
            pg_ddl.follow_publication(self._control(), self.cfg.publication, None)
        else:
            pg_ddl.publish(self._control(), self.cfg.publication)
            # A keyed table created in capture.tables joins the publication in its CREATE's
            # own transaction (capture/pg_ddl.py), before the sync here would see it.
            pg_ddl.follow_publication(self._control(), self.cfg.publication, self.filter.patterns)

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
        if self._snap is not None:
            state["incremental"] = self._snap.state()
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
                            continue  # skipped, and recorded why (key_of)
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
                if (
                    until is None
                    and not self.cfg.outbox
                    and time.monotonic() - self._last_sync > PUBLICATION_SYNC_S
                ):
                    self.sync_publication()
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
                    if idle and self._ddl_log is not None:
                        try:
                            self._ddl_log.housekeeping(self._query)
                        except psycopg2.Error as exc:
                            log.warning("ddl log housekeeping failed", error=str(exc).strip())
                    # Not ``idle``: that waits for a saved position, which a snapshot's
                    # first chunk may be what brings.
                    if not txn.open and until is None and self._snapshot_tick(sink, settled):
                        sink.resume(self._state("streaming", settled))
                    selectlib.select([conn], [], [], POLL_S)
                    continue
                message = pgoutput.decode(msg.payload)
                if isinstance(message, pgoutput.Commit):
                    txn.open = False
                    if until is not None and txn.final_lsn >= until:
                        continue  # streamed again from ``until`` once the snapshot is read
                    settled = message.end_lsn
                    if until is None and self._chunks is not None:
                        self._chunks.committed(self._txn_xid)
                        self._snapshot_tick(sink, settled)
                    state = (
                        self._state("streaming", settled)
                        if until is None
                        else self._state("snapshot", settled, progress)
                    )
                    sink.resume(state)
                    continue
                if isinstance(message, pgoutput.Begin):
                    txn = _Txn(True, message.final_lsn, message.commit_ts_ms)
                    self._txn_xid = message.xid
                    continue
                if isinstance(message, pgoutput.LogicalMessage):
                    if (
                        until is not None
                        and message.prefix == CATCH_UP_PREFIX
                        and not message.transactional
                    ):
                        return
                    if (
                        message.prefix == SNAPSHOT_PREFIX
                        and not message.transactional
                        and until is None
                        and self._chunks is not None
                    ):
                        # A chunk read ended (capture/postgres_chunks.py); outside a txn.
                        self._chunks.markers.add(message.content.decode())
                        # One below its LSN: below every commit after it whether pgoutput
                        # gives the record's start or end, above every commit before it.
                        self._last_marker_lsn = max(self._last_marker_lsn, message.lsn - 1)
                        if not txn.open and self._snapshot_tick(sink, settled):
                            sink.resume(self._state("streaming", settled))
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
        if (
            isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete)
            and message.relid == self._ddl_log_relid
        ):
            if isinstance(message, pgoutput.Insert):
                self._ddl_logged(message, txn, sink)
            return  # the log's housekeeping deletes are never published
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
            snap = self._snap
            if snap is not None and rel.table_id in snap.active:
                self._record_change(rel, message)
            sink.put(self._row(rel, message, txn))
            self.rows += 1

    def _captured(self, rel: RelationInfo) -> bool:
        return (
            bool(rel.pk)
            and self.filter(rel.namespace, rel.name)
            and not pg_ddl.is_internal(rel.namespace, rel.name)
        )

    def _ddl_logged(self, message: pgoutput.Insert, txn: _Txn, sink: Sink) -> None:
        """A ``tidelake.ddl_log`` insert: the DDL events it stands for, at its place in its
        transaction (capture/pg_ddl.py)."""
        if self._ddl_log is None or self._ddl_log_relid is None:
            return
        log_rel = self._relations[self._ddl_log_relid]
        row = pg_ddl.LogRow.from_values([c[0] for c in log_rel.columns], message.new)
        # The trigger put a table with a primary key into the publication itself; any other
        # joins it through sync_publication, which asks for its snapshot then.
        joined_by_trigger = bool(row.pk)
        if row.action in ("create", "rename") and not row.pk:
            # No primary key: the key capture.keys / capture.keyless give it, if any.
            row = dataclasses.replace(row, pk=self.key_of(row.relid, f"{row.schema}.{row.table}"))
        events = self._ddl_log.events(row, self._relations, self._captured, txn.final_lsn)
        for event in events:
            rel = event.relation
            position = txn.next_position()
            sink.put(
                self.encoder.ddl(
                    database=rel.namespace,
                    table=rel.name,
                    sql=event.sql,
                    ddl_type=event.ddl_type,
                    position=position,
                    commit_ts_ms=txn.commit_ms,
                    types=rel.types,
                    pk=rel.pk,
                )
            )
            self.ddl += 1
            log.info("ddl from the ddl log", table=rel.table_id, ddl=event.sql, at=str(position))
            if event.needs_snapshot and joined_by_trigger:
                self._on_table_added(rel.table_id)

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
        if self.cfg.outbox:
            new.pk = self.primary_key(message.relid) or tuple(
                c.name for c in message.columns if c.key
            )
        else:
            new.pk = self.key_of(message.relid, new.table_id)
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
