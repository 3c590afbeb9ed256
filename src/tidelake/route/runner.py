"""``tidelake route run NAME``: one route's durable consumer, from the CDC stream into its sink.

Each route is its own durable JetStream pull consumer, ``route-<name>``, on the CDC stream
(every subject). It progresses, fails and replays on its own: a slow or broken sink holds back
its route only, never the stager nor another route.

One batch of at most ``batch_size`` messages goes:

1. **decode** (``tidelake.formats``, as the stager) and **select** (``route/select.py``): a
   message that does not decode, or that the route takes but cannot forward, is
   dead-lettered with the reason;
2. **apply**: the sink makes the batch's changes durable, idempotently by key with the source
   position as the version (``route/change.py``). An unreachable sink is retried with
   back-off, for as long as it takes, the batch's messages kept in progress; changes the
   sink refuses for good are dead-lettered (their whole message) and the rest applied again;
3. **ack** every message of the batch, only now.

A kill at any instant leaves messages unacknowledged; JetStream redelivers them after AckWait
and the sink's position guard makes the second application change nothing.

Traces (docs/tracing.md; off by default): each batch is one CONSUMER span ``route <name>``
from decode to ack, a new trace linked to the contexts its messages carry (the publish spans'
``traceparent``, at most ``tracing.max_links``), as the stager's stage span is.

Dead letters of a route go to ``<dlq.subject_prefix>.route.<name>.<original subject>`` in the
dead-letter stream, with the stager's headers plus ``Tidelake-Route``. ``tidelake route
reprocess NAME`` applies them through the route again (after a fix of the sink or the data)
and removes the ones that landed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from nats.js import api
from nats.js.errors import NotFoundError

from tidelake import formats
from tidelake.bus import dlq
from tidelake.config import Config, RouteConfig
from tidelake.errors import ConfigError, DecodeError
from tidelake.route.change import ChangesRejected, RowChange, Sink, SinkUnavailable
from tidelake.route.registry import RouteRegistry
from tidelake.route.select import RouteSelector
from tidelake.route.sinks import open_sink
from tidelake.runtime import live_metrics as live
from tidelake.runtime import tracing
from tidelake.runtime.metrics_server import beat

log = structlog.get_logger(__name__)

#: The stager's key header (``stage/consumer.py``): a Debezium message's primary key.
KEY_HEADER = "Tidelake-Key"
#: Names the route a dead letter came from.
HEADER_ROUTE = "Tidelake-Route"
#: Longest pause between two tries of an unreachable sink.
MAX_BACKOFF_S = 30.0
#: How long one fetch waits for messages.
FETCH_TIMEOUT_S = 1.0
#: How often a running route reads the registry (paused? removed?).
REGISTRY_EVERY_S = 2.0


def durable_name(route: str) -> str:
    """The route's JetStream consumer."""
    return f"route-{route}"


def route_dlq_prefix(cfg: Config, route: str) -> str:
    """Subject prefix of the route's dead letters."""
    return f"{cfg.bus.dlq.subject_prefix}.route.{route}"


def route_config(cfg: Config, name: str) -> RouteConfig:
    """The route in effect (the config's, with run-time changes: ``route/registry.py``);
    :class:`ConfigError` when there is none of that name."""
    return RouteRegistry(cfg).get(name)


def consumer_config(cfg: Config, name: str, *, start_seq: int | None = None) -> api.ConsumerConfig:
    """The route's durable consumer: every subject, explicit acks, no MaxDeliver (the route
    dead-letters what it cannot apply itself; a sink outage must never do it)."""
    route = route_config(cfg, name)
    return api.ConsumerConfig(
        durable_name=durable_name(name),
        description=f"tidelake route {name} ({route.sink.kind})",
        deliver_policy=(
            api.DeliverPolicy.ALL if start_seq is None else api.DeliverPolicy.BY_START_SEQUENCE
        ),
        opt_start_seq=start_seq,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=cfg.bus.consumer.ack_wait_s,
        max_deliver=-1,
        max_ack_pending=max(route.batch_size * 4, 1000),
    )


async def ensure_consumer(js: Any, cfg: Config, name: str) -> None:
    """Create the route's consumer unless it exists (its position is kept across restarts)."""
    try:
        await js.consumer_info(cfg.bus.stream.name, durable_name(name))
    except NotFoundError:
        await js.add_consumer(cfg.bus.stream.name, consumer_config(cfg, name))


async def rewind(js: Any, cfg: Config, name: str, from_seq: int) -> None:
    """Deliver the stream again from ``from_seq`` (the route must be stopped): the consumer is
    made again starting there. The sink's position guard makes what it already holds a no-op."""
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(cfg.bus.stream.name, durable_name(name))
    await js.add_consumer(cfg.bus.stream.name, consumer_config(cfg, name, start_seq=from_seq))


