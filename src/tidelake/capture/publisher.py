"""Ordered, durable publishing of change messages to JetStream.

Every message carries a ``Nats-Msg-Id`` derived from its source position, so a message
republished inside the stream's duplicate window is dropped by JetStream (DESIGN.md §3
rule 2). Messages go out asynchronously but in call order (one connection writes them in
order, so stream order = call order), and :meth:`Publisher.durable` reports how far the
PubAcks have come: a capture saves its source position only up to there.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelake.errors import BusError


@dataclass(frozen=True, slots=True)
class Acked:
    """A message JetStream has stored: its stream sequence, and whether it was a duplicate."""

    tag: Any
    seq: int
    duplicate: bool


class Publisher:
    """Publishes in order; ``on_acked`` is called for each message, in order, once stored."""

    def __init__(
        self,
        js: Any,
        *,
        on_acked: Callable[[Acked], None] | None = None,
        max_in_flight: int = 2_000,
        timeout_s: float = 10.0,
    ) -> None:
        self._js = js
        self._on_acked = on_acked
        self._max_in_flight = max_in_flight
        self._timeout_s = timeout_s
        self._in_flight: deque[tuple[asyncio.Future[Any], str, bytes, dict[str, str], Any]] = (
            deque()
        )
        self.published = 0
        self.duplicates = 0

    async def publish(self, subject: str, payload: bytes, msg_id: str, tag: Any = None) -> None:
        """Queue one message; waits only when too many are in flight."""
        headers = {"Nats-Msg-Id": msg_id}
        fut = await self._js.publish_async(subject, payload, headers=headers)
        self._in_flight.append((fut, subject, payload, headers, tag))
        if len(self._in_flight) >= self._max_in_flight:
            await self._drain(len(self._in_flight) // 2)

    async def durable(self) -> None:
        """Return once every message published so far is stored by JetStream."""
        await self._drain(len(self._in_flight))

    async def _drain(self, count: int) -> None:
        for _ in range(count):
            fut, subject, payload, headers, tag = self._in_flight[0]
            try:
                ack = await asyncio.wait_for(fut, self._timeout_s)
            except Exception:
                # Lost PubAck (timeout, reconnect): publish again with the same Nats-Msg-Id;
                # JetStream drops it if the first one was stored. One connection loses only
                # a suffix of what it sent, so every later in-flight message fails too and
                # is republished after this one: stream order stays call order.
                ack = await self._republish(subject, payload, headers)
            self._in_flight.popleft()
            self.published += 1
            dup = bool(getattr(ack, "duplicate", False))
            self.duplicates += dup
            if self._on_acked is not None:
                self._on_acked(Acked(tag=tag, seq=int(ack.seq), duplicate=dup))

    async def _republish(self, subject: str, payload: bytes, headers: dict[str, str]) -> Any:
        last: Exception | None = None
        for attempt in range(10):
            try:
                return await self._js.publish(
                    subject, payload, headers=headers, timeout=self._timeout_s
                )
            except Exception as exc:
                last = exc
                await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
        raise BusError(f"cannot publish to {subject}: {last}") from last
