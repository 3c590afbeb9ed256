"""What a schema change does to the rows a sink already holds, shared by the sinks.

A route hands its sink the source's DDL as a ``schema`` :class:`~tidelake.route.change.RowChange`
(``route/select.py``). A sink holding rows turns the statement's column operations on one
table into :class:`ColumnStep` values (:func:`column_steps`, grouped per table as the lake
applies them, :func:`column_groups`) and applies them to each stored row written before it
(:func:`rewrite_row`): a dropped column goes, a renamed one moves, an added one takes the value
the source gives existing rows (its literal ``DEFAULT``; ``CURRENT_TIMESTAMP``: the commit time
to the second, as the lake), a DECIMAL whose scale changed shows that many decimals. A default
computed per row cannot be known: :class:`SchemaRefusedError`, as the lake blocks it.

A row change written *before* a schema change but reaching the sink after it (a dead letter
re-processed later) is brought forward through the steps logged since (:func:`forward`), so it
lands in the table's present shape; sinks keep those steps (:func:`steps_json`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from zoneinfo import ZoneInfo

from tidelake.lake import ddl
from tidelake.route.change import RowChange
from tidelake.route.sinks.pg_types import normalise

_T = TypeVar("_T")


class SchemaRefusedError(ValueError):
    """A schema change a sink cannot apply exactly; the message says why."""


#: The operations that change a table's columns (applied per table in one pass, as the lake).
COLUMN_OPS = (ddl.AddColumn, ddl.DropColumn, ddl.RenameColumn, ddl.ModifyColumn)

_DECIMALS = frozenset({"decimal", "dec", "fixed", "numeric"})
_ZONED = frozenset({"timestamp with time zone", "timestamptz"})
_TIMES = frozenset({"time", "time without time zone", "time with time zone", "timetz"})
#: Enough digits for any DECIMAL a source holds (MySQL 65, PostgreSQL 1000 + scale).
_EXACT = decimal.Context(prec=2100)


@dataclass(frozen=True, slots=True)
class ColumnStep:
    """One change of a stored row's fields (:func:`column_steps`)."""

    kind: Literal["drop", "rename", "set", "rescale"]
    name: str
    #: ``rename``: the new name.
    to: str = ""
    #: ``set``: the value existing rows take (text).
    value: Any = None
    #: ``rescale``: the DECIMAL's decimals.
    scale: int = 0


def applied_mark(position: str, index: int) -> str:
    """What a table's ``applied`` holds once operation ``index`` of the schema change at
    ``position`` is applied. ``#`` sorts below every character of a position, so the marks
    of one change sort by index and below any later position."""
    return f"{position}#{index:04d}"


def source_zone(name: str) -> dt.tzinfo:
    """The zone of the source's TIMESTAMP / DATETIME text (``lake.source_timezone``)."""
    return dt.UTC if name.upper() == "UTC" else ZoneInfo(name)


def current_timestamp_text(source_type: str, commit_ts_ms: int, zone: dt.tzinfo) -> str:
    """The text a column of ``source_type`` holds for ``DEFAULT CURRENT_TIMESTAMP`` added at
    ``commit_ts_ms`` (to the second), as the rows carry the type: ``YYYY-MM-DD HH:MM:SS``
    with the type's fraction digits (``datetime(3)``: three zeros) in ``zone``, a zoned
    PostgreSQL timestamp in UTC (as ``formats.debezium`` writes it), ``YYYY-MM-DD`` for a
    ``date``, ``HH:MM:SS[.f]`` for a time. The lake takes the same commit time
    (``lake/evolve.py``)."""
    name, args, _unsigned = normalise(source_type)
    # To the second, as the lake takes it: the commit time only nears the statement's own
    # clock, and the lake and every sink must hold the same value.
    instant = dt.datetime.fromtimestamp(commit_ts_ms // 1000, dt.UTC)
    local = instant if name in _ZONED else instant.astimezone(zone)
    if name == "date":
        return local.strftime("%Y-%m-%d")
    fsp = int(args) if args and args.strip().isdigit() else 0
    fraction = (f"{local.microsecond:06d}" + "0" * 3)[: min(fsp, 9)]
    clock = local.strftime("%H:%M:%S") + (f".{fraction}" if fraction else "")
    if name in _TIMES:
        return clock
    return f"{local.strftime('%Y-%m-%d')} {clock}"


def decimal_scale(source_type: str) -> int | None:
    """The decimals of a DECIMAL / NUMERIC type with a scale (``decimal(12,2)``: 2,
    ``numeric(5)``: 0); None for any other type, or an unconstrained ``numeric``."""
    name, args, _unsigned = normalise(source_type)
    if name not in _DECIMALS or not args:
        return None
    parts = [p.strip() for p in args.split(",")]
    try:
        return int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def rescaled(value: Any, scale: int) -> Any:
    """A DECIMAL value's text with exactly ``scale`` decimals, rounded half away from zero
    (MySQL's and PostgreSQL's rule); a value that is no decimal number is kept as it is."""
    if isinstance(value, bool) or not isinstance(value, str | int | bytes):
        return value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    try:
        number = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        return value
    if not number.is_finite():
        return value
    quantum = decimal.Decimal(1).scaleb(-scale)
    exact = number.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=_EXACT)
    if exact.is_zero():
        exact = exact.copy_abs()
    return format(exact, "f")


