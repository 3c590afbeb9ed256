"""The ingest: staged manifests → one Hudi upsert per table, checkpoint in the same commit.

A loop over *rounds* (HoodieStreamer's seams: source → round → rules → table store):

* ``lake/source.py`` gives the next round after the cursor: manifests in stream order, up to
  ``ingest.max_batch_events`` events, a DDL closing the round; events grouped per table;
* ``lake/apply.py`` applies each table's events: the duplicate/collapse and checkpoint rules
  (``lake/rules.py``), row typing (``lake/rows.py``), one commit per table through the table
  store (``lake/store.py``) with the table's next checkpoint in the same commit, DDL through
  the schema evolver (``lake/evolve.py``);
* here: the order of the tables (independent ones concurrently, DDL ones after them, one at
  a time), the failure policy (below), the commit records, and the cursor.

Failure policy: one table's failure never stalls the others. Whatever a table's share of a round
raises (any exception, not only ours) is caught per table and decided by ``lake/failures.py``
(``tidelake.errors.classify`` plus the resource faults a JVM error carries as text):

* refused or terminal (a DDL that cannot be applied, a record-key conflict Hudi refuses by
  its class): the table is **paused** with the cause (``paused.json``) until an operator
  resumes it;
* transient (disk full, the object store or the bus down or throttling): the table is
  **held back and retried** after a back-off (``tidelake.retry.backoff_s``, doubling up to
  ``MAX_TABLE_RETRY_WAIT_S``), for as long as it takes: when the cause is gone it
  resumes by itself, no manual step;
* unknown (a JVM error nobody classified, a bug): retried the same way, and paused after
  ``MAX_TABLE_FAILURES`` failures in a row (``… (failed 3 times in a row)``).

A held-back table is treated like a paused one by the cursor and retention (the saved cursor
stays behind its events; a retry moves the in-memory cursor back to its checkpoint), and its
cause is shown while it waits: ``retrying`` (table → cause) and ``last_error`` in the
heartbeat, which ``status`` and ``serve`` list as errors. Every other table of the round
commits. With ``--once`` a table still failing at the end makes the run fail with its error
(exit 1) after the other tables have committed.

The ingest's local state goes through the ledger (``lake/ledger.py``): the cursor (``cursor.json``)
only saves listing work, every decision comes from the per-table checkpoints read back from Hudi;
after each commit one :class:`CommitRecord` is appended to ``commits.jsonl``, the paused tables are
in ``paused.json``, and the heartbeat says what the loop does. Operator requests (pause, resume,
skip a DDL) come through ``lake/control.py``, which uses only :meth:`Ingestor.pause`,
:meth:`Ingestor.resume` and :meth:`Ingestor.checkpoint_seq`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.config import Config
from tidelake.errors import TidelakeError, is_terminal
from tidelake.events import ChangeEvent, Op
from tidelake.lake.after_round import AfterRound, Hook, RoundEvents
from tidelake.lake.apply import TableApplier, TableResult
from tidelake.lake.control import TableControl
from tidelake.lake.failures import (
    MAX_TABLE_RETRY_WAIT_S,
    TableRetry,
    heartbeat_in_place,
    table_failure,
)
from tidelake.lake.jvm_errors import shorten
from tidelake.lake.ledger import CommitRecord, Ledger, SkippedRecord
from tidelake.lake.retention import StagedRetention
from tidelake.lake.round_beat import RoundBeat
from tidelake.lake.round_trace import RoundTrace
from tidelake.lake.rules import rows_seq_last
from tidelake.lake.source import ManifestSource
from tidelake.lake.store import TableStore
from tidelake.retry import backoff_s, retrying
from tidelake.runtime import live_metrics as live
from tidelake.runtime.metrics_server import beat
from tidelake.runtime.processes import stop_on_signals
from tidelake.runtime.storage import Storage, open_storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)

#: Consecutive failed rounds of one table, for an unknown cause, before it is paused.
MAX_TABLE_FAILURES = 3


@dataclass
class RoundResult:
    """What one round did."""

    manifests: int = 0
    seq_last: int = 0
    tables: list[TableResult] = field(default_factory=list)
    interrupted: bool = False
    #: Tables whose share failed this round and wait for a retry (table → cause).
    failed: dict[str, str] = field(default_factory=dict)


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
    """Reads rounds from staging storage and applies them to the lake."""

    def __init__(self, config: Config, spark: SparkSession, storage: Storage | None = None) -> None:
        self.config = config
        self.storage = storage or open_storage(config.stage_root, config.storage.s3)
        self.source = ManifestSource(self.storage, config.ingest.max_batch_events)
        self.retention = StagedRetention(self.storage, config.stage.retention)
        # Local state (a lake on object storage keeps it in lake.state_dir / <home>/state).
        self.state_dir = config.lake_state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.state_dir)
        self.store = TableStore(config, spark, self.ledger)
        self.tables = TableApplier(config, self.store)
        self.paused: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        #: Unknown failures in a row: only these pause a table (a transient one between
        #: them, e.g. a full disk before the error it left behind, starts the count again).
        self.unknown_failures: dict[str, int] = {}
        #: Tables held back after a transient or unknown failure, until their retry time.
        self.retrying: dict[str, TableRetry] = {}
        # Never behind what retention removed: manifests at or below its bound are gone, so a
        # cursor below it would list nothing and never move (an older run saved its cursor
        # less often than it retired).
        self.cursor = self.ledger.cursor()
        try:
            self.cursor = max(self.cursor, self.retention.through_seq())
        except TidelakeError as exc:  # storage down at start: the saved hint will do
            log.warning("retired bound not read", error=str(exc))
        self._pause_lock = threading.Lock()
        self.round_beat = RoundBeat(lambda s, info, t: self.heartbeat(s, turn=t, round=info))
        self.control = TableControl(self.ledger)  # pause/resume asked by the API or CLI
        self.trace = RoundTrace(self._apply_table)  # spans, with tracing on (docs/tracing.md)
        # A new process starts with nothing paused: a pause an earlier run recorded is tried
        # again, and ``status`` must not go on showing it once the table ingests.
        self._write_paused()
        self.after_round: AfterRound | None = None  # the views (view/keeper.py)

    # -- what table control (pause, resume, skip-ddl) uses

    def pause(self, table_id: str, reason: str) -> None:
        """Hold ``table_id`` back from the next rounds (persisted at once)."""
        with self._pause_lock:  # commit threads may pause tables at the same time
            self.paused[table_id] = reason
            self._write_paused()

    def resume(self, table_id: str) -> bool:
        """Let ``table_id`` ingest again, whether this process or an earlier one paused it:
        its failure count starts again and the cursor moves back to its checkpoint, so its
        events held back meanwhile are read again. False when it was not paused."""
        with self._pause_lock:
            held = table_id in self.paused or table_id in self.retrying
            if not held and table_id not in self.ledger.paused():
                return False
            self.paused.pop(table_id, None)
            self.retrying.pop(table_id, None)  # an operator's resume retries it now
            self.failures.pop(table_id, None)
            self.unknown_failures.pop(table_id, None)
            self.cursor = min(self.cursor, self.checkpoint_seq(table_id) or 0)
            self._write_paused()
        log.info("table resumed", table=table_id, cursor=self.cursor)
        return True

    def checkpoint_seq(self, table_id: str) -> int | None:
        """The stream sequence the table's checkpoint covers; None before its first commit."""
        checkpoint = self.store.checkpoint(table_id)
        return checkpoint.seq if checkpoint is not None else None

    def _write_paused(self) -> None:
        # paused.json is a report (docs/architecture.md §5): with the lake's disk full it
        # cannot be written, and that must not turn one table's pause into a failed round
        # (the in-memory pause is what holds the table back). The heartbeat and the next
        # write say it again.
        try:
            self.ledger.save_paused(self.paused)
        except (OSError, TidelakeError) as exc:
            log.warning("paused tables not recorded", error=str(exc), paused=sorted(self.paused))

    def held_back(self) -> set[str]:
        """Tables whose events this round leaves for later: paused or waiting for a retry."""
        return set(self.paused) | set(self.retrying)

    # -- rounds

    def _apply_table(
        self,
        table_id: str,
        events: Sequence[ChangeEvent],
        seq_last: int,
        stop: threading.Event | None,
    ) -> TableResult | None:
        """One table's commit(s) of the round; None when a stop came first. Whatever it
        raises is this table's failure alone (module docstring): never the round's."""
        if stop is not None and stop.is_set():
            return None
        try:
            with self.round_beat.committing(table_id):  # status: "committing <table> for N s"
                if table_id.endswith("."):  # DDL naming a database only
                    table_result = self.tables.apply_database_ddl(table_id, events)
                else:
                    table_result = self.tables.apply(table_id, events, seq_last)
        except Exception as exc:
            live.INGESTER_TABLE_FAILURES.inc()
            return self._failed(table_id, exc)
        self.failures.pop(table_id, None)
        self.unknown_failures.pop(table_id, None)
        if table_result.refused:
            self._pause(table_id, table_result.refused)
        return table_result

    def _failed(self, table_id: str, exc: Exception) -> TableResult:
        """Pause ``table_id`` or hold it back for a retry, by :func:`table_failure`."""
        cause = str(exc) or type(exc).__name__
        decided = table_failure(exc)
        if decided == "terminal":
            self.failures.pop(table_id, None)
            self.unknown_failures.pop(table_id, None)
            return self._pause(table_id, cause)
        failures = self.failures.get(table_id, 0) + 1
        self.failures[table_id] = failures
        unknown = self.unknown_failures.get(table_id, 0) + 1 if decided == "unknown" else 0
        self.unknown_failures[table_id] = unknown
        if unknown >= MAX_TABLE_FAILURES:
            return self._pause(table_id, f"{cause} (failed {MAX_TABLE_FAILURES} times in a row)")
        wait_s = backoff_s(
            failures,
            first_wait_s=max(self.config.ingest.interval_s, 0.1),
            max_wait_s=MAX_TABLE_RETRY_WAIT_S,
        )
        with self._pause_lock:
            self.retrying[table_id] = TableRetry(exc, cause, failures, time.monotonic() + wait_s)
        log.warning(
            "table held back for a retry",
            table=table_id,
            failure=decided,
            attempt=failures,
            wait_s=round(wait_s, 2),
            error=shorten(cause, 2000),
        )
        return TableResult(table_id, failed=cause)

    def _retry_due(self) -> None:
        """Tables whose retry time has come take part again: the cursor goes back to the
        earliest of their checkpoints so their events held back meanwhile are read again
        (the other tables skip them by their own checkpoints)."""
        now = time.monotonic()
        for table_id, retry in list(self.retrying.items()):
            if retry.retry_at > now:
                continue
            self.cursor = min(self.cursor, self.checkpoint_seq(table_id) or 0)
            del self.retrying[table_id]
            log.info("table retried", table=table_id, attempt=retry.failures + 1)

    def _pause(self, table_id: str, reason: str) -> TableResult:
        self.pause(table_id, reason)
        log.error("table paused", table=table_id, reason=reason)
        return TableResult(table_id, refused=reason)

    def _record(self, table_result: TableResult, seq_last: int) -> None:
        for line in table_result.commits:
            record = CommitRecord.model_validate(line)
            self.ledger.append_commit(record)
            log.info("committed", **line)
            live.INGESTER_COMMITS.labels(table_result.table).inc()
            live.INGESTER_EVENTS.labels(table_result.table).inc(record.events)
            if record.duration_ms is not None:
                live.INGESTER_COMMIT_SECONDS.observe(record.duration_ms / 1000)
        if table_result.duplicates or table_result.stale:
            self.ledger.append_skipped(
                SkippedRecord(
                    table=table_result.table,
                    seq_last=seq_last,
                    duplicates=table_result.duplicates,
                    stale=table_result.stale,
                    at_ms=int(time.time() * 1000),
                )
            )

    def heartbeat(self, state: str, *, turn: bool = True, **fields: Any) -> None:
        """Tell ``serve``/``status``/the demo what the ingest is doing: a table held back for
        a retry shows its cause (``retrying``, and ``last_error``, which ``status`` lists)."""
        if turn:  # not the round's heartbeat thread (lake/round_beat.py)
            beat()  # every state change is the loop at work (/healthz)
        live.INGESTER_TABLES_PAUSED.set(len(self.paused))
        live.INGESTER_TABLES_RETRYING.set(len(self.retrying))
        if self.retrying:
            if state == "idle":
                state = "retrying"  # idle only until a held-back table's retry time
            fields["retrying"] = {t: shorten(r.cause, 1000) for t, r in self.retrying.items()}
            latest = max(self.retrying.values(), key=lambda r: r.retry_at)
            fields.setdefault("last_error", shorten(latest.cause, 1000))
        self.ledger.write_heartbeat(state, cursor=self.cursor, paused=sorted(self.paused), **fields)
        if self.retrying or self.paused:
            fields = {"cursor": self.cursor, "paused": sorted(self.paused), **fields}
            heartbeat_in_place(self.ledger, state, fields)

    def _commit_tables(
        self,
        todo: Sequence[tuple[str, list[ChangeEvent]]],
        result: RoundResult,
        stop: threading.Event | None,
        parallel: int,
        seq_last: int,
    ) -> None:
        """Commit ``todo``'s tables, ``parallel`` at a time, their checkpoints covering the
        stream up to ``seq_last``; a table's failure is its own (:meth:`_failed`)."""
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="commit") as pool:
            futures = {
                pool.submit(self.trace.apply, table_id, events, seq_last, stop): table_id
                for table_id, events in todo
            }
            for future in as_completed(futures):
                beat()  # a long round makes progress table by table
                table_result = future.result()  # a table's failure is in its result
                if table_result is None:
                    result.interrupted = True
                    continue
                if table_result.failed is not None:
                    result.failed[table_result.table] = table_result.failed
                    continue
                result.tables.append(table_result)
                self._record(table_result, result.seq_last)

    def _advance_cursor(self, seq: int) -> None:
        """The round is applied: the cursor moves to ``seq``, the one place it advances."""
        if not self.held_back():
            # A paused or held-back table has events in this round that it did not apply:
            # the saved hint stays behind them so a restart (which un-pauses) reads them.
            # Saved before it moves in memory: if the save fails (a full disk), the retried
            # round lists the same manifests again and saves then.
            self.ledger.save_cursor(seq)
        self.cursor = seq
        self._retire()

    def _retire(self, *, now: bool = False) -> None:
        """Retire the staged batches every table has passed (lake/retention.py): those
        ending at or below the cursor, lowered to a paused table's checkpoint (it needs
        everything after that). Retiring only saves space: a failure is logged, not raised."""
        if not (now or self.retention.due()):
            return
        bound = self.cursor
        for table_id in self.held_back():
            bound = min(bound, self.checkpoint_seq(table_id) or 0)
        try:
            if bound > self.ledger.cursor():
                # Every table passed the bound: the saved hint may move there, and must
                # before the manifests go, or a restart would list from below them.
                self.ledger.save_cursor(bound)
            self.retention.retire(bound)
        except (TidelakeError, OSError) as exc:
            log.warning("staged batches not retired", through_seq=bound, error=str(exc))

    def step(self, stop: threading.Event | None = None) -> RoundResult:
        """Apply the next round; an empty result when nothing is staged."""
        result = RoundResult()
        started = time.monotonic()
        self.control.apply(self)  # before listing: a resume may move the cursor back
        self._retry_due()  # so may a table whose retry time has come
        staged = self.source.next_round(self.cursor)
        if staged is None:
            self._after_round(None)
            return result
        result.manifests = len(staged.manifests)
        result.seq_last = staged.seq_last
        held = self.held_back()
        todo = [(t, events) for t, events in staged.events.items() if t not in held]
        # Tables are independent Hudi tables: commit them concurrently (one Spark job each),
        # so one round costs about its slowest table instead of the sum of all of them. A
        # table with DDL goes after the others, one at a time: RENAME and DROP reach other
        # tables, which must not be written at the same moment.
        plain = [(t, events) for t, events in todo if all(e.op is not Op.DDL for e in events)]
        with_ddl = [(t, events) for t, events in todo if any(e.op is Op.DDL for e in events)]
        ddl_seqs = [e.seq for events in staged.events.values() for e in events if e.op is Op.DDL]
        plain_last = rows_seq_last(staged.seq_last, ddl_seqs)
        parallel = self.config.ingest.parallel_tables
        with self.trace.round(staged, result):  # the views' spans are children of its span
            with self.round_beat.running("applying"):
                self._commit_tables(plain, result, stop, parallel, plain_last)
                if with_ddl:
                    self._commit_tables(with_ddl, result, stop, 1, staged.seq_last)
            if result.interrupted:
                return result  # the cursor stays: checkpoints skip what was committed
            # Before the cursor moves: a crash re-reads this round (lake/after_round.py).
            self._after_round(RoundEvents(staged.events, staged.seq_last))
        self._advance_cursor(staged.next_cursor(self.cursor))
        live.INGESTER_ROUNDS.inc()
        live.INGESTER_MANIFESTS.inc(result.manifests)
        live.INGESTER_ROUND_SECONDS.observe(time.monotonic() - started)
        return result

    def _after_round(self, staged: RoundEvents | None) -> None:
        follow = self.after_round  # set by the ingest command: lake/ imports no view/
        if follow is not None and follow.wants(staged):
            with self.round_beat.running("updating views"):
                follow(staged)

    def run_once(self, stop: threading.Event | None = None) -> IngestStats:
        """Apply everything staged now, then return. A table that failed (and was not
        paused) raises its error at the end, once every other table has committed."""
        stats = IngestStats()
        while not (stop is not None and stop.is_set()):
            result = self.step(stop)
            if not result.manifests:
                break
            stats.add(result)
        self._retire(now=True)
        if self.retrying:
            raise next(iter(self.retrying.values())).error
        return stats

    def run_continuous(self, interval_s: float, stop: threading.Event) -> IngestStats:
        """Apply rounds until ``stop`` is set; sleep ``interval_s`` when idle.

        A failed round is retried with back-off (``tidelake.retry``: transient and unknown
        errors alike, since this loop must stay up), ``retrying`` and the error shown in the
        heartbeat; a terminal error (a malformed manifest) ends the run.
        """
        stats = IngestStats()

        def report(error: BaseException, attempt: int, wait_s: float) -> None:
            live.INGESTER_ROUND_FAILURES.inc()
            self.heartbeat("retrying", last_error=shorten(str(error), 1000))  # serve/status

        rounds = retrying(
            "ingest round",
            first_wait_s=interval_s,
            max_wait_s=30.0,
            retry_unknown=True,
            stop_event=stop,
            on_retry=report,
        )
        self.heartbeat("idle")
        while not stop.is_set():
            try:
                result = rounds(self.step, stop)
            except Exception as exc:
                if stop.is_set() and not is_terminal(exc):
                    break  # stopped during a back-off
                raise
            if result.manifests:
                stats.add(result)
            else:
                self._retire()  # idle: what the last rounds passed goes after interval_s
                self.heartbeat("idle")
                stop.wait(interval_s)
        self.heartbeat("stopped")
        return stats


def run_ingest(
    config: Config, *, once: bool, interval_s: float | None = None, after_round: Hook | None = None
) -> IngestStats:
    """``tidelake ingest``: take the lake's writer lock (one writer per lake: lake/lock.py),
    build the Spark session, then run once or until SIGTERM. ``after_round(spark)`` makes
    what runs after each round (the views)."""
    from tidelake.lake.lock import lock_path, writer_lock
    from tidelake.lake.spark import build_spark_session

    with writer_lock(lock_path(config)):
        spark = build_spark_session(config, app_name="tidelake-ingest")
        try:
            ingestor = Ingestor(config, spark)
            if after_round is not None:
                ingestor.after_round = after_round(spark)
            with stop_on_signals() as stop:
                if once:
                    return ingestor.run_once(stop)
                if config.ingest.warm_up:
                    with ingestor.round_beat.running("warming up"):  # 10-20 s: beats meanwhile
                        log.info("warmed up", seconds=round(ingestor.store.warm_up(), 1))
                return ingestor.run_continuous(interval_s or config.ingest.interval_s, stop)
        finally:
            spark.stop()
