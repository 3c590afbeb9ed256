"""A route's view of the stream: which change events it takes and how their rows are shaped.

:class:`RouteSelector` turns one decoded :class:`~tidelake.events.ChangeEvent` into the
:class:`~tidelake.route.change.RowChange` its sink receives, or into nothing:

1. **Tables and operations.** ``tables`` patterns (shell style, matched against
   ``database.table``) and ``ops``. A DDL event becomes a ``schema`` change: its statement
   parsed as the lake parses it (``lake/ddl.py``), keeping the operations on the route's
   tables, their columns renamed, left out and masked as the rows' are; the sink applies it
   in stream order between the rows (a table created, a column added with the value existing
   rows take, renamed, retyped or dropped, a table truncated, renamed or dropped). A statement
   the lake cannot map either is dead-lettered with the reason, as is a rename bringing into
   the route's tables a table it never took.
2. **Condition** (``where``). A SQL condition over the row's columns, parsed once with sqlglot
   and evaluated here (comparisons, ``AND``/``OR``/``NOT``, ``IN``, ``IS [NOT] NULL``,
   ``LIKE``, ``BETWEEN``). Values are compared as numbers when both sides read as numbers,
   else as text (canal-json carries every value as text). An INSERT is taken when its row
   matches; an UPDATE whose new row matches is an upsert, one whose new row does not is a
   delete of its key (the row left the route's set; a key the sink never had changes
   nothing); a DELETE is taken unless its old row is known not to match.
3. **Key.** The event's key, else the route's ``keys`` for the table; without one the event
   is refused (dead-lettered with the reason): a sink applies by key.
4. **Shape.** ``compute`` adds columns from SQL expressions over the source row (exact
   decimal arithmetic, ``||``/``CONCAT``, ``UPPER``/``LOWER``/``TRIM``, ``COALESCE``,
   ``CASE``; the value's text), then ``mask`` (the stage's personal-data functions: keyed HMAC
   or fixed text), ``drop`` and ``rename``. A key column can be renamed, not dropped or
   masked.
5. **Values.** Debezium JSON without schemas carries raw values; they are turned into their
   text form from the column's source type (``formats.debezium.value_text``), and refused
   when the type is unknown. Nothing is rounded or reinterpreted.
"""

from __future__ import annotations

import decimal
import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from tidelake.config import RouteConfig
from tidelake.errors import ConfigError, DecodeError
from tidelake.events import ChangeEvent, Op
from tidelake.formats.debezium import value_text
from tidelake.lake import ddl
from tidelake.route.change import ChangeKind, RowChange
from tidelake.stage.pii import MASKED_TYPE, hash_value, mask_value

#: ``where`` compiled: a function of one row image.
Condition = Callable[[Mapping[str, Any]], bool]


class RouteRefused(DecodeError):  # noqa: N818 -- a reason, dead-lettered
    """An event the route cannot forward (no key, a value without a type): dead-lettered."""


def _parse(text: str, what: str) -> exp.Expr:
    try:
        tree = sqlglot.parse_one(text)
    except sqlglot.errors.ParseError as exc:
        raise ConfigError(f"{what}: not a SQL expression: {text!r}: {exc}") from exc
    _check(tree, text, what)
    return tree


def compile_condition(text: str) -> Condition:
    """``where`` → a function of a row; :class:`ConfigError` for SQL this does not evaluate."""
    tree = _parse(text, "where")
    return lambda row: _truth(_evaluated(tree, row, "where", text))


def compile_expression(text: str, what: str) -> Callable[[Mapping[str, Any]], str | None]:
    """A ``compute`` expression → a function of a row giving the value's text (None: NULL).
    Arithmetic is exact decimal (a quotient has 28 significant digits), ``||``/``CONCAT`` join
    text, ``UPPER``/``LOWER``/``TRIM``, ``COALESCE``, ``CASE WHEN``; :class:`ConfigError` for
    anything else."""
    tree = _parse(text, what)
    return lambda row: _text(_evaluated(tree, row, what, text))


