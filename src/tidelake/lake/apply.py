"""One table's share of a round: rules → rows → store, and the commit records it leaves.

For the events of one table (stream order, a DDL only as the round's last event):

1. drop what the table's checkpoint covers (``lake/rules.py`` :func:`filter_events`);
2. type the rows (``lake/rows.py`` :func:`build_batch`, which collapses them by key);
   values that cannot be stored exactly go to the dead-letter stream first;
3. commit them with the next checkpoint (:func:`rows_checkpoint`) through the table store
   (``lake/store.py``); a DDL goes to the schema evolver (``lake/evolve.py``) after the rows
   before it, each commit carrying its own checkpoint. A commit of rows also records which
   of the events it covers it applied (:class:`AppliedRows`: the watermark it dropped stale
   events below, the late events it took, the dead-lettered ones), in the same commit: the
   lifecycle views (``view/lifecycle.py``) take exactly those, also when a crash makes them
   read the round again (then every event is a duplicate here, and nothing is re-typed).

Each Hudi commit yields one ``commits.jsonl`` record (built here, in one place per kind).
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyspark.sql.types import StructType

from tidelake.config import Config
from tidelake.errors import IngestError, TableRefused
from tidelake.events import ChangeEvent, Op
from tidelake.lake.checkpoint import AppliedRows, TableCheckpoint, event_id
from tidelake.lake.dead_letters import DeadLetters, Rejected
from tidelake.lake.deletes import ALL_KEYS, DeleteLog, deleted_keys, judge_late
from tidelake.lake.evolve import DdlBlocked, DdlOutcome, SchemaEvolver
from tidelake.lake.rows import RowTyping, TableBatch, build_batch
from tidelake.lake.rules import filter_events, rows_checkpoint
from tidelake.lake.store import TableStore

log = structlog.get_logger(__name__)

#: Test hook: ``after_ddl_commit`` SIGKILLs the ingest's process group right after a DDL's
#: commit(s), before anything else (the next batch, the cursor hint, commits.jsonl).
CRASH_HOOK_ENV = "TEST_TIDELAKE_INGEST_CRASH_AT"


def _crash_point(point: str) -> None:
    if os.environ.get(CRASH_HOOK_ENV) == point:
        log.warning("crash hook", point=point)
        os.killpg(os.getpgid(0), signal.SIGKILL)


@dataclass
class TableResult:
    """One table's share of a round: the commits.jsonl line, or why nothing was written."""

    table: str
    #: One commits.jsonl line per Hudi commit (rows; a DDL may add one per table it changes).
    commits: list[dict[str, Any]] = field(default_factory=list)
    duplicates: int = 0
    stale: int = 0
    refused: str | None = None
    #: Why the table's share failed (held back for a retry by the ingest); nothing written.
    failed: str | None = None

    @property
    def committed(self) -> dict[str, Any] | None:
        """The last commit of the round, if any."""
        return self.commits[-1] if self.commits else None


def _ms_now() -> int:
    return int(time.time() * 1000)


#: The latest instant a commit time may name: 9999-12-31T23:59:59.999Z, the last a Python
#: ``datetime`` (and a Spark ``TimestampType``) holds.
MAX_COMMIT_TS_MS = 253_402_300_799_999


def implausible_time(event: ChangeEvent) -> str | None:
    """Why ``event``'s commit time cannot be stored as the ``_tl_commit_ts`` lineage column,
    or None. The stager refuses such messages already (``formats/positions.py``); this guards
    batches staged before it did, or by another stager."""
    ms = event.commit_ts_ms
    if ms is None or 0 <= ms <= MAX_COMMIT_TS_MS:
        return None
    return (
        f"implausible_position: {event.table_id} commit time {ms} ms is outside the range "
        f"a timestamp holds (0..{MAX_COMMIT_TS_MS})"
    )


def ddl_record(
    outcome: DdlOutcome, event: ChangeEvent, table: str | None, action: str, started: float
) -> dict[str, Any]:
    """The commits.jsonl line of one table a DDL changed; ``table``: the table the DDL was
    routed to (None for a database DDL: the shorter record ``status`` shows for those)."""
    ckpt = outcome.checkpoint
    record: dict[str, Any] = {
        "table": outcome.table_id,
        "instant": outcome.instant,
        "seq_from": event.seq - 1,
        "seq": ckpt.seq,
        "position": ckpt.position,
        "schema_version": ckpt.schema_version,
        "events": 1 if outcome.table_id == table else 0,
        "upserts": 0,
        "deletes": 0,
        "ddl": 1,
        "ddl_type": event.ddl_type,
        "ddl_action": action,
    }
    if table is None:
        return record | {"committed_at_ms": _ms_now()}
    return record | {
        "ddl_changes": outcome.ops,
        "rows_rewritten": outcome.rows_rewritten,
        "skipped_duplicates": 0,
        "skipped_stale": 0,
        "committed_at_ms": _ms_now(),
        "max_commit_ts_ms": event.commit_ts_ms,
        "commit_ts_ms_p50": event.commit_ts_ms,
        "duration_ms": int((time.monotonic() - started) * 1000),
    }