def column_groups(
    operations: Sequence[ddl.Operation],
) -> dict[str, tuple[int, list[ddl.Operation]]]:
    """Table → (the index of its first column operation, all its column operations in order):
    a statement's column operations on one table are applied together at the first one, as
    the lake does (``lake/evolve.py``)."""
    groups: dict[str, tuple[int, list[ddl.Operation]]] = {}
    for i, op in enumerate(operations):
        if isinstance(op, COLUMN_OPS):
            groups.setdefault(op.table.table_id, (i, []))[1].append(op)
    return groups


def column_steps(
    operations: Sequence[ddl.Operation], commit_ts_ms: int | None, zone: dt.tzinfo
) -> list[ColumnStep]:
    """The steps that turn a stored row of before ``operations`` (column operations of one
    table) into the row the source holds after them. Raises :class:`SchemaRefusedError` for an
    added column whose existing values the sink cannot know."""
    steps: list[ColumnStep] = []
    for op in operations:
        if isinstance(op, ddl.AddColumn):
            column, default = op.column.name, op.column.default
            if default.kind == "expression":
                raise SchemaRefusedError(
                    f"column {column}: existing rows get DEFAULT {default.text} computed per row "
                    "by the source; the sink cannot know those values"
                )
            if default.kind == "current_timestamp":
                if commit_ts_ms is None:
                    raise SchemaRefusedError(
                        f"column {column}: DEFAULT CURRENT_TIMESTAMP and no commit time"
                    )
                text = current_timestamp_text(op.column.source_type, commit_ts_ms, zone)
                steps.append(ColumnStep("set", column, value=text))
            elif default.text is not None:
                steps.append(ColumnStep("set", column, value=default.text))
        elif isinstance(op, ddl.DropColumn):
            steps.append(ColumnStep("drop", op.name))
        elif isinstance(op, ddl.RenameColumn):
            if op.old != op.new:
                steps.append(ColumnStep("rename", op.old, to=op.new))
        elif isinstance(op, ddl.ModifyColumn):
            name = op.new_name or op.name
            if name != op.name:
                steps.append(ColumnStep("rename", op.name, to=name))
            scale = decimal_scale(op.source_type)
            if scale is not None:
                steps.append(ColumnStep("rescale", name, scale=scale))
    return steps


def rewrite_row(row: Mapping[str, _T], steps: Sequence[ColumnStep]) -> dict[str, Any]:
    """``row`` (column → stored value) after ``steps``; a renamed column keeps its place.
    Steps are not all idempotent (``RENAME a TO b, ADD a``), so a sink rewrites a row once
    (it marks the row with the schema change's position; the row keeps its own)."""
    out: dict[str, Any] = dict(row)
    for step in steps:
        if step.kind == "drop":
            out.pop(step.name, None)
        elif step.kind == "rename":
            if step.name in out:
                out = {
                    (step.to if k == step.name else k): v for k, v in out.items() if k != step.to
                }
        elif step.kind == "set":
            out[step.name] = step.value
        elif step.name in out and out[step.name] is not None:
            out[step.name] = rescaled(out[step.name], step.scale)
    return out


def schema_refusal(change: RowChange, zone: dt.tzinfo) -> str | None:
    """Why ``change`` (a ``schema`` change) cannot be applied by what it says alone (an added
    column with a per-row default, CURRENT_TIMESTAMP without a commit time); None when it can
    be tried."""
    for table, (_first, ops) in column_groups(change.operations).items():
        try:
            column_steps(ops, change.commit_ts_ms, zone)
        except SchemaRefusedError as exc:
            return f"{table} seq {change.seq}: {exc}"
    return None


def forward(change: RowChange, steps: Sequence[ColumnStep]) -> RowChange:
    """A row change of before the schema changes ``steps`` come from, in the shape its table
    has after them: its row through :func:`rewrite_row`, its key and column types renamed
    (a ``set`` step fills only a column the row lacks: the row is older than the column)."""
    if not steps:
        return change
    key, types = dict(change.key), dict(change.column_types)
    row = None if change.row is None else dict(change.row)
    for step in steps:
        if step.kind == "rename":
            for image in (key, types, row):
                if image is not None and step.name in image:
                    image[step.to] = image.pop(step.name)
        elif step.kind == "drop":
            types.pop(step.name, None)
            if row is not None:
                row.pop(step.name, None)
        elif row is not None and (step.kind != "set" or step.name not in row):
            row = rewrite_row(row, [step])
    return dataclasses.replace(change, key=key, row=row, column_types=types)


def steps_json(steps: Sequence[ColumnStep]) -> str:
    """``steps`` as JSON text (a sink's log of them)."""
    return json.dumps([dataclasses.asdict(s) for s in steps])


def steps_from_json(text: str) -> list[ColumnStep]:
    """The steps :func:`steps_json` wrote."""
    return [ColumnStep(**item) for item in json.loads(text)]
