"""The ingest's local state files under ``<lake_root>/_tidelake`` (``lake.state_dir``).

Every read and write of the ingest's and the evolver's own files goes through here:

* ``cursor.json``: the stream sequence up to which manifests were listed (a hint only:
  every decision comes from the per-table checkpoints in Hudi);
* ``commits.jsonl`` / ``skipped.jsonl``: one line per Hudi commit / per table of a round that
  dropped duplicates or stale events (read by the API, the demo, chaos and bench);
* ``paused.json``: the tables paused and why (read by ``status``);
* ``dropped.json`` (:class:`Tombstones`) and ``ddl_blocked.json`` (:class:`BlockedDdl`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from tidelake.lake.checkpoint import TableCheckpoint

if TYPE_CHECKING:
    from tidelake.events import ChangeEvent

log = structlog.get_logger(__name__)

TOMBSTONES_FILE = "dropped.json"
BLOCKED_FILE = "ddl_blocked.json"
CURSOR_FILE = "cursor.json"
COMMITS_FILE = "commits.jsonl"
SKIPPED_FILE = "skipped.jsonl"
PAUSED_FILE = "paused.json"


def _replace(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` atomically: a reader sees the old file or the new one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


class IngestState:
    """The ingest's cursor hint, commit and skip logs, and paused tables."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    def read_cursor(self) -> int:
        """The saved cursor hint; 0 when there is none or it is unreadable."""
        path = self.state_dir / CURSOR_FILE
        try:
            return int(orjson.loads(path.read_bytes())["seq"])
        except FileNotFoundError:
            return 0
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("unreadable cursor hint ignored", path=str(path))
            return 0

    def write_cursor(self, seq: int) -> None:
        _replace(self.state_dir / CURSOR_FILE, orjson.dumps({"seq": seq}))

    def read_paused(self) -> dict[str, str]:
        """``paused.json`` (empty when absent or unreadable)."""
        try:
            data = orjson.loads((self.state_dir / PAUSED_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def write_paused(self, paused: dict[str, str]) -> None:
        _replace(self.state_dir / PAUSED_FILE, orjson.dumps(paused, option=orjson.OPT_INDENT_2))

    def append_commit(self, record: dict[str, Any]) -> None:
        self._append(COMMITS_FILE, record)

    def append_skipped(self, record: dict[str, Any]) -> None:
        self._append(SKIPPED_FILE, record)

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with (self.state_dir / name).open("ab") as f:
            f.write(orjson.dumps(record) + b"\n")
            f.flush()
            os.fsync(f.fileno())


class _JsonFile:
    """A small JSON object in the state directory, replaced atomically, one writer at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def update(self, key: str, value: Any | None) -> None:
        with self._lock:
            data = self.read()
            if value is None:
                if key not in data:
                    return
                del data[key]
            else:
                data[key] = value
            _replace(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))


class Tombstones(_JsonFile):
    """``dropped.json``: the last checkpoint of every table dropped (or renamed away)."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir / TOMBSTONES_FILE)

    def get(self, table_id: str) -> TableCheckpoint | None:
        text = self.read().get(table_id)
        return TableCheckpoint.from_json(text) if isinstance(text, str) else None

    def put(self, table_id: str, checkpoint: TableCheckpoint) -> None:
        self.update(table_id, checkpoint.to_json())

    def remove(self, table_id: str) -> None:
        self.update(table_id, None)


class BlockedDdl(_JsonFile):
    """``ddl_blocked.json``: per paused table, the DDL it waits on (read by ``skip-ddl``)."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__(state_dir / BLOCKED_FILE)

    def record(self, table_id: str, event: ChangeEvent, reason: str) -> None:
        self.update(
            table_id,
            {
                "seq": event.seq,
                "position": event.position.encode(),
                "ddl": event.ddl,
                "reason": reason,
            },
        )

    def clear(self, table_id: str) -> None:
        self.update(table_id, None)


def read_blocked(state_dir: Path) -> dict[str, dict[str, Any]]:
    """``ddl_blocked.json`` as a dict (empty when absent)."""
    return BlockedDdl(state_dir).read()