def _evaluated(tree: exp.Expr, row: Mapping[str, Any], what: str, text: str) -> Any:
    """``tree`` on ``row``; a result exact arithmetic cannot give (a product past 200
    digits, say) is :class:`RouteRefused` — the message is dead-lettered, never retried for
    ever nor given a rounded value."""
    try:
        return _eval(tree, row)
    except ArithmeticError as exc:
        raise RouteRefused(f"route: {what} {text!r}: {type(exc).__name__} on this row") from exc


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


_SUPPORTED = (
    exp.And,
    exp.Or,
    exp.Not,
    exp.Paren,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.In,
    exp.Is,
    exp.Like,
    exp.Between,
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Boolean,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.DPipe,
    exp.Concat,
    exp.Upper,
    exp.Lower,
    exp.Trim,
    exp.Coalesce,
    exp.Case,
    exp.If,
)


def _check(tree: exp.Expr, text: str, what: str) -> None:
    for node in tree.walk():
        if not isinstance(node, _SUPPORTED):
            raise ConfigError(
                f"{what}: {type(node).__name__} is not supported in {text!r} (columns, literals, "
                "comparisons, AND, OR, NOT, IN, IS NULL, LIKE, BETWEEN, + - * /, ||, CONCAT, "
                "UPPER, LOWER, TRIM, COALESCE and CASE are)"
            )


def _number(value: Any) -> decimal.Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return decimal.Decimal(str(value).strip())
    except decimal.InvalidOperation:
        return None


def _compare(left: Any, right: Any) -> int | None:
    """-1/0/1, or None when either side is NULL (SQL's unknown)."""
    if left is None or right is None:
        return None
    a, b = _number(left), _number(right)
    if a is not None and b is not None and a.is_finite() and b.is_finite():
        return (a > b) - (a < b)
    x, y = str(left), str(right)
    return (x > y) - (x < y)


#: Exact sums, differences and products of any two values a column holds (DECIMAL(65) at
#: most): an inexact one raises rather than rounds.
_EXACT = decimal.Context(prec=200, traps=[decimal.Inexact, decimal.InvalidOperation])
#: A quotient has 28 significant digits (Python's default context): the one rounded result.
_QUOTIENT = decimal.Context(prec=28)


def _arithmetic(
    node: exp.Expr, a: decimal.Decimal | None, b: decimal.Decimal | None
) -> decimal.Decimal | None:
    """Exact decimal arithmetic; a quotient to 28 significant digits. NULL in, NULL out; a
    division by zero is NULL (MySQL's rule)."""
    if a is None or b is None:
        return None
    if isinstance(node, exp.Add):
        return _EXACT.add(a, b)
    if isinstance(node, exp.Sub):
        return _EXACT.subtract(a, b)
    if isinstance(node, exp.Mul):
        return _EXACT.multiply(a, b)
    return None if b == 0 else _QUOTIENT.divide(a, b)


def _like(value: str, pattern: str) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


def _truth(value: Any) -> bool:
    return value is True


