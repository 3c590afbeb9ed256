"""The stager: durable pull consumer on the CDC stream -> staged batches.

docs/architecture.md §1 and §4 describe its contracts.

The loop, and why each step comes where it does:

1. fetch up to ``stage.fetch_batch`` messages from the durable consumer;
2. per message: decode it. Events are added to the batch; a message that carries no row is
   counted as skipped; a message that cannot be decoded is republished to the DLQ stream
   (``<dlq.subject_prefix>.<original subject>``, headers in :mod:`tidelake.bus.dlq`) and
   counted only once the DLQ PubAck is in: the copy must be durable before the original
   can be acked with its batch;
3. when the batch is cut (count, bytes, age, or a DDL barrier): write its files, THEN its
   manifest (durable: from here on the batch exists), THEN ack every message of the batch
   and flush the connection so the acks reach the server.

Steps 1-2 of the next batch overlap step 3 of the previous one: the pull fetcher keeps the
next pull request open while a fetched lot is decoded (``bus/pull.py``), and a cut batch is
written and acked by a task of its own while the loop goes on. At most one batch is being
written at a time, and a cut waits for it, so manifests appear in stream order and a
batch's acks still follow its own manifest; :meth:`Stager.stop` and the ``once`` drain wait
for it too.

A crash before step 3 completes only means redelivery: the batch is staged again and shows
up as a second manifest whose sequence range overlaps the first (the ingest skips what its
checkpoint holds; docs/architecture.md §3).

Local faults stop consumption; they never make a message poison (issue 23). When writing a
batch fails with a transient error (the staging disk full: ENOSPC; the object store down or
throttling: ``tidelake.errors.classify``), the batch is kept: its messages stay unacked with
their AckWait extended (``in_progress``), the loop stops fetching, and the write is retried
with back-off (:func:`tidelake.retry.backoff_s`, up to :data:`MAX_STALL_WAIT_S`) until it
succeeds. The cause is logged and shown as ``last_error`` in the stager's heartbeat.

Poison messages. The consumer's server-side MaxDeliver is unlimited (see
:mod:`tidelake.bus.provision`); this loop enforces ``bus.consumer.max_deliver``, but the
delivery count alone does not convict a message: restarts of a stager that could not write
(a full disk, killed again and again by an operator or a supervisor) raise it too, for valid
messages. So a message delivered more than ``max_deliver`` times is a *suspect*: before it is
decoded, a record ``_tidelake/suspects/<seq>`` counting its tries is written durably to
staging storage (:func:`suspect_path`), and removed once the batch holding it is durable. A
suspect whose record already shows :data:`SUSPECT_TRIES` tries — stagers with working
storage died that often while holding it — is dead-lettered with reason ``max_deliver``
*without being decoded*, which breaks a crash loop caused by the message itself. While the
record cannot be written (the same local fault), the suspect is held, not dead-lettered. The
record is the fault history made durable where the fault is: a count that only grows while
the storage works. Decoding failures, including a decoder bug raising something other than
:class:`DecodeError`, and implausible positions (:mod:`tidelake.formats.positions`) are
dead-lettered on the first delivery with their own reason.

Traces (docs/tracing.md; off by default): each staged batch is one CONSUMER span covering
files, manifest and acks, linked to the W3C contexts its messages carry (at most
``tracing.max_links``); its own context goes into the manifest for the ingest.

The counters, the stop request and the test-only crash hook ``TEST_TIDELAKE_CRASH_AT``
(``after_files``, ``after_manifest``) are shared with the Kafka stager: ``stage/control.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js import api

from tidelake.bus import dlq
from tidelake.bus.pull import PullFetcher
from tidelake.config import BusConfig, Config, StageConfig
from tidelake.errors import BusError, is_retryable
from tidelake.retry import backoff_s
from tidelake.runtime import tracing
from tidelake.runtime.live_metrics import watch_stager
from tidelake.runtime.metrics_server import beat
from tidelake.runtime.storage import LocalStorage, Storage, open_storage
from tidelake.stage.batch import Batch, BatchLimits, reason_bucket
from tidelake.stage.control import StagerControl, StagerStats
from tidelake.stage.intake import DecodeFn, Intake
from tidelake.stage.manifest import Manifest

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: The message key (Kafka key of a Debezium producer), handed to the decoder.
KEY_HEADER = "Tidelake-Key"

#: Seconds a fetch waits when the batch is empty (bounds how fast a stop request is seen).
IDLE_FETCH_S = 1.0
#: ... in ``--once`` mode, where an empty fetch means "maybe drained".
ONCE_FETCH_S = 0.3
#: Shortest fetch: nats-py refuses a zero timeout.
MIN_FETCH_S = 0.1

#: Longest pause between two attempts to write a batch while staging storage fails.
MAX_STALL_WAIT_S = 30.0
#: Stagers that may die holding a suspect (a message past max_deliver) with their storage
#: writable before it is dead-lettered as ``max_deliver`` (module docstring). Two, so that
#: one unrelated kill of the process while it holds the message does not convict it.
SUSPECT_TRIES = 2

#: Longest pause between two attempts to reach the bus (NATS down, paused or partitioned).
MAX_BUS_WAIT_S = 10.0
#: Longest pause in fetching after giving held messages back to another stager (see
#: ``Stager._give_back``): it bounds how long a standby stager takes to notice that the
#: stager it yielded to has stopped.
MAX_YIELD_PAUSE_S = 10.0


class Stager(StagerControl):
    """Pull, decode, batch, flush, ack; until :meth:`stop` (or drained, with ``once``)."""

    def __init__(
        self,
        nc: Client,
        bus: BusConfig,
        stage: StageConfig,
        storage: Storage,
        *,
        decode: DecodeFn | None = None,
    ) -> None:
        super().__init__()
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        self.bus = bus
        self.stage = stage
        self.storage = storage
        self.limits = BatchLimits.from_config(stage)
        self.intake = Intake(stage, storage, decode)
        #: The previous batch, being written and acked while the next one fills; and
        #: redeliveries of its messages that came while the next batch was still empty.
        self._flushing: asyncio.Task[Manifest] | None = None
        self._late_acks: list[Msg] = []
        #: Set while the batch being written is retried after a storage failure: the loop
        #: stops fetching until it is written.
        self._stalled = asyncio.Event()
        #: Stream sequences of suspects (past max_deliver) with a record in staging storage.
        self._suspects: set[int] = set()
        #: Messages ahead of a gap in stream order (see _in_order), by sequence.
        self._held: dict[int, Msg] = {}
        #: The consumer sequence of the last delivery taken in order whose predecessors
        #: this process accounted for (see _chained); None: unknown.
        self._chain: int | None = None
        #: Yielding the stream to another stager (see _give_back): asked for by a gap check;
        #: fetching paused until this monotonic time (0: not paused); give-backs in a row.
        self._yield_wanted = False
        self._yield_until = 0.0
        self._yield_streak = 0
        #: Failed bus requests in a row (their back-off), while the bus is unreachable.
        self._bus_attempt = 0
        #: This process's tracing (runtime/tracing.py); None when off.
        self._tracing = tracing.active()

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, *, once: bool = False) -> StagerStats:
        """Stage until stopped; with ``once``, until the consumer has nothing left for us."""
        # What exists now (modules, config, the connection) lives as long as the process:
        # frozen, the collector's full passes stop walking it again each time a batch's
        # messages are let go (4-10% of its CPU in a 20,000-message run before).
        gc.freeze()
        puller = await PullFetcher(
            self.nc,
            self.bus.stream.name,
            self.bus.consumer.durable,
            prefetch=self.stage.fetch_batch,
        ).start()
        await self._init_floor()
        batch: Batch[Msg] = Batch(self.limits)
        try:
            while not self.stopping:
                beat()  # /healthz: the loop turns at least every IDLE_FETCH_S
                if self._stalled.is_set():
                    await self._wait_out_stall(batch)  # no fetching while storage fails
                    continue
                if self._yield_wanted:
                    batch = await self._feed(batch, await self._give_back(puller, batch))
                    continue
                if self._yield_until:
                    batch = await self._sit_out(puller, batch, once=once)
                    continue
                # Held-back messages count against the room; but while a gap is open keep
                # pulling, or its redelivery could never arrive (max_ack_pending bounds it).
                want = min(self.stage.fetch_batch, batch.room() - len(self._held))
                if self._held:
                    want = max(want, self.stage.fetch_batch)
                if batch:
                    timeout = min(IDLE_FETCH_S, max(MIN_FETCH_S, batch.time_left_s()))
                else:
                    timeout = ONCE_FETCH_S if once else IDLE_FETCH_S
                msgs = await self._in_order(await puller.fetch(want, timeout), batch)
                batch = await self._feed(batch, msgs)
                if batch.is_due() or (batch and (not msgs or self.stopping) and once):
                    batch = await self._cut(batch)
                if once and not msgs and not batch and not self._held:
                    await self._settle()  # the batch being written holds unacked messages
                    if await self._drained():
                        break
            await puller.stop()
            # Messages a last reply brought are ours until AckWait: stage them now too.
            for msg in await self._in_order(puller.take_buffered(), batch):
                if batch.closed or batch.is_due():
                    batch = await self._cut(batch)
                await self._admit(batch, msg)
            if batch:
                await self._cut(batch)
            await self._settle()
        finally:
            task, self._flushing = self._flushing, None
            if task is not None:  # left only when the loop failed: let it ack, keep our error
                self._stop.set()  # a write retried after a storage failure gives up
                await asyncio.wait([task])
                if not task.cancelled() and task.exception() is not None:
                    log.error("batch not staged", error=repr(task.exception()))
            await puller.stop()
        self._log_stopped()
        return self.stats

    # -- overlap ----------------------------------------------------------------------------
    #
    # A cut batch is written and acked by a task of its own while the loop fetches and
    # decodes the next one. One such task at a time: the next cut first waits for it, so
    # manifests are written in stream order, and each task acks only after its manifest.

    async def _feed(self, batch: Batch[Msg], msgs: list[Msg]) -> Batch[Msg]:
        """Admit ``msgs`` (in stream order) to the open batch, cutting it whenever it is full,
        due or closed by a DDL; the batch open afterwards."""
        for msg in msgs:
            await self._admit(batch, msg)
            if batch.closed or batch.is_due():
                batch = await self._cut(batch)
        return batch

    async def _cut(self, batch: Batch[Msg]) -> Batch[Msg]:
        """Start writing ``batch`` (after the previous one is written and acked); return a
        new, empty batch."""
        await self._wait_out_stall(batch)  # = _settle, keeping ``batch`` alive meanwhile
        self._flushing = asyncio.create_task(self._finish(batch))
        return Batch(self.limits)

    async def _settle(self) -> None:
        """Wait until the batch being written, if any, is written and acked; raise its
        error."""
        task, self._flushing = self._flushing, None
        if task is not None:
            await task

    # -- stream order -----------------------------------------------------------------------
    #
    # The ingest skips every event at or below a table's checkpoint sequence (docs/architecture.md
    # §3), so a manifest must never hold sequence S while some S' < S still waits to be staged:
    # that S' would be skipped as a duplicate when it finally came. JetStream can deliver
    # out of stream order — a restarted stager gets new messages at once but those its dead
    # predecessor held only after AckWait; a reply lost on a reconnect is redelivered later —
    # so messages are fed to batches strictly in stream order: anything ahead of a gap is
    # held back (its AckWait kept alive) until the gap is filled by a redelivery, or proven
    # empty (no such message in the stream: expired, deleted, or outside our filter).

    async def _init_floor(self) -> None:
        info = await self._on_bus("read the consumer's state", self._consumer_info)
        #: Highest sequence such that every message at or below it is in a durable
        #: manifest (or not ours); and the next sequence a batch may take.
        self._flushed_floor = _ack_floor(info)
        self._next_seq = self._flushed_floor + 1
        self._held = {}
        self._chain = None
        self._gap_checked_at = 0.0
        self._held_touched_at = time.monotonic()

    async def _in_order(self, msgs: list[Msg], batch: Batch[Msg]) -> list[Msg]:
        """The messages that may join batches now, in stream order."""
        ready = await self._sort(msgs, batch)
        if self._held:
            await self._mind_gap()
            ready.extend(self._take_ready())
        elif msgs:
            self._yield_streak = 0  # we take the stream in order: no other stager in our way
        return ready

    async def _sort(self, msgs: list[Msg], batch: Batch[Msg]) -> list[Msg]:
        """Place each of ``msgs``: next in order (returned, with held messages it lets
        through), ahead of a gap (held), or already ours (acked with the batch holding it)."""
        ready = []
        for msg in msgs:
            seq = delivery_info(msg)[0]
            if self._chain is not None and consumer_seq(msg) <= self._chain:
                self._chain = None  # the consumer's state went back (a server restart)
            if not self._held and (
                seq == self._next_seq or (seq > self._next_seq and self._chained(msg))
            ):
                # The common case: next in order — or the next of ours (a filtered
                # consumer's messages leave out the sequences of other subjects).
                ready.append(self._took(msg, seq))
            elif seq >= self._next_seq:
                self._held[seq] = msg  # a redelivery replaces the older copy
            elif seq <= self._flushed_floor:
                await _ack_quietly(msg)  # already in a durable manifest: its first ack was lost
            elif batch:
                # In the open batch, or in the one being written: acked with the open
                # one, whose manifest comes after that one's.
                batch.extra_acks.append(msg)
            else:
                # The open batch is empty, so it is in the one being written: acked with it.
                self._late_acks.append(msg)
        ready.extend(self._take_ready())
        return ready

    def _take_ready(self) -> list[Msg]:
        ready: list[Msg] = []
        if not self._held:
            return ready
        low = self._next_seq if self._next_seq in self._held else min(self._held)
        if low != self._next_seq and not self._chained(self._held[low]):
            return ready
        for seq in sorted(self._held):
            if seq != self._next_seq and not self._chained(self._held[seq]):
                break
            ready.append(self._took(self._held.pop(seq), seq))
        return ready

    # A filtered consumer (``bus.consumer.filter_subjects``: one worker's share of the
    # stream) is delivered only its own subjects, so its stream sequences skip those of the
    # others: every message would look like one after a gap, and a gap check takes a second.
    # The consumer sequence proves such a gap empty without asking the server. JetStream
    # delivers a consumer's messages for the first time in stream order, and every delivery
    # (a redelivery too) takes the next consumer sequence (nats-server server/consumer.go:
    # getNextMsg serves redeliveries first, then the next stored message at or after the
    # consumer's stream sequence matching its filters; deliverMsg takes dseq and increments
    # it for every message it sends; the deliver-last-per-subject skip list, which breaks
    # stream order, is not a policy tidelake uses). So when this process took the
    # delivery with consumer sequence c in order, a first delivery with consumer sequence
    # c + 1 is the next message of ours in the stream: nothing of ours lies between them. A
    # redelivery, a delivery to another stager on the same consumer, or a restart breaks the
    # chain, and the gap check (_check_gap) decides as before.

    def _chained(self, msg: Msg) -> bool:
        """``msg`` is the next message of ours after everything taken so far: a first
        delivery whose consumer sequence follows the last one taken in order."""
        return (
            self._chain is not None
            and delivery_info(msg)[1] == 1
            and consumer_seq(msg) == self._chain + 1
        )

    def _took(self, msg: Msg, seq: int) -> Msg:
        """``msg`` (sequence ``seq``) joins the batches in order: the chain follows it."""
        cseq = consumer_seq(msg)
        if delivery_info(msg)[1] == 1 or (self._chain is not None and cseq == self._chain + 1):
            self._chain = cseq
        self._next_seq = seq + 1
        return msg

    async def _mind_gap(self) -> None:
        """A gap before the held messages: skip it if the stream has nothing there for us,
        else wait for the redelivery while keeping the held messages' AckWait alive."""
        now = time.monotonic()
        ack_wait = self.bus.consumer.ack_wait_s
        if now - self._held_touched_at > ack_wait / 3:
            for msg in self._held.values():
                await msg.in_progress()
            self._held_touched_at = now
        if now - self._gap_checked_at < min(1.0, ack_wait / 4):
            return
        self._gap_checked_at = now
        try:
            await self._check_gap()
        except Exception as exc:
            # The bus is unreachable (nats-server down, paused, partitioned): the gap stays
            # open and is checked again after a back-off; nothing is acked meanwhile.
            if not is_retryable(exc) or self.stopping:
                raise
            wait_s = self._bus_failed(exc, "check a gap in stream order")
            self._gap_checked_at = time.monotonic() + wait_s - min(1.0, ack_wait / 4)
            return
        self._bus_ok()

    async def _check_gap(self) -> None:
        """One look at the gap before the held messages (see :meth:`_mind_gap`)."""
        first_there = await self._first_ours_from(self._next_seq)
        if first_there > self._next_seq:
            log.info(
                "no message to stage in a gap", seq_from=self._next_seq, seq_to=first_there - 1
            )
            self._next_seq = first_there
            return
        info = await self._consumer_info()
        acked = _ack_floor(info)
        if acked >= self._next_seq:
            # Another stager (one that stalled past AckWait, or a second live one) staged
            # and acked them.
            self._chain = None  # deliveries went to that stager too
            for seq in [s for s in self._held if s <= acked]:
                await _ack_quietly(self._held.pop(seq))
            self._flushed_floor = max(self._flushed_floor, acked)
            self._next_seq = acked + 1
            run_end = self._next_seq
            while run_end in self._held:
                run_end += 1
            if self._held and max(self._held) > run_end:
                # Past the run we can take now, still a gap: that live stager holds
                # messages before ours while it waits for ours. Taking turns stages one
                # run per gap check; hand the rest over.
                self._yield_wanted = True
            return
        if not info.num_pending and int(info.num_ack_pending or 0) <= len(self._held):
            # Every message awaiting an ack is one we hold, and none is undelivered: the gap
            # is pending nowhere, so it was acked — staged in a durable manifest — while the
            # consumer's ack floor lags (it does after a nats-server kill -9). No redelivery
            # will ever fill it: waiting would stall the pipeline for good.
            first_held = min(self._held)
            log.warning(
                "gap already acked; the consumer's ack floor lags",
                seq_from=self._next_seq,
                seq_to=first_held - 1,
                ack_floor=acked,
            )
            self._flushed_floor = max(self._flushed_floor, first_held - 1)
            self._next_seq = first_held
            return
        log.info(
            "holding messages until a gap is redelivered",
            missing=self._next_seq,
            held=len(self._held),
        )

    async def _first_ours_from(self, seq: int) -> int:
        """The first stream sequence at or after ``seq`` of a message our consumer takes: the
        lowest over its subject filters (``bus.consumer.filters``), so a gap counts as empty
        only when no message of *any* of them lies in it; the first held message when none
        comes earlier."""
        first = min(self._held)
        filters = self.bus.consumer.filters
        if len(filters) > 1:
            # One look at every subject first: when nothing at all lies before the first
            # held message, no filter's look (one request each) can find anything either.
            try:
                raw = await self.js.get_msg(self.bus.stream.name, seq=seq, subject=">", next=True)
                if int(raw.seq or 0) >= first:
                    return first
            except nats.js.errors.NotFoundError:
                return first
        for subject in filters:
            try:
                raw = await self.js.get_msg(
                    self.bus.stream.name, seq=seq, subject=subject, next=True
                )
            except nats.js.errors.NotFoundError:
                continue
            first = min(first, int(raw.seq or first))
            if first <= seq:
                break  # the gap's first sequence is ours: no other filter can say more
        return first

    async def _drained(self) -> bool:
        """Nothing pending and nothing awaiting an ack (ours are flushed)."""
        info = await self._on_bus("read the consumer's state", self._consumer_info)
        return not info.num_pending and not info.num_ack_pending

    # -- two stagers on one consumer --------------------------------------------------------
    #
    # A second stager on the same durable consumer (failover) gets every other lot, and
    # after a redelivery the lots interleave finely: each stager then holds messages ahead
    # of a gap the other holds, and they take turns, one run of messages per gap check
    # (chaos runs: about one message a second). The stager that sees the other one fill its
    # gap while a further gap remains hands its held messages back (nak: redelivered at
    # once to whoever pulls, without waiting for AckWait) together with what its open pull
    # request brought, then pauses fetching for a back-off with jitter that grows while it
    # keeps yielding: one stager takes the stream, the other stands by, pulling now and
    # then, and takes over once the first stops acking. The stream-order rule is untouched
    # (held messages are only given back, never staged out of order). A message given back
    # was never admitted, so no suspect record counts it (:meth:`_convicted` runs at
    # admission): its higher delivery count can make it a suspect, never convict it.

    async def _give_back(self, puller: PullFetcher, batch: Batch[Msg]) -> list[Msg]:
        """Hand the held messages back to the stream and pause fetching; the messages that
        may join the batch instead, when the pull request's last lot filled the gap."""
        self._yield_wanted = False
        await puller.stop()  # its last messages are ours until AckWait: placed below
        ready = await self._sort(puller.take_buffered(), batch)
        if ready or not self._held:
            await puller.start()  # the gap is filled after all: go on in order
            return ready
        given = list(self._held.values())
        self._held = {}
        self._chain = None
        for msg in given:
            try:
                await msg.nak()
            except Exception as exc:  # not delivered: it comes back after AckWait instead
                log.debug("nak not sent", error=repr(exc)[:200])
        self._yield_streak += 1
        pause_s = backoff_s(self._yield_streak, first_wait_s=0.5, max_wait_s=MAX_YIELD_PAUSE_S)
        self._yield_until = time.monotonic() + pause_s
        self.stats.given_back += len(given)
        log.info(
            "another stager holds a gap before our messages: handed them back",
            messages=len(given),
            missing=self._next_seq,
            pause_s=round(pause_s, 2),
            streak=self._yield_streak,
        )
        return []

    async def _sit_out(self, puller: PullFetcher, batch: Batch[Msg], *, once: bool) -> Batch[Msg]:
        """One step of a fetching pause after :meth:`_give_back`: the open batch is still cut
        when due; once the pause is over, the pull fetcher starts again."""
        left = self._yield_until - time.monotonic()
        if left > 0:
            nap = min(left, IDLE_FETCH_S)
            if batch:
                nap = min(nap, max(MIN_FETCH_S, batch.time_left_s()))
            await asyncio.sleep(nap)
            if batch.is_due() or (batch and once):
                batch = await self._cut(batch)
            return batch
        self._yield_until = 0.0
        await puller.start()
        return batch

    # -- the bus unreachable ----------------------------------------------------------------
    #
    # nats-py reconnects forever (bus/connection.py) and buffers what is published while it
    # does (acks, in-progress, pull requests), so only requests that wait for an answer fail
    # during an outage: they are retried with back-off (tidelake.retry.backoff_s), classified
    # by tidelake.errors; nothing is acked or dead-lettered because of the outage.

    async def _consumer_info(self) -> api.ConsumerInfo:
        info: api.ConsumerInfo = await self.js.consumer_info(
            self.bus.stream.name, self.bus.consumer.durable
        )
        return info

    async def _on_bus(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, retried with back-off while the bus is unreachable (until stopped)."""
        while True:
            try:
                result = await call()
            except Exception as exc:
                if not is_retryable(exc) or self.stopping:
                    raise
                wait_s = self._bus_failed(exc, what)
                beat()  # waiting out an outage is the loop at work, not a hang
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), wait_s)
                continue
            self._bus_ok()
            return result

    def _bus_failed(self, exc: BaseException, what: str) -> float:
        """Count and show a failed bus request; the back-off before the next attempt."""
        self._bus_attempt += 1
        self.stats.bus_failures += 1
        self.stats.last_error = f"bus: {what}: {type(exc).__name__}: {exc}"[:1000]
        wait_s = backoff_s(self._bus_attempt, first_wait_s=0.5, max_wait_s=MAX_BUS_WAIT_S)
        log.warning(
            "bus unreachable; retrying",
            what=what,
            attempt=self._bus_attempt,
            wait_s=round(wait_s, 2),
            error=repr(exc)[:500],
        )
        return wait_s

    def _bus_ok(self) -> None:
        if self._bus_attempt:
            log.info("bus reachable again", failed_attempts=self._bus_attempt)
            self._bus_attempt = 0
            self.stats.last_error = ""

    async def _admit(self, batch: Batch[Msg], msg: Msg) -> None:
        """Decode ``msg`` into the batch, or dead-letter it (a durable DLQ copy first)."""
        reason = await self._convicted(msg, batch)
        attempt = 0
        while reason is None:
            try:
                reason = self._take(batch, msg)
                break
            except Exception as exc:
                # Taking a message may write to staging storage (a new table's admission,
                # stage/admission.py): a disk-full there is waited out like a batch's.
                if not is_retryable(exc) or self.stopping:
                    raise
                attempt += 1
                keep = [msg, *batch.messages, *batch.extra_acks, *self._held.values()]
                await self._pause_for(exc, attempt, f"message {delivery_info(msg)[0]}", keep)
        if attempt:
            self._ok()
        if reason is not None:  # the rare path
            await self._dead_letter(batch, msg, reason)

    async def _convicted(self, msg: Msg, batch: Batch[Msg]) -> str | None:
        """``max_deliver`` when ``msg`` is a suspect that stagers with working storage died
        holding :data:`SUSPECT_TRIES` times; else None, after recording this try durably
        (module docstring). A storage failure on the way is waited out, never a verdict."""
        seq, deliveries = delivery_info(msg)
        if deliveries <= self.bus.consumer.max_deliver or seq in self._suspects:
            return None
        path = suspect_path(seq)
        attempt = 0
        while True:
            try:
                tries = await asyncio.to_thread(self._suspect_tries, path)
                if tries >= SUSPECT_TRIES:
                    return (
                        f"{dlq.REASON_MAX_DELIVER}: delivered {deliveries} times; "
                        f"{tries} stager(s) with working storage stopped while holding it"
                    )
                await asyncio.to_thread(self.storage.put, path, str(tries + 1).encode())
            except Exception as exc:
                if not is_retryable(exc) or self.stopping:
                    raise
                attempt += 1
                keep = [msg, *batch.messages, *batch.extra_acks, *self._held.values()]
                await self._pause_for(exc, attempt, f"suspect record of message {seq}", keep)
                continue
            self._ok()
            self._suspects.add(seq)
            log.warning("message past max_deliver tried again", seq=seq, deliveries=deliveries)
            return None

    def _suspect_tries(self, path: str) -> int:
        if not self.storage.exists(path):
            return 0
        text = self.storage.get(path).decode(errors="replace").strip()
        return int(text) if text.isdecimal() else SUSPECT_TRIES  # unreadable: assume the worst

    async def _pause_for(
        self, exc: BaseException, attempt: int, what: str, keep: list[Msg], *, on_bus: bool = False
    ) -> None:
        """Wait the back-off after failed ``attempt`` to write ``what`` to staging storage
        (or, ``on_bus``, to the bus), keeping the AckWait of the messages in ``keep`` alive
        meanwhile."""
        if on_bus:
            self.stats.bus_failures += 1
        else:
            self.stats.storage_failures += 1
        where = "bus" if on_bus else "staging storage"
        self.stats.last_error = f"{where}: {what}: {exc}"[:1000]
        longest = MAX_BUS_WAIT_S if on_bus else MAX_STALL_WAIT_S
        wait_s = backoff_s(attempt, first_wait_s=0.5, max_wait_s=longest)
        log.warning(
            f"{where} failed; holding the messages and retrying",
            what=what,
            attempt=attempt,
            wait_s=round(wait_s, 2),
            error=repr(exc)[:500],
        )
        deadline = time.monotonic() + wait_s
        tick = max(0.1, min(self.bus.consumer.ack_wait_s / 3, 5.0))
        while True:
            beat()
            await _keep_alive(keep)
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping:
                return
            await asyncio.sleep(min(tick, left))

    def _bus_ok_after(self, attempts: int) -> None:
        log.info("bus reachable again", failed_attempts=attempts)
        self.stats.last_error = ""

    def _ok(self) -> None:
        """Staging storage works again: nothing to show any more."""
        if self.stats.last_error:
            log.info("staging storage writable again")
            self.stats.last_error = ""

    async def _wait_out_stall(self, batch: Batch[Msg]) -> None:
        """While the batch being written is retried, fetch nothing and keep the AckWait of
        the open batch and of the held-back messages alive; return once it is written (or
        failed for good: :meth:`_settle` raises that)."""
        task = self._flushing
        tick = max(0.1, min(self.bus.consumer.ack_wait_s / 3, 5.0))
        while task is not None and not task.done():
            beat()
            await asyncio.wait([task], timeout=tick)
            if not task.done():  # the common wait (a batch being written) sends nothing
                await _keep_alive([*batch.messages, *batch.extra_acks, *self._held.values()])
        self._stalled.clear()
        await self._settle()

    def _take(self, batch: Batch[Msg], msg: Msg) -> str | None:
        """Decode ``msg`` into the batch; or return why it must be dead-lettered."""
        seq, deliveries = delivery_info(msg)
        if deliveries > 1:
            self.stats.redelivered += 1
        key = msg.headers.get(KEY_HEADER) if msg.headers else None
        return self.intake.take(
            batch,
            msg,
            seq=seq,
            data=msg.data,
            key=key.encode() if key else None,
            subject=msg.subject,
            arrived_ms=arrival_ms(msg),
        )

    async def _dead_letter(self, batch: Batch[Msg], msg: Msg, reason: str) -> None:
        """Publish a copy to the DLQ stream, wait for its PubAck (durable before the ack),
        then count the message in the batch (acked with it)."""
        seq, deliveries = delivery_info(msg)
        subject = dlq.dlq_subject(self.bus.dlq.subject_prefix, msg.subject)
        headers = dlq.dlq_headers(reason, msg.subject, seq, deliveries)
        payload = msg.data
        # Our headers make the copy larger than the original: one that no longer fits under
        # the server's max_payload would be refused (and the connection closed) on every
        # retry, a crash loop. Its payload goes to staging storage, durably, first.
        margin = 64  # the Nats-Expected-Stream header the client adds
        if len(payload) + dlq.header_bytes(headers) + margin > self.nc.max_payload:
            path = dlq.stored_payload_path(seq)
            await asyncio.to_thread(self.storage.put, path, payload)
            headers[dlq.HEADER_PAYLOAD_STORED] = self.storage.uri(path)
            payload = b""
        attempt = 0
        while True:
            try:
                await dlq.publish(self.js, subject, payload, headers, stream=self.bus.dlq.name)
                break
            except Exception as exc:
                if is_retryable(exc) and not self.stopping:
                    # The bus is unreachable: wait it out holding the message, its batch
                    # and the held ones (a copy stored twice is one: Nats-Msg-Id).
                    attempt += 1
                    keep = [msg, *batch.messages, *batch.extra_acks, *self._held.values()]
                    what = f"DLQ copy of message {seq}"
                    await self._pause_for(exc, attempt, what, keep, on_bus=True)
                    continue
                # Refused (400/404: the same copy is refused again), or stopping: the batch
                # is not staged, its messages are redelivered later.
                if is_retryable(exc):
                    raise BusError(f"cannot publish message {seq} to the DLQ: {exc!r}") from exc
                if isinstance(exc, nats.js.errors.APIError):
                    raise BusError(f"DLQ stream refused message {seq}: {exc}") from exc
                raise
        if attempt:
            self._bus_ok_after(attempt)
        batch.add_dead_lettered(msg, seq, len(msg.data), reason)
        self.stats.dead_lettered_by_reason[reason_bucket(reason)] += 1
        log.warning("dead-lettered", seq=seq, subject=msg.subject, reason=reason[:200])

    async def _finish(self, batch: Batch[Msg]) -> Manifest:
        """Files, then manifest (durable), then the acks of every message of the batch."""
        if self._tracing is not None:
            return await self._finish_traced(batch, self._tracing)
        return await self._finish_batch(batch, time.monotonic(), {})

    async def _finish_traced(self, batch: Batch[Msg], traces: tracing.Tracing) -> Manifest:
        """:meth:`_finish_batch` inside the batch's stage span (module docstring)."""
        started = time.monotonic()
        msgs = batch.messages
        span = traces.start_stage(
            (m.headers for m in msgs),
            (m.subject for m in msgs),
            stream=self.bus.stream.name,
            messages=len(msgs),
        )
        carrier: dict[str, str] = {}
        traces.inject(span, carrier)
        try:
            manifest = await self._finish_batch(batch, started, carrier)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_attribute("error.type", type(exc).__name__)
            span.end()
            raise
        span.set_attributes(
            {
                "tidelake.manifest": manifest.name,
                "tidelake.batch_id": manifest.batch_id,
                "tidelake.seq_first": manifest.seq_first,
                "tidelake.seq_last": manifest.seq_last,
                "tidelake.staged": manifest.staged,
                "tidelake.dead_lettered": manifest.dead_lettered,
                "tidelake.skipped": manifest.skipped,
                "tidelake.tables": [t.table_id for t in manifest.tables][: tracing.MAX_SUBJECTS],
            }
        )
        span.end()
        return manifest

    async def _finish_batch(
        self, batch: Batch[Msg], started: float, trace: dict[str, str]
    ) -> Manifest:
        """:meth:`_finish`'s work; ``trace`` (the stage span's context) goes into the
        manifest."""
        manifest = await self._flush(batch, trace)
        self._hook("after_manifest")()
        self._flushed_floor = max(self._flushed_floor, manifest.seq_last)
        late, self._late_acks = self._late_acks, []
        for msg in (*batch.messages, *batch.extra_acks, *late):
            await _ack_quietly(msg)
        await self._forget_suspects(manifest)
        try:
            await self.nc.flush(timeout=10)
        except (nats.errors.Error, TimeoutError) as exc:
            # Not fatal (the bus may be down): an ack that never arrived means one more
            # delivery, acked unstaged as at or below our flushed floor, or staged again.
            log.warning("acks not confirmed by a flush", error=repr(exc))
        self._staged(batch, manifest, started)
        return manifest

    async def _flush(self, batch: Batch[Msg], trace: dict[str, str]) -> Manifest:
        """Files, then manifest; a transient storage failure (disk full, object store down)
        is retried with back-off under the same batch id, the messages kept (module
        docstring), until it succeeds or the stager is stopped."""

        async def hold(exc: BaseException, attempt: int, what: str) -> None:
            self._stalled.set()
            late = [*batch.extra_acks, *self._late_acks]
            await self._pause_for(exc, attempt, what, [*batch.messages, *late])

        manifest = await self._write(batch, self.storage, hold, trace)
        self._ok()
        self._stalled.clear()
        return manifest

    async def _forget_suspects(self, manifest: Manifest) -> None:
        """The suspects this durable batch holds are cleared (their records removed)."""
        done = [s for s in self._suspects if manifest.seq_first <= s <= manifest.seq_last]
        for seq in done:
            self._suspects.discard(seq)
            try:
                await asyncio.to_thread(self.storage.delete, suspect_path(seq))
            except Exception as exc:  # a leftover record only costs one try later
                log.warning("suspect record not removed", seq=seq, error=repr(exc)[:300])


def delivery_info(msg: Msg) -> tuple[int, int]:
    """(stream sequence, delivery count) from a JetStream message's ack subject.

    The same tokens :attr:`Msg.metadata` reads, without building its objects: this runs
    once per message on the hot path. ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>...``
    (9 tokens) or, with a domain and account hash, ``$JS.ACK.<domain>.<hash>.<stream>...``.
    """
    reply = msg.reply
    tokens: list[str] = reply.split(".") if reply else []
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[5]), int(tokens[4])
    md = msg.metadata
    return md.sequence.stream, md.num_delivered


