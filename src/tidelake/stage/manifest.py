"""The manifest: the one record that makes a staged batch exist (docs/architecture.md §4).

Layout under the staging root::

    batches/<batch_id>/<database>.<table>.jsonl   one file per table, written first (names.py)
    manifests/<seq_last:020d>-<seq_first:020d>-<batch_id>.json   written last, atomically
    retired/<seq:020d>.json   what the retired batches counted (lake/retention.py)

A batch without a manifest does not exist: the ingest only reads files a manifest names.

Manifest names sort by their *last* sequence (staging roots written before that order have
``<seq_first>-<seq_last>``; both read alike, the smaller number is the first). So "every
manifest that ends after the cursor" is the listing tail after one name, and
:class:`ManifestListing` asks storage only for what is new after the first listing. That is
safe because the one stager writes batches in stream order and acks a batch before it writes
the next manifest: a manifest that appears later with a last sequence at or below one already
listed holds only messages that listed manifests hold too (a restage of unacked messages).

A batch leaves staging once every table has passed it (:mod:`tidelake.lake.retention`): its
manifest is deleted first (the batch stops existing), then its files. Before deleting, the
retention adds the batches' counts to ``retired/``, so the totals ``tidelake serve`` shows
stay whole: :func:`read_retired` + the manifests ending after ``RetiredTotals.through_seq``.
Each line of a table file is one ``ChangeEvent.to_json()`` (with ``seq`` set). A restaged
batch (the stager died after the manifest but before the ack) appears as a second manifest
whose sequence range overlaps the first; the ingest skips what its checkpoint already holds.

DDL events are barriers: a DDL closes its batch, so it is always the batch's last event, and
``ddl`` lists it (in stream order) to be applied after the rows of the batch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from tidelake.errors import ManifestError
from tidelake.names import stage_file_name, table_id
from tidelake.runtime.storage import Storage

MANIFEST_VERSION = 1
MANIFEST_DIR = "manifests"
BATCH_DIR = "batches"
RETIRED_DIR = "retired"
RETIRED_VERSION = 1


@dataclass(frozen=True, slots=True)
class TableFile:
    """The staged events of one table in one batch."""

    database: str
    table: str
    path: str
    events: int

    @property
    def table_id(self) -> str:
        return table_id(self.database, self.table)


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
    #: The W3C context (``traceparent``, ``tracestate``) of the stage span that wrote this
    #: batch, with tracing on (docs/tracing.md): the ingest links its round to it. Empty off.
    trace: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{MANIFEST_DIR}/{self.seq_last:020d}-{self.seq_first:020d}-{self.batch_id}.json"

    def to_json(self) -> bytes:
        extra: dict[str, Any] = {"trace": self.trace} if self.trace else {}
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
                **extra,
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
                trace={str(k): str(v) for k, v in (d.get("trace") or {}).items()},
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"malformed manifest: {exc}") from exc


def table_file_path(batch_id: str, database: str, table: str) -> str:
    """``batches/<batch_id>/<db>.<table>.jsonl``, the names encoded by ``names.stage_file_name``
    (dots, slashes and the like percent-encoded): two tables never share a file, and no name
    reaches outside its batch directory."""
    return f"{BATCH_DIR}/{batch_id}/{stage_file_name(database, table)}"


def write_manifest(storage: Storage, manifest: Manifest) -> None:
    """Write the manifest last, atomically: from here on the batch exists."""
    storage.put(manifest.name, manifest.to_json())


def manifest_range(path: str) -> tuple[int, int] | None:
    """``(seq_first, seq_last)`` from a manifest path, or None for a name that is not one."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(".json"):
        return None
    try:
        a, b = (int(x) for x in name.split("-")[:2])
    except ValueError:
        return None
    return min(a, b), max(a, b)


def after_seq_key(seq: int) -> str:
    """The listing key after which every manifest ending after ``seq`` sorts (new names)."""
    return f"{MANIFEST_DIR}/{seq:020d}-~"


