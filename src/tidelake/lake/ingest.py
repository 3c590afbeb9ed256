"""The ingest: staged manifests → one Hudi upsert per table, checkpoint in the same commit.

A loop over *rounds*. A round is one or more manifests in stream order (up to
``ingest.max_batch_events`` events, and never past a manifest holding DDL: DDL is a barrier).
For each table of the round:

1. drop events at or below the table checkpoint's stream sequence (redelivered or restaged
   batches: DESIGN.md §3 rule 1) and row events strictly below its position watermark
   (republished events: rule 2; an event at the watermark may share its position with
   applied ones and is applied, which is idempotent for a copy);
2. collapse each key's events to the last by position (rule 4); a primary-key change also
   deletes the old key; a last DELETE becomes a row with ``_hoodie_is_deleted = true``;
3. upsert the typed rows with the new :class:`TableCheckpoint` in the commit's extra metadata.

The local cursor (``<lake_root>/_tidelake/cursor.json``) only saves listing work: every
decision comes from the per-table checkpoints, read back from Hudi at start.
After each commit one JSON line is appended to ``<lake_root>/_tidelake/commits.jsonl``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from pyspark.sql.types import DataType, StringType, StructField, StructType

from tidelake.api.control import TableControl
from tidelake.config import Config
from tidelake.errors import IngestError, TableRefused, Terminal
from tidelake.events import ChangeEvent, Op
from tidelake.lake.checkpoint import (
    CommittedCheckpoint,
    TableCheckpoint,
    read_checkpoint,
    table_property,
)
from tidelake.lake.dead_letters import DeadLetters, Rejected
from tidelake.lake.definitions import (
    SourceCatalog,
    canonical_key,
    configured,
    is_complete,
    resolve_columns,
)
from tidelake.lake.hudi import (
    CHECKPOINT_KEY,
    DELETE_FIELD,
    METADATA_PARTITIONS_KEY,
    ORDERING_FIELD,
    discard_interrupted_creation,
    local_dir,
    newest_base_file_bytes,
    split_table_id,
    table_path,
    write_options,
)
from tidelake.lake.jvm_errors import shorten
from tidelake.lake.schema import (
    LINEAGE_FIELDS,
    LINEAGE_NAMES,
    converter,
    spark_type,
    value_form,
)
from tidelake.lake.spark import list_dir, table_exists
from tidelake.runtime.heartbeat import write_heartbeat
from tidelake.runtime.storage import Storage, open_storage
from tidelake.stage.manifest import Manifest, list_manifests, read_manifest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = structlog.get_logger(__name__)

#: Source type assumed for a column an event carries without a type.
UNTYPED = "text"
#: Consecutive failed rounds of one table before it is paused (the others go on).
MAX_TABLE_FAILURES = 3
#: Test hook: ``after_ddl_commit`` SIGKILLs the ingest's process group right after a DDL's
#: commit(s), before anything else (the next batch, the cursor hint, commits.jsonl).
CRASH_HOOK_ENV = "TEST_TIDELAKE_INGEST_CRASH_AT"


def _crash_point(point: str) -> None:
    if os.environ.get(CRASH_HOOK_ENV) == point:
        log.warning("crash hook", point=point)
        os.killpg(os.getpgid(0), signal.SIGKILL)


# --- pure logic: filtering and collapsing ---------------------------------------------------


@dataclass
class Filtered:
    """The events of one table left to apply, and what was dropped and why."""

    kept: list[ChangeEvent] = field(default_factory=list)
    #: At or below the checkpoint's stream sequence, or a second copy in this round.
    duplicates: int = 0
    #: Row events below the position watermark (republished, or a stale DLQ replay).
    stale: int = 0


def filter_events(events: Iterable[ChangeEvent], checkpoint: TableCheckpoint | None) -> Filtered:
    """Drop what the table already holds (DESIGN.md §3 rules 1 and 2), keep stream order."""
    out = Filtered()
    seen: set[tuple[int, str]] = set()
    seq_floor = checkpoint.seq if checkpoint else 0
    watermark = checkpoint.position if checkpoint else None
    for event in events:
        ident = (event.seq, event.position.encode())
        if event.seq <= seq_floor or ident in seen:
            out.duplicates += 1
            continue
        seen.add(ident)
        # Strictly below: several events may share one position (a Debezium snapshot's rows,
        # both halves of a key change), so an event AT the watermark may be new. Applying it
        # again when it is a republished copy changes nothing: the lake already holds that
        # key's image at that position, and nothing later of the table (or the watermark
        # would be higher).
        if event.op.is_row_change and watermark is not None and event.position.encode() < watermark:
            out.stale += 1
            continue
        out.kept.append(event)
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """The last change of one key: upsert ``row`` or delete it. ``missing``: columns the
    producer did not send (``ChangeEvent.unchanged``) that no earlier event of the batch
    supplied: the row keeps the table's stored values for them."""

    key: tuple[Any, ...]
    delete: bool
    row: Mapping[str, Any]
    event: ChangeEvent
    missing: frozenset[str] = frozenset()


KeyFn = Callable[[Mapping[str, Any]], tuple[Any, ...]]


def _image(event: ChangeEvent) -> Mapping[str, Any]:
    row = event.row
    if row is None:
        row = event.key or {}
    return row


