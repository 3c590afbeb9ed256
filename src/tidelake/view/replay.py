"""A table's changes read again from the stream, for a lifecycle view recomputed by replay
(docs/views.md §7, "Rebuild by replay").

A lifecycle view's past is not in the lake (a lake table holds each row as it is now), but it
is in the stream: every change the lake applied came through it. A replay reads the stream's
messages from its first one up to the stream sequence the base table has committed, in stream
order, through the stager's own reading of a message (``Intake.read``: the decoder, the
position check, the personal-data mask), and keeps the row events of one table. What the lake
did not apply is left out as it was left out then:

* a message the stager dead-lettered (``Intake.read`` refuses it the same way again);
* an event the ingest dead-lettered: the dead-letter stream names each by its stream sequence
  and position (``lake/dead_letters.py`` ``ingest_letter_id``).

A replay needs the whole history: a stream whose first messages were removed (retention:
``bus.stream.max_age`` / ``max_bytes``) is refused with the sequence it starts at, as is a
dead-letter stream with letters removed (a purge: the replay could not know what the lake left
out). JetStream only: on a Kafka bus the replay is refused.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog
from nats.js import api

from tidelake.bus import dlq
from tidelake.bus.connection import connect
from tidelake.config import Config
from tidelake.events import ChangeEvent, Op
from tidelake.lake.dead_letters import HEADER_STAGE, ingest_letter_id
from tidelake.stage.consumer import KEY_HEADER, arrival_ms
from tidelake.stage.intake import Intake

log = structlog.get_logger("tidelake.view")

#: Seconds without a message before the replay decides the stream has no more for it.
_IDLE_S = 10.0


class ReplayError(Exception):
    """The stream cannot give the table's whole history (the reason says why)."""


@dataclass
class Replayed:
    """The row events of one table with stream sequence up to ``through``, in stream order."""

    table: str
    through: int
    events: list[ChangeEvent] = field(default_factory=list)
    #: Messages read, refused as the stager refused them, events the ingest dead-lettered.
    messages: int = 0
    refused: int = 0
    dead_lettered: int = 0


def replay_table(config: Config, table: str, through: int, bus_url: str | None = None) -> Replayed:
    """:func:`replay` from synchronous code."""
    return asyncio.run(replay(config, table, through, bus_url))


async def replay(config: Config, table: str, through: int, bus_url: str | None = None) -> Replayed:
    """``table``'s row events (``db.table``) of stream sequences 1..``through``."""
    if config.bus.kind == "kafka":
        raise ReplayError("a replay reads a JetStream stream; a Kafka bus is not replayed")
    out = Replayed(table, through)
    if through <= 0:
        return out
    nc = await connect(config.bus, bus_url, reconnect=False)
    try:
        js = nc.jetstream()
        stream = config.bus.stream.name
        info = await js.stream_info(stream)
        first, last = int(info.state.first_seq), int(info.state.last_seq)
        if first > 1:
            raise ReplayError(
                f"stream {stream} starts at sequence {first}: messages 1..{first - 1} were "
                "removed (bus.stream retention), so the table's history is not whole"
            )
        if last < through:
            raise ReplayError(
                f"stream {stream} ends at sequence {last}, before the {through} the lake has "
                "committed: it is not the stream the lake was written from"
            )
        skip = await _ingest_dead_letters(js, config, through)
        intake = Intake(config.stage, None)
        # What the stager's consumer takes: its one filter, or its set of them (a worker's).
        filters = config.bus.consumer.filters
        sub = await js.subscribe(
            filters[0] if len(filters) == 1 else ">",
            stream=stream,
            ordered_consumer=True,
            config=api.ConsumerConfig(filter_subjects=filters) if len(filters) > 1 else None,
        )
        try:
            seq = 0
            while seq < through:
                msg = await sub.next_msg(timeout=_IDLE_S)
                seq = int(msg.metadata.sequence.stream)
                if seq > through:
                    break
                out.messages += 1
                _take(out, intake, msg, seq, skip)
        finally:
            await sub.unsubscribe()
    except TimeoutError as exc:
        raise ReplayError(
            f"the stream gave no message for {_IDLE_S:.0f} s before sequence {through}"
        ) from exc
    finally:
        await nc.close()
    log.info(
        "stream replayed",
        table=table,
        through=through,
        messages=out.messages,
        events=len(out.events),
        refused=out.refused,
        dead_lettered=out.dead_lettered,
    )
    return out


def _take(out: Replayed, intake: Intake, msg: Any, seq: int, skip: set[str]) -> None:
    key = msg.headers.get(KEY_HEADER) if msg.headers else None
    decoded = intake.read(
        seq=seq,
        data=msg.data or b"",
        key=key.encode() if key else None,
        subject=msg.subject,
        arrived_ms=arrival_ms(msg),
    )
    if isinstance(decoded, str):
        out.refused += 1
        return
    for event in decoded.events:
        if event.table_id != out.table or event.op is Op.DDL:
            continue
        letter = ingest_letter_id(event)
        if letter in skip:
            skip.discard(letter)
            out.dead_lettered += 1
            continue
        out.events.append(event)


async def _ingest_dead_letters(js: Any, config: Config, through: int) -> set[str]:
    """The ids (``ingest_letter_id``) of the events the ingest dead-lettered, up to stream
    sequence ``through`` (of every table: an id names its event's sequence and position)."""
    name = config.bus.dlq.name
    try:
        info = await js.stream_info(name)
    except Exception:  # no dead-letter stream: nothing was dead-lettered
        return set()
    first, last = int(info.state.first_seq), int(info.state.last_seq)
    if int(info.state.messages) == 0 and last == 0:
        return set()
    if first > 1 or int(info.state.messages) != last - first + 1:
        raise ReplayError(
            f"dead-letter stream {name} had letters removed (a purge, its retention): the "
            "replay cannot tell which events the lake left out"
        )
    found: set[str] = set()
    sub = await js.subscribe(">", stream=name, ordered_consumer=True)
    try:
        seq = 0
        while seq < last:
            msg = await sub.next_msg(timeout=_IDLE_S)
            seq = int(msg.metadata.sequence.stream)
            headers = msg.headers or {}
            if headers.get(HEADER_STAGE) != "ingest":
                continue
            if int(headers.get(dlq.HEADER_STREAM_SEQ) or 0) <= through:
                found.add(headers.get("Nats-Msg-Id", ""))
    finally:
        await sub.unsubscribe()
    return found
