"""Keeping views equal to their definition: the incremental step, the rebuild, the check
(docs/views.md §5).

A **step** reads the base table's changes since the view's checkpoint (``view/changes.py``),
and for the groups they touch only:

1. the signed images are netted (an update that leaves the view's columns as they were
   cancels out) and the view's WHERE applied to each image;
2. per group, the change of the row count, of each SUM, of each non-NULL count, and the
   largest/smallest value added and taken away;
3. the group's stored row is read from the view table by key and the new one computed:
   counts and sums add up; a MIN/MAX takes the added value if it is more extreme; a group
   whose current extreme was taken away is recomputed from the base table as of the same
   commit; a group left with no rows is deleted;
4. the new rows and the new checkpoint are one Hudi commit.

A **rebuild** runs the definition over the base table as of its latest commit and replaces the
whole view table in one ``insert_overwrite_table`` commit: readers see the old view or the
new one. It happens on ``tidelake view rebuild``, on a changed definition, and whenever the
change log cannot answer (a rewritten base table, a view left behind further than the cleaner
keeps file versions).

**verify** compares the view table with a full recomputation over the same base commit.
"""

from __future__ import annotations

import decimal
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.config import Config
from tidelake.lake.hudi import split_table_id, table_path
from tidelake.lake.jvm_errors import describe_error
from tidelake.lake.store import (
    CDC_PROPERTY,
    CompletedInstant,
    completed_instants,
    hoodie_properties,
)
from tidelake.view.changes import (
    ChangeRange,
    SignedImages,
    UnreadableRangeError,
    plan_range,
    read_changes,
    renames_after,
)
from tidelake.view.definition import (
    INPUT,
    KEY,
    ROWS,
    Join,
    Renames,
    Side,
    ViewDefinition,
    ViewDefinitionError,
    compose_renames,
    follow_renames,
    nonnull_column,
    parse_view,
    state_sql,
)
from tidelake.view.table import ViewCheckpoint, ViewTable, now_ms

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = structlog.get_logger("tidelake.view")

DELETED = "_hoodie_is_deleted"
RECORD_KEY = "_hoodie_record_key"
_NET = "_tl_net"
#: The base-table commits whose metadata a view reads: rewrites record column renames.
REWRITES = ("replacecommit",)
#: Digits Python's decimal arithmetic keeps in a merge: more than a Spark DECIMAL holds (38).
_DECIMAL_DIGITS = 80


@dataclass
class StepResult:
    """What one view's step did."""

    view: str
    #: current (nothing new), step, rebuild, waiting (no base table yet), paused, failed
    outcome: str
    reason: str = ""
    #: Change records read, groups written (upserted or deleted), groups recomputed.
    records: int = 0
    groups: int = 0
    recomputed: int = 0
    rows: int | None = None
    duration_ms: int = 0
    checkpoint: ViewCheckpoint | None = None
    #: Base table → the Hudi instant (requested time) of the last base commit the view
    #: includes, when known (the checkpoint's ``base`` holds what the view tracks: an
    #: aggregate view the commit's completion time, a lifecycle view the stream sequence).
    instants: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("checkpoint", "instants")}
        if self.checkpoint is not None:
            out["base"] = dict(self.checkpoint.base)
            out["updated_at_ms"] = self.checkpoint.at_ms
        return out


@dataclass
class VerifyResult:
    view: str
    rows: int
    expected: int
    #: Rows in the view and not in the recomputation, and the other way round.
    extra: int
    missing: int
    base: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.extra == 0 and self.missing == 0


