"""The ingest's exactly-once rules, as pure functions (docs/architecture.md §3): no Spark, no I/O.

Given a table's :class:`TableCheckpoint` and the events of a round, these decide

* what is a duplicate or a stale copy (:func:`filter_events`, rules 1 and 2), and which
  events below the watermark are *late* rather than stale: above the position from which
  the table's delete log is complete, they are judged key by key (``lake/deletes.py``), so
  a dead letter replayed on purpose lands unless its key was deleted later (rule 3);
* what each key ends as (:func:`collapse`, rule 4: the last change by position);
* the checkpoint the next commit carries (:func:`rows_checkpoint` for rows, up to
  :func:`rows_seq_last`; :func:`ddl_checkpoint` for a DDL) and its position watermark
  (:func:`watermark`);
* which table's checkpoint decides a DDL event (:func:`route`).

The round loop (``lake/ingest.py``) and the schema evolver (``lake/evolve.py``) apply them;
the table store (``lake/store.py``) writes what they decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidelake.events import ChangeEvent, Op
from tidelake.lake import ddl
from tidelake.lake.checkpoint import TableCheckpoint


@dataclass
class Filtered:
    """The events of one table left to apply, and what was dropped and why."""

    kept: list[ChangeEvent] = field(default_factory=list)
    #: At or below the checkpoint's stream sequence, or a second copy in this round.
    duplicates: int = 0
    #: Row events below the position watermark (republished, or a stale DLQ replay).
    stale: int = 0
    #: Row events below the watermark but above ``late_since``: judged key by key
    #: (``lake/deletes.py``), in stream order.
    late: list[ChangeEvent] = field(default_factory=list)


def filter_events(
    events: Iterable[ChangeEvent],
    checkpoint: TableCheckpoint | None,
    *,
    late_since: str | None = None,
) -> Filtered:
    """Drop what the table already holds (docs/architecture.md §3 rules 1 and 2), keep stream
    order. With ``late_since`` (the position from which the table's delete log is complete,
    ``lake/deletes.py``), a row event below the watermark but above it is not stale yet: it
    goes to ``late``, for the delete log to decide (a dead letter replayed on purpose)."""
    out = Filtered()
    seen: set[tuple[int, str]] = set()
    seq_floor = checkpoint.seq if checkpoint else 0
    mark = checkpoint.position if checkpoint else None
    for event in events:
        ident = (event.seq, event.position.encode())
        if event.seq <= seq_floor or ident in seen:
            out.duplicates += 1
            continue
        seen.add(ident)
        # Strictly below: several events may share one position (a Debezium snapshot's rows,
        # both halves of a key change), so an event AT the watermark may be new. Applying it
        # again when it is a republished copy changes nothing: the lake already holds that
        # key's image at that position, and nothing later of the table (or the watermark
        # would be higher).
        if event.op.is_row_change and mark is not None and event.position.encode() < mark:
            if late_since is not None and event.position.encode() > late_since:
                out.late.append(event)
            else:
                out.stale += 1
            continue
        out.kept.append(event)
    return out


@dataclass(frozen=True, slots=True)
class Change:
    """The last change of one key: upsert ``row`` or delete it. ``missing``: columns the
    producer did not send (``ChangeEvent.unchanged``) that no earlier event of the batch
    supplied: the row keeps the table's stored values for them."""

    key: tuple[Any, ...]
    delete: bool
    row: Mapping[str, Any]
    event: ChangeEvent
    missing: frozenset[str] = frozenset()


KeyFn = Callable[[Mapping[str, Any]], tuple[Any, ...]]


def _image(event: ChangeEvent) -> Mapping[str, Any]:
    row = event.row
    if row is None:
        row = event.key or {}
    return row


