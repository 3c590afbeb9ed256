"""A view's SQL, read into the parts its incremental upkeep works with (docs/views.md §2).

A view is one ``SELECT`` over one lake table, or over two joined by an inner or left equi-join
(``ON a.x = b.y [AND …]``): plain columns in ``GROUP BY`` (the view's key), ``COUNT(*)`` and
``COUNT``/``SUM``/``MIN``/``MAX`` of a column, an optional ``WHERE``. Those are the shapes whose
new value follows from the old value and the changed rows alone (count and sum by adding and
taking away; min and max by comparing, and by reading the group again when its extreme itself
goes; a join's changed rows are those whose join key changed on either side). Anything else is
refused here with the reason, before a view table is made: a right, full or cross join, more
than one join, ``DISTINCT``, ``HAVING``, a window, a subquery, an expression as a key.

The upkeep works on the view's **input rows**: the base table's rows, or for a join the joined
rows, whose columns are named ``<alias>__<column>`` (every column of a join view is written
with its table's alias, or its name without one). :attr:`ViewDefinition.flat_sql` is the
aggregate over those rows.

The SQL is Spark SQL: a full recomputation (``rebuild``, ``verify``) runs it as written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from tidelake import names

DIALECT = "spark"
#: The aggregates the upkeep maintains, by sqlglot node.
_AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
}


class ViewDefinitionError(ValueError):
    """The view's SQL is not a shape tidelake can keep up to date incrementally."""


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate output column: ``func`` of ``column`` (None: ``COUNT(*)``)."""

    alias: str
    func: str
    column: str | None


@dataclass(frozen=True, slots=True)
class Output:
    """One output column in SELECT order: a group column or an aggregate."""

    alias: str
    group: str | None = None
    aggregate: Aggregate | None = None


@dataclass(frozen=True, slots=True)
class Side:
    """One table of a join view: ``db.table``, the qualifier its columns carry in the SQL, and
    the columns the view reads from it (join columns first)."""

    table: str
    alias: str
    columns: tuple[str, ...]

    def flat(self, column: str) -> str:
        """The name of ``column`` among the view's input rows."""
        return flat_name(self.alias, column)


@dataclass(frozen=True, slots=True)
class Join:
    """``left [INNER|LEFT] JOIN right ON left.l1 = right.r1 AND …``."""

    kind: str  # "inner" or "left"
    left: Side
    right: Side
    #: (left column, right column) pairs of the equi-join, in ON order.
    on: tuple[tuple[str, str], ...]

    @property
    def sides(self) -> tuple[Side, Side]:
        return (self.left, self.right)

    def keys(self, side: Side) -> tuple[str, ...]:
        """``side``'s join columns, in ON order."""
        return tuple(pair[0 if side is self.left else 1] for pair in self.on)


def flat_name(alias: str, column: str) -> str:
    return f"{alias}__{column}"


@dataclass(frozen=True, slots=True)
class ViewDefinition:
    """The parts of a view's SELECT (see the module docstring)."""

    name: str
    sql: str
    #: The lake table read (a join view's left table), ``db.table``.
    table: str
    #: Input-row columns (see the module docstring).
    groups: tuple[str, ...]
    outputs: tuple[Output, ...]
    #: The WHERE condition in Spark SQL over input-row columns; None without one.
    where: str | None
    #: The aggregate in Spark SQL over :data:`INPUT` (the input rows), without hidden columns.
    flat_sql: str
    join: Join | None = None

    @property
    def tables(self) -> tuple[str, ...]:
        """Every lake table the view reads, the FROM table first."""
        return (self.table,) if self.join is None else (self.table, self.join.right.table)

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        return tuple(o.aggregate for o in self.outputs if o.aggregate is not None)

    @property
    def columns(self) -> tuple[str, ...]:
        """The input-row columns the view reads: keys, aggregate inputs, WHERE columns."""
        seen = dict.fromkeys(self.groups)
        seen.update(dict.fromkeys(a.column for a in self.aggregates if a.column))
        if self.where:
            condition = sqlglot.parse_one(self.where, read=DIALECT)
            seen.update(dict.fromkeys(c.name for c in condition.find_all(exp.Column)))
        return tuple(seen)

    @property
    def fingerprint(self) -> str:
        """Changes with the meaning of the SQL, not with its spacing or case of keywords:
        a view whose fingerprint differs from its table's is rebuilt."""
        canonical = sqlglot.parse_one(self.sql, read=DIALECT).sql(dialect=DIALECT)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def group_outputs(self) -> tuple[str, ...]:
        """The output column of each GROUP BY column, in GROUP BY order."""
        by_group = {o.group: o.alias for o in self.outputs if o.group is not None}
        return tuple(by_group[g] for g in self.groups)

    @property
    def has_extremes(self) -> bool:
        return any(a.func in ("min", "max") for a in self.aggregates)