def collapse(
    events: Sequence[ChangeEvent],
    key_of: KeyFn | None = None,
    *,
    key_for: Callable[[ChangeEvent], KeyFn] | None = None,
) -> list[Change]:
    """Each key's last change by position (ties: the later event), in position order.

    An UPDATE whose primary key changed (a MySQL binlog UPDATE of a key column) also deletes
    the old key, at the same position. An update that lacks columns (``unchanged``) takes
    them from the key's previous upsert in the batch, when there is one.
    """
    last: dict[tuple[Any, ...], Change] = {}

    def offer(change: Change) -> None:
        held = last.get(change.key)
        if held is None or held.event.position <= change.event.position:
            if change.missing and held is not None and not held.delete:
                filled = {c: held.row[c] for c in change.missing if c in held.row}
                change = Change(
                    change.key,
                    change.delete,
                    {**change.row, **filled},
                    change.event,
                    (change.missing - filled.keys()) | (change.missing & held.missing),
                )
            last[change.key] = change

    for event in events:
        if not event.op.is_row_change:
            continue
        if key_for is not None:
            key_of = key_for(event)
        assert key_of is not None
        image = _image(event)
        if event.op is Op.DELETE:
            source = {**(event.key or {}), **image}
            offer(Change(key_of(source), True, source, event))
            continue
        new_key = key_of({**image, **(event.key or {})})
        if event.op is Op.UPDATE and event.before:
            old_image = {**image, **event.before}
            old_key = key_of(old_image)
            if old_key != new_key:
                offer(Change(old_key, True, old_image, event))
        offer(Change(new_key, False, image, event, frozenset(event.unchanged)))
    return sorted(last.values(), key=lambda c: c.event.position)


# --- the table writer -----------------------------------------------------------------------


@dataclass
class TableResult:
    """One table's share of a round: the commits.jsonl line, or why nothing was written."""

    table: str
    #: One commits.jsonl line per Hudi commit (rows; a DDL may add one per table it changes).
    commits: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    stale: int = 0
    refused: str | None = None

    @property
    def committed(self) -> dict[str, Any] | None:
        """The last commit of the round, if any."""
        return self.commits[-1] if self.commits else None


def _columns(events: Sequence[ChangeEvent], pk: Sequence[str]) -> dict[str, str]:
    """Column → the type the messages carry (hints), over every event, in first-seen order;
    a column no message types maps to ``""``."""
    columns: dict[str, str] = {}
    for event in events:
        for name, source_type in event.column_types.items():
            columns[name] = source_type
    for event in events:
        for image in (event.after, event.before, event.key):
            for name in image or {}:
                columns.setdefault(name, "")
        for name in event.unchanged:
            columns.setdefault(name, "")
    for name in pk:
        columns.setdefault(name, "")
    return {k: v for k, v in columns.items() if k not in LINEAGE_NAMES}


