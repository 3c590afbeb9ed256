"""The manifest source: the next round of staged change events after a cursor.

A round is one or more manifests in stream order, up to ``ingest.max_batch_events`` events
(at least one manifest), and never past a manifest holding DDL: a DDL is a barrier that
closes the round, so its table's rows before it and after it land in separate commits
under the old and the new schema. The cursor is only a listing hint: each table's
checkpoint (``lake/rules.py``) decides what is applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tidelake.events import ChangeEvent, Op
from tidelake.lake.rules import route
from tidelake.runtime.storage import Storage
from tidelake.stage.manifest import Manifest, ManifestListing, read_manifest


@dataclass
class Round:
    """The manifests of one round and their events per table (stream order)."""

    manifests: list[Manifest]
    #: ``db.table`` (or ``"<db>."`` for a DDL naming a database only) → its events.
    events: dict[str, list[ChangeEvent]] = field(default_factory=dict)

    @property
    def seq_last(self) -> int:
        """The highest stream sequence the round covers."""
        return max(m.seq_last for m in self.manifests)

    def next_cursor(self, cursor: int) -> int:
        """The cursor once the round is applied (it never moves back)."""
        return max(cursor, self.seq_last)


class ManifestSource:
    """Rounds of manifests from staging storage."""

    def __init__(self, storage: Storage, max_batch_events: int) -> None:
        self.storage = storage
        self.max_batch_events = max_batch_events
        # Lists only what is new after the first listing (stage/manifest.py).
        self.listing = ManifestListing(storage)
        self._cursor = 0

    def next_round(self, cursor: int) -> Round | None:
        """The round after stream sequence ``cursor``; None when nothing is staged."""
        manifests = self._manifests(cursor)
        if not manifests:
            return None
        return Round(manifests, self.round_events(manifests))

    def _manifests(self, cursor: int) -> list[Manifest]:
        manifests: list[Manifest] = []
        total = 0
        if cursor < self._cursor:
            self.listing.rewind()  # a resumed table moved the cursor back
        self._cursor = cursor
        for path in self.listing.after(cursor):
            manifest = read_manifest(self.storage, path)
            events = sum(t.events for t in manifest.tables)
            if manifests and total + events > self.max_batch_events:
                break
            manifests.append(manifest)
            total += events
            if manifest.ddl:
                break  # a DDL barrier closes the round
        return manifests

    def round_events(self, manifests: Sequence[Manifest]) -> dict[str, list[ChangeEvent]]:
        """Events per table, in stream order. A DDL event is taken from the manifest's ``ddl``
        list (it is also its table file's last line) and grouped under the table whose
        checkpoint decides it (``rules.route``: ``RENAME a TO b`` under ``a``); one without
        a table (``DROP DATABASE``) under ``"<db>."``."""
        per_table: dict[str, list[ChangeEvent]] = {}
        for manifest in manifests:
            for table_file in manifest.tables:
                events = per_table.setdefault(table_file.table_id, [])
                for line in self.storage.get(table_file.path).split(b"\n"):
                    if line.strip():
                        event = ChangeEvent.from_json(line)
                        if event.op is not Op.DDL:
                            events.append(event)
            for d in manifest.ddl:
                ddl = ChangeEvent.from_dict(d)
                events = per_table.setdefault(route(ddl) if ddl.table else ddl.table_id, [])
                ident = (ddl.seq, ddl.position)
                if not any((e.seq, e.position) == ident for e in events if e.op is Op.DDL):
                    events.append(ddl)
        for events in per_table.values():
            events.sort(key=lambda e: e.seq)  # stable: stream order, file order within a seq
        return {t: events for t, events in per_table.items() if events}
