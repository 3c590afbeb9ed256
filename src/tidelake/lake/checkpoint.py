"""The ingest checkpoint of one table, carried in the extra metadata of its Hudi commits.

Like HoodieStreamer's checkpoint, it is written in the same atomic commit as the data it
covers (docs/architecture.md §3), so data and checkpoint cannot disagree: after a crash the ingest
resumes from the checkpoint of the latest completed commit, and an interrupted commit is
rolled back by Hudi with its checkpoint.

This module holds the records only; ``lake/store.py`` reads them back from Hudi and
``lake/rules.py`` decides the next checkpoint. Beside the checkpoint, each commit says which
of the stream's row events it applied (:class:`AppliedRows`), for the lifecycle views
(``view/lifecycle.py``), which are kept from the events themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tidelake.errors import IngestError
from tidelake.events import ChangeEvent

CHECKPOINT_VERSION = 1
APPLIED_VERSION = 1


@dataclass(frozen=True, slots=True)
class TableCheckpoint:
    """What one table has applied.

    ``seq``: the highest stream sequence covered (events at or below it are duplicates);
    ``position``: the highest encoded position applied (the table's watermark: row events
    strictly below it are republished copies; one at it may share its position with applied
    events and is applied again, which re-applies the same image); ``schema_version``: DDL events
    applied so far;
    ``columns``: the source type of each column the table stores, in table order, as DDL
    declared it or as the rows were typed (``lake/definitions.py``): the table's own
    definition, carried in the same commit as the data it typed. Empty for a table written
    before tidelake kept it.
    """

    seq: int
    position: str | None
    schema_version: int = 0
    columns: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "version": CHECKPOINT_VERSION,
            "seq": self.seq,
            "position": self.position,
            "schema_version": self.schema_version,
        }
        if self.columns:
            body["columns"] = self.columns
        return orjson.dumps(body).decode()

    @classmethod
    def from_json(cls, text: str) -> TableCheckpoint:
        try:
            d = orjson.loads(text)
            if d.get("version") != CHECKPOINT_VERSION:
                raise IngestError(f"unsupported checkpoint version {d.get('version')!r}")
            return cls(
                seq=int(d["seq"]),
                position=d.get("position"),
                schema_version=int(d.get("schema_version", 0)),
                columns=dict(d.get("columns") or {}),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise IngestError(f"malformed table checkpoint {text!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class CommittedCheckpoint:
    """A checkpoint and the Hudi instant (requested time) whose commit holds it."""

    checkpoint: TableCheckpoint
    instant: str
    completion_time: str | None


#: One event of the stream: its stream sequence and its encoded position.
EventId = tuple[int, str]


def event_id(event: ChangeEvent) -> EventId:
    return event.seq, event.position.encode()


@dataclass(frozen=True, slots=True)
class AppliedRows:
    """Which row events of the stream one commit applied, carried in the commit beside its
    checkpoint (``tidelake.applied``), so that whoever reads it later, even after a crash,
    learns it from the lake itself.

    A commit covers its table's events whose stream sequence is above the previous
    checkpoint's and at most its own; of those (each ``(seq, position)`` once), a commit of
    rows applied every row event at or above ``floor`` (the table's position watermark
    before the commit; None: no watermark yet) and, below it, only the ``late`` ones (dead
    letters replayed, judged by the delete log: ``lake/deletes.py``), less the ``dead``
    ones: dead-lettered, a value the table cannot store exactly (``lake/dead_letters.py``).
    Every other event of the range was dropped as stale. A commit of no rows (``rows``
    False: a DDL's) applied none. Listed are only the exceptions, so the record stays small
    when a round republishes thousands of events.
    """

    rows: bool = True
    floor: str | None = None
    late: frozenset[EventId] = frozenset()
    dead: frozenset[EventId] = frozenset()

    def applied(self, event: ChangeEvent) -> bool:
        """Whether this commit applied ``event``, one of the row events it covers."""
        ident = event_id(event)
        if not self.rows or ident in self.dead:
            return False
        return self.floor is None or ident[1] >= self.floor or ident in self.late

    def to_json(self) -> str:
        body: dict[str, Any] = {"version": APPLIED_VERSION, "rows": self.rows}
        if self.rows:
            body |= {
                "floor": self.floor,
                "late": sorted(self.late),
                "dead": sorted(self.dead),
            }
        return orjson.dumps(body).decode()

    @classmethod
    def from_json(cls, text: str) -> AppliedRows:
        try:
            d = orjson.loads(text)
            if d.get("version") != APPLIED_VERSION:
                raise IngestError(f"unsupported applied-rows version {d.get('version')!r}")
            return cls(
                rows=bool(d["rows"]),
                floor=d.get("floor"),
                late=frozenset((int(s), str(p)) for s, p in d.get("late") or ()),
                dead=frozenset((int(s), str(p)) for s, p in d.get("dead") or ()),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise IngestError(f"malformed applied-rows record {text!r}: {exc}") from exc


#: What a commit that applies no row events carries (the schema evolver's).
NO_ROWS = AppliedRows(rows=False)
