"""Applying DDL to the lake's Hudi tables: schema evolution at the barrier.

docs/architecture.md §5 describes where it stands in the ingest.

The ingest calls :meth:`SchemaEvolver.apply` for a DDL event after the rows that precede it
are committed, and before any row that follows it: rows before the DDL land under the old
schema, rows after under the new one. :mod:`tidelake.lake.ddl` turns the statement into
operations; here each one becomes at most one Hudi commit per table, carrying the table's
new checkpoint (``schema_version`` + 1) in the same commit:

=====================  ===================================================================
operation              what the lake does
=====================  ===================================================================
create table           an empty Hudi table with the declared schema and primary key, so
                       the first rows pay no table creation
add column, NULL       a commit with no rows whose schema has the column (Hudi's schema
                       evolution on write): existing rows read NULL, as at the source
add column, DEFAULT    existing rows read the default at the source, so the table is
                       rewritten with it (``CURRENT_TIMESTAMP`` = the DDL's commit time)
drop / rename column   the table is rewritten without / under the new name
widen a type           the table is rewritten with the column cast (``is_safe_widening``)
truncate               the table is replaced by an empty snapshot (``insert_overwrite_table``)
drop table             a tombstone with the final checkpoint, then the directory goes
rename table           the rows are copied into the new table (its checkpoint carries
                       the old one on), then the old table is dropped as above
index, comment, …      a commit with no rows, only the checkpoint
=====================  ===================================================================

A "rewrite" is one ``insert_overwrite_table`` commit (:func:`tidelake.lake.hudi.write_options`
with ``rewrite=True``): atomic, and every file of the new snapshot has the new schema. Hudi
1.1 also offers schema-on-read evolution (``hoodie.schema.on.read.enable`` with Spark SQL
``ALTER TABLE … RENAME COLUMN / DROP COLUMN``), metadata-only, but hudi-rs 0.5.0 then reads
a renamed column as NULL in the files written before the rename (verified on the pinned
pair), and the ALTER commit cannot carry our checkpoint: so tidelake does not use it.

Idempotence: every operation first looks at the table's checkpoint; a table whose
checkpoint already covers the DDL's stream sequence is left alone. Dropped tables keep their
last checkpoint in ``<state>/dropped.json`` (a tombstone), so events replayed from before a
drop cannot re-create the table, and a drop interrupted between the tombstone and the delete
is finished the next time the table is looked at.

What cannot be applied raises :class:`DdlBlocked`: the ingest pauses that table with the
reason (``paused.json``) and records the DDL in ``ddl_blocked.json`` for ``tidelake table
skip-ddl``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from tidelake.errors import TableRefused
from tidelake.events import ChangeEvent
from tidelake.lake import ddl
from tidelake.lake.catalog import create_database, drop_database
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.hudi import DELETE_FIELD, RENAMED_KEY
from tidelake.lake.ledger import BlockedDdl
from tidelake.lake.rules import ddl_checkpoint
from tidelake.lake.schema import LINEAGE_NAMES, converter, is_safe_widening, schema_for, spark_type

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

    from tidelake.lake.store import TableStore

log = structlog.get_logger(__name__)


class DdlBlocked(TableRefused):
    """A DDL the lake cannot apply: its table pauses until an operator acts."""

    def __init__(self, table_id: str, event: ChangeEvent, reason: str) -> None:
        self.table_id = table_id
        self.event = event
        self.reason = reason
        super().__init__(
            f"{table_id}: DDL at stream sequence {event.seq} cannot be applied: {reason} "
            f"[{(event.ddl or '').strip()[:300]}] — `tidelake table skip-ddl {table_id}` "
            f"goes on without it, `tidelake table resume {table_id}` retries it"
        )


# --- the column plan of one table -----------------------------------------------------------


@dataclass
class _Field:
    """One source column of the table after the DDL: where its values come from."""

    name: str
    dtype: DataType
    #: The stored column it reads (None: a new column).
    source: str | None
    #: A new column's value for existing rows (None = NULL).
    value: Any = None
    cast: bool = False


@dataclass
class _Plan:
    """The table's source columns after the operations, and whether rows must be rewritten."""

    fields: list[_Field]
    lineage: list[Any]
    rewrite: bool = False
    changed: list[str] = field(default_factory=list)
    #: Column renames in the order applied, recorded in the rewrite's commit for the views.
    renamed: list[tuple[str, str]] = field(default_factory=list)

    def find(self, name: str) -> _Field | None:
        return next((f for f in self.fields if f.name == name), None)