def parse_view(name: str, sql: str) -> ViewDefinition:
    """Read ``sql`` into a :class:`ViewDefinition`, or raise :class:`ViewDefinitionError`."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except sqlglot.errors.ParseError as exc:
        raise ViewDefinitionError(f"view {name}: not valid SQL: {exc}") from exc
    if not isinstance(tree, exp.Select):
        raise ViewDefinitionError(f"view {name}: a view is one SELECT")
    for node, what in (
        (tree.args.get("distinct"), "DISTINCT"),
        (tree.args.get("having"), "HAVING"),
        (tree.args.get("order"), "ORDER BY"),
        (tree.args.get("limit"), "LIMIT"),
        (tree.args.get("with"), "WITH"),
    ):
        if node:
            raise ViewDefinitionError(f"view {name}: {what} is not maintained incrementally")
    if tree.find(exp.Window):
        raise ViewDefinitionError(f"view {name}: a window function is not maintained")
    if any(isinstance(s, exp.Subquery) or s is not tree for s in tree.find_all(exp.Select)):
        raise ViewDefinitionError(f"view {name}: a subquery is not maintained")
    table, alias = _table(name, tree)
    join = _join(name, tree, table, alias) if tree.args.get("joins") else None
    flat = _flat(name, tree, join)
    groups = _groups(name, flat)
    outputs = tuple(_output(name, item, groups) for item in flat.expressions)
    if not groups:
        raise ViewDefinitionError(
            f"view {name}: GROUP BY is required (its columns are the view's key)"
        )
    if not any(o.aggregate for o in outputs):
        raise ViewDefinitionError(f"view {name}: no aggregate (COUNT, SUM, MIN, MAX)")
    missing = [g for g in groups if g not in {o.group for o in outputs}]
    if missing:
        shown = ", ".join(_shown(g, join) for g in missing)
        raise ViewDefinitionError(
            f"view {name}: GROUP BY column(s) {shown} must be selected too "
            "(they are the view's key)"
        )
    aliases = [o.alias for o in outputs]
    if len(set(aliases)) != len(aliases):
        raise ViewDefinitionError(f"view {name}: two output columns share a name")
    if any(a.startswith("_tl_") or a.startswith("_hoodie") for a in aliases):
        raise ViewDefinitionError(f"view {name}: output names _tl_* and _hoodie* are reserved")
    where_node = flat.args.get("where")
    where = None
    if where_node is not None:
        if where_node.this.find(exp.AggFunc):
            raise ViewDefinitionError(f"view {name}: an aggregate in WHERE")
        where = where_node.this.sql(dialect=DIALECT)
    if join is not None:
        join = _with_columns(join, flat)
    return ViewDefinition(name, sql, table, groups, outputs, where, flat.sql(dialect=DIALECT), join)


#: The name the input rows go by in :attr:`ViewDefinition.flat_sql`.
INPUT = "tl_view_input"


def _flat(name: str, tree: exp.Select, join: Join | None) -> exp.Select:
    """The SELECT over :data:`INPUT`: columns unqualified (one table) or named
    ``<alias>__<column>`` (a join), a bare output column keeping its name."""
    flat = tree.copy()
    flat.set("joins", None)
    for item in list(flat.expressions):
        if isinstance(item, exp.Column) and join is not None:
            item.replace(exp.alias_(item.copy(), item.name))
    aliases = {} if join is None else {s.alias: s for s in join.sides}
    for column in flat.find_all(exp.Column):
        if join is not None:
            side = aliases.get(column.table)
            if side is None:
                raise ViewDefinitionError(
                    f"view {name}: write {column.sql(dialect=DIALECT)} with its table's alias "
                    f"({' or '.join(sorted(aliases))}): a join view names every column's table"
                )
            column.set("this", exp.to_identifier(side.flat(column.name)))
        column.set("table", None)
        column.set("db", None)
    next(flat.find_all(exp.Table)).replace(exp.to_table(INPUT))
    return flat


def _join(name: str, tree: exp.Select, left_table: str, left_alias: str) -> Join:
    joins = tree.args["joins"]
    if len(joins) != 1:
        raise ViewDefinitionError(f"view {name}: one join at most is maintained")
    node = joins[0]
    side, kind = (node.side or "").upper(), (node.kind or "").upper()
    if node.args.get("method") or node.args.get("using") or kind in ("CROSS", "SEMI", "ANTI"):
        raise ViewDefinitionError(
            f"view {name}: only an INNER or LEFT join ON equal columns is maintained"
        )
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER"):
        raise ViewDefinitionError(
            f"view {name}: a {side or kind} join is not maintained (INNER or LEFT)"
        )
    right = node.this
    if not isinstance(right, exp.Table) or not right.db:
        raise ViewDefinitionError(
            f"view {name}: JOIN names one lake table with its database (db.table)"
        )
    right_table = names.table_id(right.db, right.name)
    right_alias = right.alias or right.name
    if right_table == left_table:
        raise ViewDefinitionError(f"view {name}: a table joined to itself is not maintained")
    if right_alias == left_alias:
        raise ViewDefinitionError(f"view {name}: give the two tables different aliases")
    on = node.args.get("on")
    if on is None:
        raise ViewDefinitionError(f"view {name}: a join needs ON (equal columns)")
    pairs = []
    conditions: list[Any] = list(on.flatten()) if isinstance(on, exp.And) else [on]
    for condition in conditions:
        sides = _equal_columns(condition)
        if sides is None:
            raise ViewDefinitionError(
                f"view {name}: ON {condition.sql(dialect=DIALECT)} is not maintained: ON "
                "compares columns of the two tables for equality, joined by AND"
            )
        by_alias = {c.table: c.name for c in sides}
        if set(by_alias) != {left_alias, right_alias}:
            raise ViewDefinitionError(
                f"view {name}: ON {condition.sql(dialect=DIALECT)} must compare a column of "
                f"{left_alias} with one of {right_alias}"
            )
        pairs.append((str(by_alias[left_alias]), str(by_alias[right_alias])))
    left = Side(left_table, left_alias, ())
    joined = Side(right_table, right_alias, ())
    return Join("left" if side == "LEFT" else "inner", left, joined, tuple(pairs))


def _equal_columns(condition: exp.Expression) -> tuple[exp.Column, exp.Column] | None:
    if not isinstance(condition, exp.EQ):
        return None
    a, b = condition.this, condition.expression
    if isinstance(a, exp.Column) and isinstance(b, exp.Column) and a.table and b.table:
        return (a, b)
    return None


def _with_columns(join: Join, flat: exp.Select) -> Join:
    """``join`` with each side's columns: its join columns, then the others the view reads."""
    used = [c.name for c in flat.find_all(exp.Column)]
    sides = []
    for side in join.sides:
        wanted = dict.fromkeys(join.keys(side))
        prefix = flat_name(side.alias, "")
        wanted.update(dict.fromkeys(u[len(prefix) :] for u in used if u.startswith(prefix)))
        sides.append(Side(side.table, side.alias, tuple(wanted)))
    return Join(join.kind, sides[0], sides[1], join.on)


