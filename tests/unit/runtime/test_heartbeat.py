"""Heartbeat files: written atomically, read back, and judged alive or down."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from tidelake.runtime.heartbeat import (
    DOWN_AFTER_S,
    HEARTBEAT_VERSION,
    Heartbeat,
    heartbeat_age_s,
    heartbeat_record,
    is_up,
    parse_heartbeat,
    read_heartbeat,
    write_heartbeat,
)
from tidelake.runtime.storage import LocalStorage, StorageError


def test_write_then_read_a_heartbeat(tmp_path: Path) -> None:
    """The record holds the stage, its state, its pid and the caller's fields."""
    write_heartbeat(tmp_path, "ingest", "idle", cursor=7, paused=["a.b"])
    record = read_heartbeat(tmp_path, "ingest")
    assert record is not None
    assert (record["stage"], record["state"], record["cursor"], record["paused"]) == (
        "ingest",
        "idle",
        7,
        ["a.b"],
    )
    assert read_heartbeat(tmp_path, "stager") is None


def test_up_means_not_stopped_and_recent_or_recently_active() -> None:
    """Alive: a recent heartbeat, or an old one with recent activity (a long commit);
    a stopped record or an old one is down."""
    now = int(time.time() * 1000)
    old = now - int(DOWN_AFTER_S * 1000) - 1
    assert is_up({"state": "idle", "updated_at_ms": now}, now)
    assert not is_up({"state": "stopped", "updated_at_ms": now}, now)
    assert not is_up({"state": "running", "updated_at_ms": old}, now)
    assert is_up({"state": "applying", "updated_at_ms": old}, now, last_activity_ms=now - 1000)
    assert not is_up(None, now)
    assert heartbeat_age_s({"updated_at_ms": now - 2500}, now) == 2.5


def test_heartbeat_thread_stores_running_then_stopped(tmp_path: Path) -> None:
    """The thread stores its record through ``put`` with the stage's info, and ``stopped``
    when it ends."""
    stored: dict[str, bytes] = {}

    def put(name: str, data: bytes) -> None:
        stored[name] = data

    with Heartbeat(put, "stager", lambda: {"received": 3}, interval_s=0.05):
        time.sleep(0.2)
        running = parse_heartbeat(stored["_tidelake/stager.heartbeat.json"])
    stopped = parse_heartbeat(stored["_tidelake/stager.heartbeat.json"])
    assert running is not None
    assert stopped is not None
    assert (running["state"], running["received"]) == ("running", 3)
    assert stopped["state"] == "stopped"


def test_records_carry_their_version_and_older_ones_are_read() -> None:
    """A written record has ``v``; one written before versions (no ``v``) reads as the
    current version with its own fields kept."""
    old = {"stage": "ingest", "state": "idle", "pid": 1, "host": "h", "updated_at_ms": 5}
    assert {**old, "v": HEARTBEAT_VERSION, "cursor": 3} == parse_heartbeat(
        orjson.dumps({**old, "cursor": 3})
    )
    assert HEARTBEAT_VERSION == heartbeat_record("stager", "running")["v"]


def test_a_newer_or_malformed_record_reads_as_no_heartbeat() -> None:
    """A heartbeat is a hint: a newer format version or missing common keys is None."""
    newer = heartbeat_record("stager", "running") | {"v": HEARTBEAT_VERSION + 1}
    assert (None, None) == (
        parse_heartbeat(orjson.dumps(newer)),
        parse_heartbeat(orjson.dumps({"stage": "stager", "state": "running"})),
    )


def test_a_full_disk_heartbeat_is_written_over_the_old_one(tmp_path: Path) -> None:
    """A stager stalled on a full stage root still tells status why: when the atomic put fails
    (a new file needs a free block), the record is written over the old file's bytes."""
    storage = LocalStorage(tmp_path)

    def full(path: str, data: bytes) -> None:
        raise StorageError(f"cannot write {path}: [Errno 28] No space left on device")

    Heartbeat(storage.put, "stager", lambda: {"last_error": "old"}).beat()
    Heartbeat(
        full, "stager", lambda: {"last_error": "disk full"}, fallback=storage.overwrite
    ).beat()
    record = orjson.loads(storage.get("_tidelake/stager.heartbeat.json"))
    assert ("stager", "disk full") == (record["stage"], record["last_error"])
