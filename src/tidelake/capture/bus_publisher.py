"""The publisher of the configured bus, for every capture: JetStream's
(:class:`tidelake.capture.publisher.Publisher`) or, with ``bus.kind: kafka``, Kafka's
(:class:`tidelake.capture.kafka_publisher.KafkaPublisher`). Both take the same calls
(``publish``, ``durable``, ``close``, ``on_acked``), so a capture does not care which."""

from __future__ import annotations

from typing import Any

from tidelake.capture.kafka_publisher import KafkaPublisher
from tidelake.capture.publisher import Publisher
from tidelake.config import BusConfig


async def open_publisher(bus: BusConfig, url: str | None = None, **kwargs: Any) -> Any:
    """An open publisher on ``bus`` (``url`` overrides ``bus.url`` for JetStream)."""
    if bus.kind == "kafka":
        kwargs.pop("give_up_s", None)  # the Kafka client's own timeouts decide
        return await KafkaPublisher.open(bus, **kwargs)
    return await Publisher.open(bus, url, **kwargs)
