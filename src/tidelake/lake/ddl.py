"""DDL text → schema operations for the lake (DESIGN.md §5). Never executed: only parsed.

A DDL event carries the statement the source ran (TiCDC canal-json ``sql``, tidelake's own
capture, a Debezium truncate). :func:`parse_ddl` parses it with sqlglot in the source's
dialect (:func:`dialect_for`: ``postgres`` for PostgreSQL sources, ``mysql`` for TiDB, MySQL,
MariaDB and plain canal) into :class:`Operation` values, which ``lake/evolve.py`` applies to
the Hudi tables. One statement can hold several operations (``ALTER TABLE t ADD COLUMN a …,
DROP COLUMN b``); they are applied in order.

What a statement becomes:

* ``CREATE TABLE`` → :class:`CreateTable` (columns with their source types, primary key);
  ``CREATE TABLE … LIKE other`` → :class:`CreateTable` with ``like``;
* ``ALTER TABLE … ADD COLUMN`` → :class:`AddColumn`, with the value rows that exist at the
  source read after the DDL (:class:`Default`: the literal ``DEFAULT``, ``CURRENT_TIMESTAMP``,
  or MySQL's implicit default of a ``NOT NULL`` column);
* ``DROP COLUMN`` → :class:`DropColumn`; ``RENAME COLUMN`` → :class:`RenameColumn`;
  ``MODIFY`` / ``CHANGE`` / ``ALTER COLUMN … TYPE`` → :class:`ModifyColumn`;
* ``RENAME TABLE`` / ``ALTER TABLE … RENAME TO`` → :class:`RenameTable`;
* ``TRUNCATE`` → :class:`TruncateTable`; ``DROP TABLE`` → :class:`DropTable`;
  ``DROP DATABASE`` → :class:`DropDatabase`;
* indexes, comments, defaults of future rows, character sets, ``CREATE DATABASE``, views and
  the like → :class:`NoOp` (they change nothing the lake stores);
* anything else, or text that does not parse → :class:`Unsupported`, which pauses the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

Dialect = Literal["mysql", "postgres"]


def dialect_for(source: str) -> Dialect:
    """The sqlglot dialect of a ``ChangeEvent.source`` (``postgres``, ``debezium-postgresql``
    → postgres; ``tidb``, ``mysql``, ``canal``, ``debezium-mysql`` … → mysql)."""
    return "postgres" if "postgres" in source.lower() else "mysql"


@dataclass(frozen=True, slots=True, order=True)
class TableName:
    """A source table: ``database.table`` (PostgreSQL: ``schema.table``)."""

    database: str
    table: str

    @property
    def table_id(self) -> str:
        return f"{self.database}.{self.table}"

    def __str__(self) -> str:
        return self.table_id


@dataclass(frozen=True, slots=True)
class Default:
    """The value existing rows hold for a column added by DDL, as the source sees it.

    ``kind``: ``"value"`` (``text`` in canal-json text form; None is NULL),
    ``"current_timestamp"`` (the DDL's commit time), or ``"expression"`` (computed per row
    by the source: the lake cannot know the values, ``text`` holds the SQL).
    """

    kind: Literal["value", "current_timestamp", "expression"]
    text: str | None = None


NULL_DEFAULT = Default("value", None)


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """A column as DDL declares it: name, source SQL type (``mysqlType`` style text)."""

    name: str
    source_type: str
    default: Default = NULL_DEFAULT


@dataclass(frozen=True, slots=True)
class CreateTable:
    table: TableName
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...]
    like: TableName | None = None


@dataclass(frozen=True, slots=True)
class AddColumn:
    table: TableName
    column: ColumnSpec


@dataclass(frozen=True, slots=True)
class DropColumn:
    table: TableName
    name: str


@dataclass(frozen=True, slots=True)
class RenameColumn:
    table: TableName
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class ModifyColumn:
    """A type change, optionally with a new name (MySQL ``CHANGE old new TYPE``)."""

    table: TableName
    name: str
    source_type: str
    new_name: str | None = None


@dataclass(frozen=True, slots=True)
class RenameTable:
    table: TableName
    to: TableName


@dataclass(frozen=True, slots=True)
class TruncateTable:
    table: TableName


@dataclass(frozen=True, slots=True)
class DropTable:
    table: TableName


@dataclass(frozen=True, slots=True)
class DropDatabase:
    database: str


@dataclass(frozen=True, slots=True)
class NoOp:
    """A statement that changes nothing the lake stores (an index, a comment …)."""

    table: TableName | None
    what: str


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A statement the lake cannot map: its table pauses with ``reason``."""

    table: TableName | None
    reason: str


