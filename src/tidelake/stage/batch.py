"""The batch accumulator: decoded messages in, one staged batch (files + manifest) out.

Pure logic over :class:`~tidelake.runtime.storage.Storage`; it knows nothing of NATS, so a
message is any object (the stager passes JetStream messages, tests pass anything) kept only
so the caller can acknowledge the batch after :meth:`Batch.flush`.

Every received message lands in exactly one bucket, which the manifest records:

* **staged**: it decoded into one or more change events, written to the table files;
* **dead_lettered**: the caller already has it durably in the DLQ stream;
* **skipped**: it carries no row (a TiCDC watermark, a tombstone);

so ``received == staged + dead_lettered + skipped`` for every batch (docs/architecture.md §4).

A batch is cut when it holds ``max_events`` messages, ``max_bytes`` of payload, when its
first message is ``max_age_s`` old, or after a DDL event: a DDL is a barrier, the last event
of its batch, written to its table's file as that file's last line and also listed in the
manifest's ``ddl`` (a DDL without a table name, e.g. ``CREATE DATABASE``, only there).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from tidelake.config import StageConfig
from tidelake.events import ChangeEvent, Op
from tidelake.names import table_id
from tidelake.runtime.storage import Storage
from tidelake.stage.manifest import Manifest, TableFile, table_file_path, write_manifest

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """When a batch is cut: whichever limit is reached first."""

    max_events: int = 50_000
    max_bytes: int = 64 * 1024 * 1024
    max_age_s: float = 1.0

    @classmethod
    def from_config(cls, cfg: StageConfig) -> BatchLimits:
        return cls(max_events=cfg.max_events, max_bytes=cfg.max_bytes, max_age_s=cfg.max_age_s)


def new_batch_id() -> str:
    """Sortable by creation time, unique across stager processes."""
    return f"{time.time_ns() // 1_000_000:013d}-{secrets.token_hex(4)}"


class Batch(Generic[M]):
    """The messages of one batch, their staged lines per table, and their counts."""

    def __init__(self, limits: BatchLimits, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self.messages: list[M] = []
        #: Redeliveries of messages already in the batch: acked with it, not staged twice.
        self.extra_acks: list[M] = []
        self._lines: dict[tuple[str, str], list[bytes]] = {}
        self._ddl: list[ChangeEvent] = []
        self._seq_first = 0
        self._seq_last = 0
        self._bytes = 0
        self._started_at: float | None = None
        self.staged = 0
        self.dead_lettered = 0
        self.skipped = 0
        self.counts_by_reason: Counter[str] = Counter()
        #: Set once a DDL event is in: nothing after it in the stream may be added.
        self.closed = False
        #: Stream sequence of the DDL that closed the batch (0 while open).
        self.barrier_seq = 0

    # -- filling ----------------------------------------------------------------------------

    @property
    def received(self) -> int:
        return len(self.messages)

    @property
    def payload_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self.messages)

    def accepts(self, seq: int) -> bool:
        """False for a message after this batch's DDL barrier: it belongs to the next one.
        A message from before the barrier (a redelivery filling a gap) still fits."""
        return not self.closed or seq < self.barrier_seq

    def _take(self, msg: M, seq: int, size: int) -> None:
        if not self.accepts(seq):
            raise RuntimeError("the batch is closed by a DDL barrier; flush it first")
        if seq <= 0:
            raise ValueError(f"a stream sequence is positive, got {seq}")
        if not self.messages:
            self._started_at = self._clock()
            self._seq_first = self._seq_last = seq
        else:
            self._seq_first = min(self._seq_first, seq)
            self._seq_last = max(self._seq_last, seq)
        self.messages.append(msg)
        self._bytes += size

    def add_events(self, msg: M, seq: int, size: int, events: list[ChangeEvent]) -> None:
        """A message that decoded into ``events`` (at least one); each gets ``seq`` set."""
        if not events:
            raise ValueError("a staged message has events; use add_skipped for none")
        self._take(msg, seq, size)
        self.staged += 1
        for event in events:
            ev = event if event.seq == seq else _with_seq(event, seq)
            if ev.op is Op.DDL:
                if self.closed:
                    raise ValueError(f"message {seq}: a second DDL barrier in one batch")
                self._ddl.append(ev)
                self.closed = True
                self.barrier_seq = seq
                if not ev.table:
                    continue
            elif self.closed and seq >= self.barrier_seq:
                raise ValueError(f"message {seq}: a row event after a DDL event in one message")
            self._lines.setdefault((ev.database, ev.table), []).append(ev.to_json())

    def add_dead_lettered(self, msg: M, seq: int, size: int, reason: str) -> None:
        """A message already durable in the DLQ stream (its PubAck is in)."""
        self._take(msg, seq, size)
        self.dead_lettered += 1
        self.counts_by_reason[reason_bucket(reason)] += 1

    def add_skipped(self, msg: M, seq: int, size: int, reason: str) -> None:
        """A message that carries no row."""
        self._take(msg, seq, size)
        self.skipped += 1
        self.counts_by_reason[f"skipped:{reason}"] += 1

    # -- cutting ----------------------------------------------------------------------------

    def age_s(self) -> float:
        return 0.0 if self._started_at is None else self._clock() - self._started_at

    def time_left_s(self) -> float:
        """Seconds until the age limit cuts this batch (the full limit when empty)."""
        return self.limits.max_age_s - self.age_s()

    def is_due(self) -> bool:
        """True when the batch must be flushed now."""
        if not self.messages:
            return False
        return (
            self.closed
            or len(self.messages) >= self.limits.max_events
            or self._bytes >= self.limits.max_bytes
            or self.age_s() >= self.limits.max_age_s
        )

    def room(self) -> int:
        """How many more messages fit under ``max_events``."""
        return max(0, self.limits.max_events - len(self.messages))

    # -- flushing ---------------------------------------------------------------------------

    def staged_rows(self) -> dict[str, int]:
        """Staged lines per ``database.table``."""
        return {table_id(db, t): len(lines) for (db, t), lines in self._lines.items()}

    def flush(
        self,
        storage: Storage,
        *,
        batch_id: str | None = None,
        after_files: Callable[[], None] | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> Manifest:
        """Write one JSON Lines file per table, THEN the manifest; return the manifest.

        Each :meth:`Storage.put` is durable when it returns, so once this returns the batch
        exists and its messages may be acknowledged. ``after_files`` runs between the files
        and the manifest (the crash-test hook uses it). ``trace``: the stage span's W3C
        context, kept in the manifest (docs/tracing.md).
        """
        if not self.messages:
            raise ValueError("an empty batch is not flushed")
        batch_id = batch_id or new_batch_id()
        tables = []
        for (database, table), lines in sorted(self._lines.items()):
            path = table_file_path(batch_id, database, table)
            storage.put(path, b"\n".join(lines) + b"\n")
            tables.append(TableFile(database, table, path, len(lines)))
        if after_files is not None:
            after_files()
        manifest = Manifest(
            batch_id=batch_id,
            seq_first=self._seq_first,
            seq_last=self._seq_last,
            created_at_ms=time.time_ns() // 1_000_000,
            tables=tuple(tables),
            ddl=tuple(ev.to_dict() for ev in self._ddl),
            received=self.received,
            staged=self.staged,
            dead_lettered=self.dead_lettered,
            skipped=self.skipped,
            counts_by_reason=dict(self.counts_by_reason),
            trace=dict(trace or {}),
        )
        write_manifest(storage, manifest)
        return manifest


def reason_bucket(reason: str) -> str:
    """A short, low-cardinality key for a reason (the text before the first ``:``)."""
    head = reason.split(":", 1)[0].strip()
    return head[:64] or "unknown"


def _with_seq(ev: ChangeEvent, seq: int) -> ChangeEvent:
    return replace(ev, seq=seq)
