"""The ingest checkpoint of one table, carried in the extra metadata of its Hudi commits.

Like HoodieStreamer's checkpoint, it is written in the same atomic commit as the data it
covers (docs/architecture.md §3), so data and checkpoint cannot disagree: after a crash the ingest
resumes from the checkpoint of the latest completed commit, and an interrupted commit is
rolled back by Hudi with its checkpoint.

This module holds the record only; ``lake/store.py`` reads it back from Hudi and
``lake/rules.py`` decides the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tidelake.errors import IngestError

CHECKPOINT_VERSION = 1


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
