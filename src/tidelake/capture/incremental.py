"""Snapshots on demand while streaming goes on: the watermark technique, with parallel chunks.

A table is snapshotted *incrementally* when it is newly matched by ``capture.tables`` at start
(not in the saved list of snapshotted tables) or when a re-snapshot is requested
(``tidelake capture snapshot TABLE``, ``POST /api/capture/snapshot``: a request record under
:data:`REQUESTS_PREFIX` in the staging store). The stream reader keeps running and stays the
only publisher; ``capture.snapshot_workers`` threads read chunks (key ranges) of the table,
each in a short read-only transaction of its own, and hand them to the stream reader.

**Why a chunk never overwrites a newer change** (the DBLog idea, Netflix 2019; Debezium's
incremental snapshots). Each chunk read yields a *watermark* (a ``source``-specific object):

- what the chunk's transaction saw: :meth:`ChunkSource.sees` tells for a streamed transaction
  (its *mark*) whether its effects are in the chunk. MariaDB: the binlog position of the
  consistent-snapshot transaction (``binlog_snapshot_file/position``), exact by construction;
  PostgreSQL: the transaction's own snapshot (``pg_current_snapshot()``: xmin, xmax, in-progress
  xids), against which each streamed transaction's xid is tested;
- when the stream has received every transaction the chunk could have seen
  (:meth:`ChunkSource.passed`: MariaDB: the stream's binlog point reached the snapshot point;
  PostgreSQL: a non-transactional logical message the worker wrote after its read came back).

From the moment a table's first chunk is dispatched until its last is emitted, the stream
reader records the key of every change of that table with its transaction's mark
(:meth:`IncrementalSnapshots.changed`). When a chunk's watermark is passed, its rows whose key
was changed by a streamed transaction the chunk did *not* see are dropped (the stream carries
a newer state of them, already published); every other row's value is exactly the row's state
at the current stream point, because no change of it was streamed since the chunk's snapshot.
Those rows are emitted as INSERT-equivalents **at** the current point: a position just below
the next transaction's (the source decides: MySQL ``(file, next txn offset - 1, seq)``,
PostgreSQL ``(marker LSN, seq)``), so they sort after every change already published and before
every later one. ``seq`` is a counter saved in the state and raised by :data:`RESTART_GAP` at
every start: a chunk re-read after a restart gets new message ids and a position at or after
the one it had (a value emitted at position X is the row's state at X, so merging by the
highest position is right whatever was emitted twice).

One race is checked, not assumed away: a transaction already streamed before a chunk was
dispatched but not yet visible to the chunk's snapshot (a commit written to the log before
its engine commit became visible). Its keys were not recorded for the chunk, so the chunk is
read again (:meth:`ChunkSource.valid`).

**Chunks.** A table whose first key column is an integer is split into ranges of that column
(``[lo + i*step, lo + (i+1)*step)``, the first and last ranges open-ended, ``step`` from
``min``/``max`` and the row estimate so a chunk holds about ``capture.chunk_rows`` rows): any
number of workers read its ranges at once. Any other key is read in keyset order (``key >
last key LIMIT chunk_rows``), one chunk of that table at a time (several tables still go in
parallel).

**Durable and resumable.** The queue, each table's plan and its emitted chunks (and keyset
tables' last emitted key) travel in the capture's saved state (:meth:`state`), which the
runner writes only after every message emitted before it is acknowledged; after ``kill -9``
the chunks not yet saved as done are read again. A request record is deleted once a saved
state holds its table (:meth:`confirmed`).
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
import structlog

log = structlog.get_logger(__name__)

#: Where re-snapshot requests live in the staging store: ``<prefix><db.table>.json``.
REQUESTS_PREFIX = "_tidelake/capture/snapshot-requests/"
#: Raised at every start of the capture: chunk rows re-emitted after a restart never reuse a
#: message id (``Nats-Msg-Id`` is the position) of a row emitted before it, and stay above the
#: initial snapshot's running index.
RESTART_GAP = 10**12
#: Rows of one chunk published in one message, at most, and about that many bytes of values
#: (JetStream's default max_payload is 1 MiB).
MESSAGE_ROWS = 500
MESSAGE_BYTES = 256 * 1024
#: Failed reads of one chunk (the server gone, a timeout) before its table is failed.
MAX_READ_FAILURES = 5
#: Seconds between two looks at the request records.
REQUEST_POLL_S = 2.0
#: Chunks dispatched and not yet emitted: at least this many per worker, and as many more
#: as :data:`BUFFER_ROWS` rows allow (a chunk waits for the stream to pass its watermark, so
#: small chunks need many in flight to keep the workers busy; rows in memory stay bounded).
READY_PER_WORKER = 2
BUFFER_ROWS = 50_000

Key = tuple[str | None, ...]


@dataclass
class Plan:
    """How a table is cut into chunks."""

    mode: str  # "range" (integer first key column) or "keyset"
    count: int = 1  # chunks of a range plan
    lo: int = 0
    step: int = 1
    rows_total: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "count": self.count, "lo": self.lo, "step": self.step,
                "rows_total": self.rows_total}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(str(d["mode"]), int(d.get("count", 1)), int(d.get("lo", 0)),
                   int(d.get("step", 1)), d.get("rows_total"))  # fmt: skip


def range_plan(lo: int | None, hi: int | None, rows_estimate: int, chunk_rows: int) -> Plan:
    """Ranges of about ``chunk_rows`` rows over ``[lo, hi]`` (an empty table: one chunk).

    ``rows_estimate`` is the server's statistic; none (0: PostgreSQL before its first
    ANALYZE) counts the key span as dense.
    """
    if lo is None or hi is None:
        return Plan("range", 1, 0, 1, rows_estimate)
    width = hi - lo + 1
    rows = rows_estimate if rows_estimate > 0 else width
    chunks = max(1, math.ceil(rows / max(chunk_rows, 1)))
    step = max(1, math.ceil(width / chunks))
    return Plan("range", max(1, math.ceil(width / step)), lo, step, rows_estimate)


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk to read: a range of the first key column, or the keys after ``after``."""

    table: str
    chunk: int
    #: Range plans: ``lo <= key[0] < hi``; None = unbounded on that side.
    lo: int | None = None
    hi: int | None = None
    #: Keyset plans: the rows after this key (None: from the start).
    after: Sequence[Any] | None = None
    keyset: bool = False


