"""``tidelake capture kafka``: the change topics TiCDC or Debezium write to Kafka, into JetStream.

A Kafka consumer group reads the topics; :mod:`tidelake.capture.kafka_merge` decides the order
in which their messages go on (``capture.kafka.order``); the ordered publisher
(:mod:`tidelake.capture.publisher`) stores them in JetStream on
``<capture.kafka.subject_prefix>.<topic>``, each with ``Nats-Msg-Id``
``kafka:<topic>:<partition>:<offset>`` and its Kafka key as the ``Tidelake-Key`` header; and a
partition's offset is committed to Kafka only up to what JetStream has stored (and never past
its latest watermark). From there the pipeline is the same as for any producer: stager,
ingest, lake. A Kafka tombstone (a null value: Debezium's after a delete) is published as
JSON ``null``, which the stager counts as skipped.

**Whole topics per member.** The watermark order needs every partition of a topic in one
process (a DDL sits on partition 0, its table's rows on any partition), so the group uses
:class:`WholeTopicAssignor`: topics, not partitions, are spread over the members. When a
rebalance takes a topic away, what JetStream stored is committed first and the topic's held
messages are dropped; its new owner reads them again from the committed offsets.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.bus.kafka import check_credentials, client_options
from tidelake.capture.bus_publisher import open_publisher
from tidelake.capture.kafka_merge import KafkaMessage, TopicMerge
from tidelake.capture.publisher import Acked
from tidelake.config import Config, KafkaSourceConfig
from tidelake.errors import ConfigError

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer

log = structlog.get_logger(__name__)

#: Seconds between two progress lines in the log.
REPORT_EVERY_S = 10.0
#: The stager's key header (stage/consumer.py ``KEY_HEADER``).
KEY_HEADER = "Tidelake-Key"
#: How often the consumer refreshes the cluster's metadata, which is when ``topic_pattern``
#: sees a new topic: Debezium and TiCDC create one per new table on its first change. The
#: client's default (``metadata_max_age_ms``, 5 minutes) held a new table's changes back
#: that long; they are never lost (a new partition is read from its earliest offset).
METADATA_MAX_AGE_MS = 10_000


def whole_topic_assignor() -> type:
    """An aiokafka partition assignor giving each topic, all its partitions, to one member
    (round-robin over topics, in name order)."""
    from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    class WholeTopicAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
        name = "tidelake-whole-topic"
        version = 0

        @classmethod
        def assign(
            cls, cluster: Any, members: Mapping[str, Any]
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            topics = sorted({t for m in members.values() for t in m.subscription})
            plan: dict[str, dict[str, list[int]]] = collections.defaultdict(dict)
            ring = itertools.cycle(sorted(members))
            for topic in topics:
                partitions = cluster.partitions_for_topic(topic)
                if not partitions:
                    continue
                member = next(ring)
                while topic not in members[member].subscription:
                    member = next(ring)
                plan[member][topic] = sorted(partitions)
            return {
                m: ConsumerProtocolMemberAssignment(cls.version, sorted(plan[m].items()), b"")
                for m in members
            }

        @classmethod
        def metadata(cls, topics: set[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), b"")

        @classmethod
        def on_assignment(cls, assignment: Any) -> None:
            pass

    return WholeTopicAssignor


@dataclass
class KafkaSourceStats:
    consumed: int = 0
    published: int = 0
    duplicates: int = 0
    replays_dropped: int = 0
    commits: int = 0
    rebalances: int = 0


class KafkaSource:
    """One member of the bridge's consumer group, until :meth:`request_stop`."""

    def __init__(self, cfg: Config, bus_url: str | None = None) -> None:
        self.cfg = cfg
        self.kcfg: KafkaSourceConfig = cfg.capture.kafka
        if not self.kcfg.bootstrap_servers:
            raise ConfigError("capture.kafka.bootstrap_servers is not set")
        if not self.kcfg.topics and not self.kcfg.topic_pattern:
            raise ConfigError("capture.kafka: set topics or topic_pattern")
        self.bus_url = bus_url or cfg.bus.url
        self.stats = KafkaSourceStats()
        self._merges: dict[str, TopicMerge] = {}
        self._stop = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._publisher: Any = None  # capture/bus_publisher.py: either bus

    def request_stop(self) -> None:
        self._stop.set()

    # -- acks and offsets ------------------------------------------------------------------

    def _on_acked(self, acked: Acked) -> None:
        msg: KafkaMessage = acked.tag
        self.stats.published += 1
        self.stats.duplicates += int(acked.duplicate)
        merge = self._merges.get(msg.topic)
        if merge is not None:
            merge.stored(msg)

    async def _commit(self, topics: list[str] | None = None) -> None:
        """Wait for every PubAck, then commit each partition's safe offset."""
        from aiokafka import TopicPartition

        assert self._publisher is not None
        assert self._consumer is not None
        await self._publisher.durable()
        offsets = {
            TopicPartition(topic, p): offset
            for topic in (topics if topics is not None else list(self._merges))
            if topic in self._merges
            for p, offset in self._merges[topic].commit_offsets().items()
        }
        if offsets:
            await self._consumer.commit(offsets)
            self.stats.commits += 1

    async def _commit_or_wait(self) -> None:
        """:meth:`_commit`; a commit Kafka refuses now (the group is rebalancing, the broker
        is restarting) is left to the next one: until then a restart reads a little more
        again, under the same message ids."""
        from aiokafka.errors import KafkaError

        try:
            await self._commit()
        except KafkaError as exc:
            log.warning("kafka offsets not committed yet", error=repr(exc))

    # -- rebalances --------------------------------------------------------------------------

    def _listener(self) -> Any:
        from aiokafka.abc import ConsumerRebalanceListener

        source = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                topics = sorted({tp.topic for tp in revoked})
                with contextlib.suppress(Exception):  # a failed commit: read again, same ids
                    await source._commit(topics)
                for topic in topics:
                    merge = source._merges.pop(topic, None)
                    if merge is not None:
                        source.stats.replays_dropped += merge.replays
                log.info("kafka topics revoked", topics=topics)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                source.stats.rebalances += 1
                # Whole topics (WholeTopicAssignor): the assignment names every partition.
                for topic in sorted({tp.topic for tp in assigned}):
                    partitions = sorted(tp.partition for tp in assigned if tp.topic == topic)
                    source._merges[topic] = TopicMerge(topic, partitions, source.kcfg.order)
                log.info("kafka topics assigned", topics=sorted(source._merges))

        return Listener()

    # -- the loop ----------------------------------------------------------------------------

    def subject(self, topic: str) -> str:
        return f"{self.kcfg.subject_prefix}.{topic}"

    async def run(self) -> KafkaSourceStats:
        from aiokafka import AIOKafkaConsumer

        await check_credentials(self.kcfg)
        self._publisher = await open_publisher(self.cfg.bus, self.bus_url, on_acked=self._on_acked)
        consumer = AIOKafkaConsumer(
            **client_options(self.kcfg),
            group_id=self.kcfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            partition_assignment_strategy=(whole_topic_assignor(),),
        )
        self._consumer = consumer
        listener = self._listener()
        if self.kcfg.topic_pattern:
            consumer.subscribe(pattern=self.kcfg.topic_pattern, listener=listener)
        else:
            consumer.subscribe(topics=self.kcfg.topics, listener=listener)
        await consumer.start()
        last_commit = last_report = time.monotonic()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=500, max_records=2_000)
                for tp, records in batches.items():
                    merge = self._merges.get(tp.topic)
                    if merge is None:  # revoked while fetched
                        continue
                    for record in records:
                        self.stats.consumed += 1
                        message = KafkaMessage(
                            tp.topic, tp.partition, record.offset, record.key, record.value
                        )
                        for out in merge.add(message):
                            await self._publish(out)
                if time.monotonic() - last_commit >= self.kcfg.commit_interval_s:
                    await self._commit_or_wait()
                    last_commit = time.monotonic()
                if time.monotonic() - last_report >= REPORT_EVERY_S:
                    last_report = time.monotonic()
                    log.info(
                        "kafka source",
                        consumed=self.stats.consumed,
                        published=self.stats.published,
                        held={t: m.held for t, m in self._merges.items()},
                        watermarks={t: m.watermarks() for t, m in self._merges.items()},
                    )
            await self._commit_or_wait()
        finally:
            self.stats.replays_dropped += sum(m.replays for m in self._merges.values())
            with contextlib.suppress(Exception):
                await consumer.stop()
            await self._publisher.close()
        return self.stats

    async def _publish(self, msg: KafkaMessage) -> None:
        assert self._publisher is not None
        headers = {KEY_HEADER: key_header(msg.key)} if msg.key else {}
        payload = msg.value if msg.value is not None else b"null"
        await self._publisher.publish(
            self.subject(msg.topic), payload, msg.msg_id, tag=msg, headers=headers
        )


def key_header(key: bytes) -> str:
    """The ``Tidelake-Key`` header of a Kafka key: the key itself when it is one line of
    UTF-8 (a Debezium JSON key always is: Kafka's JsonConverter writes compact JSON).

    Anything else cannot travel as a NATS header value as it is, and dropping it would let the
    row be keyed another way: it goes as a text that is not JSON, naming the bytes in hex, so
    the stager dead-letters the message ("message key is not JSON") with the key recoverable."""
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\r" not in text and "\n" not in text:
        return text
    return f"unreadable Kafka key, hex {key.hex()}"


def run_kafka_source(cfg: Config) -> KafkaSourceStats:
    """Run until SIGTERM or SIGINT; what JetStream stored is committed before it returns."""
    source = KafkaSource(cfg)

    async def main() -> KafkaSourceStats:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, source.request_stop)
        return await source.run()

    return asyncio.run(main())
