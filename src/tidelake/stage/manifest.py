"""The manifest: the one record that makes a staged batch exist (DESIGN.md §4).

Layout under the staging root::

    batches/<batch_id>/<database>.<table>.jsonl   one file per table, written first
    manifests/<seq_first:020d>-<seq_last:020d>-<batch_id>.json   written last, atomically

A batch without a manifest does not exist: the ingest only reads files a manifest names.
Each line of a table file is one ``ChangeEvent.to_json()`` (with ``seq`` set). A restaged
batch (the stager died after the manifest but before the ack) appears as a second manifest
whose sequence range overlaps the first; the ingest skips what its checkpoint already holds.

DDL events are barriers: a DDL closes its batch, so it is always the batch's last event, and
``ddl`` lists it (in stream order) to be applied after the rows of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tidelake.errors import ManifestError
from tidelake.runtime.storage import Storage

MANIFEST_VERSION = 1
MANIFEST_DIR = "manifests"
BATCH_DIR = "batches"


@dataclass(frozen=True, slots=True)
class TableFile:
    """The staged events of one table in one batch."""

    database: str
    table: str
    path: str
    events: int

    @property
    def table_id(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """One staged batch: its stream-sequence range, its files, its counts and its DDL."""

    batch_id: str
    seq_first: int
    seq_last: int
    created_at_ms: int
    tables: tuple[TableFile, ...]
    #: DDL events of the batch, as ``ChangeEvent.to_dict()``, in stream order.
    ddl: tuple[dict[str, Any], ...] = ()
    #: Counts that must reconcile: received == staged + dead_lettered + skipped.
    received: int = 0
    staged: int = 0
    dead_lettered: int = 0
    #: Messages that carry no row (TIDB_WATERMARK and the like), counted not staged.
    skipped: int = 0
    counts_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{MANIFEST_DIR}/{self.seq_first:020d}-{self.seq_last:020d}-{self.batch_id}.json"

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "version": MANIFEST_VERSION,
                "batch_id": self.batch_id,
                "seq_first": self.seq_first,
                "seq_last": self.seq_last,
                "created_at_ms": self.created_at_ms,
                "tables": [
                    {"database": t.database, "table": t.table, "path": t.path, "events": t.events}
                    for t in self.tables
                ],
                "ddl": list(self.ddl),
                "received": self.received,
                "staged": self.staged,
                "dead_lettered": self.dead_lettered,
                "skipped": self.skipped,
                "counts_by_reason": self.counts_by_reason,
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        try:
            d = orjson.loads(data)
            if d.get("version") != MANIFEST_VERSION:
                raise ManifestError(f"unsupported manifest version {d.get('version')!r}")
            return cls(
                batch_id=d["batch_id"],
                seq_first=int(d["seq_first"]),
                seq_last=int(d["seq_last"]),
                created_at_ms=int(d["created_at_ms"]),
                tables=tuple(
                    TableFile(t["database"], t["table"], t["path"], int(t["events"]))
                    for t in d["tables"]
                ),
                ddl=tuple(d.get("ddl") or ()),
                received=int(d.get("received", 0)),
                staged=int(d.get("staged", 0)),
                dead_lettered=int(d.get("dead_lettered", 0)),
                skipped=int(d.get("skipped", 0)),
                counts_by_reason=dict(d.get("counts_by_reason") or {}),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"malformed manifest: {exc}") from exc


def table_file_path(batch_id: str, database: str, table: str) -> str:
    return f"{BATCH_DIR}/{batch_id}/{database}.{table}.jsonl"


def write_manifest(storage: Storage, manifest: Manifest) -> None:
    """Write the manifest last, atomically: from here on the batch exists."""
    storage.put(manifest.name, manifest.to_json())


def list_manifests(storage: Storage, after_seq: int = 0) -> list[str]:
    """Manifest paths in stream order whose range ends after ``after_seq``."""
    out = []
    for path in storage.list(MANIFEST_DIR):
        name = path.rsplit("/", 1)[-1]
        try:
            first, last = (int(x) for x in name.split("-")[:2])
        except ValueError:
            continue
        if last > after_seq:
            out.append((first, last, path))
    return [p for _, _, p in sorted(out)]


def read_manifest(storage: Storage, path: str) -> Manifest:
    return Manifest.from_json(storage.get(path))