@dataclass
class RouteStats:
    """What one route run did."""

    messages: int = 0
    changes: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    sink_retries: int = 0
    batches: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class _Taken:
    """One message of a batch: where it goes."""

    msg: Any
    seq: int
    changes: list[RowChange]
    reason: str | None = None


class RouteRunner:
    """Consumes the CDC stream for one route and applies it to the route's sink."""

    def __init__(
        self,
        cfg: Config,
        name: str,
        sink: Sink | None = None,
    ) -> None:
        self.cfg = cfg
        self.name = name
        self.route = route_config(cfg, name)
        pii_key = cfg.stage.pii_key.get_secret_value().encode() if cfg.stage.pii_key else None
        self.selector = RouteSelector(self.route, pii_key=pii_key)
        self.sink = (
            sink
            if sink is not None
            else open_sink(name, self.route.sink, source_timezone=cfg.lake.source_timezone)
        )
        self.stats = RouteStats()
        #: This process's tracing (runtime/tracing.py); None when off.
        self._tracing = tracing.active()
        # The route's own series exist from the start, at 0 (a scrape sees "no retries").
        for family in (
            live.ROUTER_MESSAGES,
            live.ROUTER_SINK_RETRIES,
            live.ROUTER_ACKED_SEQ,
            live.ROUTER_APPLY_SECONDS,
        ):
            family.labels(name)

    # -- one batch

    def _take(self, msg: Any) -> _Taken:
        seq = msg.metadata.sequence.stream
        key = (msg.headers or {}).get(KEY_HEADER)
        try:
            decoded = formats.decode(
                msg.data,
                seq=seq,
                key_json=key.encode() if key is not None else None,
                subject=msg.subject,
            )
            changes = []
            for event in decoded.events:
                change = self.selector.select(event)
                if change is None:
                    self.stats.filtered += 1
                else:
                    changes.append(change)
            return _Taken(msg, seq, changes)
        except DecodeError as exc:
            return _Taken(msg, seq, [], reason=str(exc))

    async def apply_once(self, taken: Sequence[_Taken]) -> None:
        """Apply the changes of ``taken`` that have no reason yet. Changes the sink refuses
        for good give their messages a reason, and the rest is applied again; any other
        failure (an unreachable sink) is raised."""
        while True:
            pending = [c for t in taken if t.reason is None for c in t.changes]
            if not pending:
                return
            try:
                with live.ROUTER_APPLY_SECONDS.labels(self.name).time():
                    await asyncio.to_thread(self.sink.apply, pending)
            except ChangesRejected as exc:
                rejected = set(exc.seqs) & {t.seq for t in taken if t.reason is None}
                if not rejected:
                    raise  # a sink naming no message of the batch: never loop on it
                for t in taken:
                    if t.seq in rejected:
                        t.reason = f"sink_rejected: {exc.reason}"
                log.warning(
                    "changes rejected", route=self.name, messages=len(rejected), reason=exc.reason
                )
                continue
            self.stats.changes += len(pending)
            for change in pending:
                live.ROUTER_CHANGES.labels(self.name, change.table).inc()
            return

    async def _apply(self, taken: Sequence[_Taken], stop: asyncio.Event) -> bool:
        """Apply the batch, retrying an unreachable sink with back-off for as long as it
        takes; False when stopped before the sink took it."""
        wait_s = 0.5
        while True:
            try:
                await self.apply_once(taken)
                return True
            except Exception as exc:  # unreachable sink, or an error of unknown kind: retry
                self.stats.sink_retries += 1
                live.ROUTER_SINK_RETRIES.labels(self.name).inc()
                beat()  # waiting out a sink outage is the loop at work, not a hang
                log.warning(
                    "sink write failed; retrying",
                    route=self.name,
                    error=str(exc)[:500],
                    transient=isinstance(exc, SinkUnavailable),
                    wait_s=round(wait_s, 2),
                )
                for t in taken:  # keep AckWait from redelivering what we still hold
                    with contextlib.suppress(Exception):
                        await t.msg.in_progress()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=wait_s)
                if stop.is_set():
                    return False
                wait_s = min(MAX_BACKOFF_S, wait_s * 2) * random.uniform(0.8, 1.2)

    async def _dead_letter(self, js: Any, taken: _Taken) -> None:
        assert taken.reason is not None
        msg = taken.msg
        headers = dlq.dlq_headers(taken.reason, msg.subject, taken.seq, msg.metadata.num_delivered)
        headers[HEADER_ROUTE] = self.name
        headers["Nats-Msg-Id"] = f"tidelake-dlq-route-{self.name}-{taken.seq}"
        key = (msg.headers or {}).get(KEY_HEADER)
        if key is not None:
            headers[KEY_HEADER] = key
        subject = f"{route_dlq_prefix(self.cfg, self.name)}.{msg.subject}"
        await dlq.publish(js, subject, msg.data, headers, stream=self.cfg.bus.dlq.name)
        bucket = taken.reason.split(":", 1)[0]
        self.stats.reasons[bucket] = self.stats.reasons.get(bucket, 0) + 1
        self.stats.dead_lettered += 1
        live.ROUTER_DEAD_LETTERS.labels(self.name, live.snake_label(bucket)).inc()

    async def handle(self, js: Any, msgs: Sequence[Any], stop: asyncio.Event) -> bool:
        """One batch: decode, select, apply, dead-letter, ack. False when stopped first."""
        if self._tracing is not None and msgs:
            return await self._handle_traced(js, msgs, stop, self._tracing)
        return await self._handle(js, [self._take(m) for m in msgs], stop)

    async def _handle_traced(
        self, js: Any, msgs: Sequence[Any], stop: asyncio.Event, traces: tracing.Tracing
    ) -> bool:
        """:meth:`handle` inside the batch's span (module docstring)."""
        span = traces.start_route(
            (m.headers for m in msgs),
            route=self.name,
            sink=self.route.sink.kind,
            consumer=durable_name(self.name),
            messages=len(msgs),
        )
        before = dataclasses.replace(self.stats)
        try:
            taken = [self._take(m) for m in msgs]
            done = await self._handle(js, taken, stop)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            span.end()
            raise
        after = self.stats
        tables = sorted({c.table for t in taken if t.reason is None for c in t.changes})
        span.set_attributes(
            {
                "tidelake.seq_first": min(t.seq for t in taken),
                "tidelake.seq_last": max(t.seq for t in taken),
                "tidelake.changes": after.changes - before.changes,
                "tidelake.filtered": after.filtered - before.filtered,
                "tidelake.dead_lettered": after.dead_lettered - before.dead_lettered,
                "tidelake.sink_retries": after.sink_retries - before.sink_retries,
                "tidelake.tables": tables[: tracing.MAX_SUBJECTS],
                "tidelake.stopped": not done,
            }
        )
        span.end()
        return done

    async def _handle(self, js: Any, taken: Sequence[_Taken], stop: asyncio.Event) -> bool:
        """:meth:`handle`'s apply, dead-letter and ack of the decoded batch."""
        if not await self._apply(taken, stop):
            return False
        for t in taken:
            if t.reason is not None:
                await self._dead_letter(js, t)
            await t.msg.ack()
        self.stats.messages += len(taken)
        self.stats.batches += 1
        if taken:  # a fetch may end with no message (a status reply)
            live.ROUTER_MESSAGES.labels(self.name).inc(len(taken))
            live.ROUTER_ACKED_SEQ.labels(self.name).set(max(t.seq for t in taken))
        return True

    # -- the loop

    async def run(self, stop: asyncio.Event, *, until_idle: bool = False) -> RouteStats:
        """Consume until ``stop`` is set (or, with ``until_idle``, until a fetch finds
        nothing)."""
        from tidelake.bus.connection import connect

        nc = await connect(self.cfg.bus)
        try:
            js = nc.jetstream()
            await ensure_consumer(js, self.cfg, self.name)
            sub = await js.pull_subscribe_bind(
                durable_name(self.name), stream=self.cfg.bus.stream.name
            )
            log.info("route started", route=self.name, sink=self.route.sink.kind)
            last_report = time.monotonic()
            paused, looked = self.route.paused, time.monotonic()
            while not stop.is_set():
                beat()  # /healthz: the loop turns at least every fetch timeout
                if time.monotonic() - looked >= REGISTRY_EVERY_S:
                    looked = time.monotonic()
                    try:
                        now = RouteRegistry(self.cfg).routes().get(self.name)
                    except ConfigError as exc:  # written badly by hand: go on as before
                        log.warning("route registry unreadable", route=self.name, error=str(exc))
                        now = self.route.model_copy(update={"paused": paused})
                    if now is None:
                        log.info("route removed; stopping", route=self.name)
                        break
                    if now.paused != paused:
                        paused = now.paused
                        log.info("route paused" if paused else "route resumed", route=self.name)
                if paused:
                    if until_idle:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=REGISTRY_EVERY_S)
                    continue
                try:
                    msgs = await sub.fetch(self.route.batch_size, timeout=FETCH_TIMEOUT_S)
                except TimeoutError:
                    if until_idle:
                        break
                    continue
                if not await self.handle(js, msgs, stop):
                    break
                await nc.flush()  # the acks are on their way before the next batch
                if time.monotonic() - last_report >= 10:
                    last_report = time.monotonic()
                    log.info("route progress", route=self.name, **self.stats.__dict__)
        finally:
            # close, not drain: draining a pull subscription waits out its drain timeout
            # (30 s) for requests that will never be answered; the acks were flushed already.
            with contextlib.suppress(Exception):
                await nc.flush(timeout=5)
            with contextlib.suppress(Exception):
                await nc.close()
            self.sink.close()
        log.info("route stopped", route=self.name, **self.stats.__dict__)
        return self.stats


