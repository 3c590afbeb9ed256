"""``bus.kind: kafka``: the CDC log in a Kafka topic instead of a JetStream stream.

The contract, beside JetStream's (docs/architecture.md §1, docs/kafka.md "Kafka as the bus"):

* **One topic of one partition is the log.** ``bus.kafka.topic`` plays the CDC stream's part:
  one partition, so one total order, and a record's offset + 1 is its *stream sequence*
  everywhere a JetStream sequence is used today (manifests, table checkpoints, ``replay``).
  A topic of more partitions has no order across them and is refused by :func:`ensure_topics`
  and by the stager; TiCDC's and Debezium's own multi-partition topics come in through
  ``tidelake capture kafka``, which merges them in order into this topic.
* **Headers.** ``Tidelake-Subject`` names the subject the decoder is given (for a record
  without it, the topic name: what Debezium Server would have used as its NATS subject);
  ``Tidelake-Msg-Id`` carries the id JetStream would de-duplicate on (Kafka does not: a
  republished copy is dropped by the ingest's position watermark, docs/architecture.md §3);
  the record key is the message key (Debezium's key JSON).
* **Dead letters** go to ``bus.kafka.dlq_topic`` with the headers :mod:`tidelake.bus.dlq`
  names, produced with ``acks=all`` and awaited before the original's offset is committed.
* **Offsets.** The stagers' group (``bus.kafka.group_id``) commits an offset only after the
  manifest holding every record below it is durable: the committed offset is the ack floor.

Topics are created with ``min.insync.replicas`` and retention from the config; the producer
uses ``acks=all`` and idempotence, so a broker restart neither loses nor reorders what it
acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.errors import BusError, ConfigError

if TYPE_CHECKING:
    from tidelake.config import BusConfig, KafkaBusConfig, KafkaSourceConfig

log = structlog.get_logger(__name__)

SUBJECT_HEADER = "Tidelake-Subject"
MSG_ID_HEADER = "Tidelake-Msg-Id"
#: The one partition of the CDC topic.
PARTITION = 0


def settings(bus: BusConfig) -> KafkaBusConfig:
    """``bus.kafka``, checked: the bus is Kafka and its servers are named."""
    if bus.kind != "kafka":
        raise ConfigError("bus.kind is not kafka")
    if not bus.kafka.bootstrap_servers:
        raise ConfigError("bus.kind is kafka but bus.kafka.bootstrap_servers is not set")
    return bus.kafka


def client_options(conn: KafkaBusConfig | KafkaSourceConfig) -> dict[str, Any]:
    """The aiokafka client arguments that reach ``conn``'s brokers: ``bootstrap_servers``
    and, when set, TLS (a context from its PEM files) and SASL (``security_protocol``
    SASL_SSL, SASL_PLAINTEXT or SSL). Every Kafka client tidelake makes takes them."""
    options: dict[str, Any] = {"bootstrap_servers": conn.bootstrap_servers}
    if conn.tls is not None:
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=str(conn.tls.ca_file) if conn.tls.ca_file else None,
            certfile=str(conn.tls.cert_file) if conn.tls.cert_file else None,
            keyfile=str(conn.tls.key_file) if conn.tls.key_file else None,
        )
    if conn.sasl is not None:
        options["security_protocol"] = "SASL_SSL" if conn.tls is not None else "SASL_PLAINTEXT"
        options["sasl_mechanism"] = conn.sasl.mechanism
        options["sasl_plain_username"] = conn.sasl.username
        options["sasl_plain_password"] = conn.sasl.resolved_password()
    elif conn.tls is not None:
        options["security_protocol"] = "SSL"
    return options


async def check_credentials(conn: KafkaBusConfig | KafkaSourceConfig) -> None:
    """With ``sasl`` set: open one connection to a bootstrap server, so that Kafka refusing
    the credentials (or the mechanism) stops the caller with that reason as a
    :class:`ConfigError`. aiokafka's own bootstrap reports it only as "Unable to bootstrap",
    which a caller would wait out as an outage, forever. A server that cannot be reached is
    left to the caller's retries."""
    if conn.sasl is None or not conn.bootstrap_servers:
        return
    from aiokafka.conn import create_conn
    from aiokafka.errors import SaslAuthenticationFailed, UnsupportedSaslMechanismError

    options = client_options(conn)
    del options["bootstrap_servers"]
    for server in conn.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            opened = await create_conn(host, int(port), **options)
        except (SaslAuthenticationFailed, UnsupportedSaslMechanismError) as exc:
            raise ConfigError(
                f"Kafka at {server.strip()} refused the SASL credentials of user "
                f"{conn.sasl.username!r} ({conn.sasl.mechanism}): {exc}"
            ) from exc
        except Exception:  # unreachable: the next server, or the caller's retries
            continue
        opened.close()
        return