Operation = (
    CreateTable
    | AddColumn
    | DropColumn
    | RenameColumn
    | ModifyColumn
    | RenameTable
    | TruncateTable
    | DropTable
    | DropDatabase
    | NoOp
    | Unsupported
)

#: Source types whose MySQL implicit default (a NOT NULL column added without DEFAULT) is 0.
_NUMERIC = frozenset(
    {
        "TINYINT", "UTINYINT", "SMALLINT", "USMALLINT", "MEDIUMINT", "UMEDIUMINT", "INT",
        "UINT", "BIGINT", "UBIGINT", "DECIMAL", "UDECIMAL", "FLOAT", "DOUBLE", "BIT", "YEAR",
        "BOOLEAN",
    }
)  # fmt: skip
#: ... and those whose implicit default is the empty string.
_TEXTUAL = frozenset(
    {
        "CHAR", "VARCHAR", "NCHAR", "NVARCHAR", "TEXT", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT",
        "SET", "BINARY", "VARBINARY", "BLOB", "TINYBLOB", "MEDIUMBLOB", "LONGBLOB",
    }
)  # fmt: skip


def source_type_of(kind: exp.DataType, dialect: Dialect) -> str:
    """sqlglot's data type → the type text ``lake/schema.py`` maps (``decimal(12,2)``,
    ``bigint unsigned``, ``text[]`` …), as canal-json's ``mysqlType`` would spell it."""
    if dialect == "postgres" and kind.this == exp.DataType.Type.DECIMAL and not kind.expressions:
        return "numeric"  # PostgreSQL's unconstrained numeric, not MySQL's DECIMAL(10,0)
    if dialect == "mysql" and not kind.expressions:
        # MySQL's defaults spelled out: a bare ``decimal`` / ``bit`` is how TiCDC's default
        # mysqlType names a column of ANY precision (lake/definitions.py), not DECIMAL(10,0).
        if kind.this == exp.DataType.Type.DECIMAL:
            return "decimal(10,0)"
        if kind.this == exp.DataType.Type.BIT:
            return "bit(1)"
    text = kind.sql(dialect=dialect).lower()
    return re.sub(r",\s+", ",", text)


def _name(node: exp.Expression | None) -> str:
    if node is None:
        return ""
    if isinstance(node, exp.Identifier):
        return str(node.this)
    if isinstance(node, exp.Column | exp.Table):
        ident = node.this
        return str(ident.this) if isinstance(ident, exp.Identifier) else node.name
    return node.name


def _table(node: exp.Expression | None, default_db: str) -> TableName:
    if not isinstance(node, exp.Table):
        raise _UnmappableError(f"no table name in {node!r:.80}")
    db = node.args.get("db")
    return TableName(_name(db) if db is not None else default_db, _name(node))


class _UnmappableError(Exception):
    """Raised inside the parser; becomes an :class:`Unsupported` operation."""


def _literal_text(node: exp.Expression) -> str | None:
    """A constant default in canal-json text form; raises for anything computed."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return "1" if node.this else "0"
    if isinstance(node, exp.Literal):
        return str(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return f"-{node.this.this}"
    if isinstance(node, exp.Paren):
        return _literal_text(node.this)
    if isinstance(node, exp.Cast):
        return _literal_text(node.this)  # PostgreSQL: 'x'::character varying
    raise _UnmappableError(f"a computed default: {node.sql()}")


_NOW = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentDatetime)


def _default(
    constraints: list[exp.ColumnConstraint], kind: exp.DataType, dialect: Dialect
) -> Default:
    not_null = False
    for c in constraints:
        k = c.args.get("kind")
        if isinstance(k, exp.DefaultColumnConstraint):
            value = k.this
            if isinstance(value, _NOW) or (
                isinstance(value, exp.Anonymous | exp.Func)
                and value.sql().lower().startswith(("now(", "current_timestamp", "localtimestamp"))
            ):
                return Default("current_timestamp")
            try:
                return Default("value", _literal_text(value))
            except _UnmappableError:
                return Default("expression", value.sql(dialect=dialect))
        if isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null"):
            not_null = True
    if not_null and dialect == "mysql":
        return _implicit_default(kind)
    return NULL_DEFAULT


def _implicit_default(kind: exp.DataType) -> Default:
    """MySQL's value for existing rows of a ``NOT NULL`` column added without ``DEFAULT``."""
    name = kind.this.name
    if name in _NUMERIC:
        return Default("value", "0")
    if name in _TEXTUAL:
        return Default("value", "")
    if name == "ENUM" and kind.expressions:
        first = kind.expressions[0]
        return Default("value", str(first.this) if isinstance(first, exp.Literal) else None)
    if name == "JSON":
        return Default("value", "null")
    return NULL_DEFAULT  # dates and times: zero dates, which the lake stores as NULL