# -- operator verbs: status, reprocess


@dataclass
class RouteStatus:
    """Where one route stands on the stream (``tidelake route list``)."""

    name: str
    sink: str
    paused: bool
    exists: bool
    delivered_seq: int = 0
    acked_seq: int = 0
    pending: int = 0
    in_flight: int = 0
    dead_letters: int = 0


async def route_status(js: Any, cfg: Config, name: str) -> RouteStatus:
    """The route's consumer position and its dead letters' count."""
    route = route_config(cfg, name)
    status = RouteStatus(name, route.sink.kind, route.paused, exists=False)
    try:
        info = await js.consumer_info(cfg.bus.stream.name, durable_name(name))
    except NotFoundError:
        pass
    else:
        status.exists = True
        status.delivered_seq = info.delivered.stream_seq or 0
        status.acked_seq = info.ack_floor.stream_seq or 0
        status.pending = info.num_pending or 0
        status.in_flight = info.num_ack_pending or 0
    status.dead_letters = await _dead_letter_count(js, cfg, name)
    return status


def route_state(seq: int, status: RouteStatus, dead: Mapping[int, str]) -> str:
    """What the route did with the stream's message ``seq``: ``dead_lettered``, ``applied``
    (acknowledged: in the sink, or not one the route takes), ``in_flight`` (delivered, not yet
    acknowledged) or ``pending``."""
    if seq in dead:
        return "dead_lettered"
    if seq <= status.acked_seq:
        return "applied"
    if seq <= status.delivered_seq:
        return "in_flight"
    return "pending"


