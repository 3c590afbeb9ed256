"""The capture loop shared by every source: read in a thread, publish in order, save after acks.

A source (``capture/mysql.py``, ``capture/postgres.py``) reads its change log with a blocking
client library in a reader thread and hands :class:`~tidelake.capture.canal.Outgoing`
messages and :class:`~tidelake.capture.canal.Resume` points to a :class:`Sink`. The asyncio
side publishes every message in order through :class:`~tidelake.capture.publisher.Publisher`
(``Nats-Msg-Id`` = position). A resume point becomes durable once JetStream has acknowledged
every message emitted before it; only then is its state written by
:class:`~tidelake.capture.position.PositionStore` and confirmed to the source (PostgreSQL's
flushed LSN). ``kill -9`` at any instant therefore loses nothing: the restart resumes at the
last saved transaction boundary and republishes at most what followed it. A heartbeat file
(``runtime/heartbeat.py``) beside the position file tells ``tidelake serve`` what capture does.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_streams
from tidelake.capture.bus_publisher import open_publisher
from tidelake.capture.canal import Item, Outgoing, Resume
from tidelake.capture.lag import IDLE_WITHIN_S, LagProbe, lag_seconds
from tidelake.capture.position import PositionStore
from tidelake.config import Config
from tidelake.errors import Terminal, TidelakeError, Transient
from tidelake.runtime import live_metrics as live
from tidelake.runtime.heartbeat import Heartbeat
from tidelake.runtime.metrics_server import beat
from tidelake.runtime.storage import LocalStorage, open_storage

log = structlog.get_logger(__name__)

#: Items handed from the reader thread to the publisher at once, at most.
SINK_BATCH = 512
#: Seconds between PubAck drains (each one may save the position).
DRAIN_INTERVAL_S = 0.2


class CaptureError(TidelakeError, Terminal):
    """The capture cannot go on; the message says what the operator must change."""


class SourceUnavailableError(TidelakeError, Transient):
    """The source database cannot be reached (a restart of the capture may succeed)."""


class Source(Protocol):
    """One source database's change capture."""

    kind: str

    def check(self) -> None:
        """Raise :class:`CaptureError` explaining every missing server setting."""

    def run(self, state: dict[str, Any] | None, sink: Sink, stop: threading.Event) -> None:
        """Snapshot (when due) then stream into ``sink`` until ``stop`` is set (blocking)."""

    def confirm(self, state: dict[str, Any]) -> None:
        """``state`` is saved: the source may forget what precedes it (thread-safe)."""

    def close(self) -> None:
        """Release connections."""