def _ids(rejected: Sequence[Rejected]) -> frozenset[tuple[int, str]]:
    return frozenset(event_id(r.event) for r in rejected)


class TableApplier:
    """Applies one table's events of a round through the store and the schema evolver."""

    def __init__(self, config: Config, store: TableStore) -> None:
        self.config = config
        self.store = store
        self.spark = store.spark
        self.typing = RowTyping(config)
        self.dead_letters = DeadLetters(config)
        self.evolver = SchemaEvolver(store)
        self.deletes = DeleteLog(config.lake_state_dir)

    def apply(self, table_id: str, events: Sequence[ChangeEvent], seq_last: int) -> TableResult:
        """Apply one round's events of one table: one Hudi commit for its rows, and for a DDL
        (the last event of a round) the rows before it first, then the schema change."""
        result = TableResult(table_id)
        foreign = sorted({e.table_id for e in events if not self.config.ingest.owns(e.table_id)})
        if foreign:
            # Another worker's table reached this one: its subjects and ingest.tables
            # disagree. Never written here, never lost: paused, its events kept. (A DDL
            # routed to another worker's table from one of ours — DROP TABLE a, b — goes on:
            # the evolver applies only its share, lake/evolve.py.)
            result.refused = (
                f"{', '.join(foreign)}: not among this ingest's tables (ingest.tables) although "
                "its events reach it (bus.consumer.filter_subjects): make the two agree"
            )
            return result
        since = self.deletes.since(table_id)
        filtered = filter_events(events, self.store.checkpoint(table_id), late_since=since)
        result.duplicates, result.stale = filtered.duplicates, filtered.stale
        kept = filtered.kept
        if filtered.late:
            late, stale = judge_late(filtered.late, self._key_of(table_id, events), since, {})
            if late:  # only now read the log: late events are rare
                deleted = self.deletes.latest(table_id)
                late, stale = judge_late(
                    filtered.late, self._key_of(table_id, events), since, deleted
                )
            result.stale += stale
            order = {id(e): i for i, e in enumerate(events)}
            kept = sorted([*kept, *late], key=lambda e: order[id(e)])
            log.info("late events judged", table=table_id, applied=len(late), stale=stale)
        segment: list[ChangeEvent] = []
        for event in kept:
            if event.op is not Op.DDL:
                segment.append(event)
                continue
            if segment:
                # Rows before the DDL land under the old schema; their checkpoint stops
                # right before the DDL, so a crash between the two commits is safe.
                self._apply_rows(result, segment, event.seq - 1)
                segment = []
            try:
                self._apply_ddl(result, event)
            except DdlBlocked as exc:
                self.evolver.record_blocked(exc)
                result.refused = str(exc)
                return result
        if segment:
            self._apply_rows(result, segment, seq_last)
        return result

    def _key_of(self, table_id: str, events: Sequence[ChangeEvent]) -> tuple[str, ...]:
        """The table's primary-key columns: as the events name them, else as stored."""
        named = next((e.pk for e in events if e.pk), ())
        if named:
            return tuple(named)
        path = self.store.path(table_id)
        return tuple(self.store.stored_primary_key(path) or ()) if self.store.exists(path) else ()

    def apply_database_ddl(self, db_id: str, events: Sequence[ChangeEvent]) -> TableResult:
        """``CREATE DATABASE``, ``DROP DATABASE`` …: applied table by table, each idempotent
        by its own checkpoint (there is no database checkpoint)."""
        result = TableResult(db_id)
        for event in events:
            started = time.monotonic()
            for outcome in self.evolver.apply(db_id, event):
                self._fence(outcome.table_id, event)
                result.commits.append(ddl_record(outcome, event, None, outcome.action, started))
        return result

    def _apply_ddl(self, result: TableResult, event: ChangeEvent) -> None:
        started = time.monotonic()
        skip = self.store.ledger.skipped_ddl_seq(result.table) == event.seq
        # Before the DDL's commits: no late row of these tables may cross it (deletes.py).
        for table_id in {result.table, event.table_id}:
            self._fence(table_id, event)
        for outcome in self.evolver.apply(result.table, event, skip=skip):
            action = "skipped" if skip else outcome.action
            result.commits.append(ddl_record(outcome, event, result.table, action, started))
        _crash_point("after_ddl_commit")

    def _fence(self, table_id: str, event: ChangeEvent) -> None:
        """Log a DDL of ``table_id`` as a delete of every key at its position."""
        if table_id and not table_id.endswith("."):
            checkpoint = self.store.checkpoint(table_id)
            self.deletes.start(table_id, checkpoint.position if checkpoint else None)
            self.deletes.record(table_id, [(ALL_KEYS, event.position.encode())])

    def _apply_rows(
        self, result: TableResult, row_events: Sequence[ChangeEvent], seq_last: int
    ) -> None:
        """Upsert row events in one Hudi commit with the table's next checkpoint; events
        whose values the table cannot store exactly go to the dead-letter stream first."""
        started = time.monotonic()
        table_id = result.table
        store = self.store
        previous = store.checkpoint(table_id)
        path = store.path(table_id)
        existed = store.exists(path)
        stored = store.stored_types(table_id, path) if existed else {}
        stored_key = store.stored_primary_key(path) if existed else None
        # Below the watermark, only late events judged to apply got here (lake/rules.py).
        floor = previous.position if previous else None
        late = frozenset(event_id(e) for e in row_events if floor and e.position.encode() < floor)
        # An event whose commit time no timestamp can hold (an ``es`` of 10^15 ms) would make
        # the whole commit raise, every round: it alone goes to the dead-letter stream.
        implausible = [Rejected(e, r) for e in row_events if (r := implausible_time(e))]
        if implausible:
            bad = {id(r.event) for r in implausible}
            row_events = [e for e in row_events if id(e) not in bad]
            self._dead_letter(table_id, implausible)
        if not row_events:  # all of them dead-lettered: the checkpoint still moves on
            batch = TableBatch({}, StructType([]), [], 0, 0)
            if existed:
                key = stored_key or ()
                applied = AppliedRows(True, floor, late, _ids(implausible))
                self._commit_rows(result, [], batch, previous, key, {}, seq_last, started, applied)
            return
        pk, no_key = self.typing.primary_key(table_id, row_events, stored_key)
        types, declared = self.typing.types(table_id, row_events, pk, stored, previous)
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
                current=lambda keys, cols: store.current_values(path, pk, stored, keys, cols),
            )
        if batch.rejected:
            self._dead_letter(table_id, batch.rejected)
        applied = AppliedRows(True, floor, late, _ids([*implausible, *batch.rejected]))
        self._commit_rows(
            result, row_events, batch, previous, pk, declared, seq_last, started, applied
        )

    def _commit_rows(
        self,
        result: TableResult,
        row_events: Sequence[ChangeEvent],
        batch: TableBatch,
        previous: TableCheckpoint | None,
        pk: Sequence[str],
        declared: dict[str, str],
        seq_last: int,
        started: float,
        applied: AppliedRows,
    ) -> None:
        """Commit ``batch`` with the table's next checkpoint and what it ``applied`` of the
        events it covers, and record the commit."""
        table_id = result.table
        store = self.store
        path = store.path(table_id)
        existed = store.exists(path)
        stored_key = store.stored_primary_key(path) if existed and not pk else None
        checkpoint = rows_checkpoint(
            previous,
            seq_last,
            row_events,
            {n: t for n, t in declared.items() if n in batch.columns},
        )
        if not batch.rows and not existed:
            return  # every event dead-lettered, and no table to carry the checkpoint
        # The deletes this commit makes, logged durably before it (lake/deletes.py).
        self.deletes.start(table_id, previous.position if previous else None)
        rejected = {id(r.event) for r in batch.rejected}
        landing = [e for e in row_events if id(e) not in rejected]
        self.deletes.record(table_id, deleted_keys(landing, pk))
        schema = batch.schema if batch.rows else store.stored_schema(path)
        df = self.spark.createDataFrame(batch.rows, schema)
        built = time.monotonic()
        instant = store.commit(
            table_id, df, checkpoint, pk=tuple(pk) or stored_key, applied=applied
        )
        if not existed:
            store.sync_catalog(table_id)
        result.commits.append(
            self._rows_record(result, row_events, batch, previous, checkpoint, instant)
            | {
                "duration_ms": int((time.monotonic() - started) * 1000),
                # of which: the rows built in Python and handed to Spark
                "prepare_ms": int((built - started) * 1000),
            }
        )

    @staticmethod
    def _rows_record(
        result: TableResult,
        row_events: Sequence[ChangeEvent],
        batch: TableBatch,
        previous: TableCheckpoint | None,
        checkpoint: TableCheckpoint,
        instant: str,
    ) -> dict[str, Any]:
        """The commits.jsonl line of a commit of rows (the caller adds its durations)."""
        commit_ms = sorted(e.commit_ts_ms for e in row_events if e.commit_ts_ms is not None)
        return {
            "table": result.table,
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
            "committed_at_ms": _ms_now(),
            "max_commit_ts_ms": commit_ms[-1] if commit_ms else None,
            "commit_ts_ms_p50": int(statistics.median_low(commit_ms)) if commit_ms else None,
        }

    def _dead_letter(self, table_id: str, rejected: Sequence[Rejected]) -> None:
        """Dead-letter ``rejected`` (acked before the commit that passes them), or pause the
        table when no bus is configured to take them."""
        if not self.dead_letters.available:
            raise TableRefused(f"{rejected[0].reason} (no bus.url to dead-letter it)")
        try:
            self.dead_letters.publish(rejected)
        except Exception as exc:  # a bus error: the round is retried, nothing is committed
            raise IngestError(f"{table_id}: dead letters not published: {exc}") from exc
