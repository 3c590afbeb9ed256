"""What ``status`` and ``serve`` show of a Kafka bus (``bus.kind: kafka``).

The same answers :class:`tidelake.api.jetstream.JetStream` gives for a JetStream bus, in the
same shape, read from the CDC topic, the stagers' group and the dead-letter topic
(:mod:`tidelake.bus.kafka`): the topic's first and end offsets as its first and last sequence,
the group's committed offset as the consumer's ack floor. Kafka cannot look up the last
record of a subject, so no table's capture lag is measured here (``last_by_table`` is empty).
"""

from __future__ import annotations

from typing import Any

from tidelake.bus import kafka as kbus
from tidelake.config import BusConfig


class KafkaView:
    """Reads a Kafka bus's state for the monitor: short-lived clients for the offsets, one
    kept open for record times."""

    def __init__(self, bus: BusConfig) -> None:
        self.bus = bus
        self._clock = kbus.RecordClock(bus)

    @property
    def configured(self) -> bool:
        return bool(self.bus.kafka.bootstrap_servers)

    async def close(self) -> None:
        await self._clock.close()

    async def state(self, tables: list[str]) -> dict[str, Any]:
        k = kbus.settings(self.bus)
        cdc = await kbus.topic_state(self.bus)
        dlq = await kbus.topic_state(self.bus, k.dlq_topic)
        floor = cdc.committed if cdc.committed is not None else 0
        return {
            "stream": {
                "name": k.topic,
                "messages": cdc.end_offset - cdc.first_offset,
                "bytes": None,
                "first_seq": kbus.seq_of(cdc.first_offset),
                "last_seq": cdc.end_offset,
            },
            "consumer": {
                "name": k.group_id,
                "pending": cdc.pending,
                "ack_pending": 0,
                "redelivered": 0,
                "waiting": 0,
                "delivered_seq": floor,
                "ack_floor_seq": floor,
            },
            "dlq": {
                "name": k.dlq_topic,
                "messages": dlq.end_offset - dlq.first_offset,
                "bytes": None,
                "first_seq": kbus.seq_of(dlq.first_offset),
                "last_seq": dlq.end_offset,
            },
            "last_by_table": {},
        }

    async def message_time_ms(self, seq: int) -> int | None:
        return await self._clock.time_ms(seq)
