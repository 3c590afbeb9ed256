"""The PostgreSQL sink: each source table as a typed table, written idempotently by key with
the source position as the version, and shaped by the source's DDL as the lake's tables are.

Tables. A change of source table ``db.t`` goes to ``S.t``, ``S`` being ``target_schema`` or,
unset, the source database's name. On first sight the sink creates the schema and the table
(``CREATE … IF NOT EXISTS``): one column per source column, typed from
:attr:`RowChange.column_types` by :mod:`tidelake.route.sinks.pg_types`, the primary key made
of the change's key columns, and ``_tl_position text COLLATE "C" NOT NULL``, the position of
the change that wrote the row. A change bringing a column the table lacks adds it
(``ALTER TABLE … ADD COLUMN``), unless it is older than the table's last DDL (below); an
upsert sets only the columns it carries. Each schema also holds two side tables:

* ``S._tidelake_deletes (table_name, key_text, position)``: the position of the latest delete
  of each key (``table_name`` is the target table's name, ``key_text``
  :meth:`RowChange.key_text`). A truncate or a drop at ``P`` removes its table's tombstones
  below ``P``; no other removes any.
* ``S._tidelake_schema (table_name PRIMARY KEY, source_table, ddl_position, cleared_position)``:
  for each target table, the source table it holds (``database.table``: which tables a
  ``DROP DATABASE`` removes when ``target_schema`` gathers several databases), the position
  of the last schema change applied to it, and of the last one that removed its rows
  (``TRUNCATE``, ``DROP TABLE``, ``DROP DATABASE``, a ``RENAME TABLE`` from or to it).

The guard, in SQL, in the same transaction as the rows (positions compared byte-wise,
``COLLATE "C"``):

* an upsert is ``INSERT … ON CONFLICT (key) DO UPDATE … WHERE row._tl_position <
  EXCLUDED._tl_position``, and inserts nothing when a delete of its key at a position ≥ its
  own is recorded;
* a delete raises its key's tombstone to its position (the greatest wins) and removes the row
  only when the row's position is lower;
* a row change (upsert or delete) below its table's ``cleared_position`` is skipped: the
  truncate or drop removed every row older than it, so a replayed older upsert cannot bring
  one back;
* a row change below its table's ``ddl_position`` (only a redelivery, a replay or a
  reprocessed dead letter comes after the DDL it precedes) is first brought forward through
  the column changes logged after it (``S._tidelake_schema_log (table_name, position,
  steps)``, :func:`~tidelake.route.change.forward`: renamed columns moved, dropped ones gone,
  added ones with the value existing rows took), so a dead letter re-processed after a rename
  lands with its value under the new name; then it writes only the columns the table has (it
  cannot add back a column the DDL dropped), and is skipped if the table lacks one of its key
  columns.

So a redelivered batch or a replay changes nothing, and an older upsert replayed after a delete
does not bring the row back; a newer upsert after a delete lands. Within a batch, the changes
of one key collapse to the one with the greatest position, and the greatest position of a
delete among them still raises the tombstone (it is below a final upsert's own position, so
that upsert still lands).

Schema changes. A ``schema`` :class:`RowChange` (the source's DDL, parsed as the lake parses
it, shaped by the route) is applied in stream order: the batch is cut at each one
(:func:`split_at_schema`), and the rows before it, the DDL, the rows after it are written in
turn. An operation is skipped when the table it names holds a ``ddl_position`` at or above
the change's position (a redelivery, a replay); each table an operation is applied to then
records that position as its ``ddl_position``.

=====================  ====================================================================
operation              what the sink does
=====================  ====================================================================
create table           ``CREATE TABLE`` as declared (typed by ``pg_types``, the declared
                       primary key) unless the table exists (``IF NOT EXISTS``, or one made
                       before: kept); ``LIKE other``: the columns, defaults, constraints and
                       indexes of the sink's ``other``; no primary key, or no ``other``:
                       left to the rows, which bring a key
add column             ``ADD COLUMN``, existing rows taking the value the source gives them:
                       a literal ``DEFAULT`` (or MySQL's implicit default) converted as row
                       values are (:func:`pg_types.to_param`), NULL, or for
                       ``CURRENT_TIMESTAMP`` the DDL's commit time
                       (:func:`pg_types.current_timestamp_text`); a default the source
                       computes per row (an expression, a generated column) is refused, as
                       the lake refuses it; a column the table has already is kept as it is
drop column            ``DROP COLUMN IF EXISTS``; a primary-key column is refused (the sink
                       writes by key)
rename column          ``RENAME COLUMN`` when the old name exists and the new one does not
modify column          the rename, if any, as above; then, when the PostgreSQL type differs,
                       ``ALTER COLUMN … TYPE t USING col::t``: PostgreSQL's own conversion
                       (which refuses a value it cannot convert, and rounds a ``numeric``
                       cast to a smaller scale)
truncate at P          ``DELETE`` the rows below ``P`` (a row a later change wrote stays), the
                       tombstones below ``P``; ``cleared_position`` = ``P``
drop table at P        ``DROP TABLE IF EXISTS``, the tombstones below ``P``;
                       ``cleared_position`` = ``P`` (a later ``CREATE TABLE``, or rows, make
                       it again; rows older than ``P`` are skipped). Applied late (a dead
                       letter reprocessed) to a table holding rows at or above ``P``, it
                       removes only the rows below ``P``, as a truncate
rename table a → b     ``b``, if the sink has it, is stale (the source's ``b`` did not exist):
                       dropped; ``a`` renamed ``b`` (moved to ``b``'s schema when their target
                       schemas differ) with its tombstones; both names' ``cleared_position``
                       = ``P``
drop database d        every table of source database ``d``, dropped as above: those
                       ``_tidelake_schema`` maps to ``d`` and, with ``target_schema`` unset,
                       every table of schema ``d`` holding ``_tl_position``
=====================  ====================================================================

A schema change is written in a savepoint: one that cannot be applied (a refused default, a
type change PostgreSQL refuses, with the server's message) leaves nothing and is named by
:class:`ChangesRejected`, so the route dead-letters that message alone and applies the rest.

Transaction. A whole batch — rows, DDL, tombstones, positions — is one transaction (DDL is
transactional in PostgreSQL); its commit is the durability :meth:`PostgresSink.apply` promises
before it returns, and a crash leaves all of it or nothing. A value PostgreSQL refuses (or one
:func:`pg_types.to_param` refuses because the server would round or cut it) makes the batch be
written again change by change in savepoints, to find the culprits; then the transaction is
rolled back and :class:`ChangesRejected` names their sequences and the server's message (the
route dead-letters them and applies the rest again). A lost connection (psycopg2
``OperationalError``/``InterfaceError``) raises :class:`SinkUnavailable`; the next
:meth:`apply` connects again. Any other error (a missing privilege, say) is a plain
:class:`SinkError`, retried by the route.

Sessions run with ``TimeZone=UTC`` and ``DateStyle=ISO, YMD``: a zone-less text for a
``timestamptz`` column (MySQL ``TIMESTAMP``) is read as UTC.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

import psycopg2
import psycopg2.extras
import structlog
from psycopg2 import sql
from psycopg2.errors import InsufficientPrivilege

from tidelake.config import PostgresSinkConfig
from tidelake.lake import ddl
from tidelake.names import split_table_id
from tidelake.route.change import (
    ChangesRejected,
    RowChange,
    SinkError,
    SinkUnavailable,
    split_at_schema,
)
from tidelake.route.schema import (
    COLUMN_OPS,
    ColumnStep,
    SchemaRefusedError,
    column_steps,
    forward,
    source_zone,
    steps_from_json,
    steps_json,
)
from tidelake.route.sinks import pg_types

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

#: The column holding the position of the change that wrote a row.
POSITION_COLUMN = "_tl_position"
#: The per-schema table of delete positions.
DELETES_TABLE = "_tidelake_deletes"
#: The per-schema table of each target table's source table, last DDL and last clearing.
SCHEMA_TABLE = "_tidelake_schema"
#: The per-schema log of column changes, for rows arriving after them (route.change.forward).
SCHEMA_LOG_TABLE = "_tidelake_schema_log"
#: Where the ``VALUES`` list goes in a statement (no identifier can hold a NUL).
_VALUES = "\x00values\x00"
#: Longest reason handed to :class:`ChangesRejected`.
_MAX_REASON = 4000
#: The name a table bears for a moment while it moves to another schema.
_MOVING = "_tidelake_moving"

#: A target table: (schema, name).
_Target = tuple[str, str]


class _RefusedError(Exception):
    """Changes that cannot be written, with why (raised inside one write)."""

    def __init__(self, rejected: dict[int, str]) -> None:
        super().__init__(f"{len(rejected)} change(s) refused")
        self.rejected = rejected


class _DdlRefusedError(Exception):
    """An operation of a schema change the sink cannot apply; the message says why."""


@dataclass(slots=True)
class _Table:
    """A target table as the catalog has it: column → ``format_type``, in column order."""

    schema: str
    name: str
    columns: dict[str, str] = field(default_factory=dict)

    @property
    def ident(self) -> sql.Composable:
        """The table's qualified, quoted name."""
        return sql.Identifier(self.schema, self.name)


