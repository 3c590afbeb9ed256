"""A lean JetStream pull fetcher for the stager's hot path.

``PullSubscription.fetch`` of nats-py spawns an asyncio task (``wait_for``) per message it
returns; at tens of thousands of messages a second that is most of the stager's CPU. This
speaks the same documented pull protocol with one subscription callback and one timer per
fetch: publish ``{"batch": n, "expires": ns}`` to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<c>``
with our inbox as reply; the server sends up to ``n`` messages, lingering until ``expires``,
then a ``408`` status (``404`` when nothing is there and ``no_wait`` was asked).
"""

from __future__ import annotations

import asyncio
import contextlib
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


class PullFetcher:
    """Fetches from one durable pull consumer; messages a late reply brings are kept."""

    def __init__(self, nc: Client, stream: str, durable: str) -> None:
        self._nc = nc
        self._api = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._buffer: deque[Msg] = deque()
        self._want = 0
        self._done = asyncio.Event()
        self._sub: Subscription | None = None
        self._inbox = ""

    async def start(self) -> PullFetcher:
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(
            self._inbox,
            cb=self._on_msg,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1024 * 1024 * 1024,
        )
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

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
                self._done.set()
                return
        self._buffer.append(msg)
        if len(self._buffer) >= self._want:
            self._done.set()

    def take_buffered(self, limit: int | None = None) -> list[Msg]:
        """Messages already delivered to us but not yet handed out."""
        n = len(self._buffer) if limit is None else min(limit, len(self._buffer))
        return [self._buffer.popleft() for _ in range(n)]

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages: returns when that many are in or after ``timeout``
        seconds with what arrived (possibly none)."""
        if batch < 1:
            raise ValueError("batch must be at least 1")
        if self._buffer:
            return self.take_buffered(batch)
        self._want = batch
        self._done.clear()
        request = {"batch": batch, "expires": max(1_000_000, int(timeout * 1e9))}
        await self._nc.publish(self._api, orjson.dumps(request), reply=self._inbox)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), timeout + _GRACE_S)
        return self.take_buffered(batch)
