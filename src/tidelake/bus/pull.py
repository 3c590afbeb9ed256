"""A lean JetStream pull fetcher for the stager's hot path.

``PullSubscription.fetch`` of nats-py spawns an asyncio task (``wait_for``) per message it
returns; at tens of thousands of messages a second that is most of the stager's CPU. This
speaks the same documented pull protocol with one subscription callback and one timer per
fetch: publish ``{"batch": n, "expires": ns}`` to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<c>``
with a reply subject of ours; the server sends up to ``n`` messages to it, lingering until
``expires``, then a ``408`` status (``404`` when nothing is there and ``no_wait`` was asked).

**Prefetch.** With ``prefetch`` set, a fetch that hands messages out leaves the next pull
request open before it returns, so the server streams the next messages while the caller
decodes and stages these: the round trip and the server's work overlap ours instead of
adding to them. Delivered messages are ours until AckWait whether handed out or not, so
:meth:`stop` first waits for the open request to end (its expiry bounds the wait) and the
caller stages what :meth:`take_buffered` then returns; unsubscribing with a request open
would send its messages nowhere, and they would come back only after AckWait.

Each request gets its own reply subject (``<inbox>.<n>``, one wildcard subscription), so
the status that ends an older, abandoned request (one whose end never came in time) cannot
end the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import orjson
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = structlog.get_logger(__name__)

#: Status codes that end a pull request: no messages, request expired, conflict (e.g.
#: MaxWaiting exceeded, consumer deleted, leadership change).
_END_STATUSES = frozenset({"404", "408", "409"})
#: Idle heartbeat / flow control.
_HEARTBEAT = "100"
#: Extra local wait past the request's expiry for its final status to arrive.
_GRACE_S = 0.5
#: A wanted count no buffer reaches.
_NEVER = 1 << 62


class PullFetcher:
    """Fetches from one durable pull consumer; messages a late reply brings are kept."""

    def __init__(self, nc: Client, stream: str, durable: str, *, prefetch: int = 0) -> None:
        self._nc = nc
        self._api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._prefetch = prefetch
        self._buffer: deque[Msg] = deque()
        self._want = 0
        self._done = asyncio.Event()
        self._sub: Subscription | None = None
        self._inbox = ""
        self._requests = 0
        #: The open request: its reply subject, the messages it may still bring, and the
        #: moment past which it is over even if its end status never came.
        self._open_subject = ""
        self._open_left = 0
        self._open_until = 0.0

    async def start(self) -> PullFetcher:
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(
            f"{self._inbox}.*",
            cb=self._on_msg,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1024 * 1024 * 1024,
        )
        return self

    async def stop(self) -> None:
        """Wait for the open request to end (bounded by its expiry), then unsubscribe."""
        if self._sub is None:
            return
        while self._request_open():
            self._want = _NEVER  # only the request's end (its count or status) wakes us
            self._done.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), self._open_until - time.monotonic())
        # Let the subscription's queue hand over what the server already sent (bounded: on a
        # closed connection nothing empties it).
        until = time.monotonic() + _GRACE_S
        while self._sub.pending_msgs and time.monotonic() < until:
            await asyncio.sleep(0)
        await self._sub.unsubscribe()
        self._sub = None

    def _request_open(self) -> bool:
        return self._open_left > 0 and time.monotonic() < self._open_until

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        if headers and not msg.data:
            status = headers.get("Status")
            if status is not None:
                if status == _HEARTBEAT:
                    return
                if status not in _END_STATUSES:
                    log.warning(
                        "pull request status", status=status, detail=headers.get("Description")
                    )
                if msg.subject == self._open_subject:
                    self._open_left = 0
                    self._done.set()
                return
        # A delivered message carries its stream subject, not our reply subject: it is
        # counted against the open request (one from an abandoned request only makes us
        # ask again a little early).
        self._buffer.append(msg)
        self._open_left -= 1
        if len(self._buffer) >= self._want or self._open_left <= 0:
            self._done.set()

    def take_buffered(self, limit: int | None = None) -> list[Msg]:
        """Messages already delivered to us but not yet handed out."""
        n = len(self._buffer) if limit is None else min(limit, len(self._buffer))
        return [self._buffer.popleft() for _ in range(n)]

    async def _request(self, batch: int, expires_s: float) -> None:
        self._requests += 1
        self._open_subject = f"{self._inbox}.{self._requests}"
        self._open_left = batch
        self._open_until = time.monotonic() + expires_s + _GRACE_S
        request = {"batch": batch, "expires": max(1_000_000, int(expires_s * 1e9))}
        await self._nc.publish(self._api, orjson.dumps(request), reply=self._open_subject)

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages: returns when that many are in or after ``timeout``
        seconds with what arrived (possibly none)."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        if len(self._buffer) < batch:
            wait = timeout
            if not self._request_open():
                await self._request(max(batch, self._prefetch), timeout)
                wait += _GRACE_S  # for the status that ends it at ``timeout``
            if len(self._buffer) < batch:
                self._want = batch
                self._done.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._done.wait(), wait)
        out = self.take_buffered(batch)
        # Ask ahead only while less than a lot is waiting here: what we hold unacked stays
        # bounded (max_ack_pending) however small the caller's lots are.
        low = len(self._buffer) < self._prefetch
        if out and self._prefetch and low and not self._request_open():
            await self._request(self._prefetch, timeout)
        return out