@dataclass(frozen=True, slots=True)
class _Marks:
    """A target table's row of ``_tidelake_schema``: the position of the last schema change
    applied to it and of the last that removed its rows (``""``: none)."""

    ddl: str = ""
    cleared: str = ""


@dataclass(slots=True)
class _Plan:
    """One table's share of a batch, collapsed by key."""

    #: key text → the upsert with the greatest position (when that is the key's last change).
    upserts: dict[str, RowChange] = field(default_factory=dict)
    #: key text → the delete with the greatest position (when that is the key's last change).
    deletes: dict[str, RowChange] = field(default_factory=dict)
    #: key text → greatest position of a delete of the key in the batch.
    tombstones: dict[str, str] = field(default_factory=dict)


def _plan(changes: Iterable[RowChange]) -> _Plan:
    """Collapse ``changes`` (one table) to the last change of each key, keeping the greatest
    delete position of each key for its tombstone."""
    last: dict[str, RowChange] = {}
    plan = _Plan()
    for change in changes:
        key = change.key_text()
        held = last.get(key)
        if held is None or held.position < change.position:
            last[key] = change
        if change.kind == "delete" and plan.tombstones.get(key, "") < change.position:
            plan.tombstones[key] = change.position
    for key, change in last.items():
        (plan.upserts if change.kind == "upsert" else plan.deletes)[key] = change
    return plan


def _guard(change: RowChange, marks: _Marks, columns: Collection[str] | None) -> RowChange | None:
    """``change`` (a row change) as its table's DDL history lets it be written, or None to
    skip it. Below ``marks.cleared`` it is skipped: a truncate or drop removed every row
    older than it. Below ``marks.ddl`` it keeps only the ``columns`` the table has (a column
    the DDL dropped or renamed is not added back), and is skipped when the table lacks one of
    its key columns. ``columns`` None: the table does not exist (it is made as the change
    says)."""
    if change.position < marks.cleared:
        return None
    if columns is None or not change.position < marks.ddl:
        return change
    if any(c not in columns for c in change.key):
        return None
    if change.row is None or all(c in columns for c in change.row):
        return change
    return replace(change, row={c: v for c, v in change.row.items() if c in columns})


def _added_value(spec: ddl.ColumnSpec, column_type: str, commit_ts_ms: int | None) -> Any:
    """The parameter (None: NULL) existing rows take for a column added as ``spec``, of
    ``column_type`` (``format_type``): the value the source gives them, as the lake takes it
    (``lake/evolve.py``). Raises :class:`_DdlRefusedError` when the sink cannot know it (a
    default computed per row, ``CURRENT_TIMESTAMP`` without a commit time) or cannot hold it
    exactly."""
    default = spec.default
    if default.kind == "expression":
        raise _DdlRefusedError(
            f"column {spec.name}: existing rows get DEFAULT {default.text} computed per row by "
            "the source; the sink cannot know those values"
        )
    text = default.text
    if default.kind == "current_timestamp":
        if commit_ts_ms is None:
            raise _DdlRefusedError(
                f"column {spec.name}: DEFAULT CURRENT_TIMESTAMP and the DDL has no commit time"
            )
        text = pg_types.current_timestamp_text(commit_ts_ms, column_type)
    try:
        return pg_types.to_param(text, column_type, spec.source_type)
    except pg_types.RefusedValueError as exc:
        raise _DdlRefusedError(f"column {spec.name}: DEFAULT {text!r}: {exc}") from exc


