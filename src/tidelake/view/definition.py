"""A view's SQL, read into the parts its incremental upkeep works with (docs/views.md §2).

A view is one ``SELECT`` over one lake table: plain columns in ``GROUP BY`` (the view's key),
``COUNT(*)`` and ``COUNT``/``SUM``/``MIN``/``MAX`` of a column, an optional ``WHERE``. Those
are the shapes whose new value follows from the old value and the changed rows alone (count
and sum by adding and taking away; min and max by comparing, and by reading the group again
when its extreme itself goes). Anything else is refused here with the reason, before a view
table is made: a join, ``DISTINCT``, ``HAVING``, a window, a subquery, an expression as a key.

The SQL is Spark SQL: a full recomputation (``rebuild``, ``verify``) runs it as written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
class ViewDefinition:
    """The parts of a view's SELECT (see the module docstring)."""

    name: str
    sql: str
    #: The lake table read, ``db.table``.
    table: str
    groups: tuple[str, ...]
    outputs: tuple[Output, ...]
    #: The WHERE condition in Spark SQL over unqualified columns; None without one.
    where: str | None

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        return tuple(o.aggregate for o in self.outputs if o.aggregate is not None)

    @property
    def columns(self) -> tuple[str, ...]:
        """The base-table columns the view reads: keys, aggregate inputs, WHERE columns."""
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
        (tree.args.get("joins"), "a join"),
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
    table = _table(name, tree)
    groups = _groups(name, tree)
    outputs = tuple(_output(name, item, groups) for item in tree.expressions)
    if not groups:
        raise ViewDefinitionError(
            f"view {name}: GROUP BY is required (its columns are the view's key)"
        )
    if not any(o.aggregate for o in outputs):
        raise ViewDefinitionError(f"view {name}: no aggregate (COUNT, SUM, MIN, MAX)")
    missing = [g for g in groups if g not in {o.group for o in outputs}]
    if missing:
        raise ViewDefinitionError(
            f"view {name}: GROUP BY column(s) {', '.join(missing)} must be selected too "
            "(they are the view's key)"
        )
    aliases = [o.alias for o in outputs]
    if len(set(aliases)) != len(aliases):
        raise ViewDefinitionError(f"view {name}: two output columns share a name")
    if any(a.startswith("_tl_") or a.startswith("_hoodie") for a in aliases):
        raise ViewDefinitionError(f"view {name}: output names _tl_* and _hoodie* are reserved")
    where_node = tree.args.get("where")
    where = None
    if where_node is not None:
        condition = where_node.this.copy()
        if condition.find(exp.AggFunc):
            raise ViewDefinitionError(f"view {name}: an aggregate in WHERE")
        for column in condition.find_all(exp.Column):
            column.set("table", None)
        where = condition.sql(dialect=DIALECT)
    return ViewDefinition(name, sql, table, groups, outputs, where)


def _table(name: str, tree: exp.Select) -> str:
    source = tree.args.get("from_") or tree.args.get("from")
    tables = list(tree.find_all(exp.Table))
    if source is None or len(tables) != 1 or not isinstance(source.this, exp.Table):
        raise ViewDefinitionError(f"view {name}: FROM names exactly one lake table (db.table)")
    table = tables[0]
    if not table.db:
        raise ViewDefinitionError(
            f"view {name}: name the table with its database (db.{table.name})"
        )
    return names.table_id(table.db, table.name)


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
    """The view's SELECT over ``table`` (a name in the session) instead of its lake table,
    with the hidden columns added: what a full recomputation of the view table runs."""
    tree = sqlglot.parse_one(view.sql, read=DIALECT)
    assert isinstance(tree, exp.Select)
    source = next(tree.find_all(exp.Table))
    alias = source.alias
    source.replace(
        exp.to_table(table, dialect=DIALECT).as_(alias) if alias else exp.to_table(table)
    )
    extra = [f"COUNT(*) AS {ROWS}"] + [
        f"COUNT(`{a.column}`) AS {nonnull_column(a)}" for a in view.aggregates if a.column
    ]
    return tree.select(*extra, dialect=DIALECT, copy=False).sql(dialect=DIALECT)


def follow_renames(view: ViewDefinition, renamed: Mapping[str, str]) -> ViewDefinition:
    """The view over its table after column renames (``renamed``: name in the definition →
    name now), as PostgreSQL keeps a view over a renamed column: the output columns keep their
    names, the definition reads the new ones."""
    if not renamed:
        return view
    tree = sqlglot.parse_one(view.sql, read=DIALECT)
    assert isinstance(tree, exp.Select)
    for item in list(tree.expressions):
        if isinstance(item, exp.Column) and item.name in renamed:
            item.replace(exp.alias_(item.copy(), item.name))
    for column in tree.find_all(exp.Column):
        if column.name in renamed:
            # A name from the source's DDL: always a quoted identifier in the SQL.
            column.set("this", exp.to_identifier(renamed[column.name], quoted=True))
    followed = parse_view(view.name, tree.sql(dialect=DIALECT))
    return ViewDefinition(
        view.name, followed.sql, view.table, followed.groups, followed.outputs, followed.where
    )


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
