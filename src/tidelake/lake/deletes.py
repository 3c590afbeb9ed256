"""The ingest's record of the deletes it committed: what lets a late event be applied safely.

A dead letter replayed on purpose (``tidelake dlq replay``) arrives with a new stream
sequence and its *old* position, below its table's watermark (docs/architecture.md §3 rule
3). Skipping it as stale loses it for good; applying it blindly may resurrect a row: Hudi
forgets a deleted key together with its ordering value, so an old INSERT of a key deleted
later would bring the row back. What decides is "was this key deleted at a position after
the event's?", and that is what this log keeps, per table:

* a header written before the table's first commit that carries it: ``since``, the table's
  watermark then. Every delete at a position above ``since`` was committed after the header,
  so the log holds all of them;
* one line per commit with deletes (the key's text and the delete's position), appended and
  fsync-ed *before* the Hudi commit: a crash in between leaves a delete logged that is
  applied again on the retry, never one applied and not logged;
* ``*`` (every key) at the position of each DDL of the table: no late row crosses a schema
  change, a TRUNCATE or a DROP of its table.

``lake/apply.py`` decides with :func:`judge_late` (a pure function): a late row event is
applied when its position is above ``since`` and no delete of its key (nor a DDL) was
committed at a later position; otherwise it is skipped and counted as stale. Applied, it
meets Hudi's event-time ordering (``_tl_position``, ``lake/hudi.py``): when the lake holds
the key at a later position, the stored row stays — a late event never moves a row back —
and when it holds it at an earlier one, the late event is the newest change of that key the
lake has seen, and lands. A late DELETE is applied the same way (a key absent changes
nothing; a stored row at a later position is kept by the ordering) and is itself logged.

The log only grows (one short line per delete); pruning it needs the oldest position still
in the dead-letter stream, which the ingest does not read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import orjson

from tidelake.events import ChangeEvent, Op
from tidelake.runtime.durable import append_line

#: Folder of the logs, under the ingest's state directory.
DELETES_DIR = "deletes"
LOG_VERSION = 1
#: The key text of a table-wide removal (a DDL of the table).
ALL_KEYS = "*"


def key_text(image: dict[str, object] | None, pk: Sequence[str]) -> str | None:
    """The primary key of ``image`` as canonical text: values as text (``1`` and ``"1"`` are
    one key), in the sorted order of the key's columns (the events and the lake may list a
    composite key in different orders); None when a key column is missing."""
    if not pk or image is None:
        return None
    values = []
    for column in sorted(pk):
        value = image.get(column)
        if value is None:
            return None
        values.append(str(value))
    return orjson.dumps(values).decode()


def event_key(event: ChangeEvent, pk: Sequence[str]) -> str | None:
    """The key ``event`` writes (or deletes)."""
    image = {**(event.before or {}), **(event.key or {})} if event.op is Op.DELETE else None
    if image is None:
        image = {**(event.after or {}), **(event.key or {})}
    return key_text(image, pk)


def deleted_keys(events: Iterable[ChangeEvent], pk: Sequence[str]) -> list[tuple[str, str]]:
    """(key text, position) of every key ``events`` delete: DELETEs, and the old key of an
    UPDATE that changed its key (docs/architecture.md §1)."""
    out: list[tuple[str, str]] = []
    for event in events:
        position = event.position.encode()
        if event.op is Op.DELETE:
            key = event_key(event, pk)
            if key is not None:
                out.append((key, position))
        elif event.op is Op.UPDATE and event.before:
            old = key_text({**(event.after or {}), **event.before}, pk)
            if old is not None and old != event_key(event, pk):
                out.append((old, position))
    return out


def judge_late(
    late: Sequence[ChangeEvent],
    pk: Sequence[str],
    since: str | None,
    deleted: dict[str, str],
) -> tuple[list[ChangeEvent], int]:
    """The late row events to apply, and how many are stale (module docstring): applied
    when above ``since`` and neither their key nor the whole table (:data:`ALL_KEYS`) was
    deleted at a later position. ``since`` None: the table has no log, every one is stale."""
    keep: list[ChangeEvent] = []
    stale = 0
    table_wide = deleted.get(ALL_KEYS, "")
    for event in late:
        position = event.position.encode()
        key = event_key(event, pk)
        if since is None or position <= since or key is None or position < table_wide:
            stale += 1
        elif event.op is not Op.DELETE and deleted.get(key, "") > position:
            stale += 1  # deleted later: applying it would resurrect the row
        else:
            keep.append(event)
    return keep, stale


class DeleteLog:
    """The per-table delete logs under ``<state_dir>/deletes/`` (module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / DELETES_DIR

    def path(self, table_id: str) -> Path:
        # A table id is source text (any character): the file is named by its digest.
        digest = hashlib.sha256(table_id.encode()).hexdigest()[:32]
        return self.root / f"{digest}.jsonl"

    def _lines(self, table_id: str) -> list[dict[str, object]]:
        path = self.path(table_id)
        if not path.exists():
            return []
        out = []
        for raw in path.read_bytes().splitlines():
            try:
                out.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue  # a line torn by a crash: its commit was not made either
        return out

    def since(self, table_id: str) -> str | None:
        """The watermark from which the table's log holds every delete; None: no log.
        Asked every round: reads the header line only."""
        path = self.path(table_id)
        if not path.exists():
            return None
        with path.open("rb") as f:
            first = f.readline()
        try:
            header = orjson.loads(first)
        except orjson.JSONDecodeError:
            return None  # a header torn by a crash: its first commit was not made either
        if header.get("table") == table_id and isinstance(header.get("since"), str):
            return str(header["since"])
        return None

    def start(self, table_id: str, watermark: str | None) -> None:
        """Begin the table's log (once) at ``watermark``, before a commit that carries it."""
        if self.path(table_id).exists():
            return
        header = {"v": LOG_VERSION, "table": table_id, "since": watermark or ""}
        append_line(self.path(table_id), orjson.dumps(header))

    def record(self, table_id: str, deletes: Sequence[tuple[str, str]]) -> None:
        """Append ``deletes`` (key text, position) durably, before their commit."""
        if deletes:
            append_line(self.path(table_id), orjson.dumps({"d": [list(d) for d in deletes]}))

    def latest(self, table_id: str) -> dict[str, str]:
        """Each deleted key's latest delete position (and :data:`ALL_KEYS`'s)."""
        out: dict[str, str] = {}
        for line in self._lines(table_id):
            entries = line.get("d")
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if isinstance(entry, list) and len(entry) == 2:
                    key, position = str(entry[0]), str(entry[1])
                    if position > out.get(key, ""):
                        out[key] = position
        return out