def list_manifests(storage: Storage, after_seq: int = 0) -> list[str]:
    """Manifest paths in stream order whose range ends after ``after_seq`` (a whole listing)."""
    return _in_order(storage.list(MANIFEST_DIR), after_seq)


def _in_order(paths: list[str], after_seq: int) -> list[str]:
    out = []
    for path in paths:
        seq_range = manifest_range(path)
        if seq_range is not None and seq_range[1] > after_seq:
            out.append((seq_range, path))
    return [p for _, p in sorted(out)]


class ManifestListing:
    """The manifests ending after a cursor, listed incrementally.

    The first call lists the whole ``manifests/`` prefix (it also finds names of the older
    first-last order, and retention keeps the prefix small); every later call asks only for
    the names after the highest one seen. A manifest that appears later with a smaller name
    ends at or below a sequence already listed, so it adds nothing (see the module doc).
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._known: set[str] = set()
        self._high = ""
        self._listed = False

    def after(self, seq: int) -> list[str]:
        """Paths in stream order of the manifests whose range ends after ``seq``."""
        if not self._listed:
            new = self.storage.list(MANIFEST_DIR)
            self._listed = True
        else:
            new = self.storage.list(MANIFEST_DIR, start_after=max(self._high, after_seq_key(seq)))
        for path in new:
            if manifest_range(path) is not None:
                self._known.add(path)
                self._high = max(self._high, path)
        # What the cursor passed is forgotten: retention deletes it, and a cursor moved back
        # (a resumed table) starts a whole listing again.
        ordered = _in_order(sorted(self._known), seq)
        self._known = set(ordered)
        return ordered

    def rewind(self) -> None:
        """Forget everything: the next call lists the whole prefix (the cursor went back)."""
        self._known.clear()
        self._high = ""
        self._listed = False


def read_manifest(storage: Storage, path: str) -> Manifest:
    return Manifest.from_json(storage.get(path))


@dataclass
class RetiredTotals:
    """What the retired batches counted, cumulated: ``through_seq`` is the retention's bound
    (every manifest ending at or below it is retired or about to be)."""

    through_seq: int = 0
    batches: int = 0
    received: int = 0
    staged: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    events_by_table: dict[str, int] = field(default_factory=dict)
    counts_by_reason: dict[str, int] = field(default_factory=dict)
    last_manifest_ms: int | None = None

    def add(self, manifest: Manifest) -> None:
        self.batches += 1
        self.received += manifest.received
        self.staged += manifest.staged
        self.dead_lettered += manifest.dead_lettered
        self.skipped += manifest.skipped
        for t in manifest.tables:
            self.events_by_table[t.table_id] = self.events_by_table.get(t.table_id, 0) + t.events
        for reason, n in manifest.counts_by_reason.items():
            self.counts_by_reason[reason] = self.counts_by_reason.get(reason, 0) + n
        self.last_manifest_ms = max(self.last_manifest_ms or 0, manifest.created_at_ms)

    def to_json(self) -> bytes:
        return orjson.dumps({"version": RETIRED_VERSION, **asdict(self)})

    @classmethod
    def from_json(cls, data: bytes) -> RetiredTotals:
        try:
            d = orjson.loads(data)
            if d.get("version") != RETIRED_VERSION:
                raise ManifestError(f"unsupported retired-totals version {d.get('version')!r}")
            del d["version"]
            return cls(**d)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"malformed retired totals: {exc}") from exc


def retired_path(through_seq: int) -> str:
    return f"{RETIRED_DIR}/{through_seq:020d}.json"


def read_retired(storage: Storage) -> tuple[str | None, RetiredTotals]:
    """The newest retired totals and their path (None and zeros when nothing was retired)."""
    paths = storage.list(RETIRED_DIR)
    if not paths:
        return None, RetiredTotals()
    return paths[-1], RetiredTotals.from_json(storage.get(paths[-1]))
