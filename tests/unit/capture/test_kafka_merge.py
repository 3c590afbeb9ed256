"""capture/kafka_merge.py: the order in which a TiCDC topic's messages go on, and the offsets
that may be committed (pure logic; tests/integration/capture/test_kafka_source.py runs it on a
real broker)."""

from __future__ import annotations

import orjson
import pytest

from tidelake.capture.kafka_merge import KafkaMessage, KafkaOrderError, TopicMerge, classify


def _row(ts: int, table: str = "t", key: int = 1) -> bytes:
    return orjson.dumps(
        {"database": "db", "table": table, "isDdl": False, "type": "UPDATE",
         "data": [{"id": str(key)}], "pkNames": ["id"], "_tidb": {"commitTs": ts}}
    )  # fmt: skip


def _ddl(ts: int, table: str = "t") -> bytes:
    return orjson.dumps(
        {"database": "db", "table": table, "isDdl": True, "type": "ALTER", "data": None,
         "sql": "ALTER TABLE t ADD COLUMN c INT", "_tidb": {"commitTs": ts}}
    )  # fmt: skip


def _wm(ts: int) -> bytes:
    return orjson.dumps({"type": "TIDB_WATERMARK", "data": None, "_tidb": {"watermarkTs": ts}})


class Feed:
    """Offsets per partition, counted as a broker would."""

    def __init__(self, merge: TopicMerge) -> None:
        self.merge = merge
        self.next: dict[int, int] = {}

    def __call__(self, partition: int, value: bytes | None, key: bytes | None = None) -> list[int]:
        offset = self.next.get(partition, 0)
        self.next[partition] = offset + 1
        out = self.merge.add(KafkaMessage("topic", partition, offset, key, value))
        return [_ts(m) for m in out]


def _ts(m: KafkaMessage) -> int:
    body = orjson.loads(m.value or b"null")
    return int(body["_tidb"]["commitTs"]) if body else -1


def test_classify_reads_the_tso_of_rows_ddls_and_watermarks() -> None:
    assert ("row", 5) == (classify(_row(5)).kind, classify(_row(5)).ts)
    assert ("ddl", 6) == (classify(_ddl(6)).kind, classify(_ddl(6)).ts)
    assert ("watermark", 7) == (classify(_wm(7)).kind, classify(_wm(7)).ts)
    assert "other" == classify(b"not json").kind
    assert "other" == classify(None).kind


def test_rows_wait_for_every_partitions_watermark_then_go_in_commit_ts_order() -> None:
    feed = Feed(TopicMerge("topic", [0, 1, 2]))
    assert [] == feed(1, _row(30, key=3))
    assert [] == feed(2, _row(10, key=1))
    assert [] == feed(0, _row(20, key=2))
    assert [] == feed(0, _wm(30))
    assert [] == feed(1, _wm(30))
    # The last partition's watermark lets everything at or below 30 through, oldest first.
    assert [10, 20, 30] == feed(2, _wm(30))


def test_a_ddl_on_partition_zero_waits_for_the_rows_before_it_on_other_partitions() -> None:
    """TiCDC writes canal-json DDLs to partition 0 only; the table's rows may be anywhere."""
    feed = Feed(TopicMerge("topic", [0, 1]))
    feed(0, _ddl(50))
    feed(1, _row(40))
    feed(1, _row(60))
    feed(0, _wm(55))
    assert [40, 50] == feed(1, _wm(55))  # the row before the DDL, the DDL; 60 waits
    feed(0, _wm(60))
    assert [60] == feed(1, _wm(60))


def test_replays_and_second_copies_of_a_ddl_are_dropped() -> None:
    merge = TopicMerge("topic", [0])
    feed = Feed(merge)
    feed(0, _ddl(5))
    feed(0, _row(8))
    assert [5, 8] == feed(0, _wm(10))
    # TiCDC restarted from checkpoint 4: the DDL and the row again, then an older watermark.
    assert [] == feed(0, _ddl(5))
    assert [] == feed(0, _row(8))
    assert [] == feed(0, _wm(4))
    assert 2 == merge.replays
    assert [12] == (feed(0, _row(12)) or feed(0, _wm(12)))


def test_offsets_stop_at_what_is_not_stored_and_at_the_latest_watermark() -> None:
    merge = TopicMerge("topic", [0, 1])
    feed = Feed(merge)
    feed(0, _row(1))  # offset 0 of partition 0, held
    feed(1, _wm(5))  # offset 0 of partition 1
    assert {0: 0, 1: 0} == merge.commit_offsets()  # a held row; a watermark to read again
    feed(0, _wm(5))  # releases the row: in flight until JetStream stores it
    released = KafkaMessage("topic", 0, 0, None, _row(1))
    assert {0: 0, 1: 0} == merge.commit_offsets()
    merge.stored(released)
    # Stored: partition 0 may move on to its latest watermark (offset 1), not past it.
    assert {0: 1, 1: 0} == merge.commit_offsets()


def test_partition_order_forwards_at_once_and_commits_what_is_stored() -> None:
    merge = TopicMerge("topic", [0, 1], order="partition")
    first = KafkaMessage("topic", 0, 0, b'{"id":1}', b"{}")
    tombstone = KafkaMessage("topic", 0, 1, b'{"id":1}', None)
    assert [first] == merge.add(first)
    assert [tombstone] == merge.add(tombstone)
    merge.stored(first)
    assert {0: 1} == merge.commit_offsets()
    merge.stored(tombstone)
    assert {0: 2} == merge.commit_offsets()


def test_a_canal_json_row_without_commit_ts_is_refused_in_watermark_order() -> None:
    body = orjson.dumps({"database": "db", "table": "t", "isDdl": False, "data": [{"id": "1"}]})
    with pytest.raises(KafkaOrderError, match="enable-tidb-extension=true"):
        TopicMerge("topic", [0, 1]).add(KafkaMessage("topic", 0, 0, None, body))


def test_a_message_that_is_not_canal_json_goes_on_for_the_stager_to_judge() -> None:
    merge = TopicMerge("topic", [0, 1])
    garbage = KafkaMessage("topic", 1, 0, None, b"\xff not json")
    assert [garbage] == merge.add(garbage)
