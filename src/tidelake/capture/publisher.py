"""Ordered, durable publishing of change messages to JetStream.

Every message carries a ``Nats-Msg-Id`` derived from its source position, so a message
republished inside the stream's duplicate window is dropped by JetStream (docs/architecture.md §3
rule 2). Messages go out asynchronously but in call order, and :meth:`Publisher.durable`
reports how far the PubAcks have come: a capture saves its source position only up to there.

**Stream order = call order, across server restarts.** The ingest's per-table position
watermark (docs/architecture.md §3 rule 2) drops a row event whose position is below one it
has already committed, so a message stored *after* a later one of the same table would be lost.
When nats-server dies, the messages written to the dead socket are lost, while nats-py keeps
the ones still in its unsent buffer and sends them first thing on the new connection: the
stream would then hold a later message before an earlier one. :meth:`Publisher.open` avoids
that by owning a connection that never reconnects on its own: on any failure it closes it
(its unsent buffer dies with it), connects again and republishes every in-flight message in
call order, one PubAck at a time, before it pipelines again. What the server had stored is
acknowledged again as a duplicate (same ``Nats-Msg-Id``); what it had not is stored now, in
order. A :class:`Publisher` built on a caller's connection (``Publisher(js)``) republishes in
order too, but cannot stop that connection's own reconnect from sending its buffer first.

**PubAcks on its own connection.** nats-py's ``publish_async`` costs, per message, a task
(``asyncio.wait_for`` around its semaphore), a ``secrets.token_hex`` read of the system's
random source, a done-callback and a ``PubAck.from_response`` that walks the dataclass's
fields: about a third of the capture's event-loop time (py-spy, docs/benchmarks.md "Capture
throughput"). On its own connection the publisher therefore asks for the PubAcks itself: one
subscription per connection on ``<inbox>.*``, each message published with the reply subject
``<inbox>.<n>`` (a counter), its future resolved from the reply (``{"stream", "seq",
"duplicate"}`` or ``{"error"}``, or a 503 status when no stream takes the subject, as
JetStream answers ``publish_async``'s replies). Same wire protocol, same order, same
``Nats-Msg-Id``; the in-flight bound is :class:`Publisher`'s own ``max_in_flight``.

**Traces.** With ``tracing.enabled`` (docs/tracing.md) each message gets a PRODUCER span,
started here and ended at its PubAck (with its stream sequence), and its W3C context in the
``traceparent``/``tracestate`` headers; the payload and ``Nats-Msg-Id`` stay as they are.
Off, the cost is one ``is None`` per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import structlog
from nats.js.api import PubAck
from nats.js.errors import APIError, NoStreamResponseError

from tidelake.errors import BusError, is_terminal
from tidelake.retry import async_retrying
from tidelake.runtime import tracing

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

    from tidelake.config import BusConfig

log = structlog.get_logger(__name__)

#: First pause between two attempts while the server is unreachable, and the cap of its
#: doubling (plus up to the first pause of jitter: tidelake.retry).
FIRST_RETRY_PAUSE_S = 0.1
MAX_RETRY_PAUSE_S = 1.0
#: How often a wait for a PubAck checks whether its connection died.
_ACK_POLL_S = 0.05
#: The status header JetStream's reply carries when no stream takes the subject.
_NO_RESPONDERS = "503"


@dataclass(frozen=True, slots=True)
class Acked:
    """A message JetStream has stored: its stream sequence, and whether it was a duplicate."""

    tag: Any
    seq: int
    duplicate: bool


@dataclass(slots=True)
class _InFlight:
    subject: str
    payload: bytes
    headers: dict[str, str]
    tag: Any
    #: The PubAck of the last send; None when not sent on the current connection.
    future: asyncio.Future[Any] | None = field(default=None)
    #: The message's publish span (tracing on), ended at its PubAck.
    span: Any = field(default=None)


class Publisher:
    """Publishes in order; ``on_acked`` is called for each message, in order, once stored.

    ``give_up_s``: how long the publisher keeps retrying while JetStream is unreachable before
    it raises :class:`BusError` (the caller's saved position is still safe then).
    """

    def __init__(
        self,
        js: Any,
        *,
        on_acked: Callable[[Acked], None] | None = None,
        max_in_flight: int = 2_000,
        timeout_s: float = 10.0,
        give_up_s: float = 300.0,
        reconnect: Callable[[], Awaitable[Client]] | None = None,
    ) -> None:
        self._js = js
        self._on_acked = on_acked
        self._max_in_flight = max_in_flight
        self._timeout_s = timeout_s
        self._give_up_s = give_up_s
        self._reconnect = reconnect
        self._nc: Client | None = None
        self._in_flight: deque[_InFlight] = deque()
        #: Set after a failure: nothing is pipelined until every in-flight message is stored.
        self._broken = False
        self.published = 0
        self.duplicates = 0
        #: Messages sent again after a failure, and connections opened again.
        self.republished = 0
        self.reconnects = 0
        #: PubAcks asked for on our own connection (module docstring): the connection the
        #: reply subscription is on, its subject prefix, the futures by reply token.
        self._acks_on: Client | None = None
        self._ack_prefix = ""
        self._ack_count = 0
        self._acks: dict[str, asyncio.Future[Any]] = {}
        #: This process's tracing (runtime/tracing.py); None when off.
        self._tracing = tracing.active()

    @classmethod
    async def open(cls, bus: BusConfig, url: str | None = None, **kwargs: Any) -> Publisher:
        """A publisher on its own connection, which it re-opens itself after any failure
        (see the module docstring: this is what keeps stream order = call order)."""
        from tidelake.bus.connection import connect

        async def reconnect() -> Client:
            return await connect(bus, url, reconnect=False)

        nc = await reconnect()
        pub = cls(nc.jetstream(), reconnect=reconnect, **kwargs)
        pub._nc = nc
        return pub

    async def close(self) -> None:
        """Close the publisher's own connection (after :meth:`durable`, nothing is lost)."""
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
            self._nc = None

    async def __aenter__(self) -> Publisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- publishing -------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        payload: bytes,
        msg_id: str,
        tag: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue one message; waits only when too many are in flight (or after a failure,
        until every earlier message is stored). ``headers`` go with it besides the id."""
        out = {**(headers or {}), "Nats-Msg-Id": msg_id}
        span = None
        if self._tracing is not None:
            span = self._tracing.start_publish(subject, msg_id, out)
        entry = _InFlight(subject, payload, out, tag, span=span)
        self._in_flight.append(entry)
        if self._broken or self._connection_lost():
            await self._recover()
        else:
            try:
                await self._send(entry)
            except Exception as exc:  # closed connection, stalled client: recover in order
                log.warning("publish failed; republishing in order", error=repr(exc))
                await self._recover()
        if len(self._in_flight) >= self._max_in_flight:
            await self._drain(len(self._in_flight) // 2)

    async def durable(self) -> None:
        """Return once every message published so far is stored by JetStream."""
        await self._drain(len(self._in_flight))

    # -- internals --------------------------------------------------------------------------

    async def _send(self, entry: _InFlight) -> None:
        """Pipeline ``entry``; its PubAck will resolve ``entry.future``."""
        nc = self._nc
        if nc is None:  # a caller's connection: nats-py's own asynchronous publish
            entry.future = await self._js.publish_async(
                entry.subject, entry.payload, headers=dict(entry.headers)
            )
            return
        if self._acks_on is not nc:
            await self._subscribe_acks(nc)
        self._ack_count += 1
        token = str(self._ack_count)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._acks[token] = future
        entry.future = future
        await nc.publish(
            entry.subject, entry.payload, reply=self._ack_prefix + token, headers=entry.headers
        )

    async def _subscribe_acks(self, nc: Client) -> None:
        """The reply subscription on ``nc`` (before anything is published with it)."""
        self._acks.clear()
        self._ack_prefix = nc.new_inbox() + "."
        await nc.subscribe(self._ack_prefix + "*", cb=self._on_ack)
        self._acks_on = nc

    async def _on_ack(self, msg: Msg) -> None:
        future = self._acks.pop(msg.subject[len(self._ack_prefix) :], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == _NO_RESPONDERS:
            future.set_exception(NoStreamResponseError())
            return
        try:
            reply = orjson.loads(msg.data)
        except orjson.JSONDecodeError as exc:
            future.set_exception(exc)
            return
        if "error" in reply:
            future.set_exception(APIError.from_error(reply["error"]))
            return
        future.set_result(
            PubAck(stream=reply["stream"], seq=reply["seq"], duplicate=reply.get("duplicate"))
        )

    def _connection_lost(self) -> bool:
        return self._nc is not None and not self._nc.is_connected

    def _report(self, entry: _InFlight, ack: Any) -> None:
        self.published += 1
        dup = bool(getattr(ack, "duplicate", False))
        self.duplicates += dup
        if entry.span is not None:
            entry.span.set_attribute("messaging.nats.stream_sequence", int(ack.seq))
            entry.span.set_attribute("tidelake.duplicate", dup)
            entry.span.end()
        if self._on_acked is not None:
            self._on_acked(Acked(tag=entry.tag, seq=int(ack.seq), duplicate=dup))

    async def _drain(self, count: int) -> None:
        for _ in range(count):
            if not self._in_flight:
                return
            entry = self._in_flight[0]
            ack = await self._wait_ack(entry)
            if ack is None:
                # Lost PubAck (timeout, dead connection): everything in flight is resolved
                # in call order by _recover, this one first.
                await self._recover()
                return
            self._in_flight.popleft()
            self._report(entry, ack)

    async def _wait_ack(self, entry: _InFlight) -> Any | None:
        """The PubAck of ``entry``'s send, or None when it failed or cannot come any more."""
        fut = entry.future
        if fut is None:
            return None
        deadline = time.monotonic() + self._timeout_s
        while not fut.done():
            if self._connection_lost() or time.monotonic() > deadline:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(fut), _ACK_POLL_S)
        if fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()

    async def _recover(self) -> None:
        """Store every in-flight message, in call order, one PubAck at a time."""
        self._broken = True
        # Our own connection may still hold unsent messages that follow the failed one:
        # close it first, so only this loop sends anything until the backlog is stored.
        await self._drop_connection()
        while self._in_flight:
            entry = self._in_flight[0]
            fut = entry.future
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                ack = fut.result()  # stored before the trouble started
            else:
                if fut is not None and not fut.done():
                    fut.cancel()
                entry.future = None
                ack = await self._republish(entry)
                self.republished += 1
            self._in_flight.popleft()
            self._report(entry, ack)
        self._broken = False

    async def _republish(self, entry: _InFlight) -> Any:
        """Send ``entry`` alone and wait for its PubAck, on a fresh connection after each
        failure, for up to ``give_up_s`` (unknown errors too: a stalled client, a closed
        connection); a terminal refusal ends it at once. Raises :class:`BusError` from the
        last error (so :func:`tidelake.errors.classify` sees a refusal as terminal)."""
        try:
            async for attempt in async_retrying(
                f"republish to {entry.subject}",
                deadline_s=self._give_up_s,
                first_wait_s=FIRST_RETRY_PAUSE_S,
                max_wait_s=MAX_RETRY_PAUSE_S,
                retry_unknown=True,
            ):
                with attempt:
                    try:
                        await self._ensure_connection()
                        return await self._js.publish(
                            entry.subject,
                            entry.payload,
                            headers=dict(entry.headers),
                            timeout=self._timeout_s,
                        )
                    except Exception:
                        # Whatever this connection still buffers must never be sent later.
                        await self._drop_connection()
                        raise
        except Exception as exc:
            if is_terminal(exc):
                raise BusError(f"JetStream refused a message to {entry.subject}: {exc}") from exc
            raise BusError(
                f"cannot publish to {entry.subject} for {self._give_up_s:.0f} s: {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _ensure_connection(self) -> None:
        """A connected client: the current one, or (own connection) a new one."""
        if self._reconnect is None:
            return  # the caller's connection reconnects by itself
        if self._nc is not None and self._nc.is_connected:
            return
        await self._drop_connection()
        self._nc = await self._reconnect()
        self._js = self._nc.jetstream()
        self.reconnects += 1
        log.info("publisher reconnected; republishing in order", in_flight=len(self._in_flight))

    async def _drop_connection(self) -> None:
        """Close our own connection so nothing it still buffers can be sent later."""
        if self._reconnect is None or self._nc is None:
            return
        nc, self._nc = self._nc, None
        self._acks.clear()  # their replies cannot come any more
        self._acks_on = None
        with contextlib.suppress(Exception):
            await nc.close()
