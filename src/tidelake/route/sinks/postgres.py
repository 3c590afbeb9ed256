"""The PostgreSQL sink: each source table as a typed table, written idempotently by key with
the source position as the version.

Tables. A change of source table ``db.t`` goes to ``S.t``, ``S`` being ``target_schema`` or,
unset, the source database's name. On first sight the sink creates the schema and the table
(``CREATE … IF NOT EXISTS``): one column per source column, typed from
:attr:`RowChange.column_types` by :mod:`tidelake.route.sinks.pg_types`, the primary key made
of the change's key columns, and ``_tl_position text COLLATE "C" NOT NULL``, the position of
the change that wrote the row. A change bringing a column the table lacks adds it
(``ALTER TABLE … ADD COLUMN``); no column is ever dropped, and an upsert sets only the columns
it carries. Each schema also holds ``S._tidelake_deletes (table_name, key_text, position)``:
the position of the latest delete of each key (``table_name`` is the target table's name,
``key_text`` :meth:`RowChange.key_text`). Tombstones are never removed.

The guard, in SQL, in the same transaction as the rows (positions compared byte-wise,
``COLLATE "C"``):

* an upsert is ``INSERT … ON CONFLICT (key) DO UPDATE … WHERE row._tl_position <
  EXCLUDED._tl_position``, and inserts nothing when a delete of its key at a position ≥ its
  own is recorded;
* a delete raises its key's tombstone to its position (the greatest wins) and removes the row
  only when the row's position is lower.

So a redelivered batch or a replay changes nothing, and an older upsert replayed after a delete
does not bring the row back; a newer upsert after a delete lands. Within a batch, the changes
of one key collapse to the one with the greatest position, and the greatest position of a
delete among them still raises the tombstone (it is below a final upsert's own position, so
that upsert still lands).

Transaction. A whole batch — DDL, tombstones, deletes, upserts — is one transaction; its commit
is the durability :meth:`PostgresSink.apply` promises before it returns. A value PostgreSQL
refuses (or one :func:`pg_types.to_param` refuses because the server would round or cut it)
makes the batch be written again change by change in savepoints, to find the culprits; then
the transaction is rolled back and :class:`ChangesRejected` names their sequences and the
server's message (the route dead-letters them and applies the rest again). A lost connection
(psycopg2 ``OperationalError``/``InterfaceError``) raises :class:`SinkUnavailable`; the next
:meth:`apply` connects again. Any other error (a missing privilege, say) is a plain
:class:`SinkError`, retried by the route.

Sessions run with ``TimeZone=UTC`` and ``DateStyle=ISO, YMD``: a zone-less text for a
``timestamptz`` column (MySQL ``TIMESTAMP``) is read as UTC.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import psycopg2
import psycopg2.extras
import structlog
from psycopg2 import sql
from psycopg2.errors import InsufficientPrivilege

from tidelake.config import PostgresSinkConfig
from tidelake.names import split_table_id
from tidelake.route.change import ChangesRejected, RowChange, SinkError, SinkUnavailable
from tidelake.route.sinks import pg_types

log = structlog.get_logger(__name__)
_T = TypeVar("_T")

#: The column holding the position of the change that wrote a row.
POSITION_COLUMN = "_tl_position"
#: The per-schema table of delete positions.
DELETES_TABLE = "_tidelake_deletes"
#: Where the ``VALUES`` list goes in a statement (no identifier can hold a NUL).
_VALUES = "\x00values\x00"
#: Longest reason handed to :class:`ChangesRejected`.
_MAX_REASON = 4000


class _RefusedError(Exception):
    """Changes that cannot be written, with why (raised inside one write)."""

    def __init__(self, rejected: dict[int, str]) -> None:
        super().__init__(f"{len(rejected)} change(s) refused")
        self.rejected = rejected


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


def _reason(change: RowChange, message: str) -> str:
    """One rejected change's reason: where it is and what the server said."""
    return f"seq {change.seq} {change.table} key {change.key_text()!r}: {message}"


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

    def __init__(self, config: PostgresSinkConfig, *, connect_timeout_s: int = 10) -> None:
        self.config = config
        self.connect_timeout_s = connect_timeout_s
        self._conn: Any = None
        #: Schemas whose deletes table exists (committed knowledge only).
        self._schemas: set[str] = set()
        #: (schema, table) → the table as last read from the catalog.
        self._tables: dict[tuple[str, str], _Table] = {}

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
            self._write_batch(conn, changes)
            conn.commit()
            return {}
        except _RefusedError as exc:
            self._rollback()
            return exc.rejected
        except (psycopg2.OperationalError, psycopg2.InterfaceError, InsufficientPrivilege):
            raise
        except psycopg2.DatabaseError as exc:
            self._rollback()
            log.info("postgres batch refused; writing it change by change", error=_db_message(exc))
        rejected = self._find_rejected(conn, changes)
        if rejected:
            self._rollback()
        else:
            conn.commit()  # written change by change: nothing was refused after all
        return rejected

    def _rollback(self) -> None:
        """Roll the open transaction back and forget the catalog knowledge it may hold."""
        self._forget()
        if self._conn is not None and not self._conn.closed:
            self._conn.rollback()

    def _write_batch(self, conn: Any, changes: Sequence[RowChange]) -> None:
        """The whole batch, in the open transaction: DDL, then each table's rows. Raises
        :class:`_RefusedError` for values refused before reaching the server."""
        by_table = self._by_table(changes)
        with conn.cursor() as cur:
            tables = {
                target: self._ensure(cur, target, group) for target, group in by_table.items()
            }
            refused: dict[int, str] = {}
            for target, group in by_table.items():
                try:
                    self._write_table(cur, tables[target], _plan(group))
                except _RefusedError as exc:
                    refused.update(exc.rejected)
            if refused:
                raise _RefusedError(refused)

    def _find_rejected(self, conn: Any, changes: Sequence[RowChange]) -> dict[int, str]:
        """Write ``changes`` one by one in stream order, each in a savepoint, in a fresh
        transaction; seq → reason of each change that fails. The caller commits or rolls
        back."""
        rejected: dict[int, str] = {}
        with conn.cursor() as cur:
            tables: dict[tuple[str, str], _Table] = {}
            for target, group in self._by_table(changes).items():
                table, failure = _in_savepoint(cur, partial(self._ensure, cur, target, group))
                if table is not None:
                    tables[target] = table
                    continue
                self._tables.pop(target, None)
                self._schemas.discard(target[0])
                for change in group:
                    rejected[change.seq] = _reason(change, failure or "?")
            for change in changes:
                table = tables.get(self._target(change))
                if table is None or change.seq in rejected:
                    continue  # its table could not be made, or its message is refused already
                write = partial(self._write_table, cur, table, _plan([change]))
                _, failure = _in_savepoint(cur, write)
                if failure is not None:
                    rejected[change.seq] = (
                        failure if failure.startswith("seq ") else _reason(change, failure)
                    )
        return rejected

    # -- tables -------------------------------------------------------------------------

    def _target(self, change: RowChange) -> tuple[str, str]:
        """(schema, table) a change goes to."""
        database, table = split_table_id(change.table)
        return self.config.target_schema or database, table

    def _by_table(self, changes: Sequence[RowChange]) -> dict[tuple[str, str], list[RowChange]]:
        """``changes`` grouped by target table, in first-seen order, stream order inside."""
        groups: dict[tuple[str, str], list[RowChange]] = {}
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

    def _ensure(self, cur: Any, target: tuple[str, str], changes: Sequence[RowChange]) -> _Table:
        """Create the schema, its deletes table, the table and its missing columns as
        ``changes`` (one table) need them; the table as it then is."""
        schema, name = target
        if schema not in self._schemas:
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            cur.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, "
                    'key_text text NOT NULL, position text COLLATE "C" NOT NULL, '
                    "PRIMARY KEY (table_name, key_text))"
                ).format(sql.Identifier(schema, DELETES_TABLE))
            )
            self._schemas.add(schema)
        wanted: dict[str, str | None] = {}  # column → its source type, key columns first
        for change in changes:
            for column in [*change.key, *(change.row or {})]:
                if wanted.get(column) is None:
                    wanted[column] = change.column_types.get(column)
        table = self._tables.get(target) or self._read_table(cur, schema, name)
        if table is None:
            first = changes[0]
            columns = [
                sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(pg_types.pg_type(t)))
                for c, t in wanted.items()
            ]
            cur.execute(
                sql.SQL(
                    'CREATE TABLE IF NOT EXISTS {} ({}, {} text COLLATE "C" NOT NULL, '
                    "PRIMARY KEY ({}))"
                ).format(
                    sql.Identifier(schema, name),
                    sql.SQL(", ").join(columns),
                    sql.Identifier(POSITION_COLUMN),
                    sql.SQL(", ").join(sql.Identifier(c) for c in sorted(first.key)),
                )
            )
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