@dataclass
class ChunkResult:
    """A chunk as a worker read it: rows ``(key, values)`` and the read's watermark."""

    spec: ChunkSpec
    rows: list[tuple[Key, Any]]
    watermark: Any
    #: Keyset chunks: the last key read (the next chunk starts after it), raw values.
    last: Sequence[Any] | None = None
    #: Keyset chunks: True when fewer rows than asked came back (the table's end).
    final: bool = False
    floor: Any = None
    error: BaseException | None = None
    #: What the source needs to emit the rows (its table metadata as read with them).
    meta: Any = None
    #: The engine's generation at dispatch: a read from before :meth:`reread_all` is dropped.
    generation: int = 0


class ChunkSource(Protocol):
    """What a source gives the engine (``capture/mysql.py``, ``capture/postgres.py``)."""

    def plan_table(self, table: str, chunk_rows: int) -> Plan:
        """The chunk plan of ``table`` (called in a worker thread)."""

    def read_chunk(self, spec: ChunkSpec, chunk_rows: int) -> ChunkResult:
        """Read one chunk on this worker thread's own connection."""

    def sees(self, watermark: Any, mark: Any) -> bool:
        """Whether the chunk read at ``watermark`` saw the streamed transaction ``mark``."""

    def passed(self, watermark: Any, point: Any) -> bool:
        """Whether the stream at ``point`` has received everything the chunk could see."""

    def valid(self, watermark: Any, floor: Any) -> bool:
        """False when a transaction streamed before dispatch (``floor``) is unseen: re-read."""

    def close_worker(self) -> None:
        """Release this worker thread's connection."""