def consumer_seq(msg: Msg) -> int:
    """The consumer sequence of a JetStream delivery (every delivery, a redelivery too, takes
    the next one), from its ack subject like :func:`delivery_info`."""
    reply = msg.reply
    tokens: list[str] = reply.split(".") if reply else []
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[6])
    return int(msg.metadata.sequence.consumer)


def arrival_ms(msg: Msg) -> int:
    """When ``msg`` was stored in the stream (ms since the epoch), from its ack subject's
    timestamp token (nanoseconds); the local clock when the subject does not carry one."""
    reply = msg.reply
    tokens: list[str] = reply.split(".") if reply else []
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[7].isdecimal():
        return int(tokens[7]) // 1_000_000
    try:
        return int(msg.metadata.timestamp.timestamp() * 1000)
    except Exception:  # not a JetStream message (a unit test's): judged by now
        return time.time_ns() // 1_000_000


def suspect_path(seq: int) -> str:
    """Where the stager counts the tries of a message past max_deliver (module docstring)."""
    return f"_tidelake/suspects/{seq:020d}"


def _ack_floor(info: api.ConsumerInfo) -> int:
    """The consumer's ack floor: every message at or below this sequence is acked."""
    return int(info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0


async def _ack_quietly(msg: Msg) -> None:
    """Ack ``msg``; an ack the client cannot send (its buffer full while it reconnects) only
    means one more delivery, so it is logged, not raised."""
    try:
        await msg.ack()
    except nats.errors.Error as exc:
        log.warning("ack not sent", error=repr(exc)[:200])


async def _keep_alive(msgs: list[Msg]) -> None:
    """Extend the AckWait of ``msgs`` (``+WPI``); a lost one only means a redelivery."""
    for msg in msgs:
        try:
            await msg.in_progress()
        except Exception as exc:
            log.debug("in-progress not sent", error=repr(exc)[:200])


async def run_stager(cfg: Config, *, once: bool = False, url: str | None = None) -> StagerStats:
    """``tidelake stage``: connect, provision streams and consumer, stage until signalled.
    (On a Kafka bus, ``stage/kafka_consumer.py`` ``run_kafka_stager`` instead.)"""
    from tidelake.bus.connection import connect
    from tidelake.bus.provision import ensure_consumer, ensure_streams
    from tidelake.runtime.heartbeat import Heartbeat, scalar_fields

    target = url or cfg.bus.url
    if not target:
        raise BusError("`tidelake stage` needs bus.url (TIDELAKE_BUS__URL); it starts no server")
    attempt = 0
    while True:
        # A stager started while the bus is down (or restarted by its supervisor during an
        # outage) waits for it instead of exiting: connect and provision are retried with
        # back-off while the failure is the bus being unreachable. A BusError of ours with
        # no cause is a refusal (a consumer configured differently): not waited out.
        try:
            nc = await connect(cfg.bus, target)
        except Exception as exc:
            if not _bus_unreachable(exc):
                raise
            attempt += 1
            await _wait_for_bus(exc, attempt, "connect")
            continue
        try:
            js = nc.jetstream()
            await ensure_streams(js, cfg.bus)
            await ensure_consumer(js, cfg.bus)
            break
        except Exception as exc:
            await nc.close()
            if not _bus_unreachable(exc):
                raise
            attempt += 1
            await _wait_for_bus(exc, attempt, "provision streams and consumer")
    if attempt:
        log.info("bus reachable", failed_attempts=attempt)
    try:
        tracing.setup(cfg.tracing, "stager")  # before the Stager: it asks tracing.active()
        storage = open_storage(cfg.stage_root, cfg.storage.s3)
        stager = Stager(nc, cfg.bus, cfg.stage, storage)
        watch_stager(stager.stats)  # what this process's /metrics shows
        stager.install_signal_handlers()
        fallback = storage.overwrite if isinstance(storage, LocalStorage) else None
        with Heartbeat(
            storage.put, "stager", lambda: scalar_fields(stager.stats), fallback=fallback
        ):
            return await stager.run(once=once)
    finally:
        await nc.close()
        # The last stage spans are exported before the process ends (no-op when off).
        await asyncio.to_thread(tracing.shutdown)


def _bus_unreachable(exc: BaseException) -> bool:
    """A start-up failure worth waiting out: transient, and not one of our own refusals."""
    if isinstance(exc, BusError) and exc.__cause__ is None:
        return False
    return is_retryable(exc)


async def _wait_for_bus(exc: BaseException, attempt: int, what: str) -> None:
    wait_s = backoff_s(attempt, first_wait_s=0.5, max_wait_s=MAX_BUS_WAIT_S)
    beat()  # waiting for the bus at start-up: alive, restarting would not help
    log.warning(
        "bus unreachable at start-up; retrying",
        what=what,
        attempt=attempt,
        wait_s=round(wait_s, 2),
        error=repr(exc)[:500],
    )
    await asyncio.sleep(wait_s)
