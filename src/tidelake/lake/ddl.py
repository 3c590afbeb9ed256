"""DDL text → schema operations for the lake (docs/architecture.md §5). Never executed: only parsed.

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
  ``CREATE DATABASE`` → :class:`CreateDatabase`; ``DROP DATABASE`` → :class:`DropDatabase`;
* indexes, comments, defaults of future rows, character sets, TiFlash replicas, placement,
  partitioning that keeps every row, views, sequences and the like → :class:`NoOp` (they
  change nothing the lake stores);
* anything else, or text that does not parse → :class:`Unsupported`, which pauses the table
  (``TRUNCATE/DROP/EXCHANGE PARTITION`` and ``RECOVER/FLASHBACK TABLE`` among them: they
  remove or bring back rows the lake cannot tell apart; a primary-key change, since the key
  is the lake table's record key).

MySQL-dialect text is first normalised for what TiCDC sends (:func:`normalize_mysql`: the
TiDB parser's restored SQL, with charset introducers and ``/*T![…] */`` comments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from tidelake import names

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
        return names.table_id(self.database, self.table)

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
class CreateDatabase:
    """``CREATE DATABASE``: the lake's catalog gets the database, empty until tables come."""

    database: str


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
    | CreateDatabase
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


#: Types whose canal-json text is one ISO-8859-1 character per byte (BIT: its number).
_BYTES = frozenset({"BINARY", "VARBINARY", "BLOB", "TINYBLOB", "MEDIUMBLOB", "LONGBLOB"})


def _bytes_text(raw: bytes, kind: exp.DataType) -> str:
    """A hex or bit literal as the column's canal-json text: MySQL reads such a literal as a
    binary string, and as an unsigned integer in a numeric column."""
    name = kind.this.name
    if name in _BYTES:
        return raw.decode("latin-1")
    if name in _NUMERIC:
        return str(int.from_bytes(raw, "big"))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _UnmappableError(f"the bytes {raw.hex()} are no text of a {name} column") from exc