def _shown(column: str, join: Join | None) -> str:
    """An input-row column as the SQL wrote it."""
    if join is not None:
        for side in join.sides:
            prefix = flat_name(side.alias, "")
            if column.startswith(prefix):
                return f"{side.alias}.{column[len(prefix) :]}"
    return column


def _table(name: str, tree: exp.Select) -> tuple[str, str]:
    """The FROM table (``db.table``) and the qualifier of its columns."""
    source = tree.args.get("from_") or tree.args.get("from")
    tables = list(tree.find_all(exp.Table))
    expected = 1 + len(tree.args.get("joins") or ())
    if source is None or len(tables) != expected or not isinstance(source.this, exp.Table):
        raise ViewDefinitionError(f"view {name}: FROM names exactly one lake table (db.table)")
    table = source.this
    if not table.db:
        raise ViewDefinitionError(
            f"view {name}: name the table with its database (db.{table.name})"
        )
    return names.table_id(table.db, table.name), table.alias or table.name


def _column_name(name: str, node: exp.Expression, where: str) -> str:
    if not isinstance(node, exp.Column):
        raise ViewDefinitionError(
            f"view {name}: {where} must be a plain column, not {node.sql(dialect=DIALECT)}"
        )
    return str(node.name)


def _groups(name: str, tree: exp.Select) -> tuple[str, ...]:
    group = tree.args.get("group")
    if group is None:
        return ()
    return tuple(_column_name(name, g, "a GROUP BY item") for g in group.expressions)