def _ms_to_utc(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


#: A stored Spark type → the source type that reads a value into it, for a column the table
#: stores but no definition types (a table written before definitions were kept).
_STORED_AS = {
    "tinyint": "tinyint",
    "smallint": "smallint",
    "int": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "datetime",
    "string": "text",
    "binary": "varbinary",
}


@dataclass(frozen=True)
class TableTypes:
    """How the values of one table are typed: each column's source type (None: known
    nowhere, ``lake/definitions.py``), the Spark types the table stores already, and the zone
    of zone-less source timestamps."""

    source: Mapping[str, str | None]
    stored: Mapping[str, DataType] = field(default_factory=dict)
    timezone: str = "UTC"
    #: What the messages said of a column whose type is unknown (for the reason).
    hints: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_hints(cls, columns: Mapping[str, str], timezone: str = "UTC") -> TableTypes:
        """Types from the messages alone (an untyped column as text; an incomplete type,
        such as a bare ``decimal``, types nothing)."""
        source = {c: t or UNTYPED for c, t in columns.items()}
        return cls(
            {c: t if is_complete(t) else None for c, t in source.items()},
            {},
            timezone,
            {c: t for c, t in columns.items() if t},
        )

    def target(self, name: str) -> DataType | None:
        """The Spark type column ``name`` is stored as; None when no source types it."""
        held = self.stored.get(name)
        if held is not None:
            return held
        source_type = self.source.get(name)
        return spark_type(source_type) if source_type else None

    def converter(self, table_id: str, name: str, form: str) -> Callable[[Any], Any]:
        target = self.target(name)
        source_type = self.source.get(name) or self.hints.get(name)
        if target is None:
            said = self.hints.get(name)
            return _refuse(
                f"{table_id}: the type of column {name} is not known"
                + (f" (the message says only {said!r})" if said else "")
                + f": define it by CREATE TABLE in the stream, lake.tables.{table_id}.columns "
                "or lake.source_catalog"
            )
        if not source_type:
            source_type = _STORED_AS.get(target.simpleString(), target.simpleString())
        return converter(source_type, self.timezone, form, target)


def _refuse(reason: str) -> Callable[[Any], Any]:
    def refuse(value: Any) -> Any:
        raise ValueError(reason)

    return refuse


class _Rejected(Exception):  # noqa: N818 -- control flow inside build_batch, never escapes
    def __init__(self, event: ChangeEvent, reason: str) -> None:
        super().__init__(reason)
        self.event = event
        self.reason = reason


#: Reads the stored values of ``columns`` for typed ``keys``: key → column → typed value.
CurrentValues = Callable[
    [Sequence[tuple[Any, ...]], Sequence[str]], Mapping[tuple[Any, ...], Mapping[str, Any]]
]


@dataclass
class TableBatch:
    """The typed rows of one table's upsert, ready for Spark, and the events refused."""

    columns: dict[str, str]
    schema: StructType
    rows: list[tuple[Any, ...]]
    upserts: int
    deletes: int
    rejected: list[Rejected] = field(default_factory=list)


def build_batch(
    table_id: str,
    events: Sequence[ChangeEvent],
    pk: Sequence[str],
    source_timezone: str = "UTC",
    ingest_ts: dt.datetime | None = None,
    *,
    types: TableTypes | None = None,
    current: CurrentValues | None = None,
) -> TableBatch:
    """Collapse ``events`` (already filtered) and type them into Spark rows.

    An event holding a value its column cannot store exactly (``lake/schema.py`` raises
    ValueError) is left out and returned in ``rejected`` with the reason; the key's previous
    event in the batch, if any, then decides the key, as if the refused event never came.
    ``current`` reads the stored values of columns an update did not send.
    """
    hints = _columns(events, pk)
    types = types or TableTypes.from_hints(hints, source_timezone)
    rejected: list[Rejected] = []
    live = list(events)
    while True:
        refused = _typed_batch(table_id, live, pk, types, ingest_ts, current)
        if isinstance(refused, TableBatch):
            refused.rejected = rejected
            return refused
        gone = {id(r.event) for r in refused}
        rejected.extend(refused)
        live = [e for e in live if id(e) not in gone]


def _typed_batch(
    table_id: str,
    events: Sequence[ChangeEvent],
    pk: Sequence[str],
    types: TableTypes,
    ingest_ts: dt.datetime | None,
    current: CurrentValues | None,
) -> TableBatch | list[Rejected]:
    """The batch, or the events refused in this pass (the caller drops them and retries)."""
    columns = _columns(events, pk)
    names = [n for n in columns if types.target(n) is not None or n in pk]
    unknown = [n for n in columns if n not in names]
    index = {n: i for i, n in enumerate(names)}
    forms: dict[tuple[str, str], str] = {}
    by_form: dict[str, list[Callable[[Any], Any]]] = {}

    def form_of(event: ChangeEvent) -> str:
        ident = (event.source, event.encoding)
        form = forms.get(ident)
        if form is None:
            form = forms[ident] = value_form(*ident)
        return form

    def converters(form: str) -> list[Callable[[Any], Any]]:
        """One converter per column of ``names``, for values written in ``form``."""
        held = by_form.get(form)
        if held is None:
            held = by_form[form] = [types.converter(table_id, n, form) for n in names]
        return held

    def typed(name: str, value: Any, event: ChangeEvent) -> Any:
        if value is None:
            return None
        try:
            if name in unknown:
                return types.converter(table_id, name, form_of(event))(value)
            return converters(form_of(event))[index[name]](value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise _Rejected(
                event,
                f"{table_id}: value {str(value)[:200]!r} of column {name} cannot be stored "
                f"exactly: {exc}",
            ) from exc

    def key_fn(event: ChangeEvent) -> KeyFn:
        def key_of(image: Mapping[str, Any]) -> tuple[Any, ...]:
            missing = [c for c in pk if image.get(c) is None]
            if missing:
                raise _Rejected(
                    event, f"{table_id}: an event lacks primary-key column(s) {missing}"
                )
            return tuple(typed(c, image[c], event) for c in pk)

        return key_of

    refused: list[Rejected] = []
    row_events = [e for e in events if e.op.is_row_change]
    for event in row_events if unknown else ():
        try:
            for name in unknown:
                typed(name, (event.row or {}).get(name), event)  # a value: refused, with why
        except _Rejected as exc:
            refused.append(Rejected(exc.event, exc.reason))
    if refused:
        return refused
    try:
        changes = collapse(row_events, key_for=key_fn)
    except _Rejected:
        # A key that does not type: find every such event (the rare path).
        for event in row_events:
            try:
                collapse([event], key_fn(event))
            except _Rejected as exc:
                refused.append(Rejected(exc.event, exc.reason))
        return refused
    stored_values = _stored_values(table_id, changes, current)
    if isinstance(stored_values, list):
        return stored_values
    now = ingest_ts or dt.datetime.now(dt.UTC)
    rows = []
    deletes = 0
    for change in changes:
        e = change.event
        image = change.row
        try:
            if change.missing:
                held = stored_values.get(change.key, {})
                values = [
                    held[n] if n in change.missing else typed(n, image.get(n), e) for n in names
                ]
            else:
                fns = converters(form_of(e))
                values = [
                    None if (v := image.get(n)) is None else fn(v)
                    for n, fn in zip(names, fns, strict=True)
                ]
        except (ValueError, TypeError, ArithmeticError):
            try:  # again, column by column, for the reason naming the value
                for n in names:
                    typed(n, image.get(n), e)
            except _Rejected as exc:
                refused.append(Rejected(exc.event, exc.reason))
                continue
            raise  # converters are deterministic: never reached, never a silent skip
        except _Rejected as exc:
            refused.append(Rejected(exc.event, exc.reason))
            continue
        deletes += change.delete
        op = Op.DELETE.value if change.delete else e.op.value
        rows.append(
            (
                *values,
                op,
                e.position.encode(),
                _ms_to_utc(e.commit_ts_ms),
                now,
                e.seq,
                change.delete,
            )
        )
    if refused:
        return refused
    schema = StructType(
        [StructField(n, types.target(n) or StringType(), True) for n in names]
        + list(LINEAGE_FIELDS)
    )
    used = {n: types.source.get(n) or "" for n in names}
    return TableBatch(used, schema, rows, len(rows) - deletes, deletes)


def _stored_values(
    table_id: str, changes: Sequence[Change], current: CurrentValues | None
) -> dict[tuple[Any, ...], Mapping[str, Any]] | list[Rejected]:
    """The stored values of the columns updates did not send, per key."""
    wanting = [c for c in changes if c.missing and not c.delete]
    if not wanting:
        return {}
    columns = sorted({name for c in wanting for name in c.missing})
    found = dict(current([c.key for c in wanting], columns)) if current is not None else {}
    refused = [
        Rejected(
            c.event,
            f"{table_id}: column(s) {sorted(c.missing)} were not sent (unchanged at the source) "
            f"and the lake holds no row for key {c.key} to take them from",
        )
        for c in wanting
        if c.key not in found
    ]
    return refused or found


class TableWriter:
    """Writes rounds of one lake's tables through one Spark session."""

    def __init__(self, config: Config, spark: SparkSession) -> None:
        from tidelake.lake.evolve import SchemaEvolver

        self.config = config
        self.spark = spark
        self.lake_root = config.lake_root
        self.source_timezone = config.lake.source_timezone
        self._checkpoints: dict[str, CommittedCheckpoint | None] = {}
        #: Per table: the Spark types of the columns it stores (kept current by our commits).
        self._stored: dict[str, dict[str, DataType]] = {}
        self.catalog = SourceCatalog(config)
        self.dead_letters = DeadLetters(config)
        self.evolver = SchemaEvolver(self)

    def checkpoint(self, table_id: str) -> TableCheckpoint | None:
        """The table's checkpoint: read from Hudi once, then kept current by our commits.

        A dropped table answers with its tombstone (``lake/evolve.py``); a drop that was
        interrupted after its tombstone is finished here.
        """
        if table_id not in self._checkpoints:
            database, table = split_table_id(table_id)
            path = table_path(self.lake_root, database, table)
            committed = read_checkpoint(self.spark, path)
            tombstone = self.evolver.tombstones.get(table_id)
            if tombstone is not None and (
                committed is None or committed.checkpoint.seq < tombstone.seq
            ):
                if committed is not None:
                    log.warning("finishing an interrupted drop", table=table_id)
                    self.remove_table(table_id)
                committed = CommittedCheckpoint(tombstone, "dropped", None)
            elif tombstone is not None:
                self.evolver.tombstones.remove(table_id)  # re-created after the drop
            self._checkpoints[table_id] = committed
        held = self._checkpoints[table_id]
        return held.checkpoint if held else None

    def forget(self, table_id: str) -> None:
        """Re-read the checkpoint from Hudi next time (after a failed write)."""
        self._checkpoints.pop(table_id, None)
        self._stored.pop(table_id, None)

    def apply(
        self,
        table_id: str,
        database: str,
        table: str,
        events: Sequence[ChangeEvent],
        seq_last: int,
    ) -> TableResult:
        """Apply one round's events of one table: one Hudi commit for its rows, and for a DDL
        (the last event of a round) the rows before it first, then the schema change."""
        from tidelake.lake.evolve import DdlBlocked

        result = TableResult(table_id)
        previous = self.checkpoint(table_id)
        filtered = filter_events(events, previous)
        result.duplicates, result.stale = filtered.duplicates, filtered.stale
        segment: list[ChangeEvent] = []
        for event in filtered.kept:
            if event.op is not Op.DDL:
                segment.append(event)
                continue
            if segment:
                # Rows before the DDL land under the old schema; their checkpoint stops
                # right before the DDL, so a crash between the two commits is safe.
                self._apply_rows(result, database, table, segment, event.seq - 1)
                segment = []
            try:
                self._apply_ddl(result, event)
            except DdlBlocked as exc:
                self.evolver.blocked.record(exc)
                result.refused = str(exc)
                return result
        if segment:
            self._apply_rows(result, database, table, segment, seq_last)
        return result

    def _apply_ddl(self, result: TableResult, event: ChangeEvent) -> None:
        from tidelake.api.control import skipped_ddl_seq

        started = time.monotonic()
        skip = skipped_ddl_seq(self.config.lake_state_dir, result.table) == event.seq
        for outcome in self.evolver.apply(result.table, event, skip=skip):
            ckpt = outcome.checkpoint
            result.commits.append(
                {
                    "table": outcome.table_id,
                    "instant": outcome.instant,
                    "seq_from": event.seq - 1,
                    "seq": ckpt.seq,
                    "position": ckpt.position,
                    "schema_version": ckpt.schema_version,
                    "events": 1 if outcome.table_id == result.table else 0,
                    "upserts": 0,
                    "deletes": 0,
                    "ddl": 1,
                    "ddl_type": event.ddl_type,
                    "ddl_action": "skipped" if skip else outcome.action,
                    "ddl_changes": outcome.ops,
                    "rows_rewritten": outcome.rows_rewritten,
                    "skipped_duplicates": 0,
                    "skipped_stale": 0,
                    "committed_at_ms": int(time.time() * 1000),
                    "max_commit_ts_ms": event.commit_ts_ms,
                    "commit_ts_ms_p50": event.commit_ts_ms,
                    "duration_ms": int((time.monotonic() - started) * 1000),
                }
            )
        _crash_point("after_ddl_commit")

    def _apply_rows(
        self,
        result: TableResult,
        database: str,
        table: str,
        row_events: Sequence[ChangeEvent],
        seq_last: int,
    ) -> None:
        """Upsert row events in one Hudi commit with the table's next checkpoint; events
        whose values the table cannot store exactly go to the dead-letter stream first."""
        started = time.monotonic()
        table_id = result.table
        previous = self.checkpoint(table_id)
        path = table_path(self.lake_root, database, table)
        existed = self.exists(path)
        stored = self._stored_types(table_id, path) if existed else {}
        stored_key = self.stored_primary_key(path) if existed else None
        pk, no_key = self._primary_key(table_id, row_events, stored_key)
        types, declared = self._types(table_id, row_events, pk, stored, previous)
        if no_key:
            batch = TableBatch(
                {}, StructType([]), [], 0, 0, [Rejected(e, no_key) for e in row_events]
            )
        else:
            batch = build_batch(
                table_id,
                row_events,
                pk,
                types=types,
                current=lambda keys, cols: self._current_values(path, pk, stored, keys, cols),
            )
        if batch.rejected:
            self._dead_letter(table_id, batch.rejected)
        positions = [e.position.encode() for e in row_events]
        if previous and previous.position:
            positions.append(previous.position)
        columns = dict(previous.columns) if previous else {}
        columns.update({n: t for n, t in declared.items() if n in batch.columns})
        checkpoint = TableCheckpoint(
            seq=max(seq_last, previous.seq if previous else 0),
            position=max(positions),
            schema_version=previous.schema_version if previous else 0,
            columns=columns,
        )
        if not batch.rows and not existed:
            return  # every event dead-lettered, and no table to carry the checkpoint
        schema = batch.schema if batch.rows else self.stored_schema(path)
        df = self.spark.createDataFrame(batch.rows, schema)
        built = time.monotonic()
        instant = self.commit(table_id, df, checkpoint, pk=pk or stored_key)
        if not existed:
            self.sync_catalog(table_id)
        commit_ms = sorted(e.commit_ts_ms for e in row_events if e.commit_ts_ms is not None)
        result.commits.append(
            {
                "table": table_id,
                "instant": instant,
                "seq_from": previous.seq if previous else 0,
                "seq": checkpoint.seq,
                "position": checkpoint.position,
                "schema_version": checkpoint.schema_version,
                "events": len(row_events),
                "upserts": batch.upserts,
                "deletes": batch.deletes,
                "dead_lettered": len(batch.rejected),
                "ddl": 0,
                "skipped_duplicates": result.duplicates,
                "skipped_stale": result.stale,
                "committed_at_ms": int(time.time() * 1000),
                "max_commit_ts_ms": commit_ms[-1] if commit_ms else None,
                "commit_ts_ms_p50": int(statistics.median_low(commit_ms)) if commit_ms else None,
                "duration_ms": int((time.monotonic() - started) * 1000),
                # of which: the rows built in Python and handed to Spark
                "prepare_ms": int((built - started) * 1000),
            }
        )

    def _primary_key(
        self, table_id: str, row_events: Sequence[ChangeEvent], stored_key: tuple[str, ...] | None
    ) -> tuple[tuple[str, ...], str | None]:
        """The table's record key in its one canonical order (``lake/definitions.py``), and
        a reason when no source names one (its events are then dead-lettered)."""
        given: tuple[str, ...] = next((e.pk for e in reversed(row_events) if e.pk), ())
        if not given:
            given = configured(self.config, table_id).primary_key or stored_key or ()
        if not given:
            found = self.catalog.get(table_id)
            given = found.primary_key if found else ()
        if not given:
            return (), (
                f"{table_id}: no primary key known — the message names none; set "
                f"lake.tables.{table_id}.primary_key or lake.source_catalog (the lake refuses "
                "keyless tables: Hudi needs a record key to upsert and delete exactly)"
            )
        key = canonical_key(given, stored_key)
        if stored_key and set(key) != set(stored_key):
            raise TableRefused(
                f"{table_id}: the primary key changed from {list(stored_key)} to {list(key)}; "
                "the table's record key cannot change in place"
            )
        return key, None

    def _types(
        self,
        table_id: str,
        row_events: Sequence[ChangeEvent],
        pk: Sequence[str],
        stored: Mapping[str, DataType],
        previous: TableCheckpoint | None,
    ) -> tuple[TableTypes, dict[str, str]]:
        """How this batch's values are typed, and the source types it declares for the
        table (to keep in its checkpoint): configured > the table's own > catalog > a
        complete message type; a stored column keeps its stored Spark type."""
        hints = _columns(row_events, pk)
        conf = configured(self.config, table_id).columns
        known = previous.columns if previous else {}

        def settled(name: str) -> bool:
            return name in conf or name in known or is_complete(hints.get(name) or "decimal")

        catalog: Mapping[str, str] = {}
        if self.catalog.enabled and not all(settled(n) for n in hints):
            found = self.catalog.get(table_id)
            catalog = found.columns if found else {}
        source = resolve_columns(
            list(hints), configured_types=conf, known=known, catalog=catalog, hints=hints
        )
        declared = {n: t for n, t in source.items() if t is not None}
        types = TableTypes(
            source,
            stored,
            self.source_timezone,
            {n: h for n, h in hints.items() if h},
        )
        return types, declared

    def _stored_types(self, table_id: str, path: str) -> dict[str, DataType]:
        held = self._stored.get(table_id)
        if held is None:
            held = self._stored[table_id] = _source_fields(self.stored_schema(path))
        return held

    def _current_values(
        self,
        path: str,
        pk: Sequence[str],
        stored: Mapping[str, DataType],
        keys: Sequence[tuple[Any, ...]],
        columns: Sequence[str],
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The stored values of ``columns`` for ``keys`` (a partial update's unsent columns)."""
        from pyspark.sql import functions as F  # noqa: N812 (PySpark's own convention)

        wanted = [c for c in columns if c in stored]
        if not keys or not stored:
            return {}
        key_rows = self.spark.createDataFrame(
            [tuple(k) for k in set(keys)],
            StructType([StructField(c, stored[c], True) for c in pk]),
        )
        current = self.spark.read.format("hudi").load(path)
        picked = current.join(F.broadcast(key_rows), on=list(pk), how="inner")
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in picked.select(*pk, *wanted).collect():
            values = row.asDict()
            key = tuple(values[c] for c in pk)
            out[key] = {c: values[c] for c in wanted}
            out[key].update({c: None for c in columns if c not in stored})
        return out

    def _dead_letter(self, table_id: str, rejected: Sequence[Rejected]) -> None:
        """Dead-letter ``rejected`` (acked before the commit that passes them), or pause the
        table when no bus is configured to take them."""
        if not self.dead_letters.available:
            raise TableRefused(f"{rejected[0].reason} (no bus.url to dead-letter it)")
        try:
            self.dead_letters.publish(rejected)
        except Exception as exc:  # a bus error: the round is retried, nothing is committed
            raise IngestError(f"{table_id}: dead letters not published: {exc}") from exc

    # -- what lake/evolve.py uses

    def commit(
        self,
        table_id: str,
        df: DataFrame,
        checkpoint: TableCheckpoint,
        *,
        pk: Sequence[str] | None = None,
        rewrite: bool = False,
    ) -> str:
        """Write ``df`` to the table in one Hudi commit holding ``checkpoint``; its instant."""
        database, table = split_table_id(table_id)
        path = table_path(self.lake_root, database, table)
        key = tuple(pk) if pk else self.stored_primary_key(path)
        if discard_interrupted_creation(path):  # a kill -9 while Hudi created the table
            log.warning("removed a table whose creation was interrupted", table=table_id)
        options = write_options(
            self.config.lake,
            database,
            table,
            key,
            {CHECKPOINT_KEY: checkpoint.to_json()},
            rewrite=rewrite,
            record_index=self.uses_record_index(path),
        )
        try:
            df.write.format("hudi").options(**options).mode("append").save(path)
        except Exception as exc:  # py4j / Spark errors: the JVM cause chain, root cause last
            from tidelake.lake.jvm_errors import describe_error

            self.forget(table_id)
            raise IngestError(f"{table_id}: the Hudi write failed: {describe_error(exc)}") from exc
        committed = read_checkpoint(self.spark, path)
        if committed is None or committed.checkpoint != checkpoint:
            self.forget(table_id)
            raise IngestError(
                f"{table_id}: the commit does not hold the checkpoint just written "
                f"({committed.checkpoint if committed else None} != {checkpoint})"
            )
        self._checkpoints[table_id] = committed
        written = _source_fields(df.schema)
        held = self._stored.get(table_id)
        if rewrite:
            self._stored[table_id] = written
        elif held is not None:
            held.update({n: t for n, t in written.items() if n not in held})
        return committed.instant

    def uses_record_index(self, path: str) -> bool:
        """Whether the next commit into the unpartitioned table at ``path`` looks keys up in
        the metadata table's record index, or reads the keys of the table's base files
        (SIMPLE index, no metadata table).

        SIMPLE costs less while the table is small; its cost grows with the table, the
        record index's does not (docs/benchmarks.md). A table switches once its newest base
        files reach ``lake.record_index_from_mb`` (Hudi builds the metadata table and the
        index from them in that commit) and never back: a table that has a metadata table
        keeps it, since writing with the metadata table disabled would delete it.
        """
        threshold_mb = self.config.lake.record_index_from_mb
        if threshold_mb <= 0:
            return True
        if not self.exists(path):
            return False  # created small
        if self._metadata_partitions(path):
            return True
        return newest_base_file_bytes(list_dir(self.spark, path)) >= threshold_mb * 2**20

    def _metadata_partitions(self, path: str) -> str:
        """``hoodie.table.metadata.partitions`` of the table at ``path`` ('' when none)."""
        local = local_dir(path)
        if local is None:
            return table_property(self.spark, path, METADATA_PARTITIONS_KEY) or ""
        props = local / ".hoodie" / "hoodie.properties"
        for line in props.read_text().splitlines():
            if line.startswith(METADATA_PARTITIONS_KEY + "="):
                return line.split("=", 1)[1].strip()
        return ""

    def exists(self, path: str) -> bool:
        """True when ``path`` holds a Hudi table (local or on object storage)."""
        return table_exists(self.spark, path)

    def tables_of(self, database: str) -> list[str]:
        """The ``db.table`` names of the lake's tables in ``database``."""
        from tidelake.lake.hudi import discover_tables

        return [t.table_id for t in discover_tables(self.lake_root) if t.database == database]

    def remove_table(self, table_id: str) -> None:
        """Delete the table's directory and its catalog entry (DROP TABLE at the source)."""
        from tidelake.lake.catalog import unregister_table

        database, table = split_table_id(table_id)
        path = table_path(self.lake_root, database, table)
        unregister_table(self.spark, database, table)
        jvm: Any = self.spark.sparkContext._jvm
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        fs = hpath.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        if fs.exists(hpath):
            fs.delete(hpath, True)
        tombstone = self.evolver.tombstones.get(table_id)
        self._checkpoints[table_id] = (
            CommittedCheckpoint(tombstone, "dropped", None) if tombstone else None
        )
        self._stored.pop(table_id, None)

    def sync_catalog(self, table_id: str) -> None:
        """Make the catalog show the table's current schema (after creation or a DDL)."""
        from tidelake.lake.catalog import sync_table

        database, table = split_table_id(table_id)
        try:
            sync_table(self.spark, database, table, table_path(self.lake_root, database, table))
        except Exception as exc:  # the catalog is a convenience: never fail a commit on it
            log.warning("catalog not synced", table=table_id, error=str(exc)[:500])

    def warm_up(self) -> float:
        """Two throw-away upserts into a scratch table beside the lake, then remove it.

        A fresh JVM spends 10-20 s loading and compiling Hudi's write path on its first
        commit; a continuous ingest pays that once here, before it reports ready, instead
        of on the first real batch (which would otherwise be that much less fresh).
        """
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        started = time.monotonic()
        # Local even for a lake on object storage: the JVM's write path is what warms up.
        scratch = self.config.lake_state_dir / "warmup"
        shutil.rmtree(scratch, ignore_errors=True)
        schema = StructType(
            [
                StructField("id", LongType()),
                StructField(ORDERING_FIELD, StringType()),
                StructField(DELETE_FIELD, BooleanType()),
            ]
        )
        # The path of a new (small) table: SIMPLE index, no metadata table.
        options = write_options(
            self.config.lake, "tidelake", "warmup", ["id"], {}, record_index=False
        )
        for round_no in range(2):
            rows = [(i, f"{round_no:020d}", i % 7 == 0 and round_no == 1) for i in range(100)]
            df = self.spark.createDataFrame(rows, schema)
            df.write.format("hudi").options(**options).mode("append").save(str(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
        return time.monotonic() - started

    def stored_schema(self, path: str) -> StructType:
        """The table's source and lineage columns as stored (no ``_hoodie_*`` meta columns)."""
        from pyspark.sql.types import StructType

        stored = self.spark.read.format("hudi").load(path).schema
        return StructType(
            [
                f
                for f in stored.fields
                if not f.name.startswith("_hoodie_") or f.name == DELETE_FIELD
            ]
        )

    def stored_primary_key(self, path: str) -> tuple[str, ...]:
        """The record key fields of the table at ``path``."""
        if local_dir(path) is None:  # object storage: read through Hudi
            stored = table_property(self.spark, path, "hoodie.table.recordkey.fields")
            if stored:
                return tuple(stored.split(","))
            raise IngestError(f"{path}: no record key in hoodie.properties")
        props = Path(path) / ".hoodie" / "hoodie.properties"
        for line in props.read_text().splitlines():
            if line.startswith("hoodie.table.recordkey.fields="):
                return tuple(line.split("=", 1)[1].split(","))
        raise IngestError(f"{path}: no record key in hoodie.properties")


def _source_fields(schema: StructType) -> dict[str, DataType]:
    """The source columns of a table schema (no lineage, no ``_hoodie_*``) → Spark type."""
    return {
        f.name: f.dataType
        for f in schema.fields
        if f.name not in LINEAGE_NAMES and not f.name.startswith("_hoodie_")
    }


# --- the loop -------------------------------------------------------------------------------


@dataclass
class RoundResult:
    """What one round did."""

    manifests: int = 0
    seq_last: int = 0
    tables: list[TableResult] = field(default_factory=list)
    interrupted: bool = False


@dataclass
class IngestStats:
    """Totals of a run."""

    rounds: int = 0
    manifests: int = 0
    commits: int = 0
    events: int = 0
    duplicates: int = 0
    stale: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    def add(self, result: RoundResult) -> None:
        self.rounds += 1
        self.manifests += result.manifests
        for t in result.tables:
            self.duplicates += t.duplicates
            self.stale += t.stale
            for c in t.commits:
                self.commits += 1
                self.events += int(c["events"])
            if t.refused:
                self.refused[t.table] = t.refused


class Ingestor:
    """Reads manifests from staging storage and applies them to the lake."""

    def __init__(self, config: Config, spark: SparkSession, storage: Storage | None = None) -> None:
        self.config = config
        self.storage = storage or open_storage(config.stage_root, config.storage.s3)
        self.writer = TableWriter(config, spark)
        self.paused: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        # Local state (a lake on object storage keeps it in lake.state_dir / <home>/state).
        self.state_dir = config.lake_state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.cursor = self._read_cursor()
        self._pause_lock = threading.Lock()
        self.control = TableControl(self.state_dir)  # pause/resume asked by the API or CLI
        # A new process starts with nothing paused: a pause an earlier run recorded is tried
        # again, and ``status`` must not go on showing it once the table ingests.
        self._write_paused()

    # -- local state: cursor hint and logs

    def _read_cursor(self) -> int:
        try:
            return int(orjson.loads((self.state_dir / "cursor.json").read_bytes())["seq"])
        except FileNotFoundError:
            return 0
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("unreadable cursor hint ignored", path=str(self.state_dir / "cursor.json"))
            return 0

    def _advance_cursor(self, seq: int) -> None:
        self.cursor = seq
        if self.paused:
            # A paused table has events in this round that it did not apply: keep the saved
            # hint behind them so a restart (which un-pauses) reads them again.
            return
        target = self.state_dir / "cursor.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps({"seq": seq}))
        os.replace(tmp, target)

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with (self.state_dir / name).open("ab") as f:
            f.write(orjson.dumps(record) + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def _write_paused(self) -> None:
        target = self.state_dir / "paused.json"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(self.paused, option=orjson.OPT_INDENT_2))
        os.replace(tmp, target)

    # -- rounds

    def _next_round(self) -> list[Manifest]:
        manifests: list[Manifest] = []
        total = 0
        for path in list_manifests(self.storage, after_seq=self.cursor):
            manifest = read_manifest(self.storage, path)
            events = sum(t.events for t in manifest.tables)
            if manifests and total + events > self.config.ingest.max_batch_events:
                break
            manifests.append(manifest)
            total += events
            if manifest.ddl:
                break  # a DDL barrier closes the round
        return manifests

    def _round_events(self, manifests: Sequence[Manifest]) -> dict[str, list[ChangeEvent]]:
        """Events per table, in stream order. A DDL event is taken from the manifest's ``ddl``
        list (it is also its table file's last line) and grouped under the table whose
        checkpoint decides it (``evolve.route``: ``RENAME a TO b`` under ``a``); one without
        a table (``DROP DATABASE``) under ``"<db>."``."""
        from tidelake.lake.evolve import route

        per_table: dict[str, list[ChangeEvent]] = {}
        for manifest in manifests:
            for table_file in manifest.tables:
                events = per_table.setdefault(table_file.table_id, [])
                for line in self.storage.get(table_file.path).split(b"\n"):
                    if line.strip():
                        event = ChangeEvent.from_json(line)
                        if event.op is not Op.DDL:
                            events.append(event)
            for d in manifest.ddl:
                ddl = ChangeEvent.from_dict(d)
                events = per_table.setdefault(route(ddl) if ddl.table else ddl.table_id, [])
                ident = (ddl.seq, ddl.position)
                if not any((e.seq, e.position) == ident for e in events if e.op is Op.DDL):
                    events.append(ddl)
        for events in per_table.values():
            events.sort(key=lambda e: e.seq)  # stable: stream order, file order within a seq
        return {t: events for t, events in per_table.items() if events}

    def _apply_table(
        self,
        table_id: str,
        events: Sequence[ChangeEvent],
        seq_last: int,
        stop: threading.Event | None,
    ) -> TableResult | None:
        """One table's commit(s) of the round; None when a stop came first."""
        if stop is not None and stop.is_set():
            return None
        try:
            if table_id.endswith("."):  # DDL naming a database only
                table_result = self._apply_database_ddl(table_id, events)
            else:
                database, table = split_table_id(table_id)
                table_result = self.writer.apply(table_id, database, table, events, seq_last)
        except TableRefused as exc:
            return self._pause(table_id, str(exc))
        except IngestError as exc:
            # A failing table must not hold the others back forever: retry it a few
            # rounds (the cursor stays), then pause it.
            self.failures[table_id] = self.failures.get(table_id, 0) + 1
            if self.failures[table_id] < MAX_TABLE_FAILURES:
                raise
            return self._pause(table_id, f"{exc} (failed {MAX_TABLE_FAILURES} times in a row)")
        self.failures.pop(table_id, None)
        if table_result.refused:
            self._pause(table_id, table_result.refused)
        return table_result

    def _apply_database_ddl(self, db_id: str, events: Sequence[ChangeEvent]) -> TableResult:
        """``CREATE DATABASE``, ``DROP DATABASE`` …: applied table by table, each idempotent
        by its own checkpoint (there is no database checkpoint)."""
        result = TableResult(db_id)
        for event in events:
            for outcome in self.writer.evolver.apply(db_id, event):
                result.commits.append(
                    {
                        "table": outcome.table_id,
                        "instant": outcome.instant,
                        "seq_from": event.seq - 1,
                        "seq": outcome.checkpoint.seq,
                        "position": outcome.checkpoint.position,
                        "schema_version": outcome.checkpoint.schema_version,
                        "events": 0,
                        "upserts": 0,
                        "deletes": 0,
                        "ddl": 1,
                        "ddl_type": event.ddl_type,
                        "ddl_action": outcome.action,
                        "committed_at_ms": int(time.time() * 1000),
                    }
                )
        return result

    def _record(self, table_result: TableResult, seq_last: int) -> None:
        for line in table_result.commits:
            self._append("commits.jsonl", line)
            log.info("committed", **line)
        if table_result.duplicates or table_result.stale:
            self._append(
                "skipped.jsonl",
                {
                    "table": table_result.table,
                    "seq_last": seq_last,
                    "duplicates": table_result.duplicates,
                    "stale": table_result.stale,
                    "at_ms": int(time.time() * 1000),
                },
            )

    def heartbeat(self, state: str, **fields: Any) -> None:
        """Tell ``serve``/``status``/the demo what the ingest is doing."""
        write_heartbeat(
            self.state_dir,
            "ingest",
            state,
            cursor=self.cursor,
            paused=sorted(self.paused),
            **fields,
        )

    def _pause(self, table_id: str, reason: str) -> TableResult:
        with self._pause_lock:  # commit threads may pause tables at the same time
            self.paused[table_id] = reason
            self._write_paused()
        log.error("table paused", table=table_id, reason=reason)
        return TableResult(table_id, refused=reason)

    def _commit_tables(
        self,
        todo: Sequence[tuple[str, list[ChangeEvent]]],
        result: RoundResult,
        stop: threading.Event | None,
        parallel: int,
    ) -> None:
        """Commit ``todo``'s tables, ``parallel`` at a time; failures raise after all ran."""
        failed: list[IngestError] = []
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="commit") as pool:
            futures = {
                pool.submit(self._apply_table, table_id, events, result.seq_last, stop): table_id
                for table_id, events in todo
            }
            for future in as_completed(futures):
                try:
                    table_result = future.result()
                except IngestError as exc:
                    failed.append(exc)
                    continue
                if table_result is None:
                    result.interrupted = True
                    continue
                result.tables.append(table_result)
                self._record(table_result, result.seq_last)
        if failed:
            raise failed[0]

    def step(self, stop: threading.Event | None = None) -> RoundResult:
        """Apply the next round; an empty result when nothing is staged."""
        result = RoundResult()
        self.control.apply(self)  # before listing: a resume may move the cursor back
        manifests = self._next_round()
        if not manifests:
            return result
        result.manifests = len(manifests)
        result.seq_last = max(m.seq_last for m in manifests)
        self.heartbeat("applying")
        todo = [
            (table_id, events)
            for table_id, events in self._round_events(manifests).items()
            if table_id not in self.paused
        ]
        # Tables are independent Hudi tables: commit them concurrently (one Spark job each),
        # so one round costs about its slowest table instead of the sum of all of them. A
        # table with DDL goes after the others, one at a time: RENAME and DROP reach other
        # tables, which must not be written at the same moment.
        plain = [(t, events) for t, events in todo if all(e.op is not Op.DDL for e in events)]
        with_ddl = [(t, events) for t, events in todo if any(e.op is Op.DDL for e in events)]
        self._commit_tables(plain, result, stop, self.config.ingest.parallel_tables)
        if with_ddl:
            self._commit_tables(with_ddl, result, stop, 1)
        if result.interrupted:
            return result  # the cursor stays: checkpoints skip what was committed
        self._advance_cursor(max(self.cursor, result.seq_last))
        return result

    def run_once(self, stop: threading.Event | None = None) -> IngestStats:
        """Apply everything staged now, then return."""
        stats = IngestStats()
        while not (stop is not None and stop.is_set()):
            result = self.step(stop)
            if not result.manifests:
                break
            stats.add(result)
        return stats

    def run_continuous(self, interval_s: float, stop: threading.Event) -> IngestStats:
        """Apply rounds until ``stop`` is set; sleep ``interval_s`` when idle.

        A round that fails for a reason a retry may cure is retried (with back-off); a
        terminal error (a malformed manifest) ends the run.
        """
        stats = IngestStats()
        failures = 0
        self.heartbeat("idle")
        while not stop.is_set():
            try:
                result = self.step(stop)
            except Exception as exc:
                if isinstance(exc, Terminal):
                    raise
                failures += 1
                pause = min(interval_s * 2**failures, 30.0)
                error = shorten(str(exc), 2000)
                log.error("round failed; retrying", error=error, retry_in_s=pause)
                self.heartbeat(
                    "retrying", last_error=shorten(str(exc), 1000)
                )  # shown by serve/status
                stop.wait(pause)
                continue
            failures = 0
            if result.manifests:
                stats.add(result)
            else:
                self.heartbeat("idle")
                stop.wait(interval_s)
        self.heartbeat("stopped")
        return stats


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM / SIGINT; the running commit finishes first."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("stopping after the current commit", signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_ingest(config: Config, *, once: bool, interval_s: float | None = None) -> IngestStats:
    """``tidelake ingest``: take the lake's writer lock (one writer per lake: lake/lock.py),
    build the Spark session, then run once or until SIGTERM."""
    from tidelake.lake.lock import lock_path, writer_lock
    from tidelake.lake.spark import build_spark_session

    with writer_lock(lock_path(config)):
        spark = build_spark_session(config, app_name="tidelake-ingest")
        try:
            ingestor = Ingestor(config, spark)
            with stop_on_signals() as stop:
                if once:
                    return ingestor.run_once(stop)
                if config.ingest.warm_up:
                    ingestor.heartbeat("warming up")
                    log.info("warmed up", seconds=round(ingestor.writer.warm_up(), 1))
                return ingestor.run_continuous(interval_s or config.ingest.interval_s, stop)
        finally:
            spark.stop()