def _column_spec(node: exp.ColumnDef, dialect: Dialect) -> ColumnSpec:
    kind = node.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise _UnmappableError(f"column {_name(node.this)} has no type")
    constraints = list(node.args.get("constraints") or [])
    return ColumnSpec(
        _name(node.this), source_type_of(kind, dialect), _default(constraints, kind, dialect)
    )


def _inline_primary_key(node: exp.ColumnDef) -> bool:
    return any(
        isinstance(c.args.get("kind"), exp.PrimaryKeyColumnConstraint)
        for c in node.args.get("constraints") or []
    )


def _create(stmt: exp.Create, default_db: str, dialect: Dialect) -> list[Operation]:
    kind = str(stmt.args.get("kind") or "").upper()
    if kind == "DATABASE" or kind == "SCHEMA":
        return [NoOp(None, f"CREATE {kind}")]
    if kind in ("INDEX", "VIEW", "SEQUENCE", "FUNCTION", "PROCEDURE", "TRIGGER"):
        target = stmt.find(exp.Table)
        table = _table(target, default_db) if target is not None else None
        return [NoOp(table, f"CREATE {kind}")]
    if kind != "TABLE":
        return [Unsupported(None, f"CREATE {kind or '?'} is not mapped")]
    if stmt.args.get("expression") is not None:
        target = stmt.find(exp.Table)
        table = _table(target, default_db) if target is not None else None
        return [Unsupported(table, "CREATE TABLE … AS SELECT is not mapped")]
    schema = stmt.this
    if isinstance(schema, exp.Table):
        like = next(
            (p for p in (stmt.args.get("properties") or exp.Properties()).expressions
             if isinstance(p, exp.LikeProperty)),
            None,
        )  # fmt: skip
        table = _table(schema, default_db)
        if like is None:
            return [Unsupported(table, "CREATE TABLE without columns")]
        return [CreateTable(table, (), (), like=_table(like.this, table.database))]
    if not isinstance(schema, exp.Schema):
        return [Unsupported(None, "CREATE TABLE without a table name")]
    table = _table(schema.this, default_db)
    columns: list[ColumnSpec] = []
    pk: list[str] = []
    for item in schema.expressions:
        if isinstance(item, exp.ColumnDef):
            columns.append(_column_spec(item, dialect))
            if _inline_primary_key(item):
                pk.append(_name(item.this))
        elif isinstance(item, exp.PrimaryKey):
            pk.extend(_name(e.this if isinstance(e, exp.Ordered) else e) for e in item.expressions)
    return [CreateTable(table, tuple(columns), tuple(pk))]


def _alter(stmt: exp.Alter, default_db: str, dialect: Dialect) -> list[Operation]:
    if str(stmt.args.get("kind") or "TABLE").upper() != "TABLE":
        return [NoOp(None, f"ALTER {stmt.args.get('kind')}")]
    table = _table(stmt.this, default_db)
    actions = list(stmt.args.get("actions") or [])
    if not actions:
        return [NoOp(table, "ALTER TABLE options")]  # COMMENT, CHARSET, ENGINE …
    ops: list[Operation] = []
    for action in actions:
        ops.append(_alter_action(table, action, dialect))
    return ops