def _literal_text(node: exp.Expression, kind: exp.DataType) -> str | None:
    """A constant default in the column's canal-json text form; raises for anything computed."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return "1" if node.this else "0"
    if isinstance(node, exp.HexString):
        return _bytes_text(bytes.fromhex(str(node.this)), kind)
    if isinstance(node, exp.BitString):
        bits = str(node.this) or "0"
        if kind.this.name in _NUMERIC:
            return str(int(bits, 2))
        return _bytes_text(int(bits, 2).to_bytes((len(bits) + 7) // 8, "big"), kind)
    if isinstance(node, exp.Literal):
        text = str(node.this)
        if node.is_string and kind.this.name in _BYTES:
            return text.encode("utf-8").decode("latin-1")  # a text literal's bytes are UTF-8
        return text
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return f"-{node.this.this}"
    if isinstance(node, exp.Paren | exp.Collate):
        return _literal_text(node.this, kind)  # ('x'), 'x' COLLATE utf8mb4_bin
    if isinstance(node, exp.Cast):
        return _literal_text(node.this, kind)  # PostgreSQL: 'x'::character varying
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
                return Default("value", _literal_text(value, kind))
            except _UnmappableError:
                return Default("expression", value.sql(dialect=dialect))
        if isinstance(k, exp.ComputedColumnConstraint):
            # A generated column: existing rows hold values the source computes per row.
            return Default("expression", k.sql(dialect=dialect))
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
        return [CreateDatabase(_name(stmt.this))]
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


# --- TiDB's restored SQL → text sqlglot parses ---------------------------------------------
#
# TiCDC does not send the statement the user typed: its owner re-parses the DDL job's query
# and restores it (pingcap/tiflow cdc/owner/ddl_sink.go, ddlSinkImpl.addSpecialComment) with
# RestoreTiDBSpecialComment | RestoreNameBackQuotes | RestoreKeyWordUppercase |
# RestoreStringSingleQuotes | SkipPlacementRuleForRestore | RestoreWithTTLEnableOff, and
# without RestoreStringWithoutCharset. So string literals carry their charset introducer
# (ValueExpr.Restore, pingcap/tidb pkg/types/parser_driver/value_expr.go: ``_UTF8MB4'new'``),
# TiDB-only features sit in ``/*T![feature] … */`` comments, ``RENAME AS`` names the new table
# and placement-only statements restore to nothing at all. :func:`normalize_mysql` turns that
# text into what sqlglot's MySQL dialect reads, and :func:`_pre_classify` decides the
# statements and ALTER TABLE actions sqlglot does not know (TiFlash replicas, partitions,
# placement policies, views with options, RECOVER/FLASHBACK …).

#: Charsets TiDB knows (pkg/parser/charset): a ``_name'…'`` prefix is an introducer.
_INTRODUCERS = frozenset({"utf8mb4", "utf8", "binary", "latin1", "ascii", "gbk", "gb18030"})
_INTRODUCER = re.compile(r"(?<![\w$])_([A-Za-z0-9]+)$")


def _lex(sql: str) -> list[tuple[str, str]]:
    """``sql`` as ``(kind, text)`` pieces: ``quoted`` (a whole '…', "…" or `…` token with
    its delimiters), ``comment`` (``/*…*/`` or ``-- …``) and ``code`` (the rest)."""
    pieces: list[tuple[str, str]] = []
    code: list[str] = []
    i, n = 0, len(sql)

    def flush() -> None:
        if code:
            pieces.append(("code", "".join(code)))
            code.clear()

    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\" and ch != "`":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:  # a doubled delimiter is one character
                        j += 2
                        continue
                    break
                j += 1
            flush()
            pieces.append(("quoted", sql[i : j + 1]))
            i = j + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            j = n if end < 0 else end + 2
            flush()
            pieces.append(("comment", sql[i:j]))
            i = j
        elif sql.startswith("-- ", i) or sql.startswith("--\t", i):
            end = sql.find("\n", i)
            j = n if end < 0 else end
            flush()
            pieces.append(("comment", sql[i:j]))
            i = j
        else:
            code.append(ch)
            i += 1
    flush()
    return pieces


def _unquote_string(token: str) -> str:
    """The value of a MySQL single-quoted string token (``''`` and backslash escapes)."""
    body, out, i = token[1:-1], [], 0
    escapes = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append(escapes.get(nxt, nxt))
            i += 2
        elif ch == "'" and body[i + 1 : i + 2] == "'":
            out.append("'")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def normalize_mysql(sql: str) -> str:
    """MySQL/TiDB DDL text with what sqlglot cannot read taken out, its meaning kept.

    * TiDB feature comments ``/*T! … */`` and ``/*T![feature] … */`` are dropped. TiDB runs
      their content, but every feature TiCDC wraps so (clustered_index, auto_rand,
      auto_rand_base, auto_id_cache, force_inc, pre_split, ttl, placement, SHARD_ROW_ID_BITS,
      PRE_SPLIT_REGIONS) sets how TiDB stores or schedules a table, never its columns or rows.
      Plain comments go too; MySQL's executable ``/*!NNNNN … */`` comments stay (sqlglot
      reads them).
    * A charset introducer is dropped: ``_UTF8MB4'new'`` is the literal ``'new'``;
      ``_BINARY'…'`` becomes the hex literal of its bytes (the literal is bytes, not text).
    """
    out: list[str] = []
    for kind, text in _lex(sql):
        if kind == "comment":
            out.append(text if text.startswith("/*!") else " ")
            continue
        if kind == "quoted" and text[0] == "'" and out:
            m = _INTRODUCER.search(out[-1])
            if m and m.group(1).lower() in _INTRODUCERS:
                out[-1] = out[-1][: m.start()]
                if m.group(1).lower() == "binary":
                    text = "x'" + _unquote_string(text).encode("utf-8").hex() + "'"
        out.append(text)
    return "".join(out)


def _mask(sql: str) -> str:
    """``sql`` with the inside of every quoted token blanked (same length): regular
    expressions and parenthesis matching on it never look into a literal or a name."""
    out = []
    for kind, text in _lex(sql):
        if kind == "quoted" and len(text) >= 2:
            out.append(text[0] + "_" * (len(text) - 2) + text[-1])
        else:
            out.append(text)
    return "".join(out)


def _split_top(
    masked: str, sep: str, start: int = 0, end: int | None = None
) -> list[tuple[int, int]]:
    """``(start, end)`` spans of ``masked[start:end]`` between ``sep`` outside parentheses."""
    end = len(masked) if end is None else end
    spans, depth, begin = [], 0, start
    for i in range(start, end):
        ch = masked[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            spans.append((begin, i))
            begin = i + 1
    spans.append((begin, end))
    return spans


def _closing_paren(masked: str, opening: int) -> int:
    depth = 0
    for i in range(opening, len(masked)):
        if masked[i] == "(":
            depth += 1
        elif masked[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise _UnmappableError("unbalanced parentheses")


_FLAGS = re.IGNORECASE | re.VERBOSE
_NAME = r"(?:`[^`]*`|[\w$]+)(?:\s*\.\s*(?:`[^`]*`|[\w$]+))?"

#: Whole statements sqlglot does not read, by what they do to the lake (checked in order).
_STATEMENTS: tuple[tuple[re.Pattern[str], bool, str], ...] = tuple(
    (re.compile(pattern, _FLAGS), noop, what)
    for pattern, noop, what in (
        (r"^\s*$", True, "empty statement (TiCDC restores a placement-only DDL to nothing)"),
        (r"^(ALTER)\s+(DATABASE|SCHEMA)\b", True, "ALTER DATABASE"),
        (r"^(CREATE|ALTER|DROP)\s+PLACEMENT\s+POLICY\b", True, "PLACEMENT POLICY"),
        (r"^(CREATE|ALTER|DROP)\s+RESOURCE\s+GROUP\b", True, "RESOURCE GROUP"),
        (r"^(CREATE|ALTER|DROP)\s+SEQUENCE\b", True, "SEQUENCE"),
        (
            r"^CREATE\s+(OR\s+REPLACE\s+)?(ALGORITHM\s*=\s*\w+\s+)?(DEFINER\s*=\s*\S+\s+)?"
            r"(SQL\s+SECURITY\s+\w+\s+)?VIEW\b",
            True,
            "CREATE VIEW",
        ),
        (r"^DROP\s+VIEW\b", True, "DROP VIEW"),
        (r"^(LOCK|UNLOCK)\s+TABLES?\b", True, "LOCK TABLES"),
        (
            r"^(RECOVER|FLASHBACK)\s+TABLE\b",
            False,
            "RECOVER/FLASHBACK TABLE brings back a dropped or truncated table with its rows, "
            "which the lake no longer holds",
        ),
        (
            r"^FLASHBACK\s+(DATABASE|SCHEMA|CLUSTER)\b",
            False,
            "FLASHBACK puts back rows and tables of an earlier time, which the lake cannot know",
        ),
        (r"^ADMIN\s+REPAIR\s+TABLE\b", False, "ADMIN REPAIR TABLE rewrites table metadata"),
    )
)

_PARTITION_ROWS = re.compile(r"^(TRUNCATE|DROP|EXCHANGE)\s+PARTITION\b", _FLAGS)
_KEY_CHANGE = re.compile(
    r"^(ADD\s+(CONSTRAINT\s+\S+\s+)?PRIMARY\s+KEY|DROP\s+PRIMARY\s+KEY)\b", _FLAGS
)
#: ALTER TABLE actions that change nothing the lake stores (after _PARTITION_ROWS/_KEY_CHANGE).
_NOOP_ACTION = re.compile(
    r"""^(
      SET\s+TIFLASH\s+REPLICA
    | (ADD|REORGANIZE|COALESCE|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR)\s+PARTITION
    | REMOVE\s+PARTITIONING | PARTITION\s+BY | PARTITIONS\b | PARTITION\s+\S+\s+
    | CACHE | NOCACHE | FORCE | LOCK\b | ALGORITHM\b | WITH(OUT)?\s+VALIDATION
    | CONVERT\s+TO\s+(CHARACTER\s+SET|CHARSET)
    | (DEFAULT\s+)?(CHARACTER\s+SET|CHARSET|COLLATE)\b
    | (ENGINE|COMMENT|AUTO_INCREMENT|AUTO_RANDOM_BASE|AUTO_ID_CACHE|SHARD_ROW_ID_BITS
       |PRE_SPLIT_REGIONS|ROW_FORMAT|KEY_BLOCK_SIZE|STATS_\w+|CHECKSUM|DELAY_KEY_WRITE
       |PACK_KEYS|AVG_ROW_LENGTH|MAX_ROWS|MIN_ROWS|COMPRESSION|ENCRYPTION|INSERT_METHOD
       |TTL\w*|PLACEMENT|ATTRIBUTES|SECONDARY_ENGINE\w*|SECONDARY_(UN)?LOAD|UNION|TABLESPACE
       |STORAGE|DATA\s+DIRECTORY|INDEX\s+DIRECTORY|PAGE_CHECKSUM|TRANSACTIONAL)\b
    | ADD\s+(INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|VECTOR|COLUMNAR|CONSTRAINT|FOREIGN\s+KEY|CHECK)\b
    | DROP\s+(INDEX|KEY|FOREIGN\s+KEY|CHECK|CONSTRAINT)\b
    | ALTER\s+(INDEX|CHECK|CONSTRAINT)\b
    | RENAME\s+(INDEX|KEY)\b
    | ALTER\s+(COLUMN\s+)?\S+\s+(SET|DROP)\s+(DEFAULT|VISIBLE|INVISIBLE)\b
    | ORDER\s+BY | (ENABLE|DISABLE)\s+KEYS
    )""",
    _FLAGS,
)
_ADD_COLUMNS = re.compile(r"^ADD\s+(COLUMN\s+)?(IF\s+NOT\s+EXISTS\s+)?\(", _FLAGS)
_NOT_A_COLUMN = re.compile(
    r"^(INDEX|KEY|UNIQUE|PRIMARY|FULLTEXT|SPATIAL|VECTOR|CONSTRAINT|FOREIGN|CHECK)\b", _FLAGS
)
_IF_EXISTS = re.compile(r"^(MODIFY|CHANGE)(\s+COLUMN)?\s+IF\s+EXISTS\b", _FLAGS)
_RENAME_AS = re.compile(r"^RENAME\s+AS\b", _FLAGS)
_ALTER_TABLE = re.compile(rf"^ALTER\s+(ONLINE\s+|OFFLINE\s+|IGNORE\s+)?TABLE\s+({_NAME})", _FLAGS)
_CREATE_TABLE = re.compile(
    rf"^CREATE\s+(GLOBAL\s+|LOCAL\s+)?(TEMPORARY\s+)?TABLE\s+(IF\s+NOT\s+EXISTS\s+)?{_NAME}\s*\(",
    _FLAGS,
)


def _table_of(name: str, default_db: str) -> TableName:
    return _table(sqlglot.parse_one(name, into=exp.Table, read="mysql"), default_db)


def _pre_classify(text: str, default_db: str) -> list[Operation] | str:
    """One MySQL/TiDB statement (normalised): its operations when decided here, else the
    text to give sqlglot (ALTER TABLE without its no-op actions, CREATE TABLE without its
    table options)."""
    masked = _mask(text)
    lead = masked.lstrip()
    offset = len(masked) - len(lead)
    for pattern, noop, what in _STATEMENTS:
        if pattern.search(lead):
            return [NoOp(None, what) if noop else Unsupported(None, what)]
    m = _CREATE_TABLE.match(lead)
    if m:
        close = _closing_paren(masked, offset + m.end() - 1)
        rest = masked[close + 1 :]
        if not re.search(r"\b(SELECT|AS|LIKE)\b", rest, re.IGNORECASE):
            # Table options and partitioning: how the source stores the table, not its columns.
            return text[: close + 1]
        return text
    m = _ALTER_TABLE.match(lead)
    if not m:
        return text
    head_end = offset + m.end()
    table = _table_of(text[offset + m.start(2) : head_end], default_db)
    if re.match(r"\s*SET\s+TIFLASH\s+REPLICA\b", masked[head_end:], re.IGNORECASE):
        # A statement of its own (LOCATION LABELS 'a', 'b' has commas of its own).
        return [NoOp(table, "SET TIFLASH REPLICA")]
    kept: list[str] = []
    skipped: list[str] = []
    for start, end in _split_top(masked, ",", head_end):
        action, shown = masked[start:end].strip(), text[start:end].strip()
        if not action:
            continue
        if _PARTITION_ROWS.match(action):
            return [Unsupported(table, f"{shown[:80]!r} removes or swaps the rows of partitions, "
                                       "which the lake cannot tell apart")]  # fmt: skip
        if _KEY_CHANGE.match(action):
            return [Unsupported(table, f"{shown[:80]!r} changes the primary key, which is the "
                                       "lake table's record key")]  # fmt: skip
        passed = _NOOP_ACTION.match(action)
        if passed:
            skipped.append(" ".join(re.sub(r"`_*`", "", passed.group(0)).split()).upper())
            continue
        if _ADD_COLUMNS.match(action):
            # ADD COLUMN (a INT, b INT, INDEX …): one ADD per element (TiDB's restore keeps
            # the parenthesised form of ActionAddColumns / a multi-schema change).
            inner_open = start + (len(masked[start:end]) - len(masked[start:end].lstrip()))
            inner_open = masked.index("(", inner_open)
            inner_close = _closing_paren(masked, inner_open)
            for s, e in _split_top(masked, ",", inner_open + 1, inner_close):
                element = text[s:e].strip()
                if element and not _NOT_A_COLUMN.match(masked[s:e].strip()):
                    kept.append(f"ADD COLUMN {element}")
            continue
        if _IF_EXISTS.match(action):
            shown = re.sub(r"\s+IF\s+EXISTS\b", "", shown, count=1, flags=re.IGNORECASE)
        elif _RENAME_AS.match(action):
            shown = re.sub(r"^RENAME\s+AS\b", "RENAME TO", shown, flags=re.IGNORECASE)
        kept.append(shown)
    if not kept:
        return [NoOp(table, ", ".join(skipped) if skipped else "ALTER TABLE options")]
    return text[:head_end] + " " + ", ".join(kept)


def _statements(sql: str) -> list[str]:
    """``sql`` split into statements at ``;`` outside literals and comments."""
    masked = _mask(sql)
    return [sql[s:e] for s, e in _split_top(masked, ";")]


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

    MySQL-dialect text (TiDB through TiCDC, MySQL, MariaDB) is normalised first
    (:func:`normalize_mysql`) and the statements sqlglot does not know are decided by
    :func:`_pre_classify`. Never raises for bad input: text that does not parse, or parses
    into something the lake cannot map, becomes one :class:`Unsupported` naming why.
    """
    if dialect != "mysql":
        return _parse(sql, dialect, default_database)
    texts = [t for t in _statements(normalize_mysql(sql)) if t.strip()] or [""]
    ops: list[Operation] = []
    for text in texts:
        try:
            decided = _pre_classify(text, default_database)
        except (_UnmappableError, SqlglotError) as exc:
            ops.append(Unsupported(None, str(exc)[:300]))
            continue
        ops.extend(
            decided if isinstance(decided, list) else _parse(decided, "mysql", default_database)
        )
    return ops


def _parse(sql: str, dialect: Dialect, default_database: str) -> list[Operation]:
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