def _eval(node: exp.Expr, row: Mapping[str, Any]) -> Any:
    """SQL three-valued logic: True, False or None (unknown)."""
    if isinstance(node, exp.Paren):
        return _eval(node.this, row)
    if isinstance(node, exp.Column):
        return row.get(node.name)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else decimal.Decimal(node.this)
    if isinstance(node, exp.Neg):
        inner = _number(_eval(node.this, row))
        return None if inner is None else -inner
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div):
        left, right = _eval(node.this, row), _eval(node.expression, row)
        return _arithmetic(node, _number(left), _number(right))
    if isinstance(node, exp.DPipe):
        parts = [_eval(node.this, row), _eval(node.expression, row)]
        return None if None in parts else "".join(_text(p) or "" for p in parts)
    if isinstance(node, exp.Concat):  # MySQL's CONCAT: NULL when any argument is
        parts = [_eval(e, row) for e in node.expressions]
        return None if None in parts else "".join(_text(p) or "" for p in parts)
    if isinstance(node, exp.Upper | exp.Lower | exp.Trim):
        value = _eval(node.this, row)
        if value is None:
            return None
        text = _text(value) or ""
        if isinstance(node, exp.Upper):
            return text.upper()
        return text.lower() if isinstance(node, exp.Lower) else text.strip(" ")
    if isinstance(node, exp.Coalesce):
        for e in (node.this, *node.expressions):
            value = _eval(e, row)
            if value is not None:
                return value
        return None
    if isinstance(node, exp.Case):
        for branch in node.args.get("ifs") or []:
            if _truth(_eval(branch.this, row)):
                return _eval(branch.args["true"], row)
        default = node.args.get("default")
        return None if default is None else _eval(default, row)
    if isinstance(node, exp.Not):
        inner = _eval(node.this, row)
        return None if inner is None else not inner
    if isinstance(node, exp.And):
        a, b = _eval(node.this, row), _eval(node.expression, row)
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if isinstance(node, exp.Or):
        a, b = _eval(node.this, row), _eval(node.expression, row)
        if a is True or b is True:
            return True
        return None if a is None or b is None else False
    if isinstance(node, exp.Is):
        return _eval(node.this, row) is None
    if isinstance(node, exp.In):
        value = _eval(node.this, row)
        results = [_compare(value, _eval(e, row)) for e in node.expressions]
        if any(r == 0 for r in results):
            return True
        return None if any(r is None for r in results) else False
    if isinstance(node, exp.Between):
        low = _compare(_eval(node.this, row), _eval(node.args["low"], row))
        high = _compare(_eval(node.this, row), _eval(node.args["high"], row))
        if low is None or high is None:
            return None
        return low >= 0 and high <= 0
    if isinstance(node, exp.Like):
        value, pattern = _eval(node.this, row), _eval(node.expression, row)
        return None if value is None or pattern is None else _like(str(value), str(pattern))
    cmp = _compare(_eval(node.this, row), _eval(node.expression, row))
    if cmp is None:
        return None
    if isinstance(node, exp.EQ):
        return cmp == 0
    if isinstance(node, exp.NEQ):
        return cmp != 0
    if isinstance(node, exp.GT):
        return cmp > 0
    if isinstance(node, exp.GTE):
        return cmp >= 0
    if isinstance(node, exp.LT):
        return cmp < 0
    if isinstance(node, exp.LTE):
        return cmp <= 0
    raise AssertionError(f"unchecked node {type(node).__name__}")  # _check refuses it


