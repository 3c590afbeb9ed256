"""The order in which Kafka messages of one topic may go on to JetStream, and how far each
partition's offset may be committed.

Two orders, chosen per source (``capture.kafka.order``):

``watermark`` — TiCDC's canal-json with ``enable-tidb-extension=true``, over any number of
partitions. What TiCDC writes, read from its code (pingcap/tiflow; ``docs/kafka.md`` cites
each file):

* a row or DDL carries ``_tidb.commitTs`` (``canal_json_row_event_encoder.go``,
  ``newJSONMessageForDML`` / ``newJSONMessageForDDL``); within a partition one table's rows
  come in commitTs order, tables sharing a partition interleave;
* a DDL goes to partition 0 only (``cdc/sink/ddlsink/mq/mq_ddl_sink.go``,
  ``getDDLDispatchRule``), while the table's rows may sit on any partition;
* a ``TIDB_WATERMARK`` message (``_tidb.watermarkTs``, the changefeed's checkpoint: every row
  at or below it is already in Kafka) goes to every partition (``WriteCheckpointTs`` →
  ``SyncBroadcastMessage``);
* at-least-once: after a TiCDC restart, rows, DDLs and watermarks already sent can come again
  at later offsets.

So a message is held until every partition's watermark has reached its commitTs; then all
held messages at or below the smallest watermark go out in commitTs order (a DDL after the
rows before it, before the rows after it). A row or DDL at or below what was already let
through is a replay and is dropped (counted), as is a second copy of a DDL.

``partition`` — Debezium (Kafka Connect or Debezium Server: a partition per key hash, order
per key only, no watermarks) and single-partition topics: each partition's messages go out
in offset order as they come.

**Offsets.** A partition's offset is committed only up to its oldest message that is not yet
stored by JetStream (held, or in flight), and never past its latest watermark (``watermark``
order), so that a restarted bridge reads that watermark again instead of waiting for the
next one, which an idle changefeed never sends. What is read again is published again with
the same ``Nats-Msg-Id`` (``kafka:<topic>:<partition>:<offset>``): JetStream drops it
inside its duplicate window, and past it the ingest's position rules do (docs/architecture.md
§3 rule 2).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Literal

import orjson

from tidelake.errors import TidelakeError

Order = Literal["watermark", "partition"]
WATERMARK_TYPE = "TIDB_WATERMARK"


class KafkaOrderError(TidelakeError):
    """A message the configured order cannot place (a canal-json row without a commitTs)."""


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """One Kafka record as the bridge forwards it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def msg_id(self) -> str:
        return f"kafka:{self.topic}:{self.partition}:{self.offset}"


@dataclass(frozen=True, slots=True)
class _Classified:
    kind: Literal["row", "ddl", "watermark", "other"]
    ts: int | None = None


def classify(value: bytes | None) -> _Classified:
    """What a canal-json value is, and its TSO (``commitTs``, or ``watermarkTs``)."""
    if not value:
        return _Classified("other")
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return _Classified("other")  # the stager dead-letters it with its reason
    if not isinstance(obj, dict):
        return _Classified("other")
    tidb = obj.get("_tidb")
    tidb = tidb if isinstance(tidb, dict) else {}
    if obj.get("type") == WATERMARK_TYPE:
        ts = tidb.get("watermarkTs")
        return _Classified("watermark", ts if isinstance(ts, int) else None)
    if "data" not in obj and "isDdl" not in obj:
        return _Classified("other")
    ts = tidb.get("commitTs")
    kind: Literal["row", "ddl"] = "ddl" if obj.get("isDdl") is True else "row"
    return _Classified(kind, ts if isinstance(ts, int) and not isinstance(ts, bool) else None)


@dataclass
class _Partition:
    #: Offsets read from this partition and not yet stored by JetStream (held or in flight).
    open: set[int] = field(default_factory=set)
    #: The next offset to read.
    next_offset: int | None = None
    #: The highest watermark seen, and the offset of the message that carried it.
    watermark: int | None = None
    watermark_offset: int | None = None


@dataclass
class TopicMerge:
    """The messages of one topic in the order they may be published (module docstring)."""

    topic: str
    partitions: list[int]
    order: Order = "watermark"
    #: Counters: replays dropped (rows and DDLs at or below what was already let through).
    replays: int = 0
    _parts: dict[int, _Partition] = field(init=False)
    _held: list[tuple[int, int, int, KafkaMessage]] = field(init=False, default_factory=list)
    _released_through: int = field(init=False, default=-1)
    _ddls: set[tuple[int, bytes]] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self._parts = {p: _Partition() for p in self.partitions}

    def add(self, msg: KafkaMessage) -> list[KafkaMessage]:
        """Take one message; return the messages that may be published now, in order."""
        part = self._parts.setdefault(msg.partition, _Partition())
        part.next_offset = msg.offset + 1
        if self.order == "partition":
            part.open.add(msg.offset)
            return [msg]
        what = classify(msg.value)
        if what.kind == "other":  # not canal-json: on at once, for the stager to judge
            part.open.add(msg.offset)
            return [msg]
        if what.ts is None:
            raise KafkaOrderError(
                f"{msg.topic}[{msg.partition}]@{msg.offset}: canal-json without _tidb.commitTs "
                "cannot be ordered across partitions: set enable-tidb-extension=true in the "
                "changefeed's sink-uri, or capture.kafka.order: partition for a topic of one "
                "partition"
            )
        if what.kind == "watermark":
            if part.watermark is None or what.ts >= part.watermark:
                part.watermark, part.watermark_offset = what.ts, msg.offset
            return self._release()
        if what.ts <= self._released_through:
            self.replays += 1  # sent again by TiCDC after a restart: already let through
            return []
        if what.kind == "ddl":
            ident = (what.ts, msg.value or b"")
            if ident in self._ddls:
                self.replays += 1
                return []
            self._ddls.add(ident)
        part.open.add(msg.offset)
        heapq.heappush(self._held, (what.ts, msg.partition, msg.offset, msg))
        return self._release()

    def _release(self) -> list[KafkaMessage]:
        marks = [self._parts[p].watermark for p in self.partitions]
        if not marks or any(m is None for m in marks):
            return []
        low = min(m for m in marks if m is not None)
        out = []
        while self._held and self._held[0][0] <= low:
            out.append(heapq.heappop(self._held)[3])
        self._released_through = max(self._released_through, low)
        return out

    def stored(self, msg: KafkaMessage) -> None:
        """JetStream has stored ``msg``: its offset no longer holds the partition back."""
        part = self._parts.get(msg.partition)
        if part is not None:
            part.open.discard(msg.offset)

    def watermarks(self) -> dict[int, int | None]:
        """Each partition's highest watermark so far."""
        return {p: part.watermark for p, part in self._parts.items()}

    @property
    def held(self) -> int:
        return len(self._held)

    def commit_offsets(self) -> dict[int, int]:
        """Per partition, the offset a restarted bridge must read from (Kafka's committed
        offset: the next message to read)."""
        out = {}
        for p, part in self._parts.items():
            if part.next_offset is None:
                continue
            candidates = [part.next_offset]
            if part.open:
                candidates.append(min(part.open))
            if self.order == "watermark" and part.watermark_offset is not None:
                candidates.append(part.watermark_offset)
            out[p] = min(candidates)
        return out
