"""pipeline/kafka.py: the private KRaft broker the Kafka tests run on keeps what it acknowledged
across a kill -9 and a clean restart, and keeps a consumer group's committed offsets; a real
broker (Kafka 4.1.1 from Maven Central) and a real client (aiokafka)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tidelake.pipeline import kafka
from tidelake.pipeline.kafka import KafkaBroker

aiokafka = pytest.importorskip("aiokafka")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not kafka.available(),
        reason="Kafka is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

TOPIC = "shop.orders"
MESSAGES = 300


async def _produce(bootstrap: str, values: range) -> None:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        for n in values:
            # Keyed: one key's messages stay in one partition, in order.
            await producer.send_and_wait(TOPIC, str(n).encode(), key=str(n % 7).encode())
    finally:
        await producer.stop()


async def _consume(
    bootstrap: str, want: int, timeout_s: float = 60.0
) -> list[tuple[int, int, int]]:
    """``(partition, offset, value)`` of up to ``want`` messages of the group ``g``; its offsets
    committed after they were read."""
    consumer = aiokafka.AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id="g",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    got: list[tuple[int, int, int]] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while len(got) < want and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp, records in batches.items():
                got += [(tp.partition, r.offset, int(r.value)) for r in records]
        await consumer.commit()
    finally:
        await consumer.stop()
    return got


def test_what_the_broker_acknowledged_survives_a_kill_and_a_restart(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka")
    with broker:
        asyncio.run(_produce(broker.bootstrap_servers, range(MESSAGES)))
        broker.kill()
        broker.start()  # same data folder, same port
        first = asyncio.run(_consume(broker.bootstrap_servers, MESSAGES))
        assert list(range(MESSAGES)) == sorted(v for _, _, v in first)
        # Per key (so per partition) in the order produced.
        by_partition: dict[int, list[int]] = {}
        for partition, _, value in sorted(first):
            by_partition.setdefault(partition, []).append(value)
        assert all(values == sorted(values) for values in by_partition.values())
        assert len(by_partition) > 1  # the topic got the broker's 3 partitions

        broker.stop()
        broker.start()
        asyncio.run(_produce(broker.bootstrap_servers, range(MESSAGES, MESSAGES + 10)))
        # The group resumes from its committed offsets: only the new messages.
        second = asyncio.run(_consume(broker.bootstrap_servers, 10))
        assert list(range(MESSAGES, MESSAGES + 10)) == sorted(v for _, _, v in second)
