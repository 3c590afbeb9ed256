"""Ordered, durable publishing of change messages to the Kafka bus (``bus.kind: kafka``).

The Kafka side of :class:`tidelake.capture.publisher.Publisher`, with the same calls
(:meth:`KafkaPublisher.publish`, :meth:`~KafkaPublisher.durable`, ``on_acked``) so a capture
does not care which bus it feeds. Each message is produced to the CDC topic's one partition
(:mod:`tidelake.bus.kafka`) with ``acks=all`` and the idempotent producer: the broker keeps
the call order, and a retry after a lost acknowledgement is not stored twice. Its subject
and message id travel as headers; a ``Tidelake-Key`` header becomes the record key.

Kafka does not de-duplicate across producer sessions as JetStream's ``Nats-Msg-Id`` does: a
capture restarted from its saved position produces again what it had produced after it,
and those copies are dropped by the ingest's position watermark (docs/architecture.md §3
rule 2). When a send fails for good (the broker unreachable past the client's timeouts) the
publisher raises :class:`BusError`; nothing after the failed message is acknowledged, so the
caller's saved position stays safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.bus import kafka as kbus
from tidelake.capture.publisher import Acked
from tidelake.errors import BusError

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from tidelake.config import BusConfig

log = structlog.get_logger(__name__)

#: The record-key header (stage/consumer.py ``KEY_HEADER``).
KEY_HEADER = "Tidelake-Key"


class KafkaPublisher:
    """Produces in order; ``on_acked`` is called for each message, in order, once stored."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        *,
        on_acked: Callable[[Acked], None] | None = None,
        max_in_flight: int = 2_000,
    ) -> None:
        self._producer = producer
        self._topic = topic
        self._on_acked = on_acked
        self._max_in_flight = max_in_flight
        self._in_flight: deque[tuple[asyncio.Future[Any], Any]] = deque()
        self.published = 0
        self.duplicates = 0

    @classmethod
    async def open(cls, bus: BusConfig, **kwargs: Any) -> KafkaPublisher:
        from aiokafka import AIOKafkaProducer

        k = kbus.settings(bus)
        await kbus.ensure_topics(bus)
        producer = AIOKafkaProducer(
            **kbus.client_options(k),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
        )
        await producer.start()
        return cls(producer, k.topic, **kwargs)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._producer.stop()

    async def __aenter__(self) -> KafkaPublisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def publish(
        self,
        subject: str,
        payload: bytes,
        msg_id: str,
        tag: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue one message; waits only when too many are in flight."""
        extra = dict(headers or {})
        key = extra.pop(KEY_HEADER, None)
        extra[kbus.SUBJECT_HEADER] = subject
        extra[kbus.MSG_ID_HEADER] = msg_id
        try:
            future = await self._producer.send(
                self._topic,
                payload,
                key=key.encode() if key is not None else None,
                partition=kbus.PARTITION,
                headers=kbus.headers_list(extra),
            )
        except Exception as exc:
            raise BusError(f"cannot produce to Kafka topic {self._topic!r}: {exc!r}") from exc
        self._in_flight.append((future, tag))
        if len(self._in_flight) >= self._max_in_flight:
            await self._drain(len(self._in_flight) // 2)

    async def durable(self) -> None:
        """Return once every message produced so far is stored by Kafka."""
        await self._drain(len(self._in_flight))

    async def _drain(self, count: int) -> None:
        for _ in range(count):
            future, tag = self._in_flight[0]
            try:
                meta = await future
            except Exception as exc:
                raise BusError(f"Kafka did not store a message: {exc!r}") from exc
            self._in_flight.popleft()
            self.published += 1
            if self._on_acked is not None:
                self._on_acked(Acked(tag, kbus.seq_of(meta.offset), False))