async def dead_letter_reasons(js: Any, cfg: Config, name: str) -> dict[int, str]:
    """The route's dead letters: stream sequence → reason."""
    from tidelake.bus.scan import scan_stream

    count = await _dead_letter_count(js, cfg, name)
    if not count:
        return {}
    letters = await scan_stream(js, f"{route_dlq_prefix(cfg, name)}.>", count)
    out = {}
    for letter in letters:
        headers = letter.headers or {}
        seq = int(headers.get(dlq.HEADER_STREAM_SEQ, "0"))
        out[seq] = headers.get(dlq.HEADER_REASON, "")
    return out


async def _dead_letter_count(js: Any, cfg: Config, name: str) -> int:
    try:
        info = await js.stream_info(
            cfg.bus.dlq.name, subjects_filter=f"{route_dlq_prefix(cfg, name)}.>"
        )
    except NotFoundError:
        return 0
    return sum((info.state.subjects or {}).values())


@dataclass
class Reprocessed:
    """What ``tidelake route reprocess`` did."""

    applied: int = 0
    still_failing: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


async def reprocess(js: Any, runner: RouteRunner) -> Reprocessed:
    """Apply the route's dead letters through its selector and sink again (their original
    stream sequences kept); each one that lands is removed from the dead-letter stream, one
    that fails again stays, with the new reason logged and counted."""
    from tidelake.bus.scan import scan_stream

    cfg, name = runner.cfg, runner.name
    count = await _dead_letter_count(js, cfg, name)
    out = Reprocessed()
    if not count:
        return out
    letters = await scan_stream(js, f"{route_dlq_prefix(cfg, name)}.>", count)
    for start in range(0, len(letters), runner.route.batch_size):
        chunk = letters[start : start + runner.route.batch_size]
        taken = [_Taken(m, 0, []) for m in chunk]
        for t in taken:
            headers = t.msg.headers or {}
            t.seq = int(headers.get(dlq.HEADER_STREAM_SEQ, "0"))
            original = headers.get(dlq.HEADER_ORIGINAL_SUBJECT, "")
            key = headers.get(KEY_HEADER)
            try:
                decoded = formats.decode(
                    t.msg.data,
                    seq=t.seq,
                    key_json=key.encode() if key is not None else None,
                    subject=original,
                )
                t.changes = [c for e in decoded.events if (c := runner.selector.select(e))]
            except DecodeError as exc:
                t.reason = str(exc)
        await runner.apply_once(taken)  # an unreachable sink ends it with that error
        for t in taken:
            if t.reason is None:
                await js.delete_msg(cfg.bus.dlq.name, t.msg.metadata.sequence.stream)
                out.applied += 1
            else:
                out.still_failing += 1
                bucket = t.reason.split(":", 1)[0]
                out.reasons[bucket] = out.reasons.get(bucket, 0) + 1
                log.warning("dead letter still fails", route=name, seq=t.seq, reason=t.reason)
    return out