@dataclass
class DdlOutcome:
    """What one DDL did to one table: the commits.jsonl line(s) are built from it."""

    table_id: str
    action: str
    checkpoint: TableCheckpoint
    instant: str | None = None
    rows_rewritten: int | None = None
    ops: list[str] = field(default_factory=list)


class SchemaEvolver:
    """Applies the operations of DDL events to the tables of one :class:`TableStore`."""

    def __init__(self, store: TableStore) -> None:
        self.store = store
        self.spark = store.spark
        self.config = store.config
        self.ledger = store.ledger

    def record_blocked(self, blocked: DdlBlocked) -> None:
        """Keep the DDL a table waits on (``ddl_blocked.json``, for ``skip-ddl``)."""
        event = blocked.event
        self.ledger.record_blocked(
            blocked.table_id,
            BlockedDdl(
                seq=event.seq,
                position=event.position.encode(),
                ddl=event.ddl,
                reason=blocked.reason,
            ),
        )

    # -- entry point

    def apply(self, table_id: str, event: ChangeEvent, skip: bool = False) -> list[DdlOutcome]:
        """Apply one DDL event (its table's rows before it are committed already)."""
        dialect = ddl.dialect_for(event.source)
        ops = (
            [ddl.NoOp(None, "skipped by operator")]
            if skip
            else ddl.parse_ddl(event.ddl or "", dialect, event.database)
        )
        log.info(
            "ddl", table=table_id, seq=event.seq, ddl=event.ddl, ops=[_op_name(o) for o in ops]
        )
        for op in ops:
            if isinstance(op, ddl.Unsupported):
                raise DdlBlocked(table_id, event, op.reason)
        ops = self._owned_ops(table_id, event, ops)
        outcomes: list[DdlOutcome] = []
        column_ops: dict[str, list[ddl.Operation]] = {}
        for op in ops:
            if isinstance(op, ddl.AddColumn | ddl.DropColumn | ddl.RenameColumn | ddl.ModifyColumn):
                column_ops.setdefault(op.table.table_id, []).append(op)
        done_columns: set[str] = set()
        for op in ops:
            if isinstance(op, ddl.AddColumn | ddl.DropColumn | ddl.RenameColumn | ddl.ModifyColumn):
                target = op.table.table_id
                if target not in done_columns:
                    done_columns.add(target)
                    outcomes += self._alter_columns(target, column_ops[target], event)
            elif isinstance(op, ddl.CreateTable):
                outcomes += self._create(op, event)
            elif isinstance(op, ddl.TruncateTable):
                outcomes += self._truncate(op.table.table_id, event)
            elif isinstance(op, ddl.DropTable):
                outcomes += self._drop(op.table.table_id, event, "drop table")
            elif isinstance(op, ddl.CreateDatabase):
                # No table and no checkpoint: databases.json orders it (lake/catalog.py).
                create_database(self.spark, self.ledger, op.database, event.seq)
            elif isinstance(op, ddl.DropDatabase):
                # Only this worker's tables: each worker owning tables of the database
                # takes the event on its own subjects and drops its own (ingest.tables).
                mine = [t for t in self.store.tables_of(op.database) if self.config.ingest.owns(t)]
                for loc in mine:
                    outcomes += self._drop(loc, event, "drop database")
                drop_database(self.spark, self.ledger, op.database, event.seq)
            elif isinstance(op, ddl.RenameTable):
                outcomes += self._rename_table(op.table.table_id, op.to.table_id, event)
        owned = self.config.ingest.owns(table_id)
        if owned and not any(o.table_id == table_id for o in outcomes) and event.table:
            # An index, a comment, a skipped DDL …: the table's checkpoint moves all the same.
            outcomes += self._bump(table_id, event, "recorded")
        self.ledger.clear_blocked(table_id)
        return outcomes

    # -- helpers

    def _owned_ops(
        self, table_id: str, event: ChangeEvent, ops: Sequence[ddl.Operation]
    ) -> list[ddl.Operation]:
        """The operations on this ingest's own tables (``ingest.tables``; all when unset).
        One statement may name tables of several workers (``DROP TABLE a, b``: each table's
        own event reaches its owner, which applies its share); a rename across two workers
        can be applied by neither, so the table pauses with the reason instead."""
        owns = self.config.ingest.owns
        kept: list[ddl.Operation] = []
        for op in ops:
            if isinstance(op, ddl.RenameTable):
                source, target = op.table.table_id, op.to.table_id
                if owns(source) != owns(target):
                    raise DdlBlocked(
                        table_id,
                        event,
                        f"RENAME from {source} to {target} crosses two workers' tables "
                        "(ingest.tables): move both to one worker, or skip it",
                    )
                if owns(source):
                    kept.append(op)
                continue
            target_table = getattr(op, "table", None)
            if target_table is not None and not owns(target_table.table_id):
                log.info("ddl on another worker's table left to it", table=target_table.table_id)
                continue
            kept.append(op)
        return kept

    def _next(self, table_id: str, event: ChangeEvent) -> TableCheckpoint | None:
        """The table's checkpoint after ``event``; None when it already covers the event."""
        return ddl_checkpoint(self.store.checkpoint(table_id), event)

    def _path(self, table_id: str) -> str:
        return self.store.path(table_id)

    def _exists(self, table_id: str) -> bool:
        return self.store.exists(self._path(table_id))

    def _bump(self, table_id: str, event: ChangeEvent, action: str) -> list[DdlOutcome]:
        checkpoint = self._next(table_id, event)
        if checkpoint is None or not self._exists(table_id):
            return []
        schema = self.store.stored_schema(self._path(table_id))
        df = self.spark.createDataFrame([], schema)
        instant = self.store.commit(table_id, df, checkpoint)
        return [DdlOutcome(table_id, action, checkpoint, instant)]

    # -- create

    def _create(self, op: ddl.CreateTable, event: ChangeEvent) -> list[DdlOutcome]:
        table_id = op.table.table_id
        checkpoint = self._next(table_id, event)
        if checkpoint is None:
            return []
        if self._exists(table_id) and self.store.checkpoint(table_id) is not None:
            # CREATE TABLE IF NOT EXISTS, or a table the lake has from before: keep it.
            return self._bump(table_id, event, "create table (exists)")
        # A table directory without any checkpoint holds nothing this DDL's stream committed:
        # a creation killed after Hudi wrote the table's properties but before its first
        # commit completed (seen by a short `make chaos` run). It is created as declared, so
        # the declared column types reach the checkpoint instead of being lost.
        if op.like is not None:
            like_path = self._path(op.like.table_id)
            if not self.store.exists(like_path):
                log.warning("CREATE TABLE LIKE a table the lake lacks", table=table_id)
                return []
            schema = self.store.stored_schema(like_path)
            pk = self.store.stored_primary_key(like_path)
        else:
            if not op.primary_key:
                log.warning("table without primary key not created", table=table_id)
                return []
            declared = {c.name: c.source_type for c in op.columns}
            schema = schema_for(declared)
            pk = op.primary_key
            checkpoint = replace(checkpoint, columns=declared)
        df = self.spark.createDataFrame([], schema)
        instant = self.store.commit(table_id, df, checkpoint, pk=pk)
        self.ledger.remove_tombstone(table_id)
        self.store.sync_catalog(table_id)
        return [DdlOutcome(table_id, "create table", checkpoint, instant)]

    # -- columns

    def _plan(self, schema: StructType) -> _Plan:
        fields = [
            _Field(f.name, f.dataType, f.name)
            for f in schema.fields
            if f.name not in LINEAGE_NAMES and not f.name.startswith("_hoodie_")
        ]
        lineage = [f for f in schema.fields if f.name in LINEAGE_NAMES]
        return _Plan(fields, lineage)

    def _alter_columns(
        self, table_id: str, ops: Sequence[ddl.Operation], event: ChangeEvent
    ) -> list[DdlOutcome]:
        checkpoint = self._next(table_id, event)
        if checkpoint is None or not self._exists(table_id):
            return []
        path = self._path(table_id)
        schema = self.store.stored_schema(path)
        pk = self.store.stored_primary_key(path)
        plan = self._plan(schema)
        for op in ops:
            reason = self._plan_op(plan, op, pk, event)
            if reason is not None:
                raise DdlBlocked(table_id, event, reason)
        from pyspark.sql.types import StructField, StructType

        new_schema = StructType(
            [StructField(f.name, f.dtype, True) for f in plan.fields] + plan.lineage
        )
        checkpoint = replace(checkpoint, columns=_declared_after(checkpoint.columns, ops))
        rows: int | None = None
        if plan.rewrite:
            df = self._rewritten(path, plan)
            rows = df.count()
            renamed = {RENAMED_KEY: orjson.dumps(plan.renamed).decode()} if plan.renamed else {}
            instant = self.store.commit(table_id, df, checkpoint, rewrite=True, extra=renamed)
        else:
            df = self.spark.createDataFrame([], new_schema)
            instant = self.store.commit(table_id, df, checkpoint)
        self.store.sync_catalog(table_id)
        action = "rewrite" if plan.rewrite else "schema"
        return [DdlOutcome(table_id, action, checkpoint, instant, rows, plan.changed)]

    def _plan_op(
        self, plan: _Plan, op: ddl.Operation, pk: Sequence[str], event: ChangeEvent
    ) -> str | None:
        """Apply ``op`` to ``plan``; a reason when it cannot be applied."""
        if isinstance(op, ddl.AddColumn):
            col = op.column
            if plan.find(col.name) is not None:
                return None  # applied already (or the rows brought it first)
            value = self._default_value(col, event)
            if isinstance(value, str) and value.startswith("!"):
                return value[1:]
            plan.fields.append(_Field(col.name, spark_type(col.source_type), None, value))
            plan.rewrite |= value is not None
            plan.changed.append(f"add {col.name} {col.source_type}")
        elif isinstance(op, ddl.DropColumn):
            if op.name in pk:
                return f"dropping primary-key column {op.name} changes the record key"
            held = plan.find(op.name)
            if held is None:
                return None
            plan.fields.remove(held)
            plan.rewrite = True
            plan.changed.append(f"drop {op.name}")
        elif isinstance(op, ddl.RenameColumn):
            return self._rename_column(plan, op.old, op.new, pk)
        elif isinstance(op, ddl.ModifyColumn):
            if op.new_name is not None:
                reason = self._rename_column(plan, op.name, op.new_name, pk)
                if reason is not None:
                    return reason
            name = op.new_name or op.name
            held = plan.find(name)
            if held is None:
                return f"column {name} to modify is not in the table"
            new_type = spark_type(op.source_type)
            if new_type == held.dtype:
                return None
            if not is_safe_widening(held.dtype, new_type):
                return (
                    f"column {name}: {held.dtype.simpleString()} → {new_type.simpleString()} "
                    f"({op.source_type}) is not a safe widening; existing values could change"
                )
            held.dtype, held.cast = new_type, True
            plan.rewrite = True
            plan.changed.append(f"widen {name} to {op.source_type}")
        return None

    @staticmethod
    def _rename_column(plan: _Plan, old: str, new: str, pk: Sequence[str]) -> str | None:
        if old == new:
            return None
        if old in pk:
            return f"renaming primary-key column {old} changes the record key"
        held = plan.find(old)
        if held is None:
            return None if plan.find(new) is not None else f"column {old} is not in the table"
        if plan.find(new) is not None:
            return f"column {new} exists already"
        held.name = new
        plan.rewrite = True
        plan.changed.append(f"rename {old} to {new}")
        plan.renamed.append((old, new))
        return None

    def _default_value(self, col: ddl.ColumnSpec, event: ChangeEvent) -> Any:
        """The typed value existing rows take; ``"!reason"`` when the lake cannot know it."""
        default = col.default
        tz = self.config.lake.source_timezone
        if default.kind == "expression":
            return (
                f"!column {col.name}: existing rows get DEFAULT {default.text} computed per row "
                "by the source; the lake cannot know those values"
            )
        text = default.text
        if default.kind == "current_timestamp":
            if event.commit_ts_ms is None:
                return f"!column {col.name}: DEFAULT CURRENT_TIMESTAMP and no commit time"
            instant = dt.datetime.fromtimestamp(event.commit_ts_ms / 1000, dt.UTC)
            zone = converter_zone(tz)
            text = instant.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")
        if text is None:
            return None
        try:
            return converter(col.source_type, tz)(text)
        except (ValueError, TypeError, ArithmeticError) as exc:
            return f"!column {col.name}: default {text!r} is not a valid {col.source_type}: {exc}"

    def _rewritten(self, path: str, plan: _Plan) -> DataFrame:
        from pyspark.sql import functions as F  # noqa: N812 (PySpark's own convention)

        current = self.store.read(path)
        columns: list[Column] = []
        for f in plan.fields:
            if f.source is None:
                columns.append(F.lit(f.value).cast(f.dtype).alias(f.name))
            elif f.cast:
                columns.append(F.col(_quoted(f.source)).cast(f.dtype).alias(f.name))
            else:
                columns.append(F.col(_quoted(f.source)).alias(f.name))
        for lf in plan.lineage:
            if lf.name == DELETE_FIELD:
                columns.append(F.lit(False).alias(DELETE_FIELD))
            else:
                columns.append(F.col(_quoted(lf.name)))
        return current.select(*columns)

    # -- whole tables

    def _truncate(self, table_id: str, event: ChangeEvent) -> list[DdlOutcome]:
        checkpoint = self._next(table_id, event)
        if checkpoint is None or not self._exists(table_id):
            return []
        schema = self.store.stored_schema(self._path(table_id))
        df = self.spark.createDataFrame([], schema)
        instant = self.store.commit(table_id, df, checkpoint, rewrite=True)
        self.store.sync_catalog(table_id)
        return [DdlOutcome(table_id, "truncate", checkpoint, instant, 0)]

    def _drop(self, table_id: str, event: ChangeEvent, action: str) -> list[DdlOutcome]:
        checkpoint = self._next(table_id, event)
        if checkpoint is None:
            return []
        # The tombstone first: should the process die before the directory is gone, the
        # next look at the table finishes the drop (TableStore.checkpoint).
        self.ledger.put_tombstone(table_id, checkpoint.to_json())
        self.store.remove_table(table_id)
        return [DdlOutcome(table_id, action, checkpoint)]

    def _rename_table(self, old_id: str, new_id: str, event: ChangeEvent) -> list[DdlOutcome]:
        outcomes: list[DdlOutcome] = []
        old_next = self._next(old_id, event)
        if old_next is None:
            return []  # the old name already carries the rename: done
        new_next = self._next(new_id, event)
        if new_next is not None and self._exists(old_id):
            old_cp = self.store.checkpoint(old_id)
            carried = TableCheckpoint(
                seq=new_next.seq,
                position=max(p for p in (old_next.position, new_next.position) if p),
                schema_version=(old_cp.schema_version if old_cp else 0) + 1,
                columns=dict(old_cp.columns) if old_cp else {},
            )
            old_path = self._path(old_id)
            if self._exists(new_id):
                # At the source the new name was free: what the lake holds there is stale.
                self.store.remove_table(new_id)
            pk = self.store.stored_primary_key(old_path)
            df = self.store.read(old_path)
            keep = [c for c in df.columns if not c.startswith("_hoodie_")]
            from pyspark.sql import functions as F  # noqa: N812

            copy = df.select(*[_quoted(c) for c in keep], F.lit(False).alias(DELETE_FIELD))
            rows = copy.count()
            instant = self.store.commit(new_id, copy, carried, pk=pk, rewrite=True)
            self.ledger.remove_tombstone(new_id)
            self.store.sync_catalog(new_id)
            outcomes.append(DdlOutcome(new_id, "rename table (to)", carried, instant, rows))
        outcomes += self._drop(old_id, event, "rename table (from)")
        return outcomes