class Sink:
    """Collects items in the reader thread and hands them to the event loop in batches.

    :meth:`put` blocks when the publisher is behind (a bounded queue), so a fast source
    never fills memory. :meth:`flush` should be called whenever the source may go idle.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
        self._loop = loop
        self._queue = queue
        self._items: list[Item] = []
        self._last_flush = time.monotonic()
        self.emitted = 0
        #: When a flush last found nothing to hand over: the source polled and had nothing
        #: more to read (``capture/lag.py``: the capture is caught up).
        self.idle_at = 0.0

    def put(self, item: Item) -> None:
        self._items.append(item)
        if isinstance(item, Outgoing):
            self.emitted += 1
        if len(self._items) >= SINK_BATCH:
            self.flush()

    def resume(self, state: dict[str, Any], *, flush_after_s: float = 0.02) -> None:
        """A transaction boundary: ``state`` is where a restart would continue."""
        self.put(Resume(state))
        if time.monotonic() - self._last_flush >= flush_after_s:
            self.flush()

    def flush(self) -> None:
        if self._items:
            items, self._items = self._items, []
            asyncio.run_coroutine_threadsafe(self._queue.put(items), self._loop).result()
        else:
            self.idle_at = time.monotonic()
        self._last_flush = time.monotonic()

    def finish(self, error: BaseException | None = None) -> None:
        self.flush()
        asyncio.run_coroutine_threadsafe(self._queue.put(error or _END), self._loop).result()


_END = object()


@dataclass
class CaptureStats:
    """What a capture run did."""

    published: int = 0
    duplicates: int = 0
    saves: int = 0
    state: dict[str, Any] | None = None


class _Durable:
    """Resume points waiting for the PubAcks of everything emitted before them."""

    def __init__(self) -> None:
        self.marks: deque[tuple[int, dict[str, Any]]] = deque()

    def add(self, published_before: int, state: dict[str, Any]) -> None:
        self.marks.append((published_before, state))

    def durable(self, acked: int) -> dict[str, Any] | None:
        latest = None
        while self.marks and self.marks[0][0] <= acked:
            latest = self.marks.popleft()[1]
        return latest


async def capture_loop(
    cfg: Config,
    source: Source,
    *,
    stop: threading.Event,
    on_saved: Callable[[dict[str, Any]], None] | None = None,
) -> CaptureStats:
    """Run ``source`` until ``stop`` is set or it fails; the position is saved on the way out."""
    store = PositionStore(cfg.capture_position_file)
    state = store.load()
    stats = CaptureStats(state=state)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=16)
    sink = Sink(loop, queue)
    # Its own connection, re-opened in order after a failure: stream order = call order,
    # which the ingest's position watermark relies on (capture/publisher.py). On a Kafka
    # bus, the idempotent producer's order (capture/kafka_publisher.py).
    pub = await open_publisher(cfg.bus)
    waiting = _Durable()
    sent = 0
    # Lag (capture/lag.py): probed on a connection of its own, never the reader's.
    measure_lag = getattr(source, "lag", None)
    open_conn = getattr(source, "connect", None)
    probe = (
        LagProbe(
            open_conn,
            lambda conn: measure_lag(conn, stats.state),
            interval_s=cfg.capture.lag_interval_s,
            server=lambda: getattr(source, "dsn", None),  # a failover moves it (mysql.py)
        )
        if measure_lag is not None and open_conn is not None
        else None
    )

    def lag() -> dict[str, Any]:
        report = probe.latest() if probe is not None else {}
        newest = next(iter(live.CAPTURER_LAST_COMMIT.collect())).samples[0].value
        caught_up = (
            time.monotonic() - sink.idle_at <= IDLE_WITHIN_S and pub.published >= sink.emitted
        )
        seconds = lag_seconds(time.time(), int(newest * 1000) or None, caught_up=caught_up)
        return {**report, "seconds": seconds}

    skipped_tables = getattr(source, "skipped_tables", None)
    # Incremental snapshots (capture/incremental.py): progress, and the saved states that
    # let the source delete the snapshot requests they hold.
    snapshot_status = getattr(source, "snapshot_status", None)
    snapshot_saved = getattr(source, "snapshot_saved", None)

    def info() -> dict[str, Any]:
        saved = stats.state or {}
        return {
            "source": source.kind,
            "phase": saved.get("phase"),
            "published": pub.published,
            "duplicates": pub.duplicates,
            "emitted": sink.emitted,
            # Tables the capture does not take, with the reason (capture/keys.py): status
            # shows them as skipped, not stale.
            "skipped": skipped_tables() if skipped_tables is not None else {},
            "snapshot": snapshot_status() if snapshot_status is not None else {"tables": {}},
            "position_saves": store.saves,
            "lag": lag(),
            # MySQL/MariaDB (capture/gtid.py): the server read now, its epoch, the saved GTID.
            "server": {
                "address": (saved.get("server") or {}).get("address"),
                "epoch": saved.get("epoch"),
                "gtid": saved.get("gtid"),
            }
            if saved.get("server")
            else None,
        }

    # In the staging store beside the stager's (<staging>/_tidelake/capture.heartbeat.json):
    # `serve` and `status` read both from there, also when the capture runs in a container
    # of its own whose disk nobody else sees (the shipped compose and Kubernetes layouts).
    staging = open_storage(cfg.stage_root, cfg.storage.s3)
    fallback = staging.overwrite if isinstance(staging, LocalStorage) else None
    heartbeat = Heartbeat(staging.put, "capture", info, fallback=fallback)
    attach_staging = getattr(source, "attach_staging", None)
    if attach_staging is not None:  # snapshot requests live there (capture/incremental.py)
        attach_staging(staging)
    live.watch_capture(
        lambda: {
            "published": pub.published,
            "duplicates": pub.duplicates,
            "position_saves": store.saves,
        }
    )
    live.watch_capture_health(info)

    def reader() -> None:
        try:
            source.run(state, sink, stop)
        except BaseException as exc:  # handed to the event loop, raised there
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing to report to
                sink.finish(exc)
            return
        with contextlib.suppress(RuntimeError):
            sink.finish()

    async def save_durable() -> None:
        await pub.durable()
        latest = waiting.durable(pub.published)
        if latest is not None and skipped_tables is not None:
            # Saved with the position: a restart reports them before it meets them again.
            latest = {**latest, "skipped": skipped_tables()}
        if latest is not None:
            store.save(latest)
            stats.state = latest
            source.confirm(latest)
            if snapshot_saved is not None:
                snapshot_saved(latest)
            if on_saved is not None:
                on_saved(latest)

    ticker: asyncio.Task[None] | None = None
    try:
        await _ensure_bus(cfg)
        thread = threading.Thread(target=reader, name=f"capture-{source.kind}", daemon=True)
        thread.start()
        heartbeat.start()
        # /healthz keeps turning while a publish waits for PubAcks (a slow or restarting
        # JetStream: the publisher retries for up to give_up_s, then fails the capture),
        # not only when the loop below comes round; a blocked event loop still stops it.
        ticker = asyncio.create_task(_beat_every(DRAIN_INTERVAL_S))
        if probe is not None:
            probe.start()
        last_drain = time.monotonic()
        error: BaseException | None = None
        while True:
            beat()  # /healthz: the loop turns at least every DRAIN_INTERVAL_S
            try:
                got = await asyncio.wait_for(queue.get(), DRAIN_INTERVAL_S)
            except TimeoutError:
                got = None
            if got is _END:
                break
            if isinstance(got, BaseException):
                error = got
                break
            last: Outgoing | None = None
            for item in got or ():
                if isinstance(item, Outgoing):
                    await pub.publish(item.subject, item.payload, item.msg_id)
                    sent += 1
                    last = item
                else:
                    waiting.add(sent, item.state)
            if last is not None:
                # Once per batch, not per message (each set takes the gauge's lock).
                live.CAPTURER_LAST_COMMIT.set(last.commit_ts_ms / 1000)
                live.CAPTURER_PUBLISH_LAG.set(max(0.0, time.time() - last.commit_ts_ms / 1000))
            if got is None or time.monotonic() - last_drain >= DRAIN_INTERVAL_S:
                await save_durable()
                last_drain = time.monotonic()
            if stop.is_set() and got is None:
                break
        stop.set()
        await save_durable()
        if error is not None:
            raise error
    finally:
        if probe is not None:
            probe.stop()
        heartbeat.stop()
        if ticker is not None:
            ticker.cancel()
        stats.published = pub.published
        stats.duplicates = pub.duplicates
        stats.saves = store.saves
        with contextlib.suppress(Exception):
            await pub.close()
        source.close()
    return stats


async def _ensure_bus(cfg: Config) -> None:
    """The CDC stream (JetStream) or topics (Kafka) exist before anything is published."""
    if cfg.bus.kind == "kafka":
        from tidelake.bus.kafka import ensure_topics

        await ensure_topics(cfg.bus)
        return
    nc = await connect(cfg.bus)
    try:
        await ensure_streams(nc.jetstream(), cfg.bus)
    finally:
        await nc.close()


async def _beat_every(interval_s: float) -> None:
    while True:
        beat()
        await asyncio.sleep(interval_s)


def run_capture(cfg: Config, source: Source) -> CaptureStats:
    """Blocking: capture until SIGTERM/SIGINT, then save the position and return."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log.info("capture stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    source.check()
    from tidelake.runtime.tracing import process_tracing

    with process_tracing(cfg.tracing, "capture"):  # a span per message (docs/tracing.md)
        return asyncio.run(capture_loop(cfg, source, stop=stop))