def seq_of(offset: int) -> int:
    """The stream sequence of the record at ``offset`` (sequences start at 1, offsets at 0)."""
    return offset + 1


def offset_of(seq: int) -> int:
    return seq - 1


def headers_dict(headers: Sequence[tuple[str, bytes]] | None) -> dict[str, str]:
    """A record's headers as text (the last of a repeated name wins)."""
    out: dict[str, str] = {}
    for name, value in headers or ():
        out[name] = value.decode("utf-8", errors="replace") if value is not None else ""
    return out


def headers_list(headers: dict[str, str]) -> list[tuple[str, bytes]]:
    return [(k, v.encode()) for k, v in headers.items()]


async def ensure_topics(bus: BusConfig) -> None:
    """Create the CDC and dead-letter topics when missing; refuse a CDC topic of more than one
    partition (it would have no order)."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    k = settings(bus)
    await check_credentials(k)
    admin = AIOKafkaAdminClient(**client_options(k))
    await admin.start()
    try:
        wanted = {
            k.topic: {
                "min.insync.replicas": str(k.min_insync_replicas),
                "retention.ms": str(k.retention_ms),
                "cleanup.policy": "delete",
            },
            k.dlq_topic: {
                "min.insync.replicas": str(k.min_insync_replicas),
                "retention.ms": str(k.dlq_retention_ms),
                "cleanup.policy": "delete",
            },
        }
        existing = set(await admin.list_topics())
        new = [
            NewTopic(name, 1, k.replication_factor, topic_configs=configs)
            for name, configs in wanted.items()
            if name not in existing
        ]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):  # made by another meanwhile
                await admin.create_topics(new)
            log.info("kafka topics created", topics=[t.name for t in new])
        # A topic just created may be described with no partitions until the controller's
        # metadata reaches the broker: asked again for a while.
        for _ in range(50):
            partitions = _partition_count(await admin.describe_topics([k.topic]), k.topic)
            if partitions:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    if partitions != 1:
        raise BusError(
            f"Kafka topic {k.topic!r} has {partitions} partitions: the CDC topic must have one "
            "(one order); bring multi-partition topics in with `tidelake capture kafka`"
        )


def _partition_count(described: Any, topic: str) -> int:
    for entry in described:
        name = entry.get("topic") if isinstance(entry, dict) else None
        if name == topic:
            return len(entry.get("partitions") or [])
    raise BusError(f"Kafka does not describe topic {topic!r}")


async def _exists(consumer: Any, topic: str) -> bool:
    """Whether Kafka has ``topic``, asked without naming it: a metadata request for one topic
    makes a broker with ``auto.create.topics.enable`` (the default) create it, with the
    broker's partition count, before :func:`ensure_topics` can make it with one."""
    return topic in await consumer.topics()


@dataclass(frozen=True, slots=True)
class TopicState:
    """Where the CDC topic and the stagers' group stand."""

    first_offset: int
    end_offset: int
    committed: int | None

    @property
    def pending(self) -> int:
        """Records not yet staged (committed) that the topic still holds."""
        start = self.committed if self.committed is not None else self.first_offset
        return max(0, self.end_offset - max(start, self.first_offset))


