"""What ``tidelake serve`` asks of JetStream: stream and consumer state, the message explorer,
the dead-letter queue and replays.

Reads use the stream's message-get API (``$JS.API.STREAM.MSG.GET``: by sequence, or the next
message at or after a sequence on a subject filter), so paging the stream never creates a
consumer and never moves the stager's durable consumer. Where a message stands is read off
that consumer: at or below its ack floor it is *acked* (staged), at or below its delivered
sequence it is *delivered* (awaiting the stager's ack), above it *pending*.

Replays republish copies; nothing here rewinds a consumer:

* **DLQ replay**: the dead-lettered payload goes back to its original subject with the header
  ``Tidelake-Replay: <dlq seq>`` (and ``Nats-Msg-Id: tidelake-replay-dlq-<dlq seq>``, so a
  double replay inside the duplicate window is stored once); once JetStream has stored it,
  the DLQ copy is deleted. The ingest applies it if it is newer than its table's position
  watermark and skips it as stale (counted) otherwise — docs/guarantees.md.
* **Stream replay** (``--from-seq`` / ``--from-time``): every message from there up to the
  stream's last sequence *at the start of the replay* is republished to its subject with
  ``Tidelake-Replay: stream:<seq>`` (``Nats-Msg-Id: tidelake-replay-<seq>``); the same rules
  decide in the ingest, so a replay onto a lake that holds the data changes nothing, and one
  onto a lake that lost a table rebuilds it.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext, api

from tidelake.bus import dlq
from tidelake.bus.connection import connect
from tidelake.bus.coverage import Coverage, stream_coverage
from tidelake.bus.discovery import live_record
from tidelake.config import BusConfig
from tidelake.errors import BusError

log = structlog.get_logger(__name__)

HEADER_REPLAY = "Tidelake-Replay"
#: Seconds per connection attempt of the API's client (three attempts at most).
CONNECT_TIMEOUT_S = 1.0
#: Payload bytes shown of one message (show / DLQ show); the rest is cut.
MAX_PAYLOAD_SHOWN = 64 * 1024
#: Payload bytes previewed per message in a page of the explorer.
PREVIEW_CHARS = 200
#: Unstaged subjects listed in the state (the most messages first); all are counted.
UNSTAGED_SHOWN = 20

ProgressFn = Callable[[int, int], None]


def _ms(t: dt.datetime | None) -> int | None:
    return None if t is None else int(t.timestamp() * 1000)


def subject_prefix(bus: BusConfig) -> str | None:
    """``cdc.`` for the stream subject ``cdc.>``: tables publish to ``<prefix><db>.<table>``."""
    first = bus.stream.subjects[0] if bus.stream.subjects else ""
    return first[:-1] if first.endswith(".>") else None


def table_subject(bus: BusConfig, table: str) -> str:
    prefix = subject_prefix(bus)
    if prefix is None:
        raise BusError(f"stream subjects {bus.stream.subjects} do not end in '.>': no table map")
    return f"{prefix}{table}"


def table_of_subject(bus: BusConfig, subject: str) -> str | None:
    prefix = subject_prefix(bus)
    if prefix is None or not subject.startswith(prefix):
        return None
    rest = subject[len(prefix) :]
    return rest if rest.count(".") == 1 else None


def _text(data: bytes | None, limit: int) -> str:
    return (data or b"")[:limit].decode("utf-8", errors="replace")


def unstaged_state(coverage: Coverage | None) -> dict[str, Any] | None:
    """The state's ``unstaged``: subjects no stager takes (at most :data:`UNSTAGED_SHOWN`, the
    most messages first), how many there are, their messages and the stagers seen; None when
    coverage is unknown (no consumer carries the stager marker: bus/coverage.py)."""
    if coverage is None:
        return None
    ranked = sorted(coverage.unstaged.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "subjects": dict(ranked[:UNSTAGED_SHOWN]),
        "subject_count": len(ranked),
        "messages": coverage.unstaged_messages,
        "stagers": list(coverage.stagers),
    }


@dataclass(frozen=True, slots=True)
class ConsumerPosition:
    """The stager's durable consumer: how far it has delivered and acked."""

    delivered: int = 0
    ack_floor: int = 0

    def state_of(self, seq: int) -> str:
        if seq <= self.ack_floor:
            return "acked"
        if seq <= self.delivered:
            return "delivered"
        return "pending"


