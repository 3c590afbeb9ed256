"""capture/kafka_publisher.py with a stand-in producer (our own logic only: the real broker
is in tests/integration/stage/test_kafka_stager.py): what each record carries, acks in call
order, a failed send raised as a BusError with nothing after it acknowledged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tidelake.bus import kafka as kbus
from tidelake.capture.kafka_publisher import KafkaPublisher
from tidelake.capture.publisher import Acked
from tidelake.errors import BusError


class _Meta:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _Producer:
    """Records every send; its futures resolve in order, or fail from ``fail_at`` on."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail_at = fail_at

    async def send(self, topic: str, value: bytes, **kw: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        n = len(self.sent)
        self.sent.append({"topic": topic, "value": value, **kw})
        if self.fail_at is not None and n >= self.fail_at:
            future.set_exception(RuntimeError("broker gone"))
        else:
            future.set_result(_Meta(n))
        return future


def test_each_record_carries_subject_id_and_key_and_acks_come_in_call_order() -> None:
    producer = _Producer()
    acked: list[Acked] = []
    pub = KafkaPublisher(producer, "cdc", on_acked=acked.append)  # type: ignore[arg-type]

    async def go() -> None:
        await pub.publish("cdc.shop.orders", b"{}", "id-1", tag="a")
        await pub.publish("cdc.shop.orders", b"{}", "id-2", tag="b", headers={
            "Tidelake-Key": '{"id":2}', "Other": "x"})  # fmt: skip
        await pub.durable()

    asyncio.run(go())
    first, second = producer.sent
    assert (None, 0) == (first["key"], first["partition"])
    assert b'{"id":2}' == second["key"]
    headers = kbus.headers_dict(second["headers"])
    assert {
        kbus.SUBJECT_HEADER: "cdc.shop.orders",
        kbus.MSG_ID_HEADER: "id-2",
        "Other": "x",
    } == headers, "the key travels as the record key, not as a header"
    assert [("a", 1), ("b", 2)] == [(a.tag, a.seq) for a in acked]
    assert 2 == pub.published


def test_a_failed_send_is_a_bus_error_and_nothing_after_it_is_acknowledged() -> None:
    producer = _Producer(fail_at=1)
    acked: list[Acked] = []
    pub = KafkaPublisher(producer, "cdc", on_acked=acked.append)  # type: ignore[arg-type]

    async def go() -> None:
        for n in range(3):
            await pub.publish("s", b"{}", f"id-{n}", tag=n)
        await pub.durable()

    with pytest.raises(BusError, match="did not store"):
        asyncio.run(go())
    assert [0] == [a.tag for a in acked]