class RouteSelector:
    """One route's tables, operations, condition, key and column shaping."""

    def __init__(self, route: RouteConfig, *, pii_key: bytes | None = None) -> None:
        self.route = route
        self.condition = compile_condition(route.where) if route.where else None
        self.computed = {
            column: compile_expression(text, f"compute.{column}")
            for column, text in route.compute.items()
        }
        self._ops = {Op(o) for o in route.ops}
        if "hash" in route.mask.values() and pii_key is None:
            raise ConfigError("mask: 'hash' needs a key: set TIDELAKE_STAGE__PII_KEY")
        self._pii_key = pii_key
        clash = set(route.drop) & set(route.rename)
        if clash:
            raise ConfigError(f"drop and rename both name {', '.join(sorted(clash))}")

    def takes_table(self, table: str) -> bool:
        return any(fnmatch.fnmatchcase(table, p) for p in self.route.tables)

    def select(self, event: ChangeEvent) -> RowChange | None:
        """The change the sink gets for ``event``, or None when the route does not take it.
        Raises :class:`RouteRefused` for an event it takes but cannot forward."""
        table = event.table_id
        if event.op is Op.DDL:
            return self._schema_change(event)
        if event.op not in self._ops or not self.takes_table(table):
            return None
        after = self._values(event, event.after)
        before = self._values(event, event.before)
        kind: ChangeKind = "delete" if event.op is Op.DELETE else "upsert"
        if self.condition is not None:
            if event.op is Op.INSERT and not self.condition(after or {}):
                return None
            if event.op is Op.UPDATE and not self.condition(after or {}):
                kind = "delete"  # the row left the route's set
            if event.op is Op.DELETE and before is not None and not self.condition(before):
                return None
        image = after if kind == "upsert" else (before or after)
        key = self._key(event, table, image)
        return RowChange(
            table=table,
            kind=kind,
            key=self._shape_key(key),
            row=self._shape(self._compute(image or {}), set(key)) if kind == "upsert" else None,
            position=event.position.encode(),
            seq=event.seq,
            column_types=self._shape_types(event.column_types),
            commit_ts_ms=event.commit_ts_ms,
        )

    # -- DDL

    def _schema_change(self, event: ChangeEvent) -> RowChange | None:
        """A DDL event as the sink sees it: its operations on the route's tables, parsed as
        the lake parses them (``lake/ddl.py``), columns renamed, left out and masked as rows
        are; None when none of it concerns the route. Raises :class:`RouteRefused` for a
        statement the lake cannot map either, or one bringing rows the route never took."""
        ops: list[ddl.Operation] = []
        for op in ddl.parse_ddl(event.ddl or "", ddl.dialect_for(event.source), event.database):
            ops.extend(self._shape_operation(event, op))
        if not ops:
            return None
        return RowChange(
            table=event.table_id,
            kind="schema",
            key={},
            row=None,
            position=event.position.encode(),
            seq=event.seq,
            commit_ts_ms=event.commit_ts_ms,
            operations=tuple(ops),
            statement=event.ddl,
        )

    def _takes_database(self, database: str) -> bool:
        return any(fnmatch.fnmatchcase(database, p.split(".", 1)[0]) for p in self.route.tables)

    def _shape_operation(self, event: ChangeEvent, op: ddl.Operation) -> list[ddl.Operation]:
        """``op`` as the route's sink sees it (none, one or, never more than, one)."""
        statement = (event.ddl or "").strip()[:120]
        if isinstance(op, ddl.NoOp | ddl.CreateDatabase):
            return []
        if isinstance(op, ddl.Unsupported):
            if op.table is not None and not self.takes_table(op.table.table_id):
                return []
            if op.table is None and not self.takes_table(event.table_id):
                return []
            raise RouteRefused(f"route: {event.table_id}: {statement!r}: {op.reason}")
        if isinstance(op, ddl.DropDatabase):
            return [op] if self._takes_database(op.database) else []
        if isinstance(op, ddl.RenameTable):
            source, target = self.takes_table(op.table.table_id), self.takes_table(op.to.table_id)
            if source and target:
                return [op]
            if source:  # the rows leave the route's tables
                return [ddl.DropTable(op.table)]
            if target:
                raise RouteRefused(
                    f"route: {op.to}: {statement!r} renames {op.table}, a table the route does "
                    "not take, into one it takes: the sink never had its rows"
                )
            return []
        if not self.takes_table(op.table.table_id):
            return []
        if isinstance(op, ddl.CreateTable):
            return [
                ddl.CreateTable(
                    op.table,
                    tuple(self._shape_spec(c) for c in op.columns if c.name not in self.route.drop),
                    tuple(self._name(c) for c in op.primary_key),
                    op.like,
                )
            ]
        if isinstance(op, ddl.AddColumn):
            if op.column.name in self.route.drop:
                return []
            return [ddl.AddColumn(op.table, self._shape_spec(op.column))]
        if isinstance(op, ddl.DropColumn):
            if op.name in self.route.drop:
                return []
            return [ddl.DropColumn(op.table, self._name(op.name))]
        if isinstance(op, ddl.RenameColumn | ddl.ModifyColumn):
            old = op.old if isinstance(op, ddl.RenameColumn) else op.name
            new = op.new if isinstance(op, ddl.RenameColumn) else (op.new_name or op.name)
            if old in self.route.drop:
                return []  # the rows bring the new column, if the route keeps it
            if new in self.route.drop:
                return [ddl.DropColumn(op.table, self._name(old))]
            if isinstance(op, ddl.RenameColumn):
                if self._name(old) == self._name(new):
                    return []
                return [ddl.RenameColumn(op.table, self._name(old), self._name(new))]
            renamed = self._name(new) if op.new_name else None
            return [
                ddl.ModifyColumn(
                    op.table,
                    self._name(old),
                    MASKED_TYPE if old in self.route.mask else op.source_type,
                    renamed if renamed != self._name(old) else None,
                )
            ]
        return [op]  # TruncateTable, DropTable

    def _name(self, column: str) -> str:
        return self.route.rename.get(column, column)

    def _shape_spec(self, spec: ddl.ColumnSpec) -> ddl.ColumnSpec:
        method = self.route.mask.get(spec.name)
        if method is None:
            return ddl.ColumnSpec(self._name(spec.name), spec.source_type, spec.default)
        default = spec.default
        if default.kind == "value" and default.text is not None:
            default = ddl.Default("value", self._mask(method, default.text))
        elif default.kind != "value":
            default = ddl.Default("expression", "masked")  # its values are masked per row
        return ddl.ColumnSpec(self._name(spec.name), MASKED_TYPE, default)

    # -- parts

    def _values(self, event: ChangeEvent, image: dict[str, Any] | None) -> dict[str, Any] | None:
        if image is None or event.encoding != "debezium-json":
            return image
        connector = event.source.removeprefix("debezium-")
        out: dict[str, Any] = {}
        for column, value in image.items():
            source_type = event.column_types.get(column)
            if source_type is None:
                if value is None:
                    out[column] = None
                    continue
                raise RouteRefused(
                    f"route: {event.table_id}.{column}: Debezium JSON without schemas and no "
                    "source type for the column: its value cannot be written exactly"
                )
            try:
                out[column] = value_text(value, source_type, connector)
            except ValueError as exc:
                raise RouteRefused(f"route: {event.table_id}.{column}: {exc}") from exc
        return out

    def _key(self, event: ChangeEvent, table: str, image: dict[str, Any] | None) -> dict[str, Any]:
        if event.key:
            return dict(event.key)
        columns = self.route.keys.get(table) or list(event.pk)
        if columns and image is not None and all(image.get(c) is not None for c in columns):
            return {c: image[c] for c in columns}
        raise RouteRefused(
            f"route: {table}: the event names no primary key; set routes.<name>.keys for the table"
        )

    def _shape_key(self, key: dict[str, Any]) -> dict[str, Any]:
        for column in key:
            if column in self.route.drop or column in self.route.mask:
                raise RouteRefused(
                    f"route: key column {column} is dropped or masked: the sink applies by key"
                )
        return {self.route.rename.get(c, c): v for c, v in key.items()}

    def _shape(self, row: Mapping[str, Any], key_columns: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column, value in row.items():
            if column in self.route.drop:
                continue
            method = self.route.mask.get(column)
            if method is not None and value is not None and column not in key_columns:
                value = self._mask(method, value)
            out[self.route.rename.get(column, column)] = value
        return out

    def _compute(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row with the ``compute`` columns added, each from the source row's values."""
        if not self.computed:
            return row
        return {**row, **{column: fn(row) for column, fn in self.computed.items()}}

    def _mask(self, method: str, value: Any) -> str:
        if method == "hash":
            assert self._pii_key is not None  # checked in __init__
            return hash_value(self._pii_key, value)
        return mask_value(value)

    def _shape_types(self, types: Mapping[str, str]) -> dict[str, str]:
        shaped = {
            self.route.rename.get(c, c): (MASKED_TYPE if c in self.route.mask else t)
            for c, t in types.items()
            if c not in self.route.drop
        }
        # A computed value is its text: a sink stores it as text.
        return shaped | {self.route.rename.get(c, c): "text" for c in self.computed}