def _alter_action(table: TableName, action: exp.Expression, dialect: Dialect) -> Operation:
    if isinstance(action, exp.ColumnDef):
        return AddColumn(table, _column_spec(action, dialect))
    if isinstance(action, exp.Drop):
        kind = str(action.args.get("kind") or "").upper()
        if kind == "COLUMN":
            names = [_name(t) for t in action.args.get("tables") or []]
            if len(names) != 1:
                raise _UnmappableError(f"DROP COLUMN of {len(names)} names")
            return DropColumn(table, names[0])
        return NoOp(table, f"DROP {kind or 'constraint'}")
    if isinstance(action, exp.RenameColumn):
        return RenameColumn(table, _name(action.this), _name(action.args.get("to")))
    if isinstance(action, exp.ModifyColumn):
        spec = action.this
        if not isinstance(spec, exp.ColumnDef):
            raise _UnmappableError("MODIFY without a column definition")
        column = _column_spec(spec, dialect)
        old = action.args.get("rename_from")
        if old is not None and _name(old) != column.name:
            return ModifyColumn(table, _name(old), column.source_type, new_name=column.name)
        return ModifyColumn(table, column.name, column.source_type)
    if isinstance(action, exp.AlterColumn):
        dtype = action.args.get("dtype")
        if isinstance(dtype, exp.DataType):
            return ModifyColumn(table, _name(action.this), source_type_of(dtype, dialect))
        # SET/DROP DEFAULT, SET/DROP NOT NULL, visibility: later rows carry their values.
        return NoOp(table, "ALTER COLUMN default or constraint")
    if isinstance(action, exp.AlterRename):
        return RenameTable(table, _table(action.this, table.database))
    if isinstance(action, exp.AddConstraint | exp.IndexColumnConstraint):
        return NoOp(table, "ADD index or constraint")
    if type(action).__name__ in ("RenameIndex", "AlterIndex", "Comment"):
        return NoOp(table, type(action).__name__)
    text = action.sql(dialect=dialect)[:120]
    raise _UnmappableError(f"ALTER TABLE action {text!r} is not mapped")


_RENAME_PAIR = re.compile(r"\s+TO\s+", re.IGNORECASE)


def _rename_command(text: str, default_db: str, dialect: Dialect) -> list[Operation]:
    """MySQL ``RENAME TABLE a TO b [, c TO d]`` (sqlglot keeps it as a Command)."""
    body = re.sub(r"^\s*TABLES?\s+", "", text, flags=re.IGNORECASE)
    ops: list[Operation] = []
    for pair in _split_top_level(body):
        parts = _RENAME_PAIR.split(pair.strip())
        if len(parts) != 2:
            raise _UnmappableError(f"RENAME TABLE {pair!r:.80}")
        old = _table(sqlglot.parse_one(parts[0], into=exp.Table, read=dialect), default_db)
        new = _table(sqlglot.parse_one(parts[1], into=exp.Table, read=dialect), old.database)
        ops.append(RenameTable(old, new))
    return ops


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside quotes (backticks, double quotes)."""
    parts, current, quote = [], [], ""
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "`\"'":
            quote = ch
            current.append(ch)
        elif ch == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _statement(stmt: exp.Expression, default_db: str, dialect: Dialect) -> list[Operation]:
    if isinstance(stmt, exp.Create):
        return _create(stmt, default_db, dialect)
    if isinstance(stmt, exp.Alter):
        return _alter(stmt, default_db, dialect)
    if isinstance(stmt, exp.TruncateTable):
        if stmt.args.get("is_database"):
            return [Unsupported(None, "TRUNCATE DATABASE is not mapped")]
        return [TruncateTable(_table(t, default_db)) for t in stmt.expressions]
    if isinstance(stmt, exp.Drop):
        kind = str(stmt.args.get("kind") or "").upper()
        tables = list(stmt.args.get("tables") or [])
        if kind == "TABLE":
            return [DropTable(_table(t, default_db)) for t in tables]
        if kind in ("DATABASE", "SCHEMA"):
            return [DropDatabase(_name(t)) for t in tables]
        return [NoOp(None, f"DROP {kind}")]
    if isinstance(stmt, exp.Command):
        verb = str(stmt.this).upper()
        text = stmt.expression.this if isinstance(stmt.expression, exp.Literal) else ""
        if verb == "RENAME":
            return _rename_command(str(text), default_db, dialect)
        if verb in ("COMMENT", "ANALYZE", "OPTIMIZE", "GRANT", "REVOKE", "SET"):
            return [NoOp(None, verb)]
        return [Unsupported(None, f"{verb} {str(text)[:80]!r} is not mapped")]
    return [Unsupported(None, f"{stmt.sql(dialect=dialect)[:120]!r} is not mapped")]


def parse_ddl(sql: str, dialect: Dialect, default_database: str) -> list[Operation]:
    """The operations of one DDL statement (or several, ``;``-separated).

    Never raises for bad input: text that does not parse, or parses into something the lake
    cannot map, becomes one :class:`Unsupported` naming why.
    """
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if isinstance(s, exp.Expression)]
    except SqlglotError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Unsupported(None, f"the DDL does not parse as {dialect}: {first[:200]}")]
    ops: list[Operation] = []
    for stmt in statements:
        try:
            ops.extend(_statement(stmt, default_database, dialect))
        except (_UnmappableError, SqlglotError) as exc:
            ops.append(Unsupported(None, str(exc)[:300]))
    return ops or [NoOp(None, "empty statement")]
