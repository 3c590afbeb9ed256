"""One ingest writer per lake: an exclusive lock file under the lake's state directory.

Two ingests writing the same Hudi tables would race: each reads the other's checkpoint only
at start, so both would apply the same events and Hudi's optimistic concurrency is off
(single writer). The ingest therefore takes ``<lake_root>/_tidelake/ingest.lock`` with
``fcntl.flock(LOCK_EX | LOCK_NB)`` before it starts Spark, and holds it for its whole life.

``flock`` belongs to the open file: the kernel releases it when the holder exits, however it
exits (``kill -9`` included), so a crashed ingest never leaves a stale lock behind. The file
also records who holds it (pid, host, start time) so the second writer can say why it stops.
The lock file itself is never deleted: deleting it would let a third process lock a new
inode while the holder still locks the old one.

For a lake on object storage there is no local state directory; the lock then lives under
``<home>`` and only keeps two writers on one machine apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tidelake.config import Config
from tidelake.errors import IngestError, Terminal
from tidelake.lake.ledger import Ledger


class LakeLockedError(IngestError, Terminal):
    """Another ingest holds the lake's writer lock; the message names it."""


def lock_path(config: Config) -> Path:
    """Where the writer lock of ``config``'s lake lives."""
    # The ingest's state directory: <lake>/_tidelake, or lake.state_dir / <home>/state for
    # a lake on object storage (config.lake_state_dir); the ledger names the file.
    return Ledger(config.lake_state_dir).lock_path


def read_holder(path: Path) -> dict[str, Any] | None:
    """What the lock file says about its holder (None when unreadable or empty)."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _describe(holder: dict[str, Any] | None) -> str:
    if holder is None:
        return "another process"
    since = holder.get("since_ms")
    when = (
        time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(since / 1000))
        if isinstance(since, int)
        else ""
    )
    return f"ingest pid {holder.get('pid')} on host {holder.get('host')}{when}"


@contextlib.contextmanager
def writer_lock(path: Path) -> Iterator[dict[str, Any]]:
    """Hold the exclusive writer lock at ``path`` for the ``with`` block.

    Raises :class:`LakeLockedError` at once (no waiting) when another process holds it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LakeLockedError(
                f"{_describe(read_holder(path))} already writes this lake (lock {path}); "
                "two writers on the same Hudi tables would race, so this one stops. "
                "Stop the other ingest first; a killed one releases the lock by itself."
            ) from None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since_ms": time.time_ns() // 1_000_000,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, orjson.dumps(holder) + b"\n", 0)
        os.fsync(fd)
        yield holder
    finally:
        os.close(fd)  # releases the lock