@dataclass
class TableProgress:
    """One table's incremental snapshot: saved in the capture state and shown in status."""

    state: str = "queued"  # queued | running | done | failed
    plan: Plan | None = None
    #: Chunks emitted: all below ``done_next``, plus ``done_extra``.
    done_next: int = 0
    done_extra: set[int] = field(default_factory=set)
    #: Keyset plans: the last key emitted (raw values as the source reads them back).
    after: list[Any] | None = None
    rows_done: int = 0
    chunks_done: int = 0
    started_ms: int = 0
    updated_ms: int = 0
    error: str | None = None
    request: str | None = None

    def is_done(self, chunk: int) -> bool:
        return chunk < self.done_next or chunk in self.done_extra

    def mark_done(self, chunk: int) -> None:
        self.done_extra.add(chunk)
        while self.done_next in self.done_extra:
            self.done_extra.discard(self.done_next)
            self.done_next += 1

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "rows_done": self.rows_done,
            "rows_total": self.plan.rows_total if self.plan else None,
            "chunks_done": self.chunks_done,
            "started_ms": self.started_ms,
            "updated_ms": self.updated_ms,
        }
        if self.plan is not None and self.plan.mode == "range":
            out["chunks_total"] = self.plan.count
        if self.error:
            out["error"] = self.error
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.status(),
            "plan": self.plan.to_dict() if self.plan else None,
            "done_next": self.done_next,
            "done_extra": sorted(self.done_extra),
            "after": self.after,
            "request": self.request,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableProgress:
        return cls(
            state=str(d.get("state", "queued")),
            plan=Plan.from_dict(d["plan"]) if d.get("plan") else None,
            done_next=int(d.get("done_next", 0)),
            done_extra={int(x) for x in d.get("done_extra") or ()},
            after=d.get("after"),
            rows_done=int(d.get("rows_done", 0)),
            chunks_done=int(d.get("chunks_done", 0)),
            started_ms=int(d.get("started_ms", 0)),
            updated_ms=int(d.get("updated_ms", 0)),
            error=d.get("error"),
            request=d.get("request"),
        )


@dataclass
class _Task:
    kind: str  # "plan" | "chunk"
    table: str
    spec: ChunkSpec | None = None
    #: The stream point when the chunk was dispatched (:meth:`ChunkSource.valid`).
    floor: Any = None
    generation: int = 0


@dataclass
class _Planned:
    table: str
    plan: Plan | None
    error: BaseException | None = None


