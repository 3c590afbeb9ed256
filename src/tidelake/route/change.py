"""What a route hands its sink: one row change, already filtered and transformed, and the
contract every sink keeps (docs/routes.md).

A sink applies :class:`RowChange` batches **idempotently by key, with the source position as
the version**: a change whose position is not above the one the sink holds for its key (a
stored row, or the record of a delete) changes nothing. So a redelivered batch, a replay from
an older sequence and changes of one key arriving out of order can never move a row backwards
or bring a deleted row back. :meth:`Sink.apply` returns only once the batch is durable in the
destination; the route acknowledges the messages after that, never before.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol

from tidelake.errors import TidelakeError, Transient
from tidelake.lake.ddl import Operation

#: ``upsert`` writes ``row`` (an INSERT or an UPDATE of the source), ``delete`` removes the key,
#: ``schema`` is a DDL statement of the source (``operations``).
ChangeKind = Literal["upsert", "delete", "schema"]


def key_text(key: Mapping[str, Any]) -> str:
    """A key as one stable text: values in the sorted order of the key's columns,
    ``\\x1f``-separated (``1`` and ``"1"`` are one key, as in the lake's delete log). Sinks
    and webhook receivers name a row by it."""
    return "\x1f".join(str(key[c]) for c in sorted(key))


@dataclass(frozen=True, slots=True)
class RowChange:
    """One source row change as a route's sink receives it."""

    #: ``database.table`` of the source (``names.table_id``).
    table: str
    kind: ChangeKind
    #: Primary-key column → value; never empty, except for a ``schema`` change.
    key: dict[str, Any]
    #: The whole row after the route's transforms (key columns included); None for a delete.
    row: dict[str, Any] | None
    #: ``events.Position.encode()``: fixed-width text whose string order is the change order.
    position: str
    #: JetStream stream sequence of the message that carried the change.
    seq: int
    #: Source SQL type of each column (``"decimal(10,2)"``, ``"varchar(20)"``), when known.
    column_types: dict[str, str] = field(default_factory=dict)
    #: Commit time in milliseconds since the epoch, when the producer sent one.
    commit_ts_ms: int | None = None
    #: A ``schema`` change's operations (``lake.ddl``, as the lake parses the statement), on
    #: the route's tables only, columns named and typed as the sink sees them (after the
    #: route's ``rename``, ``drop`` and ``mask``). Never an ``Unsupported`` or a ``NoOp``.
    operations: tuple[Operation, ...] = ()
    #: A ``schema`` change's statement, as the source ran it.
    statement: str | None = None

    def key_text(self) -> str:
        """The key as one stable text (:func:`key_text`)."""
        return key_text(self.key)


def split_at_schema(
    changes: Sequence[RowChange],
) -> list[tuple[list[RowChange], RowChange | None]]:
    """``changes`` (stream order) cut at each ``schema`` change: (the row changes before it,
    the schema change), the last pair's schema change None. A sink applies each pair in
    order, so that rows written before a DDL carry the columns of before and rows after it
    those of after."""
    pieces: list[tuple[list[RowChange], RowChange | None]] = []
    rows: list[RowChange] = []
    for change in changes:
        if change.kind == "schema":
            pieces.append((rows, change))
            rows = []
        else:
            rows.append(change)
    pieces.append((rows, None))
    return pieces


def scalar_text(value: Any) -> str | None:
    """The text every sink writes for a value JSON has no type for: a DECIMAL exactly (a
    float would round a DECIMAL(38, 18)), bytes as ``0x`` and hex, a date or time in ISO 8601,
    a UUID; None for any other type. Raises ValueError for a NaN or infinite DECIMAL."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value!r} has no exact text")
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return None


class SinkError(TidelakeError):
    """A sink could not write a batch; nothing of it is acknowledged."""


class SinkUnavailable(SinkError, Transient):  # noqa: N818 -- what the route sees
    """The destination is unreachable or refused for now: the route retries the batch."""


class ChangesRejected(SinkError):  # noqa: N818 -- what the route sees
    """Changes the destination refuses for good (a value its column cannot hold, a webhook
    that answered an error to every try): the route dead-letters these with ``reason`` and
    applies the rest of the batch again."""

    def __init__(self, seqs: Sequence[int], reason: str) -> None:
        super().__init__(f"{len(seqs)} change(s) rejected: {reason}")
        self.seqs = tuple(seqs)
        self.reason = reason


class Sink(Protocol):
    """A destination of one route."""

    #: The sink's kind, as in the config (``postgres``, ``redis``, ``webhook``).
    kind: str

    def apply(self, changes: Sequence[RowChange]) -> None:
        """Make ``changes`` (stream order) durable in the destination, idempotently by key
        with the position as the version. Raises :class:`SinkUnavailable` to be retried,
        :class:`ChangesRejected` for changes that can never be written."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