class ViewMaintainer:
    """The configured views of one lake, through one Spark session."""

    def __init__(self, config: Config, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark

    def definition(self, name: str) -> ViewDefinition:
        view = self.config.views.get(name)
        if view is None:
            raise ViewDefinitionError(f"no view named {name!r} in the configuration")
        if view.kind != "aggregate" or view.sql is None:
            raise ViewDefinitionError(f"view {name} is a {view.kind} view, not an aggregate")
        return parse_view(name, view.sql)

    def base_path(self, table: str) -> str:
        return table_path(self.config.lake_root, *split_table_id(table))

    # -- running

    def run_all(self) -> list[StepResult]:
        """One step of every aggregate view; a failing view never stops the others."""
        return [self.step(n) for n, v in self.config.views.items() if v.kind == "aggregate"]

    def step(self, name: str) -> StepResult:
        started = time.monotonic()
        try:
            result = self._step(name)
        except Exception as exc:  # a view's failure is its own: reported, retried next round
            reason = describe_error(exc) if "py4j" in type(exc).__module__ else str(exc)
            log.warning("view step failed", view=name, error=reason[:500])
            result = StepResult(name, "failed", reason=reason[:2000])
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def _step(self, name: str) -> StepResult:
        if self.config.views[name].paused:
            return StepResult(name, "paused")
        defined = self.definition(name)
        table = ViewTable(self.config, self.spark, name)
        instants = {
            t: completed_instants(self.spark, self.base_path(t), metadata_of=REWRITES)
            for t in defined.tables
        }
        exists = table.exists()
        absent = [t for t, held in instants.items() if not held]
        if absent and exists:
            return StepResult(
                name,
                "failed",
                reason=f"{', '.join(absent)} no longer exists (dropped or renamed): the view "
                "holds its rows as of its last update",
            )
        if absent:
            return StepResult(name, "waiting", reason=f"{', '.join(absent)} has no commit yet")
        checkpoint = table.checkpoint() if exists else None
        if checkpoint is None:
            return self._rebuild(defined, table, "the view table is new", {})
        if checkpoint.definition != defined.fingerprint:
            return self._rebuild(defined, table, "the definition changed", {})
        for base in defined.tables:
            if hoodie_properties(self.spark, self.base_path(base)).get(CDC_PROPERTY) != "true":
                return self._rebuild(
                    defined, table, f"{base} keeps no change log", checkpoint.renamed
                )
        try:
            spans = {
                t: plan_range(
                    t,
                    self.base_path(t),
                    instants[t],
                    checkpoint.base.get(t),
                    retained_commits=self.config.lake.table_services.clean_retain_commits,
                )
                for t in defined.tables
            }
        except UnreadableRangeError as exc:
            return self._rebuild(defined, table, str(exc), _renames_since(checkpoint, instants))
        if all(span is None for span in spans.values()):
            included = _requested(instants, checkpoint.base)
            return StepResult(name, "current", checkpoint=checkpoint, instants=included)
        view = follow_renames(defined, checkpoint.renamed)
        through = {t: span.through if span else checkpoint.base[t] for t, span in spans.items()}
        snapshots = {t: self._snapshot(self.base_path(t), through[t]) for t in view.tables}
        try:
            only = spans[view.table]
            if view.join is None and only is not None:
                images = read_changes(self.spark, only, snapshots[view.table].schema, view.columns)
                records = images.records
                signed = self._signed(snapshots[view.table], images)
            else:
                signed, records = self._join_changes(view, spans, snapshots, checkpoint.base)
        except UnreadableRangeError as exc:
            return self._rebuild(defined, table, str(exc), checkpoint.renamed)
        new = ViewCheckpoint(defined.fingerprint, through, now_ms(), "step", checkpoint.renamed)
        rows_in = self._input(view, snapshots)
        schema = self._table_schema(view, rows_in)
        rows, recomputed = self._apply(view, table, rows_in, schema.fieldNames(), signed)
        # No view row changed: the commit still moves the checkpoint on.
        table.write(self.spark.createDataFrame(rows, schema), new, rebuild=False)
        log.info(
            "view step",
            view=name,
            records=records,
            groups=len(rows),
            recomputed=recomputed,
            through=through,
        )
        return StepResult(
            name,
            "step",
            records=records,
            groups=len(rows),
            recomputed=recomputed,
            checkpoint=new,
            instants=_requested(instants, new.base),
        )

    def rebuild_or_fail(self, name: str, reason: str) -> StepResult:
        """:meth:`rebuild`, a failure reported as the result (as :meth:`step` does)."""
        started = time.monotonic()
        try:
            return self.rebuild(name, reason)
        except Exception as exc:
            detail = describe_error(exc) if "py4j" in type(exc).__module__ else str(exc)
            log.warning("view rebuild failed", view=name, error=detail[:500])
            failed = StepResult(name, "failed", reason=detail[:2000])
            failed.duration_ms = int((time.monotonic() - started) * 1000)
            return failed

    def rebuild(self, name: str, reason: str = "asked for") -> StepResult:
        started = time.monotonic()
        view = self.definition(name)
        table = ViewTable(self.config, self.spark, name)
        for base in view.tables:
            if not completed_instants(self.spark, self.base_path(base), metadata_of=()):
                return StepResult(name, "waiting", reason=f"{base} has no commit yet")
        held = table.checkpoint() if table.exists() else None
        renamed: dict[str, dict[str, str]] = {}
        if held is not None and held.definition == view.fingerprint:
            instants = {
                t: completed_instants(self.spark, self.base_path(t), metadata_of=REWRITES)
                for t in view.tables
            }
            renamed = _renames_since(held, instants)
        result = self._rebuild(view, table, reason, renamed)
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def _rebuild(
        self, defined: ViewDefinition, table: ViewTable, reason: str, renamed: Renames
    ) -> StepResult:
        from pyspark.sql import functions as F  # noqa: N812

        view = follow_renames(defined, renamed)
        last = {
            t: completed_instants(self.spark, self.base_path(t), metadata_of=())[-1]
            for t in view.tables
        }
        through = {t: done.completed for t, done in last.items()}
        snapshots = {t: self._snapshot(self.base_path(t), through[t]) for t in view.tables}
        # Written from Spark as computed: a view of millions of groups never passes Python.
        state = (
            self._state(view, self._input(view, snapshots))
            .withColumn(DELETED, F.lit(False))
            .cache()
        )
        try:
            count = state.count()
            checkpoint = ViewCheckpoint(
                defined.fingerprint,
                through,
                now_ms(),
                "rebuild",
                {t: dict(r) for t, r in renamed.items() if r},
            )
            table.write(state, checkpoint, rebuild=True)
        finally:
            state.unpersist()
        table.register()
        log.info("view rebuilt", view=view.name, reason=reason, rows=count, through=through)
        return StepResult(
            view.name,
            "rebuild",
            reason=reason,
            groups=count,
            rows=count,
            checkpoint=checkpoint,
            instants={t: done.requested for t, done in last.items()},
        )

    def verify(self, name: str) -> VerifyResult:
        return verify_view(self, name)

    # -- the pieces

    def _snapshot(self, base: str, through: str) -> DataFrame:
        """The base table as of the commit completed at ``through``."""
        return self.spark.read.format("hudi").option("as.of.instant", through).load(base)

    def _input(self, view: ViewDefinition, snapshots: Mapping[str, DataFrame]) -> DataFrame:
        """The view's input rows over ``snapshots`` (``db.table`` → its rows): the base
        table's rows, or the joined rows (``definition.Join``)."""
        if view.join is None:
            return snapshots[view.table]
        return _joined(view.join, snapshots)

    def _join_changes(
        self,
        view: ViewDefinition,
        spans: Mapping[str, ChangeRange | None],
        snapshots: Mapping[str, DataFrame],
        held: Mapping[str, str],
    ) -> tuple[DataFrame | None, int]:
        """The signed input rows of a join view over the step, and the change records read.

        A joined row changes only if a row of either side with its join key changed. So the
        join keys the change logs name (before and after images) pick the rows of both sides
        with those keys, as of the view's checkpoint and as of the step's commits; their
        joins, the old taken away and the new added, are the change of the input rows."""
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.types import StructField, StructType

        assert view.join is not None
        join = view.join
        changed: list[tuple[Side, DataFrame]] = []
        records = 0
        for side in join.sides:
            span = spans[side.table]
            if span is None:
                continue
            columns = join.keys(side)
            snapshot = snapshots[side.table]
            images = read_changes(self.spark, span, snapshot.schema, columns)
            records += images.records
            keys = sorted({r[:-1] for r in images.rows}, key=repr)
            if keys:
                types = {f.name: f.dataType for f in snapshot.schema.fields}
                schema = StructType([StructField(c, types[c], True) for c in columns])
                changed.append((side, self.spark.createDataFrame(keys, schema)))
        if not changed:
            return None, records

        def picked(snapshot: DataFrame, side: Side) -> DataFrame:
            parts = []
            for other, keys in changed:
                on = [
                    snapshot[mine].eqNullSafe(keys[theirs])
                    for mine, theirs in zip(join.keys(side), join.keys(other), strict=True)
                ]
                parts.append(snapshot.join(F.broadcast(keys), on, "left_semi"))
            rows = parts[0]
            for part in parts[1:]:
                rows = rows.unionByName(part)
            return rows.dropDuplicates([RECORD_KEY]) if len(parts) > 1 else rows

        before: dict[str, DataFrame] = {}
        after: dict[str, DataFrame] = {}
        for side in join.sides:
            now = snapshots[side.table]
            then = now
            if spans[side.table] is not None:
                then = _as_typed(
                    self._snapshot(self.base_path(side.table), held[side.table]), now, side
                )
            before[side.table] = picked(then, side)
            after[side.table] = picked(now, side)
        old = _joined(join, before).withColumn(_NET, F.lit(-1))
        new = _joined(join, after).withColumn(_NET, F.lit(1))
        return old.unionByName(new), records

    def _state(self, view: ViewDefinition, rows: DataFrame) -> DataFrame:
        """The full state rows of the view over its input ``rows`` (with ``_tl_key``)."""

        rows.createOrReplaceTempView(INPUT)
        state = self._run_definition(state_sql(view, INPUT))
        return state.select(_key(view.group_outputs), *state.columns)

    def _run_definition(self, sql: str) -> DataFrame:
        """The operator's view SQL (``views.<name>.sql``) as Spark SQL, as ``tidelake query``
        runs theirs; base-table columns renamed by the source's DDL enter it as quoted
        identifiers only (``definition.follow_renames``)."""
        return self.spark.sql(sql)

    def _table_schema(self, view: ViewDefinition, rows: DataFrame) -> Any:
        from pyspark.sql.types import BooleanType, StructField, StructType

        schema = self._state(view, rows).schema
        return StructType([*schema.fields, StructField(DELETED, BooleanType(), False)])

    def _signed(self, snapshot: DataFrame, images: SignedImages) -> DataFrame | None:
        """A single-table view's signed images as rows (None: there are none)."""
        from pyspark.sql.types import IntegerType, StructField, StructType

        if not images.rows:
            return None
        types = {f.name: f.dataType for f in snapshot.schema.fields}
        schema = StructType(
            [StructField(c, types[c], True) for c in images.columns]
            + [StructField(_NET, IntegerType(), False)]
        )
        return self.spark.createDataFrame(images.rows, schema)

    def _apply(
        self,
        view: ViewDefinition,
        table: ViewTable,
        rows_in: DataFrame,
        state_fields: list[str],
        signed: DataFrame | None,
    ) -> tuple[list[tuple[Any, ...]], int]:
        """The view rows the signed input rows change (deleted ones flagged), and how many
        groups were recomputed from the input rows."""
        from pyspark.sql import functions as F  # noqa: N812

        if signed is None:
            return [], 0
        columns = view.columns
        if view.where:  # per image: a row moving into or out of the condition counts
            signed = signed.where(F.expr(view.where))
        delta_df = _netted(signed, columns).groupBy(*view.groups).agg(*_delta_columns(view))
        delta_df = delta_df.select(_key(view.groups), "*")
        # A MIN/MAX nets on its own column: an update of another column (an order's total)
        # leaves the group's latest date as it was, so the group is not read again for it.
        for a in view.aggregates:
            if a.func in ("min", "max") and a.column:
                pick = F.min if a.func == "min" else F.max
                net = F.col(_NET)
                extremes = (
                    _netted(signed, (*view.groups, a.column))
                    .groupBy(*view.groups)
                    .agg(
                        pick(F.when(net > 0, F.col(a.column))).alias(f"add_{a.alias}"),
                        pick(F.when(net < 0, F.col(a.column))).alias(f"gone_{a.alias}"),
                    )
                    .select(_key(view.groups), f"add_{a.alias}", f"gone_{a.alias}")
                )
                delta_df = delta_df.join(extremes, KEY, "left")
        delta = delta_df.collect()
        if not delta:
            return [], 0
        stored = {
            row[KEY]: row.asDict()
            for row in table.read()
            .join(F.broadcast(self.spark.createDataFrame([(r[KEY],) for r in delta], [KEY])), KEY)
            .collect()
        }
        out: list[tuple[Any, ...] | None] = []
        recompute: list[Any] = []
        for change in delta:
            with decimal.localcontext(prec=_DECIMAL_DIGITS):  # exact, as Spark's DECIMAL(38)
                merged = _merge(view, change.asDict(), stored.get(change[KEY]))
            if merged is None:
                recompute.append(change)
            elif merged[ROWS] == 0:
                out.append(_deleted(state_fields, stored.get(change[KEY])))
            else:
                out.append(tuple(merged.get(f) for f in state_fields))
        if recompute:
            out += self._recompute(view, rows_in, recompute, state_fields, stored)
        return [r for r in out if r is not None], len(recompute)

    def _recompute(
        self,
        view: ViewDefinition,
        rows_in: DataFrame,
        groups: list[Any],
        fields: list[str],
        stored: dict[Any, dict[str, Any]],
    ) -> list[tuple[Any, ...] | None]:
        """Groups read again from the input rows as of the step's commits (an extreme gone)."""
        from pyspark.sql import functions as F  # noqa: N812
        from pyspark.sql.types import StructField, StructType

        types = {f.name: f.dataType for f in rows_in.schema.fields}

        keys = self.spark.createDataFrame(
            [tuple(g[c] for c in view.groups) for g in groups],
            StructType([StructField(c, types[c], True) for c in view.groups]),
        )
        # NULL-safe on the group columns: a NULL key is a group like any other.
        condition = [rows_in[c].eqNullSafe(keys[c]) for c in view.groups]
        picked = rows_in.join(F.broadcast(keys), condition, "left_semi")
        fresh = {r[KEY]: r.asDict() for r in self._state(view, picked).collect()}
        out: list[tuple[Any, ...] | None] = []
        for group in groups:
            row = fresh.get(group[KEY])
            if row is None:
                out.append(_deleted(fields, stored.get(group[KEY])))
            else:
                out.append(tuple(row.get(f, False if f == DELETED else None) for f in fields))
        return out


def _renames_since(
    held: ViewCheckpoint, instants: Mapping[str, Sequence[CompletedInstant]]
) -> dict[str, dict[str, str]]:
    """Per base table, the renames ``held`` knows composed with those committed since."""
    return {
        t: compose_renames(held.renamed.get(t, {}), renames_after(found, held.base.get(t)))
        for t, found in instants.items()
    }


def _column(name: str) -> Column:
    """A column by its name as stored, whatever characters the source gave it."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.col("`" + name.replace("`", "``") + "`")


def _joined(join: Join, tables: Mapping[str, DataFrame]) -> DataFrame:
    """The join's input rows over ``tables`` (``db.table`` → rows): each side's columns the
    view reads, named ``<alias>__<column>``."""
    left, right = (
        tables[side.table].select(*(_column(c).alias(side.flat(c)) for c in side.columns))
        for side in join.sides
    )
    on = [left[join.left.flat(mine)] == right[join.right.flat(theirs)] for mine, theirs in join.on]
    return left.join(right, on, "left" if join.kind == "left" else "inner")


def _as_typed(then: DataFrame, now: DataFrame, side: Side) -> DataFrame:
    """``then`` (a side as of the view's checkpoint) with the columns the view reads in the
    types they have ``now``; a column it does not have yet cannot be compared."""
    from pyspark.sql import functions as F  # noqa: N812

    types = {f.name: f.dataType for f in now.schema.fields}
    held = {f.name: f.dataType for f in then.schema.fields}
    missing = [c for c in side.columns if c not in held]
    if missing:
        raise UnreadableRangeError(
            f"{side.table} had no column {', '.join(missing)} at the view's checkpoint"
        )
    return then.select(
        F.col(RECORD_KEY),
        *(
            _column(c).cast(types[c]).alias(c) if held[c] != types[c] else _column(c)
            for c in side.columns
        ),
    )


def _requested(
    instants: Mapping[str, Sequence[CompletedInstant]], base: Mapping[str, str]
) -> dict[str, str]:
    """Base table → the Hudi instant (requested time) of the commit whose completion time
    ``base`` names, for those on the active timeline ``instants`` (per base table)."""
    out = {}
    for table, done in base.items():
        requested = {i.completed: i.requested for i in instants.get(table, ())}
        if done in requested:
            out[table] = requested[done]
    return out


def _key(columns: Sequence[str]) -> Column:
    """``_tl_key``: the JSON array of the group's values as text (NULL as null)."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.to_json(F.array(*(F.col(c).cast("string") for c in columns))).alias(KEY)


def _delta_columns(view: ViewDefinition) -> Iterator[Column]:
    """Per group of netted images: the change of the row count and of each aggregate."""
    from pyspark.sql import functions as F  # noqa: N812

    net = F.col(_NET)
    yield F.sum(net).alias("d_rows")
    for a in view.aggregates:
        if a.column is None:
            continue
        value = F.col(a.column)
        yield F.sum(F.when(value.isNotNull(), net).otherwise(0)).alias(f"d_n_{a.alias}")
        if a.func == "sum":
            yield F.sum(value * net).alias(f"d_sum_{a.alias}")


def _netted(signed: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The signed images projected on ``columns`` and netted: equal images cancel out."""
    from pyspark.sql import functions as F  # noqa: N812

    netted = signed.groupBy(*dict.fromkeys(columns)).agg(F.sum(_NET).alias(_NET))
    return netted.where(F.col(_NET) != 0)


def _merge(
    view: ViewDefinition, change: dict[str, Any], stored: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The group's new state row from its stored row and its change; None when it must be
    recomputed (its MIN/MAX value was taken away, or it is not stored as the change expects)."""
    old = stored or {}
    rows = (old.get(ROWS) or 0) + change["d_rows"]
    if rows < 0 or (stored is None and change["d_rows"] <= 0):
        return None  # takes away rows the view does not hold: read the group again
    new: dict[str, Any] = {KEY: change[KEY], ROWS: rows, DELETED: False}
    if rows == 0:
        return new  # the group is gone: no extreme to look for, nothing to read again
    for output in view.outputs:
        if output.group is not None:
            new[output.alias] = change[output.group]
    for a in view.aggregates:
        if a.column is None:
            new[a.alias] = rows
            continue
        count_column = nonnull_column(a)
        count = (old.get(count_column) or 0) + change[f"d_n_{a.alias}"]
        new[count_column] = count
        if a.func == "count":
            new[a.alias] = count
        elif a.func == "sum":
            total, step = old.get(a.alias), change[f"d_sum_{a.alias}"]
            if count == 0:
                new[a.alias] = None
            elif total is None and step is None:
                return None  # values counted but none summed: read the group again
            else:
                # A zero is a value (Decimal("0.00") is falsy): only None means no sum.
                new[a.alias] = step if total is None else total if step is None else total + step
        else:
            current, added, gone = (
                old.get(a.alias),
                change[f"add_{a.alias}"],
                change[f"gone_{a.alias}"],
            )
            if (
                gone is not None
                and current is not None
                and _reaches(a.func, gone, current)
                and not (added is not None and _reaches(a.func, added, current))
            ):
                # The extreme itself was taken away and nothing as extreme added: only the
                # base table knows the group's next one. (An added value reaching it is the
                # new extreme: every other value is behind the old one.)
                return None
            candidates = [v for v in (current, added) if v is not None]
            if count == 0:
                new[a.alias] = None
            elif not candidates:
                return None
            else:
                new[a.alias] = min(candidates) if a.func == "min" else max(candidates)
    return new


def _reaches(func: str, value: Any, extreme: Any) -> bool:
    """``value`` is as extreme as ``extreme`` for a MIN (``func`` "min") or a MAX."""
    return bool(value <= extreme) if func == "min" else bool(value >= extreme)


def _deleted(fields: list[str], stored: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """A delete record of the group, or None when the view never held it."""
    if stored is None:
        return None
    row = dict(stored)
    row[DELETED] = True
    return tuple(row.get(f) for f in fields)


def verify_view(maintainer: ViewMaintainer, name: str) -> VerifyResult:
    """Compare the view table with a full recomputation over the base commit it includes."""
    defined = maintainer.definition(name)
    table = ViewTable(maintainer.config, maintainer.spark, name)
    checkpoint = table.checkpoint() if table.exists() else None
    if checkpoint is None or any(t not in checkpoint.base for t in defined.tables):
        raise ViewDefinitionError(f"view {name} has not been built yet (tidelake view run)")
    view = follow_renames(defined, checkpoint.renamed)
    snapshots = {
        t: maintainer._snapshot(maintainer.base_path(t), checkpoint.base[t]) for t in view.tables
    }
    visible = [o.alias for o in view.outputs]
    expected = maintainer._state(view, maintainer._input(view, snapshots)).select(*visible).cache()
    actual = table.read().select(*visible).cache()
    try:
        return VerifyResult(
            name,
            rows=actual.count(),
            expected=expected.count(),
            extra=actual.exceptAll(expected).count(),
            missing=expected.exceptAll(actual).count(),
            base=dict(checkpoint.base),
        )
    finally:
        expected.unpersist()
        actual.unpersist()