def _op_tables(op: ddl.Operation) -> list[ddl.TableName]:
    """The source tables ``op`` names (none for a database-level operation)."""
    if isinstance(op, ddl.RenameTable):
        return [op.table, op.to]
    if isinstance(op, ddl.CreateDatabase | ddl.DropDatabase):
        return []
    return [op.table] if op.table is not None else []


def _database_of(table_id: str | None) -> str | None:
    """The database of a ``database.table`` id, None when there is none."""
    if not table_id:
        return None
    try:
        return split_table_id(table_id)[0]
    except ValueError:
        return None


def _reason(change: RowChange, message: str) -> str:
    """One rejected change's reason: where it is and what the server said."""
    return f"seq {change.seq} {change.table} key {change.key_text()!r}: {message}"


def _schema_reason(change: RowChange, message: str) -> str:
    """A rejected schema change's reason: the statement and why."""
    statement = " ".join((change.statement or "").split())[:200]
    return f"seq {change.seq} {change.table} DDL {statement!r}: {message}"


def _db_message(exc: psycopg2.Error) -> str:
    """PostgreSQL's own message of ``exc`` (with the column and detail when given)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) or str(exc).strip()
    column = getattr(diag, "column_name", None)
    detail = getattr(diag, "message_detail", None)
    extra = [f"column {column}" if column else "", detail or ""]
    return "; ".join([primary, *[e for e in extra if e]])


class PostgresSink:
    """Writes a route's changes into PostgreSQL tables (see the module docstring)."""

    kind = "postgres"

    def __init__(
        self,
        config: PostgresSinkConfig,
        *,
        connect_timeout_s: int = 10,
        source_timezone: str = "UTC",
    ) -> None:
        self.config = config
        self.connect_timeout_s = connect_timeout_s
        #: ``lake.source_timezone``: the zone of the text a late row's added column takes.
        self._zone = source_zone(source_timezone)
        self._conn: Any = None
        #: Schemas whose side tables exist (in the open transaction, or committed).
        self._schemas: set[str] = set()
        #: (schema, table) → the table as last read from the catalog.
        self._tables: dict[_Target, _Table] = {}

    # -- connection ---------------------------------------------------------------------

    def _connection(self) -> Any:
        """The open connection, connecting first when there is none."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        kwargs: dict[str, Any] = {
            "connect_timeout": self.connect_timeout_s,
            "application_name": "tidelake-route",
        }
        password = self.config.password_value()
        if password is not None:
            kwargs["password"] = password
        conn = psycopg2.connect(self.config.dsn, **kwargs)
        try:
            with conn.cursor() as cur:
                cur.execute("SET TIME ZONE 'UTC'; SET datestyle = 'ISO, YMD'")
            conn.commit()
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        """Forget the connection (and what it learnt): the next apply connects again."""
        conn, self._conn = self._conn, None
        self._forget()
        if conn is not None:
            with contextlib.suppress(psycopg2.Error):
                conn.close()

    def _forget(self) -> None:
        """Drop cached catalog knowledge (after a rollback it may be wrong)."""
        self._schemas.clear()
        self._tables.clear()

    def close(self) -> None:
        """Close the connection."""
        self._drop_connection()

    # -- apply --------------------------------------------------------------------------

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Write ``changes`` in one transaction and commit it (see the module docstring)."""
        if not changes:
            return
        try:
            rejected = self._apply(changes)
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
            self._drop_connection()
            raise SinkUnavailable(f"postgres sink: {str(exc).strip()}") from exc
        except psycopg2.Error as exc:
            with contextlib.suppress(psycopg2.Error):
                self._rollback()
            raise SinkError(f"postgres sink: {_db_message(exc)}") from exc
        except BaseException:  # a bug, or an interrupt: leave no transaction open
            with contextlib.suppress(psycopg2.Error):
                self._rollback()
            raise
        if rejected:
            reason = "; ".join(rejected.values())
            if len(reason) > _MAX_REASON:
                reason = reason[: _MAX_REASON - 3] + "..."
            raise ChangesRejected(sorted(rejected), reason)

    def _apply(self, changes: Sequence[RowChange]) -> dict[int, str]:
        """Write and commit the batch; or, when some changes cannot be written, roll back and
        return seq → reason of each. psycopg2 errors other than a refused value pass."""
        conn = self._connection()
        try:
            rejected = self._write_batch(conn, changes, singly=False)
        except (psycopg2.OperationalError, psycopg2.InterfaceError, InsufficientPrivilege):
            raise
        except psycopg2.DatabaseError as exc:
            self._rollback()
            log.info("postgres batch refused; writing it change by change", error=_db_message(exc))
            rejected = self._write_batch(conn, changes, singly=True)
        if rejected:
            self._rollback()
        else:
            conn.commit()
        return rejected

    def _rollback(self) -> None:
        """Roll the open transaction back and forget the catalog knowledge it may hold."""
        self._forget()
        if self._conn is not None and not self._conn.closed:
            self._conn.rollback()

    def _write_batch(
        self, conn: Any, changes: Sequence[RowChange], *, singly: bool
    ) -> dict[int, str]:
        """The whole batch in the open transaction, in stream order: the row changes before
        each schema change, then that schema change (in a savepoint), and so on. Returns
        seq → reason of each change that cannot be written (the caller then rolls back).
        ``singly``: each row change in a savepoint of its own, to find the ones the server
        refuses; else the rows of a piece go together, and a value the server refuses raises
        its psycopg2 error."""
        rejected: dict[int, str] = {}
        with conn.cursor() as cur:
            for rows, schema_change in split_at_schema(changes):
                if rows and singly:
                    self._write_rows_singly(cur, rows, rejected)
                elif rows:
                    rejected.update(self._write_rows(cur, rows))
                if schema_change is None or schema_change.seq in rejected:
                    continue
                _, failure = _in_savepoint(cur, partial(self._write_schema, cur, schema_change))
                self._tables.clear()  # the DDL changed them, or was rolled back
                if failure is not None:
                    self._schemas.clear()
                    rejected[schema_change.seq] = _schema_reason(schema_change, failure)
        return rejected

    def _write_rows(self, cur: Any, rows: Sequence[RowChange]) -> dict[int, str]:
        """Row changes (no schema change among them) together: their tables made, then each
        table's tombstones, deletes and upserts. seq → reason of the values refused before
        reaching the server (nothing of their table is then written)."""
        kept = [c for c in self._guarded(cur, rows) if c is not None]
        by_table = self._by_table(kept)
        tables = {target: self._ensure(cur, target, group) for target, group in by_table.items()}
        refused: dict[int, str] = {}
        for target, group in by_table.items():
            try:
                self._write_table(cur, tables[target], _plan(group))
            except _RefusedError as exc:
                refused.update(exc.rejected)
        return refused

    def _write_rows_singly(
        self, cur: Any, rows: Sequence[RowChange], rejected: dict[int, str]
    ) -> None:
        """Row changes one by one in stream order, each in a savepoint; adds seq → reason of
        each one that fails to ``rejected``."""
        for schema in dict.fromkeys(self._target(c)[0] for c in rows):
            _, failure = _in_savepoint(cur, partial(self._ensure_schema, cur, schema))
            if failure is not None:  # a name PostgreSQL refuses for a schema, say
                self._schemas.discard(schema)
                for change in rows:
                    if self._target(change)[0] == schema:
                        rejected.setdefault(change.seq, _reason(change, failure))
        rows = [c for c in rows if self._target(c)[0] in self._schemas]
        kept = [c for c in self._guarded(cur, rows) if c is not None]
        tables: dict[_Target, _Table] = {}
        for target, group in self._by_table(kept).items():
            table, failure = _in_savepoint(cur, partial(self._ensure, cur, target, group))
            if table is not None:
                tables[target] = table
                continue
            self._tables.pop(target, None)
            for change in group:
                rejected.setdefault(change.seq, _reason(change, failure or "?"))
        for change in kept:
            table = tables.get(self._target(change))
            if table is None or change.seq in rejected:
                continue  # its table could not be made, or its message is refused already
            write = partial(self._write_table, cur, table, _plan([change]))
            _, failure = _in_savepoint(cur, write)
            if failure is not None:
                rejected[change.seq] = (
                    failure if failure.startswith("seq ") else _reason(change, failure)
                )

    # -- tables -------------------------------------------------------------------------

    def _target(self, change: RowChange) -> _Target:
        """(schema, table) a row change goes to."""
        database, table = split_table_id(change.table)
        return self.config.target_schema or database, table

    def _target_of(self, name: ddl.TableName) -> _Target:
        """(schema, table) of the source table ``name``."""
        return self.config.target_schema or name.database, name.table

    def _by_table(self, changes: Sequence[RowChange]) -> dict[_Target, list[RowChange]]:
        """``changes`` grouped by target table, in first-seen order, stream order inside."""
        groups: dict[_Target, list[RowChange]] = {}
        for change in changes:
            groups.setdefault(self._target(change), []).append(change)
        return groups

    def _read_table(self, cur: Any, schema: str, name: str) -> _Table | None:
        """The table as the catalog has it, or None when there is no such table."""
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p') "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (schema, name),
        )
        rows = cur.fetchall()
        if not rows:
            return None
        return _Table(schema, name, {str(n): str(t) for n, t in rows})

    def _primary_key(self, cur: Any, table: _Table) -> list[str]:
        """The columns of the table's primary key."""
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE n.nspname = %s AND c.relname = %s AND i.indisprimary",
            (table.schema, table.name),
        )
        return [str(r[0]) for r in cur.fetchall()]

    def _ensure_schema(self, cur: Any, schema: str) -> None:
        """Create the schema and its side tables when missing."""
        if schema in self._schemas:
            return
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, "
                'key_text text NOT NULL, position text COLLATE "C" NOT NULL, '
                "PRIMARY KEY (table_name, key_text))"
            ).format(sql.Identifier(schema, DELETES_TABLE))
        )
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (table_name text PRIMARY KEY, source_table text, "
                'ddl_position text COLLATE "C", cleared_position text COLLATE "C")'
            ).format(sql.Identifier(schema, SCHEMA_TABLE))
        )
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, "
                'position text COLLATE "C" NOT NULL, steps text NOT NULL)'
            ).format(sql.Identifier(schema, SCHEMA_LOG_TABLE))
        )
        self._schemas.add(schema)

    def _read_marks(self, cur: Any, targets: Iterable[_Target]) -> dict[_Target, _Marks]:
        """The ``_tidelake_schema`` row of each of ``targets`` that has one (their schemas'
        side tables exist)."""
        by_schema: dict[str, list[str]] = {}
        for schema, name in targets:
            by_schema.setdefault(schema, []).append(name)
        marks: dict[_Target, _Marks] = {}
        for schema, names in by_schema.items():
            cur.execute(
                sql.SQL(
                    "SELECT table_name, ddl_position, cleared_position FROM {} "
                    "WHERE table_name = ANY(%s)"
                ).format(sql.Identifier(schema, SCHEMA_TABLE)),
                (names,),
            )
            for name, ddl_position, cleared in cur.fetchall():
                marks[(schema, str(name))] = _Marks(ddl_position or "", cleared or "")
        return marks

    def _write_marks(
        self,
        cur: Any,
        target: _Target,
        source_table: str | None,
        ddl_position: str | None,
        cleared: str | None = None,
    ) -> None:
        """Raise the target's recorded positions to these (None: keep), and record its
        source table (None: keep)."""
        schema, name = target
        cur.execute(
            sql.SQL(
                "INSERT INTO {} AS s (table_name, source_table, ddl_position, cleared_position) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (table_name) DO UPDATE SET "
                "source_table = COALESCE(EXCLUDED.source_table, s.source_table), "
                "ddl_position = GREATEST(s.ddl_position, EXCLUDED.ddl_position), "
                "cleared_position = GREATEST(s.cleared_position, EXCLUDED.cleared_position)"
            ).format(sql.Identifier(schema, SCHEMA_TABLE)),
            (name, source_table, ddl_position, cleared),
        )

    def _guarded(self, cur: Any, rows: Sequence[RowChange]) -> list[RowChange | None]:
        """``rows`` (row changes) as :func:`_guard` lets each be written against its table's
        recorded positions (None: skipped). Makes the schemas and their side tables, and
        records the source table of a table seen for the first time."""
        sources: dict[_Target, str] = {}
        for change in rows:
            sources.setdefault(self._target(change), change.table)
        for schema in dict.fromkeys(s for s, _ in sources):
            self._ensure_schema(cur, schema)
        marks = self._read_marks(cur, sources)
        columns: dict[_Target, set[str] | None] = {}
        for target, source in sources.items():
            if target not in marks:
                self._write_marks(cur, target, source, None)
            table = self._tables.get(target) or self._read_table(cur, *target)
            if table is not None:
                self._tables[target] = table
            columns[target] = set(table.columns) if table is not None else None
        history = self._history(cur, rows, marks)
        out: list[RowChange | None] = []
        for change in rows:
            target = self._target(change)
            later = [s for at, taken in history.get(target, ()) if at > change.position
                     for s in taken]  # fmt: skip
            guarded = _guard(forward(change, later), marks.get(target, _Marks()), columns[target])
            if guarded is not change and not later:
                log.debug(
                    "postgres sink skips or trims a change older than its table's DDL",
                    table=change.table, seq=change.seq, position=change.position,
                )  # fmt: skip
            out.append(guarded)
        return out

    def _history(
        self, cur: Any, rows: Sequence[RowChange], marks: Mapping[_Target, _Marks]
    ) -> dict[_Target, list[tuple[str, list[ColumnStep]]]]:
        """For each table with a row change below its last DDL (and not below its last
        truncate or drop): the column steps logged after the oldest such change, in order."""
        oldest: dict[_Target, str] = {}
        for change in rows:
            target = self._target(change)
            held = marks.get(target, _Marks())
            if held.cleared <= change.position < held.ddl:
                oldest[target] = min(oldest.get(target, change.position), change.position)
        history: dict[_Target, list[tuple[str, list[ColumnStep]]]] = {}
        for (schema, name), since in oldest.items():
            cur.execute(
                sql.SQL(
                    "SELECT position, steps FROM {} WHERE table_name = %s AND position > %s "
                    'COLLATE "C" ORDER BY position COLLATE "C"'
                ).format(sql.Identifier(schema, SCHEMA_LOG_TABLE)),
                (name, since),
            )
            history[(schema, name)] = [
                (str(at), steps_from_json(taken)) for at, taken in cur.fetchall()
            ]
        return history

    def _create_table(
        self, cur: Any, target: _Target, columns: dict[str, str], key: Sequence[str]
    ) -> None:
        """``CREATE TABLE IF NOT EXISTS`` with ``columns`` (name → PostgreSQL type), the
        position column and ``key`` as primary key."""
        cur.execute(
            sql.SQL(
                'CREATE TABLE IF NOT EXISTS {} ({}, {} text COLLATE "C" NOT NULL, PRIMARY KEY ({}))'
            ).format(
                sql.Identifier(*target),
                sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t))
                    for c, t in columns.items()
                ),
                sql.Identifier(POSITION_COLUMN),
                sql.SQL(", ").join(sql.Identifier(c) for c in key),
            )
        )

    def _ensure(self, cur: Any, target: _Target, changes: Sequence[RowChange]) -> _Table:
        """Create the table and its missing columns as ``changes`` (one table, guarded, its
        schema made) need them; the table as it then is."""
        schema, name = target
        wanted: dict[str, str | None] = {}  # column → its source type, key columns first
        for change in changes:
            for column in [*change.key, *(change.row or {})]:
                if wanted.get(column) is None:
                    wanted[column] = change.column_types.get(column)
        table = self._tables.get(target) or self._read_table(cur, schema, name)
        if table is None:
            columns = {c: pg_types.pg_type(t) for c, t in wanted.items()}
            self._create_table(cur, target, columns, sorted(changes[0].key))
            table = self._read_table(cur, schema, name)
            assert table is not None
        added = False
        if POSITION_COLUMN not in table.columns:  # a table someone else made
            cur.execute(
                sql.SQL(
                    'ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} text COLLATE "C" NOT NULL '
                    "DEFAULT ''"
                ).format(table.ident, sql.Identifier(POSITION_COLUMN))
            )
            added = True
        for column, source_type in wanted.items():
            if column not in table.columns:
                log.info(
                    "postgres sink adds a column", table=f"{schema}.{name}", column=column,
                    source_type=source_type,
                )  # fmt: skip
                cur.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                        table.ident,
                        sql.Identifier(column),
                        sql.SQL(pg_types.pg_type(source_type)),
                    )
                )
                added = True
        if added:
            table = self._read_table(cur, schema, name)
            assert table is not None
        self._tables[target] = table
        return table

    # -- schema changes -----------------------------------------------------------------

    def _write_schema(self, cur: Any, change: RowChange) -> None:
        """Apply the operations of one schema change in the open transaction (the caller
        holds a savepoint), each on the tables whose ``ddl_position`` is below the change's,
        and record its position on them. Raises :class:`_RefusedError` naming the change when
        an operation cannot be applied."""
        position = change.position
        sources: dict[_Target, str | None] = {}
        for op in change.operations:
            for name in _op_tables(op):
                sources.setdefault(self._target_of(name), name.table_id)
        for schema in dict.fromkeys(s for s, _ in sources):
            self._ensure_schema(cur, schema)
        databases: dict[str, dict[_Target, str | None]] = {}
        for op in change.operations:
            if isinstance(op, ddl.DropDatabase) and op.database not in databases:
                databases[op.database] = self._database_tables(cur, op.database)
                for target, source in databases[op.database].items():
                    sources.setdefault(target, source)
        marks = self._read_marks(cur, sources)
        #: target → whether its rows were removed, for each table an operation was due on.
        done: dict[_Target, bool] = {}
        #: target → what the operations applied to it do to an older row (the log's entry).
        steps: dict[_Target, list[ColumnStep]] = {}

        def due(*targets: _Target) -> bool:
            return all(marks.get(t, _Marks()).ddl < position for t in targets)

        log.info(
            "postgres sink applies DDL", table=change.table, seq=change.seq, position=position,
            ops=[type(op).__name__ for op in change.operations],
        )  # fmt: skip
        try:
            for op in change.operations:
                if isinstance(op, ddl.DropDatabase):
                    for target in databases[op.database]:
                        if due(target):
                            self._drop(cur, target, position)
                            done[target] = True
                    continue
                if isinstance(op, ddl.RenameTable):
                    old, new = self._target_of(op.table), self._target_of(op.to)
                    if due(old, new) and old != new:
                        self._rename_table(cur, old, new, position)
                        done[old] = done[new] = True
                        sources[new] = op.to.table_id
                    continue
                names = _op_tables(op)
                if not names:
                    continue  # CREATE DATABASE and the like: nothing a sink holds
                target = self._target_of(names[0])
                if not due(target):
                    continue
                done[target] = done.get(target, False) | self._apply_op(cur, target, op, change)
                if isinstance(op, COLUMN_OPS):  # what it did to the rows, for late ones
                    try:
                        taken = column_steps([op], change.commit_ts_ms, self._zone)
                    except SchemaRefusedError as exc:  # _add_column refused it already
                        raise _DdlRefusedError(str(exc)) from exc
                    steps.setdefault(target, []).extend(taken)
        except _DdlRefusedError as exc:
            raise _RefusedError({change.seq: str(exc)}) from exc
        for target, cleared in done.items():
            self._write_marks(
                cur, target, sources.get(target), position, position if cleared else None
            )
        for (schema, table_name), taken in steps.items():
            if taken:
                cur.execute(
                    sql.SQL("INSERT INTO {} (table_name, position, steps) VALUES (%s, %s, %s)")
                    .format(sql.Identifier(schema, SCHEMA_LOG_TABLE)),
                    # JSON in a text column: jsonb has no \u0000, a binary default may
                    (table_name, position, steps_json(taken)),
                )  # fmt: skip

    def _apply_op(self, cur: Any, target: _Target, op: ddl.Operation, change: RowChange) -> bool:
        """Apply one operation on one table; whether it removed the table's rows."""
        table = self._read_table(cur, *target)
        if isinstance(op, ddl.CreateTable):
            self._create(cur, target, table, op)
        elif isinstance(op, ddl.TruncateTable):
            self._truncate(cur, target, table, change.position)
            return True
        elif isinstance(op, ddl.DropTable):
            self._drop(cur, target, change.position)
            return True
        elif table is None:
            log.info(
                "postgres sink: DDL on a table it does not hold", table=f"{target[0]}.{target[1]}"
            )
        elif isinstance(op, ddl.AddColumn):
            self._add_column(cur, table, op.column, change.commit_ts_ms)
        elif isinstance(op, ddl.DropColumn):
            self._drop_column(cur, table, op.name)
        elif isinstance(op, ddl.RenameColumn):
            self._rename_column(cur, table, op.old, op.new)
        elif isinstance(op, ddl.ModifyColumn):
            self._modify_column(cur, table, op)
        return False

    def _create(self, cur: Any, target: _Target, table: _Table | None, op: ddl.CreateTable) -> None:
        """CREATE TABLE as declared, unless the table exists."""
        where = f"{target[0]}.{target[1]}"
        if table is not None:
            log.info("postgres sink keeps the table a CREATE TABLE names", table=where)
            return
        if op.like is not None:
            like = self._target_of(op.like)
            if self._read_table(cur, *like) is None:
                log.warning(
                    "CREATE TABLE LIKE a table the sink lacks", table=where, like=str(op.like)
                )
                return
            cur.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS "
                    "INCLUDING CONSTRAINTS INCLUDING INDEXES)"
                ).format(sql.Identifier(*target), sql.Identifier(*like))
            )
            return
        columns = {c.name: pg_types.pg_type(c.source_type) for c in op.columns}
        columns.pop(POSITION_COLUMN, None)
        if not op.primary_key or any(k not in columns for k in op.primary_key):
            log.warning("table without primary key not created: its rows make it", table=where)
            return
        self._create_table(cur, target, columns, op.primary_key)

    def _add_column(
        self, cur: Any, table: _Table, spec: ddl.ColumnSpec, commit_ts_ms: int | None
    ) -> None:
        """ADD COLUMN, existing rows taking the value the source gives them."""
        if spec.name in table.columns:
            return  # added already (or a row brought it first)
        column_type = pg_types.pg_type(spec.source_type)
        value = _added_value(spec, column_type, commit_ts_ms)
        column = sql.Identifier(spec.name)
        if value is None:
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    table.ident, column, sql.SQL(column_type)
                )
            )
            return
        # A constant DEFAULT fills the existing rows without rewriting the table; dropped at
        # once, so that it never fills a row a later change writes.
        cur.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN {} {} DEFAULT {}::{}").format(
                table.ident,
                column,
                sql.SQL(column_type),
                sql.Literal(value),
                sql.SQL(pg_types.cast_type(column_type)),
            )
        )
        cur.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT").format(table.ident, column)
        )

    def _drop_column(self, cur: Any, table: _Table, name: str) -> None:
        """DROP COLUMN IF EXISTS; never a key column."""
        if name not in table.columns or name == POSITION_COLUMN:
            return
        if name in self._primary_key(cur, table):
            raise _DdlRefusedError(
                f"dropping primary-key column {name} changes the key the sink writes by"
            )
        cur.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(
                table.ident, sql.Identifier(name)
            )
        )

    def _rename_column(self, cur: Any, table: _Table, old: str, new: str) -> None:
        """RENAME COLUMN when ``old`` exists and ``new`` does not (else: renamed already, a
        later row brought ``new`` first, or the sink never had ``old``)."""
        if old == new or old not in table.columns or new in table.columns:
            log.info(
                "postgres sink leaves a column rename", table=f"{table.schema}.{table.name}",
                old=old, new=new, old_held=old in table.columns, new_held=new in table.columns,
            )  # fmt: skip
            return
        cur.execute(
            sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                table.ident, sql.Identifier(old), sql.Identifier(new)
            )
        )
        table.columns = {(new if c == old else c): t for c, t in table.columns.items()}

    def _modify_column(self, cur: Any, table: _Table, op: ddl.ModifyColumn) -> None:
        """The rename, if any; then ALTER COLUMN TYPE when the PostgreSQL type differs."""
        if op.new_name is not None:
            self._rename_column(cur, table, op.name, op.new_name)
        name = op.new_name or op.name
        held = table.columns.get(name)
        if held is None:
            log.info(
                "postgres sink: column to modify is not in the table",
                table=f"{table.schema}.{table.name}", column=name,
            )  # fmt: skip
            return
        column_type = pg_types.pg_type(op.source_type)
        if held == column_type:
            return
        column = sql.Identifier(name)
        # PostgreSQL's casts round without an error (numeric(10,2) to numeric(10,1), double
        # to real): a value the new type cannot hold exactly refuses the change instead.
        cur.execute(
            sql.SQL(
                "SELECT {c}::text FROM {t} WHERE ({c}::{new})::{old} IS DISTINCT FROM {c} LIMIT 1"
            ).format(c=column, t=table.ident, new=sql.SQL(column_type), old=sql.SQL(held))
        )
        altered = cur.fetchone()
        if altered is not None:
            raise _DdlRefusedError(
                f"column {name}: {held} to {column_type} would change the stored value "
                f"{str(altered[0])[:60]!r}"
            )
        cur.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
                table.ident, column, sql.SQL(column_type), column, sql.SQL(column_type)
            )
        )
        table.columns[name] = column_type

    def _clear_tombstones(self, cur: Any, target: _Target, position: str) -> None:
        """Remove the table's tombstones below ``position``."""
        schema, name = target
        cur.execute(
            sql.SQL('DELETE FROM {} WHERE table_name = %s AND position < %s COLLATE "C"').format(
                sql.Identifier(schema, DELETES_TABLE)
            ),
            (name, position),
        )

    def _truncate(self, cur: Any, target: _Target, table: _Table | None, position: str) -> None:
        """Remove the rows (and tombstones) below ``position``."""
        if table is not None and POSITION_COLUMN in table.columns:
            cur.execute(
                sql.SQL('DELETE FROM {} WHERE {} < %s COLLATE "C"').format(
                    table.ident, sql.Identifier(POSITION_COLUMN)
                ),
                (position,),
            )
        elif table is not None:
            cur.execute(sql.SQL("TRUNCATE {}").format(table.ident))
        self._clear_tombstones(cur, target, position)

    def _drop(self, cur: Any, target: _Target, position: str) -> None:
        """DROP TABLE IF EXISTS, and its tombstones below ``position``. A table holding a row
        written at or above ``position`` (the drop applied late: a dead letter reprocessed,
        the table made again by later changes) only loses its rows below it, as a truncate."""
        where = f"{target[0]}.{target[1]}"
        table = self._read_table(cur, *target)
        if table is not None and POSITION_COLUMN in table.columns:
            cur.execute(
                sql.SQL('SELECT EXISTS (SELECT 1 FROM {} WHERE {} >= %s COLLATE "C")').format(
                    table.ident, sql.Identifier(POSITION_COLUMN)
                ),
                (position,),
            )
            if cur.fetchone()[0]:
                log.warning(
                    "postgres sink: a table dropped at this position holds later rows: only "
                    "the older ones go", table=where, position=position,
                )  # fmt: skip
                self._truncate(cur, target, table, position)
                return
        log.info("postgres sink drops a table", table=where, position=position)
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(*target)))
        self._clear_tombstones(cur, target, position)

    def _rename_table(self, cur: Any, old: _Target, new: _Target, position: str) -> None:
        """``old`` becomes ``new`` with its tombstones; what the sink held at ``new`` is stale
        (the source's ``new`` did not exist) and is dropped first."""
        if self._read_table(cur, *new) is not None:
            log.info("postgres sink drops the stale table a rename goes to", table=".".join(new))
            self._drop(cur, new, position)
        else:
            self._clear_tombstones(cur, new, position)
        if self._read_table(cur, *old) is None:
            return
        if old[0] == new[0]:
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(*old), sql.Identifier(new[1])
                )
            )
        else:  # moved under a name no table of either schema bears
            moving = sql.Identifier(_MOVING)
            cur.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(sql.Identifier(*old), moving))
            cur.execute(
                sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                    sql.Identifier(old[0], _MOVING), sql.Identifier(new[0])
                )
            )
            cur.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    sql.Identifier(new[0], _MOVING), sql.Identifier(new[1])
                )
            )
        cur.execute(
            sql.SQL(
                "INSERT INTO {} AS d (table_name, key_text, position) SELECT %s, key_text, "
                "position FROM {} WHERE table_name = %s ON CONFLICT (table_name, key_text) DO "
                "UPDATE SET position = GREATEST(d.position, EXCLUDED.position)"
            ).format(sql.Identifier(new[0], DELETES_TABLE), sql.Identifier(old[0], DELETES_TABLE)),
            (new[1], old[1]),
        )
        cur.execute(
            sql.SQL("DELETE FROM {} WHERE table_name = %s").format(
                sql.Identifier(old[0], DELETES_TABLE)
            ),
            (old[1],),
        )
        # The column history goes with the rows (a late row of the new name still meets it).
        cur.execute(
            sql.SQL(
                "INSERT INTO {} (table_name, position, steps) SELECT %s, position, steps "
                "FROM {} WHERE table_name = %s"
            ).format(
                sql.Identifier(new[0], SCHEMA_LOG_TABLE), sql.Identifier(old[0], SCHEMA_LOG_TABLE)
            ),
            (new[1], old[1]),
        )
        cur.execute(
            sql.SQL("DELETE FROM {} WHERE table_name = %s").format(
                sql.Identifier(old[0], SCHEMA_LOG_TABLE)
            ),
            (old[1],),
        )

    def _database_tables(self, cur: Any, database: str) -> dict[_Target, str | None]:
        """The sink's tables of source database ``database`` → their source table (None:
        unrecorded): those ``_tidelake_schema`` maps to it, and, ``target_schema`` unset,
        every table of schema ``database`` holding the position column."""
        schema = self.config.target_schema or database
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if cur.fetchone() is None:
            return {}
        self._ensure_schema(cur, schema)
        cur.execute(
            sql.SQL("SELECT table_name, source_table FROM {} ORDER BY table_name").format(
                sql.Identifier(schema, SCHEMA_TABLE)
            )
        )
        tables: dict[_Target, str | None] = {}
        for name, source in cur.fetchall():
            if self.config.target_schema is None or _database_of(source) == database:
                tables[(schema, str(name))] = source
        if self.config.target_schema is None:
            cur.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_attribute a ON a.attrelid = c.oid WHERE n.nspname = %s "
                "AND c.relkind IN ('r', 'p') AND a.attname = %s AND NOT a.attisdropped "
                "ORDER BY c.relname",
                (schema, POSITION_COLUMN),
            )
            for (name,) in cur.fetchall():
                tables.setdefault((schema, str(name)), None)
        return tables

    # -- rows ---------------------------------------------------------------------------

    def _execute_values(
        self, cur: Any, statement: sql.Composable, template: Sequence[str], rows: list[list[Any]]
    ) -> None:
        """Run ``statement`` (holding ``_VALUES`` where the list goes) for ``rows``, each
        cast by ``template`` (one SQL type per column)."""
        text = statement.as_string(cur).replace("%", "%%").replace(_VALUES, "%s")
        casts = ", ".join(f"%s::{t.replace('%', '%%')}" for t in template)
        psycopg2.extras.execute_values(cur, text, rows, template=f"({casts})", page_size=1000)

    def _param(self, change: RowChange, table: _Table, column: str, value: Any) -> Any:
        """``value`` of ``column`` as a query parameter (raises RefusedValueError)."""
        return pg_types.to_param(value, table.columns[column], change.column_types.get(column))

    def _write_table(self, cur: Any, table: _Table, plan: _Plan) -> None:
        """Tombstones, deletes and upserts of one table. Raises :class:`_RefusedError` (before
        writing anything) when a value cannot be stored exactly."""
        refused: dict[int, str] = {}
        delete_rows: dict[tuple[str, ...], list[list[Any]]] = {}
        for change in plan.deletes.values():
            key_cols = tuple(sorted(change.key))
            try:
                params = [self._param(change, table, c, change.key[c]) for c in key_cols]
            except (pg_types.RefusedValueError, KeyError) as exc:
                refused[change.seq] = _reason(change, _refusal(exc))
                continue
            delete_rows.setdefault(key_cols, []).append([*params, change.position])
        upsert_rows: dict[tuple[tuple[str, ...], tuple[str, ...]], list[list[Any]]] = {}
        for key_text, change in plan.upserts.items():
            key_cols = tuple(sorted(change.key))
            row = {**change.key, **(change.row or {})}
            columns = (*key_cols, *sorted(c for c in row if c not in change.key))
            try:
                params = [self._param(change, table, c, row[c]) for c in columns]
            except (pg_types.RefusedValueError, KeyError) as exc:
                refused[change.seq] = _reason(change, _refusal(exc))
                continue
            upsert_rows.setdefault((key_cols, columns), []).append(
                [*params, key_text, change.position]
            )
        if refused:
            raise _RefusedError(refused)

        if plan.tombstones:
            self._execute_values(
                cur,
                sql.SQL(
                    "INSERT INTO {} AS d (table_name, key_text, position) VALUES {} "
                    "ON CONFLICT (table_name, key_text) DO UPDATE SET position = EXCLUDED.position "
                    'WHERE d.position < EXCLUDED.position COLLATE "C"'
                ).format(sql.Identifier(table.schema, DELETES_TABLE), sql.SQL(_VALUES)),
                ["text", "text", "text"],
                [[table.name, k, p] for k, p in plan.tombstones.items()],
            )
        for key_cols, rows in delete_rows.items():
            names = [f"k{i}" for i in range(len(key_cols))]
            self._execute_values(
                cur,
                sql.SQL(
                    "DELETE FROM {} AS t USING (VALUES {}) AS v({}, p) WHERE {} "
                    'AND t.{} < v.p COLLATE "C"'
                ).format(
                    table.ident,
                    sql.SQL(_VALUES),
                    sql.SQL(", ").join(sql.Identifier(n) for n in names),
                    sql.SQL(" AND ").join(
                        sql.SQL("t.{} = v.{}").format(sql.Identifier(c), sql.Identifier(n))
                        for c, n in zip(key_cols, names, strict=True)
                    ),
                    sql.Identifier(POSITION_COLUMN),
                ),
                [*(pg_types.cast_type(table.columns[c]) for c in key_cols), "text"],
                rows,
            )
        for (key_cols, columns), rows in upsert_rows.items():
            self._upsert(cur, table, key_cols, columns, rows)

    def _upsert(
        self,
        cur: Any,
        table: _Table,
        key_cols: tuple[str, ...],
        columns: tuple[str, ...],
        rows: list[list[Any]],
    ) -> None:
        """Insert or update ``rows`` (values of ``columns``, then key text and position),
        guarded by the rows' positions and the table's tombstones."""
        names = [f"c{i}" for i in range(len(columns))]
        targets = [*columns, POSITION_COLUMN]
        updated = [c for c in targets if c not in key_cols]
        pos = sql.Identifier(POSITION_COLUMN)
        statement = sql.SQL(
            "INSERT INTO {table} AS t ({targets}) SELECT {values}, v.p "
            "FROM (VALUES {list}) AS v({names}, k, p) WHERE NOT EXISTS (SELECT 1 FROM {deletes} d "
            "WHERE d.table_name = {name} AND d.key_text = v.k AND d.position >= v.p "
            'COLLATE "C") ON CONFLICT ({key}) DO UPDATE SET {sets} '
            'WHERE t.{pos} < EXCLUDED.{pos} COLLATE "C"'
        ).format(
            table=table.ident,
            targets=sql.SQL(", ").join(sql.Identifier(c) for c in targets),
            values=sql.SQL(", ").join(sql.SQL("v.{}").format(sql.Identifier(n)) for n in names),
            list=sql.SQL(_VALUES),
            names=sql.SQL(", ").join(sql.Identifier(n) for n in names),
            deletes=sql.Identifier(table.schema, DELETES_TABLE),
            name=sql.Literal(table.name),
            key=sql.SQL(", ").join(sql.Identifier(c) for c in key_cols),
            sets=sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                for c in updated
            ),
            pos=pos,
        )
        template = [*(pg_types.cast_type(table.columns[c]) for c in columns), "text", "text"]
        self._execute_values(cur, statement, template, rows)


def _in_savepoint(cur: Any, fn: Callable[[], _T]) -> tuple[_T | None, str | None]:
    """``fn()`` inside a savepoint: (its result, None), or (None, why) when it failed with
    an error of the data (then rolled back to the savepoint). Connection errors and a missing
    privilege pass through."""
    cur.execute("SAVEPOINT tl_change")
    try:
        result = fn()
    except _RefusedError as exc:
        cur.execute("ROLLBACK TO SAVEPOINT tl_change")
        return None, "; ".join(exc.rejected.values())
    except (psycopg2.OperationalError, psycopg2.InterfaceError, InsufficientPrivilege):
        raise
    except psycopg2.DatabaseError as exc:
        cur.execute("ROLLBACK TO SAVEPOINT tl_change")
        return None, _db_message(exc)
    cur.execute("RELEASE SAVEPOINT tl_change")
    return result, None


def _refusal(exc: Exception) -> str:
    """The reason of a value refused before the server saw it."""
    if isinstance(exc, KeyError):
        return f"column {exc.args[0]!r} is not in the table"
    return str(exc)
