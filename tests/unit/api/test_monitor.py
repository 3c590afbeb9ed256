"""A table the capture skips (capture/keys.py) is listed as skipped with its reason, never
stale, and does not keep the pipeline from being healthy (``status --check``)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from tidelake.api.monitor import Snapshot, status_json
from tidelake.api.records import LakeRecord, StageRecord
from tidelake.runtime.storage import LocalStorage

NOW = int(time.time() * 1000)


def test_skipped_table_is_listed_as_skipped_and_the_pipeline_stays_healthy(
    tmp_path: Path,
) -> None:
    """The capture's heartbeat names shop.log as skipped: status lists it with state
    ``skipped`` and the reason, beside a fresh table, and the pipeline is healthy."""
    lake = tmp_path / "lake"
    lake.mkdir()
    commit = {
        "table": "shop.orders", "seq": 9, "events": 1, "upserts": 1, "deletes": 0,
        "committed_at_ms": NOW, "max_commit_ts_ms": NOW - 1000, "duration_ms": 100,
    }  # fmt: skip
    (lake / "commits.jsonl").write_bytes(orjson.dumps(commit) + b"\n")
    stage, record = StageRecord(LocalStorage(tmp_path / "staging")), LakeRecord(lake)
    stage.refresh()
    record.refresh()
    beat = {"state": "idle", "updated_at_ms": NOW}
    bus = {
        "stream": {"name": "S", "messages": 9, "bytes": 900, "first_seq": 1, "last_seq": 9},
        "consumer": {"pending": 0, "ack_pending": 0, "redelivered": 0, "ack_floor_seq": 9},
        "dlq": {"name": "D", "messages": 0, "bytes": 0},
        "last_by_table": {"shop.orders": {"seq": 9, "time_ms": NOW}},
    }
    snap = Snapshot(NOW, stage, record, beat, beat, bus, None, 60.0, {})
    reason = 'no primary key: set capture.keys["shop.log"] to its key columns'
    snap.capture = {
        "state": "running", "updated_at_ms": NOW, "source": "postgres", "phase": "streaming",
        "skipped": {"shop.log": reason},
    }  # fmt: skip
    status = status_json(snap)
    tables = {t["table"]: t for t in status["tables"]}
    assert tables["shop.log"]["state"] == "skipped"
    assert tables["shop.log"]["skipped_reason"] == reason
    assert tables["shop.orders"]["state"] == "fresh"
    assert status["state"] == "healthy", status["problems"]