def message_batches(rows: Sequence[tuple[Key, Any]]) -> Iterable[list[Any]]:
    """A chunk's row values in groups published as one message each (:data:`MESSAGE_ROWS`
    rows or :data:`MESSAGE_BYTES` of values; a larger row goes alone)."""
    batch: list[Any] = []
    size = 0
    for _key, data in rows:
        row_size = sum(len(v) for v in data.values() if v is not None)
        if batch and (len(batch) >= MESSAGE_ROWS or size + row_size > MESSAGE_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(data)
        size += row_size
    if batch:
        yield batch


def _now_ms() -> int:
    return int(time.time() * 1000)


def request_record(table: str) -> bytes:
    """The JSON of a re-snapshot request of ``table`` (``db.table``)."""
    return orjson.dumps({"table": table, "id": uuid.uuid4().hex, "requested_ms": _now_ms()})


def request_path(table: str) -> str:
    """Where the request of ``table`` lives in the staging store."""
    if not table or "/" in table or table.count(".") < 1 or table.startswith("."):
        raise ValueError(f"not a table name (db.table): {table!r}")
    return f"{REQUESTS_PREFIX}{table}.json"


class IncrementalSnapshots:
    """The engine: queue, workers, per-table progress, chunk windows (see the module doc).

    Every method but :meth:`snapshot_status`, :meth:`confirmed` and the workers' loop runs on
    the stream reader's thread; the workers talk to it through two queues only.
    """

    def __init__(
        self,
        source: ChunkSource,
        *,
        workers: int,
        chunk_rows: int,
        captured: Callable[[str], bool],
    ) -> None:
        self.source = source
        self.workers = max(1, workers)
        self.chunk_rows = chunk_rows
        self.captured = captured
        self.tables: dict[str, TableProgress] = {}
        self.queue: list[str] = []
        self.snapshotted: set[str] = set()
        self.seq = 0
        #: Tables whose changes the stream records (first chunk dispatched .. last emitted).
        self.active: set[str] = set()
        self._changes: dict[str, list[tuple[Any, Key, int]]] = {}
        self._tick = 0  # stream ticks, the order of dispatch against recorded changes
        self._tasks: queue.Queue[_Task | None] = queue.Queue()
        self._results: queue.Queue[ChunkResult | _Planned] = queue.Queue()
        #: table -> {chunk: tick of its dispatch}: dispatched, not emitted yet.
        self._in_flight: dict[str, dict[int, int]] = {}
        self._keyset_after: dict[str, Any] = {}
        self._retry: dict[str, list[int]] = {}
        self._generation = 0
        self._failures: dict[tuple[str, int], int] = {}
        self._planning: set[str] = set()
        self._ready: list[ChunkResult] = []
        self._threads: list[threading.Thread] = []
        self._next_chunk: dict[str, int] = {}
        self._status: dict[str, Any] = {"tables": {}}
        self._version = 0
        self._saved_version = -1
        self._saved: dict[str, Any] = {}
        self.storage: Any = None
        self._next_poll = 0.0
        self._picked: dict[str, tuple[str, str]] = {}  # table -> (request path, request id)
        self._confirm_lock = threading.Lock()
        self.emitted_rows = 0

    # -- state ------------------------------------------------------------------------------

    def load(self, saved: dict[str, Any] | None, current: Iterable[str], *, fresh: bool) -> None:
        """Restore from a saved state's ``"incremental"`` part; queue newly matched tables.

        ``fresh``: this start snapshots every current table itself (initial snapshot), or the
        saved state predates incremental snapshots: the current tables count as snapshotted.
        """
        current = list(current)
        if saved:
            self.seq = int(saved.get("seq", 0))
            self.snapshotted = set(saved.get("snapshotted") or ())
            self.tables = {
                t: TableProgress.from_dict(d) for t, d in (saved.get("tables") or {}).items()
            }
            self.queue = [t for t in saved.get("queue") or () if t in self.tables]
        elif fresh:
            self.snapshotted = set(current)
        self.seq += RESTART_GAP
        for table in current:
            if table not in self.snapshotted and table not in self.queue:
                log.info("table newly captured: incremental snapshot queued", table=table)
                self._enqueue(table, None)
        for table in self.queue:
            # A plan read before the restart stays: its emitted chunks are counted against it.
            progress = self.tables[table]
            progress.state = "queued" if progress.plan is None else "running"
        self._changed_state()

    def state(self) -> dict[str, Any]:
        """The part of the capture state this engine owns (a fresh dict when it changed)."""
        if self._saved_version != self._version:
            self._saved = {
                "seq": self.seq,
                "snapshotted": sorted(self.snapshotted),
                "queue": list(self.queue),
                "tables": {t: p.to_dict() for t, p in self.tables.items()},
            }
            self._saved_version = self._version
        return self._saved

    def snapshot_status(self) -> dict[str, Any]:
        """``{"tables": {"db.t": {state, rows_done, rows_total, chunks_done, ...}}}``."""
        return self._status

    def _changed_state(self) -> None:
        self._version += 1
        self._status = {"tables": {t: p.status() for t, p in self.tables.items()}}

    # -- requests ---------------------------------------------------------------------------

    def request(self, table: str, request_id: str | None = None) -> bool:
        """Queue a (re-)snapshot of ``table``; False when it is not a captured table."""
        if not self.captured(table):
            return False
        self._enqueue(table, request_id)
        self._changed_state()
        return True

    def _enqueue(self, table: str, request_id: str | None) -> None:
        # A table being snapshotted starts over: its in-flight chunks are discarded on return.
        if table in self.queue:
            self.queue.remove(table)
        self._in_flight.pop(table, None)
        self._ready = [r for r in self._ready if r.spec.table != table]
        self.active.discard(table)
        self._changes.pop(table, None)
        self.tables[table] = TableProgress(request=request_id, updated_ms=_now_ms())
        self._next_chunk.pop(table, None)
        self._keyset_after.pop(table, None)
        self._retry.pop(table, None)
        self.queue.append(table)

    def poll_requests(self) -> None:
        """Pick up request records (every :data:`REQUEST_POLL_S`)."""
        if self.storage is None or time.monotonic() < self._next_poll:
            return
        self._next_poll = time.monotonic() + REQUEST_POLL_S
        try:
            paths = self.storage.list(REQUESTS_PREFIX)
        except Exception as exc:  # a flaky store must not stop the capture
            log.warning("snapshot requests unreadable", error=str(exc))
            return
        for path in paths:
            if not path.endswith(".json"):
                continue
            try:
                record = orjson.loads(self.storage.get(path))
                table, rid = str(record["table"]), str(record.get("id") or path)
            except Exception as exc:
                log.warning("snapshot request unreadable, removed", path=path, error=str(exc))
                with contextlib.suppress(Exception):
                    self.storage.delete(path)
                continue
            if self._picked.get(table, ("", ""))[1] == rid:
                continue  # queued already, waiting for a saved state to hold it
            self._picked[table] = (path, rid)
            if self.request(table, rid):
                log.info("snapshot requested", table=table)
            else:
                self.tables[table] = TableProgress(
                    state="failed", request=rid, updated_ms=_now_ms(),
                    error="not a captured table (capture.tables, primary key)",
                )  # fmt: skip
                self._changed_state()
                log.warning("snapshot request of a table not captured", table=table)

    def confirmed(self, saved: dict[str, Any]) -> None:
        """``saved`` is durable: delete the request records it holds (any thread)."""
        if self.storage is None or not self._picked:
            return
        tables = saved.get("tables") or {}
        with self._confirm_lock:
            for table, (path, rid) in list(self._picked.items()):
                if (tables.get(table) or {}).get("request") != rid:
                    continue
                try:
                    current = orjson.loads(self.storage.get(path)).get("id")
                except Exception:
                    current = None
                if current == rid:  # not replaced by a newer request meanwhile
                    with contextlib.suppress(Exception):
                        self.storage.delete(path)
                self._picked.pop(table, None)

    # -- the stream reader's side -----------------------------------------------------------

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def changed(self, table: str, key: Key, mark: Any) -> None:
        """A streamed change of ``table`` (call only when ``table in self.active``)."""
        self._changes[table].append((mark, key, self._tick))

    def tick(self, point: Any, *, emit: bool = True) -> list[ChunkResult]:
        """At a transaction boundary (or idle) at stream ``point``: dispatch work, and return
        the chunks to emit now, their rows filtered. The caller emits them before anything
        else and calls :meth:`emitted` for each.

        ``emit`` False holds every chunk back: the source's emission point is not yet above
        every position an earlier run may have published (after ``kill -9``, the stream
        replays up to where it was; a chunk emitted below that would sort under the lake's
        position watermark and be dropped)."""
        self.poll_requests()
        if not self.queue:
            return []
        self._tick += 1
        self._start_workers()
        self._collect(point)
        self._dispatch(point)
        if not emit:
            return []
        out: list[ChunkResult] = []
        keep: list[ChunkResult] = []
        for result in self._ready:
            if self.source.passed(result.watermark, point):
                out.append(self._filtered(result))
            else:
                keep.append(result)
        self._ready = keep
        return out

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def emitted(self, result: ChunkResult) -> None:
        """``result``'s rows are emitted: record the chunk as done."""
        table = result.spec.table
        progress = self.tables.get(table)
        if progress is None:
            return
        progress.mark_done(result.spec.chunk)
        progress.chunks_done += 1
        progress.rows_done += len(result.rows)
        progress.updated_ms = _now_ms()
        self.emitted_rows += len(result.rows)
        if result.spec.keyset:
            progress.after = list(result.last) if result.last is not None else progress.after
        self._in_flight.get(table, {}).pop(result.spec.chunk, None)
        finished = (
            result.final
            if result.spec.keyset
            else progress.plan is not None and progress.done_next >= progress.plan.count
        )
        if finished:
            self._finish(table, "done")
        self._trim(table)
        self._changed_state()

    def _finish(self, table: str, state: str, error: str | None = None) -> None:
        progress = self.tables[table]
        progress.state, progress.error, progress.updated_ms = state, error, _now_ms()
        if table in self.queue:
            self.queue.remove(table)
        self.active.discard(table)
        self._changes.pop(table, None)
        self._in_flight.pop(table, None)
        if state == "done":
            self.snapshotted.add(table)
            log.info("incremental snapshot done", table=table, rows=progress.rows_done,
                     chunks=progress.chunks_done)  # fmt: skip
        else:
            log.error("incremental snapshot failed", table=table, error=error)

    def _filtered(self, result: ChunkResult) -> ChunkResult:
        """Drop the rows whose key a streamed transaction unseen by the chunk changed."""
        changes = self._changes.get(result.spec.table) or []
        if not changes:
            return result
        unseen = {key for mark, key, _t in changes if not self.source.sees(result.watermark, mark)}
        if unseen:
            result.rows = [r for r in result.rows if r[0] not in unseen]
        return result

    def _trim(self, table: str) -> None:
        """Forget recorded changes no chunk in flight can still need."""
        changes = self._changes.get(table)
        if not changes:
            return
        pending = self._in_flight.get(table)
        if not pending:
            changes.clear()
            return
        oldest = min(pending.values())
        self._changes[table] = [c for c in changes if c[2] >= oldest]

    def _collect(self, point: Any) -> None:
        while True:
            try:
                got = self._results.get_nowait()
            except queue.Empty:
                return
            if isinstance(got, _Planned):
                self._planned(got)
                continue
            table = got.spec.table
            if got.generation != self._generation:
                continue  # read before reread_all: dropped
            if got.spec.chunk not in self._in_flight.get(table, {}):
                continue  # the table was re-queued meanwhile: a stale read
            progress = self.tables[table]
            if got.error is not None:
                failures = self._failures.get((table, got.spec.chunk), 0) + 1
                self._failures[(table, got.spec.chunk)] = failures
                if failures >= MAX_READ_FAILURES:
                    self._finish(table, "failed", f"{type(got.error).__name__}: {got.error}")
                    self._changed_state()
                    continue
                log.warning("chunk read failed; read again", table=table,
                            chunk=got.spec.chunk, error=str(got.error))  # fmt: skip
                self._read_again(got.spec)
                continue
            if not self.source.valid(got.watermark, got.floor):
                log.info("chunk read again: a streamed change was not visible to it yet",
                         table=table, chunk=got.spec.chunk)  # fmt: skip
                self._read_again(got.spec)
                continue
            if got.spec.keyset and not got.final:
                # The next keyset chunk starts after this one's last key, read or not yet
                # emitted: its range does not depend on what this chunk drops.
                self._keyset_after[table] = got.last
            progress.updated_ms = _now_ms()
            self._ready.append(got)

    def _read_again(self, spec: ChunkSpec) -> None:
        self._in_flight[spec.table].pop(spec.chunk, None)
        if spec.keyset:
            self._next_chunk[spec.table] = spec.chunk
            self._keyset_after[spec.table] = spec.after
        else:
            self._retry.setdefault(spec.table, []).append(spec.chunk)

    def reread_all(self) -> None:
        """Forget every chunk read but not emitted (its watermark means nothing any more:
        the capture now reads another server's log, capture/gtid.py); they are read again."""
        self._generation += 1
        for table, flight in self._in_flight.items():
            progress = self.tables.get(table)
            for chunk in sorted(flight):
                if progress is not None and progress.plan is not None:
                    if progress.plan.mode == "keyset":
                        self._next_chunk[table] = progress.done_next
                        self._keyset_after[table] = progress.after
                    else:
                        self._retry.setdefault(table, []).append(chunk)
            flight.clear()
            if table in self._changes:
                self._changes[table] = []
        self._ready = []

    def _planned(self, got: _Planned) -> None:
        self._planning.discard(got.table)
        progress = self.tables.get(got.table)
        if progress is None or got.table not in self.queue:
            return
        if got.error is not None or got.plan is None:
            self._finish(got.table, "failed", f"{type(got.error).__name__}: {got.error}")
        else:
            progress.plan = got.plan
            progress.state = "running"
            progress.started_ms = progress.started_ms or _now_ms()
        self._changed_state()

    def _dispatch(self, point: Any) -> None:
        limit = max(self.workers * READY_PER_WORKER, BUFFER_ROWS // max(self.chunk_rows, 1))
        for table in list(self.queue):
            progress = self.tables[table]
            if progress.plan is None:
                if table not in self._planning and len(self._planning) < self.workers:
                    self._planning.add(table)
                    self._tasks.put(_Task("plan", table))
                continue
            plan = progress.plan
            flight = self._in_flight.setdefault(table, {})
            while self._outstanding() < limit:
                spec = self._next_spec(table, progress, plan, flight)
                if spec is None:
                    break
                if table not in self.active:
                    self.active.add(table)
                    self._changes[table] = []
                flight[spec.chunk] = self._tick
                self._tasks.put(_Task("chunk", table, spec, point, self._generation))
            if self._outstanding() >= limit:
                return

    def _outstanding(self) -> int:
        return sum(len(s) for s in self._in_flight.values())

    def _next_spec(
        self, table: str, progress: TableProgress, plan: Plan, flight: dict[int, int]
    ) -> ChunkSpec | None:
        if plan.mode == "keyset":
            # One keyset chunk of a table read at a time: the next one starts after its last
            # key. A final chunk (the table's end) ends the reads.
            waiting = {r.spec.chunk: r.final for r in self._ready if r.spec.table == table}
            if any(c not in waiting for c in flight) or any(waiting.values()):
                return None
            chunk = self._next_chunk.get(table, progress.done_next)
            after = self._keyset_after.get(table, progress.after)
            self._next_chunk[table] = chunk + 1
            return ChunkSpec(table, chunk, after=after, keyset=True)
        retry = self._retry.get(table)
        if retry:
            chunk = retry.pop(0)
        else:
            chunk = self._next_chunk.get(table, 0)
            while chunk < plan.count and (progress.is_done(chunk) or chunk in flight):
                chunk += 1
            if chunk >= plan.count:
                return None
            self._next_chunk[table] = chunk + 1
        lo = None if chunk == 0 else plan.lo + chunk * plan.step
        hi = None if chunk == plan.count - 1 else plan.lo + (chunk + 1) * plan.step
        return ChunkSpec(table, chunk, lo=lo, hi=hi)

    # -- workers ----------------------------------------------------------------------------

    def _start_workers(self) -> None:
        if self._threads:
            return
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"snapshot-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _work(self) -> None:
        try:
            while True:
                task = self._tasks.get()
                if task is None:
                    return
                if task.kind == "plan":
                    try:
                        plan = self.source.plan_table(task.table, self.chunk_rows)
                        self._results.put(_Planned(task.table, plan))
                    except Exception as exc:
                        self._results.put(_Planned(task.table, None, exc))
                    continue
                assert task.spec is not None
                try:
                    result = self.source.read_chunk(task.spec, self.chunk_rows)
                except Exception as exc:
                    result = ChunkResult(task.spec, [], None, error=exc)
                    with contextlib.suppress(Exception):  # a broken connection: a new one
                        self.source.close_worker()
                result.floor = task.floor
                result.generation = task.generation
                self._results.put(result)
        finally:
            with contextlib.suppress(Exception):
                self.source.close_worker()

    def close(self) -> None:
        """Stop the workers (a chunk being read is finished and dropped)."""
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []


def snapshotted_at_start(state: dict[str, Any] | None, mode: str) -> bool:
    """Whether the tables captured at this start count as snapshotted already (``fresh`` of
    :meth:`IncrementalSnapshots.load`): a first start whose initial snapshot reads them
    (``capture.snapshot: initial``) or that skips them (``never``), an initial snapshot
    being resumed, or a state saved before incremental snapshots. A first start with
    ``capture.snapshot: incremental`` queues every captured table instead: streaming starts
    at the log's end and the tables are read in parallel chunks beside it."""
    if state is None:
        return mode != "incremental"
    return state.get("phase") != "streaming" or state.get("incremental") is None


class SnapshotHooks:
    """What the capture runner and the publication sync ask of a source that snapshots on
    demand; each source sets ``_snap`` (its engine, once streaming starts) and ``_staging``."""

    _snap: IncrementalSnapshots | None
    _staging: Any

    def attach_staging(self, storage: Any) -> None:
        """The staging store holding snapshot requests (the runner's)."""
        self._staging = storage
        if self._snap is not None:
            self._snap.storage = storage

    def snapshot_status(self) -> dict[str, Any]:
        """Incremental snapshots per table (heartbeat ``"snapshot"``)."""
        return self._snap.snapshot_status() if self._snap is not None else {"tables": {}}

    def snapshot_saved(self, state: dict[str, Any]) -> None:
        """``state`` is saved: delete the snapshot requests it holds (the runner calls it)."""
        if self._snap is not None:
            self._snap.confirmed(state.get("incremental") or {})

    def queue_snapshot(self, table: str) -> bool:
        """Snapshot ``table`` (``db.table`` / ``schema.table``) incrementally, from the
        stream's next boundary; False before streaming started."""
        return self._snap is not None and self._snap.request(table)