def _output(name: str, item: exp.Expression, groups: tuple[str, ...]) -> Output:
    alias = item.alias_or_name
    inner = item.this if isinstance(item, exp.Alias) else item
    if isinstance(inner, exp.Column):
        column = str(inner.name)
        if column not in groups:
            raise ViewDefinitionError(f"view {name}: {column} is neither grouped nor aggregated")
        return Output(alias, group=column)
    func = _AGGREGATES.get(type(inner))
    if func is None:
        raise ViewDefinitionError(
            f"view {name}: {inner.sql(dialect=DIALECT)} is not maintained (COUNT, SUM, MIN, "
            "MAX of a column, COUNT(*))"
        )
    if not isinstance(item, exp.Alias):
        raise ViewDefinitionError(
            f"view {name}: name the aggregate {inner.sql(dialect=DIALECT)} (… AS name)"
        )
    argument = inner.this
    if isinstance(argument, exp.Distinct):
        raise ViewDefinitionError(f"view {name}: {func.upper()}(DISTINCT …) is not maintained")
    if isinstance(argument, exp.Star):
        if func != "count":
            raise ViewDefinitionError(f"view {name}: {func.upper()}(*) is not SQL")
        return Output(alias, aggregate=Aggregate(alias, func, None))
    column = _column_name(name, argument, f"the argument of {func.upper()}")
    return Output(alias, aggregate=Aggregate(alias, func, column))


#: The hidden columns of a view table: the group's row count, and per aggregate of a column
#: the count of its non-NULL values (a SUM of no values is NULL, not 0).
ROWS = "_tl_rows"
KEY = "_tl_key"


def nonnull_column(aggregate: Aggregate) -> str:
    return f"_tl_n_{aggregate.alias}"


def state_sql(view: ViewDefinition, table: str) -> str:
    """The view's aggregate over ``table`` (a name in the session holding its input rows),
    with the hidden columns added: what a full recomputation of the view table runs."""
    tree = sqlglot.parse_one(view.flat_sql, read=DIALECT)
    assert isinstance(tree, exp.Select)
    next(tree.find_all(exp.Table)).replace(exp.to_table(table, dialect=DIALECT))
    extra = [f"COUNT(*) AS {ROWS}"] + [
        f"COUNT({_quoted(a.column)}) AS {nonnull_column(a)}" for a in view.aggregates if a.column
    ]
    return tree.select(*extra, dialect=DIALECT, copy=False).sql(dialect=DIALECT)


def _quoted(column: str) -> str:
    return exp.column(column, quoted=True).sql(dialect=DIALECT)


#: Per lake table (``db.table``): its columns renamed since the definition was written, the
#: definition's name → the name now.
Renames = Mapping[str, Mapping[str, str]]


def follow_renames(view: ViewDefinition, renamed: Renames) -> ViewDefinition:
    """The view over its tables after column renames, as PostgreSQL keeps a view over a
    renamed column: the output columns keep their names, the definition reads the new ones."""
    if not any(renamed.values()):
        return view
    tree = sqlglot.parse_one(view.sql, read=DIALECT)
    assert isinstance(tree, exp.Select)
    by_alias = {} if view.join is None else {s.alias: s.table for s in view.join.sides}

    def now(column: exp.Column) -> str | None:
        table = view.table if view.join is None else by_alias.get(column.table, "")
        return renamed.get(table, {}).get(column.name)

    for item in list(tree.expressions):
        if isinstance(item, exp.Column) and now(item):
            item.replace(exp.alias_(item.copy(), item.name))
    for column in list(tree.find_all(exp.Column)):
        new = now(column)
        if new:
            # A name from the source's DDL: always a quoted identifier in the SQL.
            column.set("this", exp.to_identifier(new, quoted=True))
    return parse_view(view.name, tree.sql(dialect=DIALECT))


def compose_renames(held: Mapping[str, str], renames: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``held`` (definition name → current name) after ``renames`` (old → new, in order)."""
    out = dict(held)
    for old, new in renames:
        followed = False
        for original, current in out.items():
            if current == old:
                out[original] = new
                followed = True
        if not followed and old not in out:
            out[old] = new
    return out