async def topic_state(bus: BusConfig, topic: str | None = None) -> TopicState:
    """First and end offsets of ``topic`` (the CDC topic by default) and the group's
    committed offset."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    k = settings(bus)
    tp = TopicPartition(topic or k.topic, PARTITION)
    consumer = AIOKafkaConsumer(**client_options(k), group_id=k.group_id, enable_auto_commit=False)
    await consumer.start()
    try:
        if not await _exists(consumer, tp.topic):
            return TopicState(0, 0, None)
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        committed = await consumer.committed(tp) if topic in (None, k.topic) else None
    finally:
        await consumer.stop()
    return TopicState(first, end, committed)


async def rewind(
    bus: BusConfig, *, from_seq: int | None, from_time_ms: int | None, dry_run: bool = False
) -> dict[str, Any]:
    """``tidelake replay`` on a Kafka bus: move the stagers' committed offset back to
    ``from_seq`` (or to the first record at or after ``from_time_ms``). The stagers must be
    stopped (Kafka refuses an offset commit from outside a live group's generation); they
    stage again from there, and the ingest skips what its checkpoints hold. ``dry_run``:
    only say what would be staged again."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    k = settings(bus)
    tp = TopicPartition(k.topic, PARTITION)
    consumer = AIOKafkaConsumer(**client_options(k), group_id=k.group_id, enable_auto_commit=False)
    await consumer.start()
    try:
        if not await _exists(consumer, tp.topic):
            raise BusError(f"Kafka has no topic {tp.topic!r}")
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        if from_time_ms is not None:
            found = (await consumer.offsets_for_times({tp: from_time_ms}))[tp]
            offset = found.offset if found is not None else end
        else:
            assert from_seq is not None
            offset = offset_of(from_seq)
        if offset < first:
            raise BusError(
                f"sequence {seq_of(offset)} is gone from {k.topic!r} (retention): the first "
                f"kept is {seq_of(first)}"
            )
        offset = min(offset, end)
        before = await consumer.committed(tp)
        if not dry_run:
            consumer.assign([tp])
            await consumer.commit({tp: OffsetAndMetadata(offset, "tidelake replay")})
    finally:
        await consumer.stop()
    return {
        "topic": k.topic,
        "from_seq": seq_of(offset),
        "to_seq": end,
        "messages": end - offset,
        "committed_before": before,
    }


@dataclass(frozen=True, slots=True)
class Letter:
    """A dead letter to produce: payload, key and the headers of :mod:`tidelake.bus.dlq`."""

    payload: bytes
    key: bytes | None
    headers: dict[str, str]


async def read_records(
    bus: BusConfig, seqs: Sequence[int], topic: str | None = None
) -> dict[int, tuple[str, bytes | None, bytes | None]]:
    """``(subject, key, value)`` of the records at stream sequences ``seqs`` of ``topic`` (the
    CDC topic by default) that the topic still holds."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    k = settings(bus)
    name = topic or k.topic
    tp = TopicPartition(name, PARTITION)
    consumer = AIOKafkaConsumer(**client_options(k), enable_auto_commit=False)
    await consumer.start()
    found: dict[int, tuple[str, bytes | None, bytes | None]] = {}
    try:
        if not await _exists(consumer, name):
            return found
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        for seq in sorted(set(seqs)):
            offset = offset_of(seq)
            if offset < first or offset >= end:
                continue
            consumer.seek(tp, offset)
            got = await consumer.getmany(tp, timeout_ms=5_000, max_records=1)
            for record in got.get(tp, []):
                if record.offset == offset:
                    subject = headers_dict(record.headers).get(SUBJECT_HEADER) or name
                    found[seq] = (subject, record.key, record.value)
    finally:
        await consumer.stop()
    return found


async def produce_letters(bus: BusConfig, letters: Sequence[Letter]) -> None:
    """Produce ``letters`` to the dead-letter topic (``acks=all``); return once Kafka has every
    one, or raise :class:`BusError`."""
    from aiokafka import AIOKafkaProducer

    k = settings(bus)
    producer = AIOKafkaProducer(**client_options(k), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for letter in letters:
            await producer.send_and_wait(
                k.dlq_topic,
                letter.payload,
                key=letter.key,
                partition=PARTITION,
                headers=headers_list(letter.headers),
            )
    except Exception as exc:
        raise BusError(f"cannot produce to the Kafka dead-letter topic: {exc!r}") from exc
    finally:
        await producer.stop()


@dataclass(frozen=True, slots=True)
class Record:
    """One record of the CDC topic as the stager sees it."""

    seq: int
    headers: dict[str, str]
    key: bytes | None
    value: bytes | None


async def scan_topic(bus: BusConfig, topic: str | None = None) -> list[Record]:
    """Every record ``topic`` (the CDC topic by default) holds now, in offset order."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    k = settings(bus)
    tp = TopicPartition(topic or k.topic, PARTITION)
    consumer = AIOKafkaConsumer(**client_options(k), enable_auto_commit=False)
    await consumer.start()
    out: list[Record] = []
    try:
        if not await _exists(consumer, tp.topic):
            return out
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.seek(tp, first)  # seek_to_beginning races the client's own reset to latest
        while await consumer.position(tp) < end:
            got = await consumer.getmany(tp, timeout_ms=2_000, max_records=5_000)
            for record in got.get(tp, []):
                if record.offset < end:
                    out.append(
                        Record(
                            seq_of(record.offset),
                            headers_dict(record.headers),
                            record.key,
                            record.value,
                        )
                    )
    finally:
        await consumer.stop()
    return out


class RecordClock:
    """When the CDC topic stored the record at a sequence, read on one consumer kept open:
    the monitor asks for the first record of every new batch at each refresh (up to
    hundreds), and a client per question would bootstrap a connection each time."""

    def __init__(self, bus: BusConfig) -> None:
        self.k = settings(bus)
        self._consumer: Any = None

    async def time_ms(self, seq: int) -> int | None:
        """The record's timestamp (ms); None once it is gone or Kafka does not answer."""
        from aiokafka import TopicPartition

        tp = TopicPartition(self.k.topic, PARTITION)
        try:
            consumer = await self._open(tp)
            if consumer is None:
                return None
            consumer.seek(tp, offset_of(seq))
            got = await consumer.getmany(tp, timeout_ms=2_000, max_records=1)
        except Exception:
            await self.close()  # opened again at the next question
            return None
        for record in got.get(tp, []):
            if record.offset == offset_of(seq):
                return int(record.timestamp)
        return None

    async def _open(self, tp: Any) -> Any:
        if self._consumer is None:
            from aiokafka import AIOKafkaConsumer

            consumer = AIOKafkaConsumer(**client_options(self.k), enable_auto_commit=False)
            await consumer.start()
            if not await _exists(consumer, tp.topic):
                await consumer.stop()
                return None
            consumer.assign([tp])
            self._consumer = consumer
        return self._consumer

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()


async def message_ids_before(
    bus: BusConfig, end_offset: int, window_ms: int
) -> list[tuple[str, int, int]]:
    """``(Tidelake-Msg-Id, timestamp ms, sequence)`` of the CDC topic's records stored in the
    ``window_ms`` before the record at ``end_offset`` (before now when the topic ends there),
    up to ``end_offset``: what a stager starting at ``end_offset`` needs to know to recognise
    a republished copy of them."""
    import time

    from aiokafka import AIOKafkaConsumer, TopicPartition

    k = settings(bus)
    tp = TopicPartition(k.topic, PARTITION)
    consumer = AIOKafkaConsumer(**client_options(k), enable_auto_commit=False)
    await consumer.start()
    out: list[tuple[str, int, int]] = []
    try:
        if not await _exists(consumer, tp.topic):
            return out
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        end_offset = min(end_offset, end)
        if end_offset <= first:
            return out
        reference = time.time_ns() // 1_000_000
        if end_offset < end:
            consumer.seek(tp, end_offset)
            got = await consumer.getmany(tp, timeout_ms=5_000, max_records=1)
            reference = next((int(r.timestamp) for r in got.get(tp, [])), reference)
        found = (await consumer.offsets_for_times({tp: reference - window_ms}))[tp]
        start = max(first, min(found.offset if found is not None else end_offset, end_offset))
        consumer.seek(tp, start)
        while await consumer.position(tp) < end_offset:
            got = await consumer.getmany(tp, timeout_ms=2_000, max_records=5_000)
            for record in got.get(tp, []):
                msg_id = headers_dict(record.headers).get(MSG_ID_HEADER)
                if record.offset < end_offset and msg_id:
                    out.append((msg_id, int(record.timestamp), seq_of(record.offset)))
    finally:
        await consumer.stop()
    return out
