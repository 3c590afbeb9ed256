"""Dead letters of the ingest: change events whose values the lake cannot store exactly.

The stager dead-letters what it cannot decode; the ingest is the first to know a table's
column types, so a value that the table cannot hold exactly (a fraction its DECIMAL would
round, an ENUM index without labels, a row without a known key) is dead-lettered here. The
event is not applied; the rest of its table goes on.

What goes to the dead-letter stream: the original message, fetched from the CDC stream by its
stream sequence, republished to ``<dlq.subject_prefix>.<original subject>`` with the headers of
:mod:`tidelake.bus.dlq` (so ``tidelake dlq replay`` sends it back once the cause is fixed);
when the CDC stream no longer holds it, the staged event itself (JSON) under
``<prefix>.ingest.<database>.<table>``. ``Nats-Msg-Id`` is derived from the stream sequence
and the event's position, so a batch applied again after a crash stores each dead letter
once. The commit that skips the events happens only after JetStream acknowledged them.

On a Kafka bus (``bus.kind: kafka``, :mod:`tidelake.bus.kafka`) the same letters go to the
dead-letter topic, the original read from the CDC topic at offset ``seq - 1``; Kafka keeps no
de-duplication window, so a batch applied again after a crash may store a letter twice (the
same ``Tidelake-Msg-Id`` header on both).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

import nats.errors
import structlog

from tidelake.bus import dlq
from tidelake.bus import kafka as kbus
from tidelake.bus.connection import connect
from tidelake.config import Config
from tidelake.errors import BusError
from tidelake.events import ChangeEvent

log = structlog.get_logger(__name__)

#: Header naming the stage that refused the event (the stager's dead letters have none).
HEADER_STAGE = "Tidelake-Stage"
_SUBJECT_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]")


@dataclass(frozen=True, slots=True)
class Rejected:
    """One event the lake refused, and why (the reason names table, column and value)."""

    event: ChangeEvent
    reason: str


class DeadLetters:
    """Publishes rejected events to the dead-letter stream and waits for the acks."""

    def __init__(self, config: Config) -> None:
        self.bus = config.bus

    @property
    def available(self) -> bool:
        """Whether a bus is configured (an ingest run without one pauses the table instead)."""
        if self.bus.kind == "kafka":
            return bool(self.bus.kafka.bootstrap_servers)
        return bool(self.bus.url)

    def publish(self, rejected: Sequence[Rejected]) -> None:
        """Every rejected event durably in the dead-letter stream, or BusError."""
        if rejected and self.bus.kind == "kafka":
            asyncio.run(self._publish_to_kafka(rejected))
        elif rejected:
            asyncio.run(self._publish(rejected))

    async def _publish_to_kafka(self, rejected: Sequence[Rejected]) -> None:
        originals = await kbus.read_records(self.bus, [item.event.seq for item in rejected])
        letters = []
        for item in rejected:
            event = item.event
            found = originals.get(event.seq)
            subject, key, payload = found if found is not None else (None, None, None)
            if subject is None or payload is None:
                subject, payload = _event_subject(event), event.to_json()
            headers = _headers(item, subject)
            headers[kbus.MSG_ID_HEADER] = headers.pop("Nats-Msg-Id")
            letters.append(kbus.Letter(payload, key, headers))
        await kbus.produce_letters(self.bus, letters)
        for item in rejected:
            log.warning(
                "event dead-lettered by the ingest",
                table=item.event.table_id,
                seq=item.event.seq,
                reason=item.reason[:300],
            )

    async def _publish(self, rejected: Sequence[Rejected]) -> None:
        nc = await connect(self.bus, reconnect=False)
        try:
            js = nc.jetstream()
            for item in rejected:
                subject, payload, headers = await self._letter(js, item)
                try:
                    await js.publish(subject, payload, headers=headers, stream=self.bus.dlq.name)
                except nats.errors.Error as exc:
                    raise BusError(f"cannot dead-letter {item.event.table_id}: {exc!r}") from exc
                log.warning(
                    "event dead-lettered by the ingest",
                    table=item.event.table_id,
                    seq=item.event.seq,
                    reason=item.reason[:300],
                )
        finally:
            await nc.close()

    async def _letter(self, js: object, item: Rejected) -> tuple[str, bytes, dict[str, str]]:
        event = item.event
        original: tuple[str, bytes] | None = None
        try:
            msg = await js.get_msg(self.bus.stream.name, event.seq)  # type: ignore[attr-defined]
            original = (msg.subject, msg.data or b"")
        except (TimeoutError, nats.errors.Error) as exc:
            log.info(
                "original message not in the stream; dead-lettering the event", error=repr(exc)
            )
        if original is not None:
            subject, payload = original
        else:
            subject, payload = _event_subject(event), event.to_json()
        headers = _headers(item, subject)
        return dlq.dlq_subject(self.bus.dlq.subject_prefix, subject), payload, headers


def _event_subject(event: ChangeEvent) -> str:
    """The subject of a letter carrying the staged event itself (its original is gone)."""
    table = ".".join(_SUBJECT_UNSAFE.sub("_", p) or "_" for p in (event.database, event.table))
    return f"ingest.{table}"


def _headers(item: Rejected, subject: str) -> dict[str, str]:
    event = item.event
    headers = dlq.dlq_headers(item.reason, subject, event.seq, 0)
    headers["Nats-Msg-Id"] = ingest_letter_id(event)
    headers[HEADER_STAGE] = "ingest"
    return headers


def ingest_letter_id(event: ChangeEvent) -> str:
    """The ``Nats-Msg-Id`` of the ingest's letter of ``event``: its stream sequence and
    position (a replay of the stream leaves the event out by it: ``view/replay.py``)."""
    return f"tidelake-dlq-ingest-{event.seq}-{event.position.encode()}"
