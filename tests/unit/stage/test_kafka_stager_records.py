"""stage/kafka_consumer.py, one record at a time (our own logic, with a stand-in dead-letter
producer; the real broker is in tests/integration/stage/test_kafka_stager.py): a record's
sequence is its offset + 1, its subject the ``Tidelake-Subject`` header or else the topic, its
Kafka key the decoder's key; a tombstone is counted as skipped; an undecodable record goes to
the dead-letter topic with its reason and sequence before it is counted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tidelake.bus import dlq
from tidelake.bus import kafka as kbus
from tidelake.config import BusConfig, StageConfig
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch, BatchLimits
from tidelake.stage.kafka_consumer import KafkaStager


@dataclass
class _Record:
    offset: int
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    topic: str = "dbserver1.inventory.customers"
    timestamp: int = 1_700_000_000_000


class _Producer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send_and_wait(self, topic: str, value: bytes, **kw: Any) -> None:
        self.sent.append({"topic": topic, "value": value, **kw})


def _stager(tmp_path: Path) -> tuple[KafkaStager, _Producer]:
    bus = BusConfig(kind="kafka", kafka={"bootstrap_servers": "127.0.0.1:1"})
    stager = KafkaStager(bus, StageConfig(), LocalStorage(tmp_path))
    producer = _Producer()
    stager._producer = producer  # type: ignore[assignment]
    return stager, producer


def _debezium_insert(row_id: int) -> bytes:
    return orjson.dumps(
        {
            "before": None,
            "after": {"id": row_id, "name": "x"},
            "source": {
                "connector": "mysql",
                "db": "inventory",
                "table": "customers",
                "ts_ms": 1_700_000_000_000,
                "file": "binlog.000001",
                "pos": 100 + row_id,
                "row": 0,
                "snapshot": "false",
            },
            "op": "c",
            "ts_ms": 1_700_000_000_001,
        }
    )


def test_records_land_under_their_offset_plus_one_with_their_kafka_key(tmp_path: Path) -> None:
    stager, producer = _stager(tmp_path)
    batch: Batch[int] = Batch(BatchLimits())
    key = b'{"id":7}'
    asyncio.run(stager._admit(batch, _Record(6, _debezium_insert(7), key=key)))  # type: ignore[arg-type]
    asyncio.run(stager._admit(batch, _Record(7, None, key=key)))  # type: ignore[arg-type]
    assert ([7, 8], 1, 1) == (batch.messages, batch.staged, batch.skipped)
    assert not producer.sent
    manifest = batch.flush(LocalStorage(tmp_path))
    (table,) = manifest.tables
    line = orjson.loads(LocalStorage(tmp_path).get(table.path))
    assert (7, "inventory", "customers") == (line["seq"], line["database"], line["table"])


def test_an_undecodable_record_is_dead_lettered_with_its_reason_then_counted(
    tmp_path: Path,
) -> None:
    stager, producer = _stager(tmp_path)
    batch: Batch[int] = Batch(BatchLimits())
    record = _Record(41, b"{not json", headers=[(kbus.SUBJECT_HEADER, b"cdc.shop.orders")])
    asyncio.run(stager._admit(batch, record))  # type: ignore[arg-type]
    (sent,) = producer.sent
    headers = kbus.headers_dict(sent["headers"])
    assert "tidelake.cdc.dlq" == sent["topic"]
    assert b"{not json" == sent["value"]
    assert "42" == headers[dlq.HEADER_STREAM_SEQ]
    assert "cdc.shop.orders" == headers[dlq.HEADER_ORIGINAL_SUBJECT]
    assert "not JSON" in headers[dlq.HEADER_REASON]
    assert "tidelake-dlq-42" == headers[kbus.MSG_ID_HEADER]
    assert (1, 0) == (batch.dead_lettered, batch.staged)


def test_a_republished_copy_inside_the_window_is_skipped_once_and_counted(tmp_path: Path) -> None:
    """The same ``Tidelake-Msg-Id`` at a later sequence within ``duplicate_window_s`` is a
    copy (a capture that restarted republished it): skipped as ``duplicate``. The same record
    read again (a rebalance) is not a copy of itself; after the window, an id is new again."""
    stager, _ = _stager(tmp_path)
    batch: Batch[int] = Batch(BatchLimits())
    ms = 1_700_000_000_000
    window = int(stager.k.duplicate_window_s * 1000)

    def record(offset: int, msg_id: str, at: int) -> _Record:
        return _Record(
            offset, _debezium_insert(offset), headers=[(kbus.MSG_ID_HEADER, msg_id.encode())],
            timestamp=at,
        )  # fmt: skip

    for rec in (
        record(0, "a", ms),
        record(1, "b", ms + 10),
        record(2, "a", ms + 20),  # a copy of 0
        record(0, "a", ms),  # 0 read again after a rebalance: itself, not a copy
        record(3, "b", ms + 10 + window + 1),  # past the window: new
    ):
        asyncio.run(stager._admit(batch, rec))  # type: ignore[arg-type]
    assert (4, 1) == (batch.staged, batch.skipped)
    assert {"skipped:duplicate": 1} == dict(batch.counts_by_reason)