def _declared_after(columns: dict[str, str], ops: Sequence[ddl.Operation]) -> dict[str, str]:
    """The table's column source types after its column operations (``lake/definitions.py``:
    what DDL declares is how later values are typed)."""
    out = dict(columns)
    for op in ops:
        if isinstance(op, ddl.AddColumn):
            out[op.column.name] = op.column.source_type
        elif isinstance(op, ddl.DropColumn):
            out.pop(op.name, None)
        elif isinstance(op, ddl.RenameColumn) and op.old in out:
            out = {(op.new if k == op.old else k): v for k, v in out.items()}
        elif isinstance(op, ddl.ModifyColumn):
            if op.new_name is not None and op.name in out:
                out = {(op.new_name if k == op.name else k): v for k, v in out.items()}
            out[op.new_name or op.name] = op.source_type
    return out


def converter_zone(name: str) -> dt.tzinfo:
    """The zone of ``lake.source_timezone``."""
    from zoneinfo import ZoneInfo

    return dt.UTC if name.upper() == "UTC" else ZoneInfo(name)


def _quoted(name: str) -> str:
    """A column name for ``F.col``: backticks, inner backticks doubled (dots stay literal)."""
    return "`" + name.replace("`", "``") + "`"


def _op_name(op: ddl.Operation) -> str:
    return type(op).__name__