def collapse(
    events: Sequence[ChangeEvent],
    key_of: KeyFn | None = None,
    *,
    key_for: Callable[[ChangeEvent], KeyFn] | None = None,
) -> list[Change]:
    """Each key's last change by position (ties: the later event), in position order.

    An UPDATE whose primary key changed (a MySQL binlog UPDATE of a key column) also deletes
    the old key, at the same position. An update that lacks columns (``unchanged``) takes
    them from the key's previous upsert in the batch, when there is one.
    """
    last: dict[tuple[Any, ...], Change] = {}

    def offer(change: Change) -> None:
        held = last.get(change.key)
        if held is None or held.event.position <= change.event.position:
            if change.missing and held is not None and not held.delete:
                filled = {c: held.row[c] for c in change.missing if c in held.row}
                change = Change(
                    change.key,
                    change.delete,
                    {**change.row, **filled},
                    change.event,
                    (change.missing - filled.keys()) | (change.missing & held.missing),
                )
            last[change.key] = change

    for event in events:
        if not event.op.is_row_change:
            continue
        if key_for is not None:
            key_of = key_for(event)
        assert key_of is not None
        image = _image(event)
        if event.op is Op.DELETE:
            source = {**(event.key or {}), **image}
            offer(Change(key_of(source), True, source, event))
            continue
        new_key = key_of({**image, **(event.key or {})})
        if event.op is Op.UPDATE and event.before:
            old_image = {**image, **event.before}
            old_key = key_of(old_image)
            if old_key != new_key:
                offer(Change(old_key, True, old_image, event))
        offer(Change(new_key, False, image, event, frozenset(event.unchanged)))
    return sorted(last.values(), key=lambda c: c.event.position)


def watermark(previous: TableCheckpoint | None, positions: Iterable[str]) -> str | None:
    """The table's position watermark after applying events at ``positions``: the highest
    position it has seen, never lower than the previous checkpoint's (rule 2)."""
    held = [p for p in positions if p]
    if previous is not None and previous.position:
        held.append(previous.position)
    return max(held) if held else None


def rows_checkpoint(
    previous: TableCheckpoint | None,
    seq_last: int,
    events: Sequence[ChangeEvent],
    declared: Mapping[str, str],
) -> TableCheckpoint:
    """The checkpoint of a commit of row ``events`` that covers the stream up to
    ``seq_last``: the sequence never moves back, the watermark is :func:`watermark`, the
    schema version stays, and the column types the batch ``declared`` join the table's."""
    columns = dict(previous.columns) if previous else {}
    columns.update(declared)
    return TableCheckpoint(
        seq=max(seq_last, previous.seq if previous else 0),
        position=watermark(previous, (e.position.encode() for e in events)),
        schema_version=previous.schema_version if previous else 0,
        columns=columns,
    )


def rows_seq_last(seq_last: int, ddl_seqs: Iterable[int]) -> int:
    """The stream sequence that the commit of a table without DDL in the round covers: the
    round's last, or just below the round's DDL (a DDL is the last event of its batch).

    A DDL may change tables it is not routed to (``DROP DATABASE`` drops every table of the
    database, ``RENAME TABLE a TO b`` writes ``b``), and it does nothing to a table whose
    checkpoint covers it already: a table's rows committed in the same round must not.
    """
    first_ddl = min(ddl_seqs, default=None)
    return seq_last if first_ddl is None else min(seq_last, first_ddl - 1)


def ddl_checkpoint(previous: TableCheckpoint | None, event: ChangeEvent) -> TableCheckpoint | None:
    """The table's checkpoint after the DDL ``event`` (``schema_version`` + 1); None when
    ``previous`` already covers it (the DDL was applied: do nothing)."""
    if previous is not None and previous.seq >= event.seq:
        return None
    return TableCheckpoint(
        seq=event.seq,
        position=watermark(previous, [event.position.encode()]),
        schema_version=(previous.schema_version if previous else 0) + 1,
        columns=dict(previous.columns) if previous else {},
    )


def route(event: ChangeEvent) -> str:
    """The table whose checkpoint decides whether a DDL event is applied.

    Normally the event's own table. A statement naming other tables (``RENAME TABLE a TO b``,
    ``DROP TABLE a, b``) is routed to the last table it changes, so that the event stays
    unapplied until its last step is done: ``RENAME`` finishes by dropping ``a``, whose
    tombstone then covers the event.
    """
    ops = ddl.parse_ddl(event.ddl or "", ddl.dialect_for(event.source), event.database)
    last = None
    for op in ops:
        if isinstance(op, ddl.RenameTable | ddl.DropTable | ddl.TruncateTable | ddl.CreateTable):
            last = op.table.table_id
    return last or event.table_id
