"""What every stager shares, whichever bus it reads: its counters, the stop request and the
signals that make it, the test-only crash hook, and the lines it logs per batch and at the end.

The JetStream stager (``stage/consumer.py``) and the Kafka one (``stage/kafka_consumer.py``)
both derive from :class:`StagerControl`.

Test-only hook: ``TEST_TIDELAKE_CRASH_AT=after_files`` (between a batch's data files and its
manifest) or ``after_manifest`` (between the manifest and the acks or the offset commit) makes
the process ``SIGKILL`` itself at exactly that point, the first time it gets there. The chaos
and crash tests use it; it must never be set in production. (Its name does not start with
``TIDELAKE_``: those variables are configuration overrides.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from tidelake.errors import is_retryable
from tidelake.runtime.live_metrics import STAGER_FLUSH_SECONDS
from tidelake.runtime.storage import Storage
from tidelake.stage.batch import Batch, new_batch_id
from tidelake.stage.manifest import Manifest

log = structlog.get_logger(__name__)

CRASH_HOOK_ENV = "TEST_TIDELAKE_CRASH_AT"
CRASH_POINTS = frozenset({"after_files", "after_manifest"})


@dataclass
class StagerStats:
    """Counters of one stager process (exposed as Prometheus metrics by the API)."""

    received: int = 0
    staged: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    batches: int = 0
    redelivered: int = 0
    rows_by_table: Counter[str] = field(default_factory=Counter)
    dead_lettered_by_reason: Counter[str] = field(default_factory=Counter)
    last_seq: int = 0
    #: Failed attempts to write to staging storage (each retried, none acked).
    storage_failures: int = 0
    #: Failed requests to the bus (NATS or Kafka unreachable), each retried; none acks anything.
    bus_failures: int = 0
    #: Messages handed back (nak) to the stream for another stager to stage in order.
    given_back: int = 0
    #: Times a Kafka bus's group gave this stager the CDC topic's partition.
    rebalances: int = 0
    #: The storage or bus error being retried now, for the heartbeat (empty once it succeeds).
    last_error: str = ""

    def add_batch(self, batch: Batch[Any], manifest: Manifest) -> None:
        self.batches += 1
        self.received += manifest.received
        self.staged += manifest.staged
        self.dead_lettered += manifest.dead_lettered
        self.skipped += manifest.skipped
        self.rows_by_table.update({t.table_id: t.events for t in manifest.tables})
        self.last_seq = max(self.last_seq, manifest.seq_last)


class StagerControl:
    """The counters, the stop request and the crash hook of one stager."""

    def __init__(self) -> None:
        self.stats = StagerStats()
        self._stop = asyncio.Event()
        self._crash_at = os.environ.get(CRASH_HOOK_ENV) or None
        if self._crash_at is not None and self._crash_at not in CRASH_POINTS:
            raise ValueError(f"{CRASH_HOOK_ENV} must be one of {sorted(CRASH_POINTS)}")

    def stop(self) -> None:
        """Stop fetching; the current batch is finished (flushed and acked) before exit."""
        if not self._stop.is_set():
            log.info("stager stopping: finishing the current batch")
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    def _hook(self, point: str) -> Callable[[], None]:
        """The test-only crash hook (see the module docstring); a no-op unless armed."""
        if self._crash_at != point:
            return _noop

        def crash() -> None:
            log.warning("test crash hook: SIGKILL", point=point)
            os.kill(os.getpid(), signal.SIGKILL)

        return crash

    async def _write(
        self,
        batch: Batch[Any],
        storage: Storage,
        hold: Callable[[BaseException, int, str], Awaitable[None]],
        trace: Mapping[str, str] | None = None,
    ) -> Manifest:
        """Write ``batch`` (files, then manifest) under one batch id; after a transient
        failure (disk full, object store down) ``hold(error, attempt, what)`` waits the
        back-off, keeping the batch's input, and the write is tried again, until it succeeds
        or the stager is stopped. ``trace`` goes into the manifest (docs/tracing.md)."""
        batch_id = new_batch_id()
        attempt = 0
        while True:
            try:
                return await asyncio.to_thread(
                    batch.flush,
                    storage,
                    batch_id=batch_id,
                    after_files=self._hook("after_files"),
                    trace=trace,
                )
            except Exception as exc:
                if not is_retryable(exc) or self.stopping:
                    raise
                attempt += 1
                await hold(exc, attempt, f"batch {batch_id}")

    def _staged(self, batch: Batch[Any], manifest: Manifest, started: float) -> None:
        """Count and log a batch whose manifest is durable and whose input is let go."""
        self.stats.add_batch(batch, manifest)
        STAGER_FLUSH_SECONDS.observe(time.monotonic() - started)
        log.info(
            "batch staged",
            batch_id=manifest.batch_id,
            seq_first=manifest.seq_first,
            seq_last=manifest.seq_last,
            received=manifest.received,
            staged=manifest.staged,
            dead_lettered=manifest.dead_lettered,
            skipped=manifest.skipped,
            tables=len(manifest.tables),
            ddl=len(manifest.ddl),
            seconds=round(time.monotonic() - started, 3),
        )

    def _log_stopped(self) -> None:
        log.info(
            "stager stopped",
            received=self.stats.received,
            staged=self.stats.staged,
            dead_lettered=self.stats.dead_lettered,
            skipped=self.stats.skipped,
            batches=self.stats.batches,
        )


def _noop() -> None:
    return None
