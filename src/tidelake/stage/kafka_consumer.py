"""The stager on a Kafka bus (``bus.kind: kafka``): the CDC topic -> staged batches.

The same contract as the JetStream stager (``stage/consumer.py``; docs/architecture.md §1
and §4), on the Kafka terms of :mod:`tidelake.bus.kafka`:

1. the stagers form one consumer group on the CDC topic; its one partition is read by one of
   them at a time, in offset order (a record's stream sequence is its offset + 1);
2. each record is decoded into the open batch (:class:`~tidelake.stage.intake.Intake`); one
   that cannot be is produced to the dead-letter topic (``acks=all``, awaited) first, then
   counted in the batch;
3. when the batch is cut: its files, THEN its manifest (durable), THEN the group's offset is
   committed past its last record: the committed offset is the ack floor.

Kafka hands a partition out in order and never out of it, so none of the JetStream stager's
gap-holding is needed here. A crash before step 3 completes means the next owner of the
partition reads from the last committed offset again: the batch is staged a second time,
under sequences that overlap the first manifest's, and the ingest skips what its checkpoints
hold (docs/architecture.md §3) — exactly as after a JetStream redelivery.

**Rebalances.** When the group takes the partition away (another stager joined, or this one
missed its heartbeats), the open batch is dropped unwritten: its records were not committed,
so the new owner reads them again. A batch being written when it happens is finished; its
commit is then refused by Kafka (not our generation any more) and the overlap is, again,
skipped by the ingest.

**Nothing expires unseen.** Offsets are never reset silently (``auto_offset_reset="none"``):
when the group's committed offset is older than the topic's first record (retention deleted
records before they were staged) the stager stops with an error naming the lost sequences
instead of skipping them. A new group starts at the first record the topic holds.

**Local faults stop consumption**, as in the JetStream stager: a transient storage failure
(disk full, object store down) is retried with back-off, the batch kept and nothing
committed; a transient Kafka failure is retried by the client and by :meth:`_dead_letter`.

Not here: JetStream's delivery count (Kafka has none), so there is no ``max_deliver``
verdict; a message that makes the decoder raise is dead-lettered at once (``decoder_error``),
and one that kills the process is read again by the next owner.

Test-only hook (``stage/control.py``): ``TEST_TIDELAKE_CRASH_AT=after_files`` or
``after_manifest`` kills the process at that point the first time it gets there.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from tidelake.bus import dlq
from tidelake.bus import kafka as kbus
from tidelake.config import BusConfig, Config, StageConfig
from tidelake.errors import BusError, is_retryable
from tidelake.retry import backoff_s
from tidelake.runtime.live_metrics import watch_stager
from tidelake.runtime.metrics_server import beat
from tidelake.runtime.storage import LocalStorage, Storage, open_storage
from tidelake.stage.batch import Batch, BatchLimits, reason_bucket
from tidelake.stage.consumer import IDLE_FETCH_S, MAX_STALL_WAIT_S, ONCE_FETCH_S
from tidelake.stage.control import StagerControl, StagerStats
from tidelake.stage.intake import DecodeFn, Intake
from tidelake.stage.manifest import Manifest

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

log = structlog.get_logger(__name__)

#: Attempts to produce one dead letter before the batch is given up (read again later).
DLQ_ATTEMPTS = 8
#: Longest wait for one attempt to reach Kafka at start-up (creating the topics, joining).
UP_ATTEMPT_S = 60.0


class KafkaStager(StagerControl):
    """Poll, decode, batch, flush, commit; until :meth:`stop` (or drained, with ``once``)."""

    def __init__(
        self,
        bus: BusConfig,
        stage: StageConfig,
        storage: Storage,
        *,
        decode: DecodeFn | None = None,
    ) -> None:
        super().__init__()
        self.bus = bus
        self.k = kbus.settings(bus)
        self.stage = stage
        self.storage = storage
        self.limits = BatchLimits.from_config(stage)
        self.intake = Intake(stage, storage, decode)
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._tp: TopicPartition | None = None
        #: Set by a rebalance that took the partition away: the open batch is dropped.
        self._revoked = False
        #: A check made at assignment failed (records expired unstaged): raised by the loop.
        self._fatal: BaseException | None = None
        #: The duplicate window: Tidelake-Msg-Id -> (timestamp ms, sequence) of the first
        #: record seen with it, and the ids in the order seen (to let them expire).
        self._seen: dict[str, tuple[int, int]] = {}
        self._seen_order: deque[tuple[int, str]] = deque()
        #: The window of the current assignment has been read back (see _start_at).
        self._preloaded = False

    # -- the group ----------------------------------------------------------------------------

    def _listener(self) -> Any:
        from aiokafka.abc import ConsumerRebalanceListener

        stager = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                if stager._tp is not None and stager._tp in revoked:
                    stager._revoked = True
                    stager._tp = None
                    log.info("kafka partition revoked: the open batch is read again by its owner")

            async def on_partitions_assigned(self, assigned: Any) -> None:
                for tp in assigned:
                    stager._preloaded = False
                    try:
                        await stager._start_at(tp)
                    except Exception as exc:
                        if is_retryable(exc):  # positioned again by the next poll (_poll)
                            log.warning("kafka position not read", error=repr(exc)[:300])
                        else:
                            stager._fatal = exc
                            return
                    stager._tp = tp
                    stager.stats.rebalances += 1
                    log.info("kafka partition assigned", topic=tp.topic, partition=tp.partition)

        return Listener()

    async def _start_at(self, tp: TopicPartition, *, preload: bool = True) -> None:
        """Position on the committed offset; refuse one older than the topic's first record.
        ``preload``: also read the duplicate window back from before it (once per
        assignment: positioning it again after a failed poll needs it only if that failed)."""
        assert self._consumer is not None
        committed = await self._consumer.committed(tp)
        first = (await self._consumer.beginning_offsets([tp]))[tp]
        if committed is None:
            # A new group: from the first record the topic holds. Committed, not only
            # sought, so the fetcher (offset reset "none") has a position to start from.
            from aiokafka.structs import OffsetAndMetadata

            await self._consumer.commit({tp: OffsetAndMetadata(first, "")})
            self._consumer.seek(tp, first)
            return
        if preload and committed > first:
            window_ms = int(self.k.duplicate_window_s * 1000)
            for msg_id, ts, seq in await kbus.message_ids_before(self.bus, committed, window_ms):
                self._copy_of(msg_id, ts, seq)
        self._preloaded = True
        if committed < first:
            raise BusError(
                f"sequences {kbus.seq_of(committed)}..{kbus.seq_of(first - 1)} of Kafka topic "
                f"{tp.topic!r} were deleted (retention) before they were staged: they are lost "
                "to the lake; replay them from the source, then `tidelake replay --from-seq "
                f"{kbus.seq_of(first)}` moves the stagers on"
            )
        self._consumer.seek(tp, committed)

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, *, once: bool = False) -> StagerStats:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        consumer = AIOKafkaConsumer(
            **kbus.client_options(self.k),
            group_id=self.k.group_id,
            enable_auto_commit=False,
            auto_offset_reset="none",
            isolation_level="read_committed",
            max_poll_records=self.stage.fetch_batch,
            # A batch written through a storage outage keeps the loop from polling for long.
            max_poll_interval_ms=30 * 60 * 1000,
        )
        producer = AIOKafkaProducer(
            **kbus.client_options(self.k), acks="all", enable_idempotence=True
        )
        self._consumer, self._producer = consumer, producer
        consumer.subscribe([self.k.topic], listener=self._listener())
        await self.until_up(
            "start the dead-letter producer",
            lambda: asyncio.wait_for(producer.start(), UP_ATTEMPT_S),
        )
        await self.until_up(
            "join the stagers' group", lambda: asyncio.wait_for(consumer.start(), UP_ATTEMPT_S)
        )
        log.info("kafka stager started", topic=self.k.topic, group=self.k.group_id)
        batch: Batch[int] = Batch(self.limits)
        try:
            while not self.stopping:
                beat()
                if self._fatal is not None:
                    raise self._fatal
                if self._revoked:
                    self._revoked = False
                    batch = Batch(self.limits)
                timeout = IDLE_FETCH_S if not once else ONCE_FETCH_S
                if batch:
                    timeout = min(timeout, max(0.05, batch.time_left_s()))
                fetched = await self._poll(timeout, max(1, batch.room()))
                if self._revoked or self._tp is None:
                    # What this poll brought belongs to the new owner, or came before our
                    # assignment had positioned us (read again from there).
                    continue
                records = [r for tp_records in fetched.values() for r in tp_records]
                for record in records:
                    await self._admit(batch, record)
                    if batch.closed or batch.is_due():
                        batch = await self._cut(batch)
                if batch.is_due() or (batch and once and not records):
                    batch = await self._cut(batch)
                if once and not records and not batch and await self._drained():
                    break
            if batch and not self._revoked:
                await self._cut(batch)
        finally:
            await consumer.stop()
            await producer.stop()
        self._log_stopped()
        return self.stats

    async def _poll(self, timeout_s: float, max_records: int) -> dict[Any, list[Any]]:
        """One ``getmany``. A new group's first poll may race the assignment, which commits
        the first offset (:meth:`_start_at`): that one is polled again. A position that fell
        out of the topic (retention deleted records not yet staged) stops the stager."""
        from aiokafka.errors import NoOffsetForPartitionError, OffsetOutOfRangeError

        assert self._consumer is not None
        try:
            fetched: dict[Any, list[Any]] = await self._consumer.getmany(
                timeout_ms=int(timeout_s * 1000), max_records=max_records
            )
        except NoOffsetForPartitionError as exc:
            # The assignment's positioning lost a race with the fetcher, or failed while
            # Kafka was unreachable: position again from the committed offset.
            await asyncio.sleep(0.1)
            for tp in self._consumer.assignment():
                try:
                    await self._start_at(tp, preload=not self._preloaded)
                except Exception as again:
                    if not is_retryable(again):
                        raise
                    log.warning("kafka position not read", error=repr(again)[:300])
            log.debug("no kafka position yet", error=repr(exc)[:200])
            return {}
        except OffsetOutOfRangeError as exc:
            raise BusError(
                f"the Kafka topic {self.k.topic!r} no longer holds records this stager had not "
                f"staged yet (retention deleted them): {exc}; they are lost to the lake"
            ) from exc
        return fetched

    async def until_up(self, what: str, call: Callable[[], Awaitable[None]]) -> None:
        """``call()``, retried with back-off while Kafka is unreachable."""
        attempt = 0
        while True:
            try:
                await call()
                return
            except Exception as exc:
                if not is_retryable(exc) or self.stopping:
                    raise
                attempt += 1
                self.stats.bus_failures += 1
                wait_s = backoff_s(attempt, first_wait_s=0.5, max_wait_s=10.0)
                beat()
                log.warning(
                    "kafka unreachable; retrying",
                    what=what,
                    attempt=attempt,
                    wait_s=round(wait_s, 2),
                    error=repr(exc)[:500],
                )
                await asyncio.sleep(wait_s)

    async def _drained(self) -> bool:
        """This stager holds the partition and has read to its end."""
        assert self._consumer is not None
        tp = self._tp
        if tp is None:
            return False
        end: int = (await self._consumer.end_offsets([tp]))[tp]
        position: int = await self._consumer.position(tp)
        return position >= end

    # -- one record ---------------------------------------------------------------------------

    async def _admit(self, batch: Batch[int], record: ConsumerRecord[Any, Any]) -> None:
        """Decode ``record`` into the batch, or dead-letter it (a durable copy first)."""
        seq = kbus.seq_of(record.offset)
        headers = kbus.headers_dict(record.headers)
        subject = headers.get(kbus.SUBJECT_HEADER) or record.topic
        data: bytes = record.value if record.value is not None else b"null"  # a tombstone
        if self._copy_of(headers.get(kbus.MSG_ID_HEADER), int(record.timestamp), seq):
            batch.add_skipped(seq, seq, len(data), "duplicate")
            return
        attempt = 0
        while True:
            try:
                reason = self.intake.take(
                    batch,
                    seq,
                    seq=seq,
                    data=data,
                    key=record.key,
                    subject=subject,
                    arrived_ms=int(record.timestamp),
                )
                break
            except Exception as exc:  # a new table's admission record: storage may fail
                if not is_retryable(exc) or self.stopping:
                    raise
                attempt += 1
                await self._pause(exc, attempt, f"message {seq}")
        if reason is not None:
            await self._dead_letter(batch, record, seq, subject, data, reason)

    def _copy_of(self, msg_id: str | None, ts: int, seq: int) -> bool:
        """Whether the record at ``seq`` is a republished copy: another record carried
        ``msg_id`` at most ``bus.kafka.duplicate_window_s`` before it (JetStream drops such a
        copy by its ``Nats-Msg-Id``; Kafka keeps it). The same record read again (a rebalance,
        a restart) is not a copy of itself."""
        if not msg_id:
            return False
        window_ms = int(self.k.duplicate_window_s * 1000)
        while self._seen_order and self._seen_order[0][0] < ts - window_ms:
            old_ts, old_id = self._seen_order.popleft()
            if self._seen.get(old_id, (None, 0))[0] == old_ts:
                del self._seen[old_id]
        first = self._seen.get(msg_id)
        if first is None or seq < first[1]:  # the earliest record with the id is the original
            self._seen[msg_id] = (ts, seq)
            self._seen_order.append((ts, msg_id))
            return False
        return seq != first[1] and ts - first[0] <= window_ms

    async def _dead_letter(
        self,
        batch: Batch[int],
        record: ConsumerRecord[Any, Any],
        seq: int,
        subject: str,
        data: bytes,
        reason: str,
    ) -> None:
        """Produce a copy to the dead-letter topic, wait for Kafka's acknowledgement (durable
        before the offset is committed), then count the message in the batch."""
        assert self._producer is not None
        headers = dlq.dlq_headers(reason, subject, seq, 1)
        headers.pop("Nats-Msg-Id", None)
        headers[kbus.MSG_ID_HEADER] = f"tidelake-dlq-{seq}"
        for attempt in range(1, DLQ_ATTEMPTS + 1):
            try:
                await self._producer.send_and_wait(
                    self.k.dlq_topic,
                    value=data,
                    key=record.key,
                    headers=kbus.headers_list(headers),
                )
                break
            except Exception as exc:
                if attempt == DLQ_ATTEMPTS or not is_retryable(exc) or self.stopping:
                    raise BusError(f"cannot produce message {seq} to the DLQ: {exc!r}") from exc
                self.stats.bus_failures += 1
                await asyncio.sleep(backoff_s(attempt, first_wait_s=0.5, max_wait_s=10.0))
        batch.add_dead_lettered(seq, seq, len(data), reason)
        self.stats.dead_lettered_by_reason[reason_bucket(reason)] += 1
        log.warning("dead-lettered", seq=seq, subject=subject, reason=reason[:200])

    # -- a batch --------------------------------------------------------------------------

    async def _cut(self, batch: Batch[int]) -> Batch[int]:
        """Files, then manifest (durable), then the group's offset; a new, empty batch."""
        started = time.monotonic()
        manifest = await self._flush(batch)
        self._hook("after_manifest")()
        await self._commit(manifest.seq_last)
        self._staged(batch, manifest, started)
        return Batch(self.limits)

    async def _flush(self, batch: Batch[int]) -> Manifest:
        """Files, then manifest, retried while staging storage fails (nothing committed)."""
        manifest = await self._write(batch, self.storage, self._pause)
        if self.stats.last_error:
            log.info("staging storage writable again")
            self.stats.last_error = ""
        return manifest

    async def _commit(self, seq_last: int) -> None:
        """Commit the offset after ``seq_last`` (the offset of the next record to stage). A
        commit Kafka refuses (the partition moved, the broker restarts) is not retried: the
        next owner reads the batch again and the ingest skips what it holds."""
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        assert self._consumer is not None
        tp = self._tp
        if tp is None:
            log.warning("batch staged after the partition moved: its owner stages it again")
            return
        try:
            await self._consumer.commit({tp: OffsetAndMetadata(seq_last, "")})
        except KafkaError as exc:
            self.stats.bus_failures += 1
            log.warning("kafka offset not committed; the batch will be read again", error=repr(exc))

    async def _pause(self, exc: BaseException, attempt: int, what: str) -> None:
        self.stats.storage_failures += 1
        self.stats.last_error = f"staging storage: {what}: {exc}"[:1000]
        wait_s = backoff_s(attempt, first_wait_s=0.5, max_wait_s=MAX_STALL_WAIT_S)
        log.warning(
            "staging storage failed; holding the batch and retrying",
            what=what,
            attempt=attempt,
            wait_s=round(wait_s, 2),
            error=repr(exc)[:500],
        )
        deadline = time.monotonic() + wait_s
        while not self.stopping and time.monotonic() < deadline:
            beat()
            await asyncio.sleep(min(1.0, deadline - time.monotonic()))


async def run_kafka_stager(cfg: Config, *, once: bool = False) -> StagerStats:
    """``tidelake stage`` on a Kafka bus: stage until signalled (or drained, ``once``). A
    stager started while Kafka is down (or restarted by its supervisor during an outage)
    waits for it instead of exiting."""
    from tidelake.runtime.heartbeat import Heartbeat, scalar_fields

    storage = open_storage(cfg.stage_root, cfg.storage.s3)
    stager = KafkaStager(cfg.bus, cfg.stage, storage)
    # Bounded: an admin request to a broker still recovering can wait for ever; then it is
    # one more failed attempt, tried again.
    await stager.until_up(
        "create the topics",
        lambda: asyncio.wait_for(kbus.ensure_topics(cfg.bus), UP_ATTEMPT_S),
    )
    watch_stager(stager.stats)
    stager.install_signal_handlers()
    fallback = storage.overwrite if isinstance(storage, LocalStorage) else None
    with Heartbeat(storage.put, "stager", lambda: scalar_fields(stager.stats), fallback=fallback):
        return await stager.run(once=once)