class JetStream:
    """One connection to the bus, opened on first use and reopened after a failure.

    With no URL at all and a ``home``, each connection attempt looks for the bus a
    ``tidelake run`` recorded there since (bus/discovery.py): a ``serve`` started before the
    pipeline finds its bus once it is up."""

    def __init__(self, bus: BusConfig, url: str | None = None, *, home: Path | None = None) -> None:
        self.bus = bus
        self.url = url or bus.url
        self.home = home if self.url is None else None
        self._nc: Client | None = None
        self._coverage_refused = False

    @property
    def configured(self) -> bool:
        return bool(self.url)

    async def js(self) -> JetStreamContext:
        if not self.url and self.home is not None:
            record, _why = live_record(self.home)
            self.url = record.url if record is not None else None
        if not self.url:
            raise BusError("no bus.url configured (TIDELAKE_BUS__URL): JetStream state unknown")
        if self._nc is None or self._nc.is_closed:
            # An operator tool answers fast: give up on an unreachable bus in seconds.
            quick = self.bus.model_copy(
                update={"connect_timeout_s": min(self.bus.connect_timeout_s, CONNECT_TIMEOUT_S)}
            )
            self._nc = await connect(quick, self.url)
        return self._nc.jetstream(timeout=5)

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()
            self._nc = None

    # -- state -----------------------------------------------------------------------------

    async def state(self, tables: list[str]) -> dict[str, Any]:
        """Stream, consumer and DLQ state, the subjects no stager takes (``unstaged``:
        :func:`unstaged_state`) and the last message of each table's subject."""
        js = await self.js()
        s = await js.stream_info(self.bus.stream.name)
        out: dict[str, Any] = {
            "stream": {
                "name": self.bus.stream.name,
                "messages": s.state.messages,
                "bytes": s.state.bytes,
                "first_seq": s.state.first_seq,
                "last_seq": s.state.last_seq,
            }
        }
        try:
            c = await js.consumer_info(self.bus.stream.name, self.bus.consumer.durable)
            out["consumer"] = {
                "name": self.bus.consumer.durable,
                "pending": c.num_pending or 0,
                "ack_pending": c.num_ack_pending or 0,
                "redelivered": c.num_redelivered or 0,
                "waiting": c.num_waiting or 0,
                "delivered_seq": c.delivered.stream_seq if c.delivered else 0,
                "ack_floor_seq": c.ack_floor.stream_seq if c.ack_floor else 0,
            }
        except nats.js.errors.NotFoundError:
            out["consumer"] = None
        try:
            d = await js.stream_info(self.bus.dlq.name)
            out["dlq"] = {
                "name": self.bus.dlq.name,
                "messages": d.state.messages,
                "bytes": d.state.bytes,
                "first_seq": d.state.first_seq,
                "last_seq": d.state.last_seq,
            }
        except nats.js.errors.NotFoundError:
            out["dlq"] = {"name": self.bus.dlq.name, "messages": 0, "bytes": 0}
        try:
            coverage = await stream_coverage(js, self.bus.stream.name)
        except nats.js.errors.APIError as exc:
            # JetStream answered with a refusal (a stream gone since, a restricted account):
            # coverage is unknown, the rest of the state still holds. Said once, not per poll.
            if not self._coverage_refused:
                log.warning("stream coverage unknown", stream=self.bus.stream.name, error=str(exc))
            self._coverage_refused = True
            coverage = None
        out["unstaged"] = unstaged_state(coverage)
        last: dict[str, dict[str, Any]] = {}
        if subject_prefix(self.bus) is not None:
            for table in tables:
                try:
                    m = await js.get_msg(
                        self.bus.stream.name, subject=table_subject(self.bus, table)
                    )
                except nats.js.errors.NotFoundError:
                    continue
                last[table] = {"seq": m.seq, "time_ms": _ms(m.time), "data": m.data}
        out["last_by_table"] = last
        return out

    async def position(self) -> ConsumerPosition:
        js = await self.js()
        try:
            c = await js.consumer_info(self.bus.stream.name, self.bus.consumer.durable)
        except nats.js.errors.NotFoundError:
            return ConsumerPosition()
        return ConsumerPosition(
            c.delivered.stream_seq if c.delivered else 0,
            c.ack_floor.stream_seq if c.ack_floor else 0,
        )

    async def message_time_ms(self, seq: int) -> int | None:
        """When JetStream stored message ``seq`` (None once it is gone)."""
        js = await self.js()
        try:
            return _ms((await js.get_msg(self.bus.stream.name, seq)).time)
        except nats.js.errors.NotFoundError:
            return None

    # -- paging ----------------------------------------------------------------------------

    async def _next(
        self, js: JetStreamContext, stream: str, seq: int, subject: str
    ) -> api.RawStreamMsg | None:
        """The first message at or after ``seq`` on ``subject`` (wildcards allowed)."""
        try:
            return await js.get_msg(stream, seq=max(seq, 1), subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return None

    async def seq_at_time(self, stream: str, when_ms: int) -> int:
        """The first sequence stored at or after ``when_ms`` (binary search on store times)."""
        js = await self.js()
        info = await js.stream_info(stream)
        lo, hi = info.state.first_seq, info.state.last_seq + 1
        while lo < hi:
            mid = (lo + hi) // 2
            m = await self._next(js, stream, mid, ">")
            if m is None or m.seq is None:
                hi = mid
                continue
            if (_ms(m.time) or 0) < when_ms:
                lo = m.seq + 1
            else:
                hi = mid
        return lo

    async def page(
        self,
        stream: str,
        *,
        subject: str = ">",
        start_seq: int = 1,
        limit: int = 50,
        end_seq: int | None = None,
    ) -> list[api.RawStreamMsg]:
        """Up to ``limit`` messages at or after ``start_seq`` on ``subject``, in order."""
        js = await self.js()
        out: list[api.RawStreamMsg] = []
        seq = start_seq
        while len(out) < limit:
            m = await self._next(js, stream, seq, subject)
            if m is None or m.seq is None or (end_seq is not None and m.seq > end_seq):
                break
            out.append(m)
            seq = m.seq + 1
        return out

    async def explore(
        self,
        *,
        subject: str | None = None,
        table: str | None = None,
        start_seq: int | None = None,
        start_time_ms: int | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """A page of the CDC stream with each message's place relative to the stager."""
        stream = self.bus.stream.name
        filt = subject or (table_subject(self.bus, table) if table else ">")
        seq = start_seq or 1
        if start_time_ms is not None:
            seq = max(seq, await self.seq_at_time(stream, start_time_ms))
        msgs = await self.page(stream, subject=filt, start_seq=seq, limit=limit + 1)
        pos = await self.position()
        rows = [
            {
                "seq": m.seq,
                "subject": m.subject,
                "table": table_of_subject(self.bus, m.subject or ""),
                "time_ms": _ms(m.time),
                "size": len(m.data or b""),
                "msg_id": (m.headers or {}).get("Nats-Msg-Id"),
                "replay": (m.headers or {}).get(HEADER_REPLAY),
                "state": pos.state_of(m.seq or 0),
                "preview": _text(m.data, PREVIEW_CHARS),
            }
            for m in msgs[:limit]
        ]
        more = len(msgs) > limit
        return {
            "subject": filt,
            "start_seq": seq,
            "consumer": {"delivered_seq": pos.delivered, "ack_floor_seq": pos.ack_floor},
            "messages": rows,
            "next_seq": msgs[limit].seq if more else None,
        }

    async def message(self, seq: int) -> dict[str, Any]:
        js = await self.js()
        try:
            m = await js.get_msg(self.bus.stream.name, seq)
        except nats.js.errors.NotFoundError as exc:
            raise KeyError(seq) from exc
        pos = await self.position()
        return {
            "seq": m.seq,
            "subject": m.subject,
            "table": table_of_subject(self.bus, m.subject or ""),
            "time_ms": _ms(m.time),
            "headers": m.headers or {},
            "state": pos.state_of(seq),
            "size": len(m.data or b""),
            "payload": _text(m.data, MAX_PAYLOAD_SHOWN),
            "payload_base64": base64.b64encode((m.data or b"")[:MAX_PAYLOAD_SHOWN]).decode(),
        }

    # -- dead-letter queue -----------------------------------------------------------------

    @staticmethod
    def _dead_letter(m: api.RawStreamMsg, with_payload: bool) -> dict[str, Any]:
        h = m.headers or {}
        out: dict[str, Any] = {
            "dlq_seq": m.seq,
            "subject": m.subject,
            "time_ms": _ms(m.time),
            "reason": h.get(dlq.HEADER_REASON),
            "original_subject": h.get(dlq.HEADER_ORIGINAL_SUBJECT),
            "original_seq": int(h[dlq.HEADER_STREAM_SEQ]) if dlq.HEADER_STREAM_SEQ in h else None,
            "deliveries": int(h.get(dlq.HEADER_DELIVERY_COUNT, 0) or 0),
            "size": len(m.data or b""),
        }
        if with_payload:
            out["headers"] = h
            out["payload"] = _text(m.data, MAX_PAYLOAD_SHOWN)
        else:
            out["preview"] = _text(m.data, PREVIEW_CHARS)
        return out

    async def dlq_list(self, start_seq: int = 1, limit: int = 50) -> dict[str, Any]:
        try:
            msgs = await self.page(self.bus.dlq.name, start_seq=start_seq, limit=limit + 1)
        except nats.js.errors.NotFoundError:
            msgs = []
        rows = [self._dead_letter(m, with_payload=False) for m in msgs[:limit]]
        return {"messages": rows, "next_seq": msgs[limit].seq if len(msgs) > limit else None}

    async def dlq_show(self, dlq_seq: int) -> dict[str, Any]:
        js = await self.js()
        try:
            m = await js.get_msg(self.bus.dlq.name, dlq_seq)
        except nats.js.errors.NotFoundError as exc:
            raise KeyError(dlq_seq) from exc
        return self._dead_letter(m, with_payload=True)

    async def dlq_replay(self, dlq_seq: int) -> dict[str, Any]:
        """Republish a dead letter to its original subject, then delete it from the DLQ."""
        js = await self.js()
        try:
            m = await js.get_msg(self.bus.dlq.name, dlq_seq)
        except nats.js.errors.NotFoundError as exc:
            raise KeyError(dlq_seq) from exc
        h = m.headers or {}
        subject = h.get(dlq.HEADER_ORIGINAL_SUBJECT)
        if not subject:
            raise BusError(f"dead letter {dlq_seq} has no {dlq.HEADER_ORIGINAL_SUBJECT} header")
        headers = {
            HEADER_REPLAY: str(dlq_seq),
            "Nats-Msg-Id": f"tidelake-replay-dlq-{dlq_seq}",
        }
        ack = await js.publish(subject, m.data or b"", headers=headers, stream=self.bus.stream.name)
        await js.delete_msg(self.bus.dlq.name, dlq_seq)
        log.info("dead letter replayed", dlq_seq=dlq_seq, subject=subject, seq=ack.seq)
        return {
            "dlq_seq": dlq_seq,
            "subject": subject,
            "seq": ack.seq,
            "duplicate": bool(ack.duplicate),
        }

    async def dlq_discard(self, dlq_seq: int) -> dict[str, Any]:
        js = await self.js()
        try:
            await js.delete_msg(self.bus.dlq.name, dlq_seq)
        except nats.js.errors.NotFoundError as exc:
            raise KeyError(dlq_seq) from exc
        except nats.js.errors.APIError as exc:
            if exc.code == 404 or "no message found" in str(exc).lower():
                raise KeyError(dlq_seq) from exc
            raise
        log.info("dead letter discarded", dlq_seq=dlq_seq)
        return {"dlq_seq": dlq_seq, "discarded": True}

    async def dlq_seqs(self) -> list[int]:
        """Every sequence in the DLQ now (for replay / discard of all)."""
        out: list[int] = []
        seq = 1
        while True:
            page = await self.page(self.bus.dlq.name, start_seq=seq, limit=500)
            out.extend(m.seq for m in page if m.seq is not None)
            if len(page) < 500:
                return out
            seq = out[-1] + 1

    # -- stream replay ---------------------------------------------------------------------

    async def replay(
        self,
        *,
        from_seq: int | None = None,
        from_time_ms: int | None = None,
        to_seq: int | None = None,
        subject: str | None = None,
        dry_run: bool = False,
        progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Republish the stream from a sequence or a time (see the module docstring)."""
        if (from_seq is None) == (from_time_ms is None):
            raise ValueError("give exactly one of from_seq and from_time")
        js = await self.js()
        stream = self.bus.stream.name
        info = await js.stream_info(stream)
        start = from_seq if from_seq is not None else 0
        if from_time_ms is not None:
            start = await self.seq_at_time(stream, from_time_ms)
        start = max(start, info.state.first_seq)
        end = min(to_seq or info.state.last_seq, info.state.last_seq)
        filt = subject or ">"
        total = max(0, end - start + 1)
        replayed = duplicates = 0
        seq = start
        first: int | None = None
        last: int | None = None
        while seq <= end:
            page = await self.page(stream, subject=filt, start_seq=seq, limit=200, end_seq=end)
            if not page:
                break
            for m in page:
                if m.seq is None or m.subject is None:
                    continue
                if first is None:
                    first = m.seq
                last = m.seq
                if not dry_run:
                    headers = {
                        k: v for k, v in (m.headers or {}).items() if k not in ("Nats-Msg-Id",)
                    }
                    headers[HEADER_REPLAY] = f"stream:{m.seq}"
                    headers["Nats-Msg-Id"] = f"tidelake-replay-{m.seq}"
                    ack = await js.publish(m.subject, m.data or b"", headers=headers, stream=stream)
                    duplicates += bool(ack.duplicate)
                replayed += 1
                if progress is not None:
                    progress(m.seq - start + 1, total)
            seq = (page[-1].seq or seq) + 1
        log.info("stream replayed", first=first, last=last, messages=replayed, dry_run=dry_run)
        return {
            "from_seq": start,
            "to_seq": end,
            "subject": filt,
            "first_seq": first,
            "last_seq": last,
            "messages": replayed,
            "duplicates": duplicates,
            "dry_run": dry_run,
        }


def is_bus_error(exc: BaseException) -> bool:
    """Errors that mean "the bus is unreachable or refused", reported, never raised."""
    return isinstance(exc, BusError | nats.errors.Error | OSError | TimeoutError)
