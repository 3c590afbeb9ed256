"""Table and pipeline states, and the metric names against docs/metrics.md."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import orjson

from tidelake.api.metrics import render
from tidelake.api.monitor import Snapshot, pipeline_state, status_json, table_states
from tidelake.api.records import LakeRecord, StageRecord
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, TableFile, write_manifest

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
NOW = int(time.time() * 1000)


def _snapshot(tmp_path: Path, commits: list[dict[str, Any]], last_seq: dict[str, int]) -> Snapshot:
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "commits.jsonl").write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in commits))
    (lake / "skipped.jsonl").write_bytes(
        orjson.dumps({"table": "a.t", "seq_last": 9, "stale": 1, "at_ms": NOW}) + b"\n"
    )
    storage = LocalStorage(tmp_path / "staging")
    write_manifest(
        storage,
        Manifest(
            "b1",
            1,
            9,
            NOW,
            (TableFile("a", "t", "p", 8),),
            received=9,
            staged=8,
            dead_lettered=1,
            counts_by_reason={"not JSON": 1},
        ),
    )
    stage, record = StageRecord(storage), LakeRecord(lake)
    stage.refresh()
    stage.totals.batch_latency.observe(0.4)
    record.refresh()
    beat = {"state": "idle", "updated_at_ms": NOW}
    bus = {
        "stream": {"name": "S", "messages": 9, "bytes": 900, "first_seq": 1, "last_seq": 9},
        "consumer": {"pending": 0, "ack_pending": 0, "redelivered": 0, "ack_floor_seq": 9},
        "dlq": {"name": "D", "messages": 0, "bytes": 0},
        "unstaged": {"subjects": {}, "subject_count": 0, "messages": 0, "stagers": ["st"]},
        "last_by_table": {t: {"seq": s, "time_ms": NOW} for t, s in last_seq.items()},
    }
    return Snapshot(NOW, stage, record, beat, beat, bus, None, 60.0, {"a.t": 0.2})


def _commit(table: str, seq: int, newest_ms: int) -> dict[str, Any]:
    return {
        "table": table,
        "seq": seq,
        "events": 1,
        "upserts": 1,
        "deletes": 0,
        "committed_at_ms": NOW,
        "max_commit_ts_ms": newest_ms,
        "duration_ms": 100,
    }


def test_table_states_fresh_catching_up_stale_and_pipeline_state(tmp_path: Path) -> None:
    """Covered → fresh; behind but keeping pace (its newest change within FRESH_WITHIN_S,
    or its last commit recent with a short lag: the steady state of a busy table) → fresh;
    behind otherwise → catching_up; behind and past stale_after → stale, which makes the
    pipeline stale."""
    snap = _snapshot(
        tmp_path,
        [
            _commit("a.t", 9, NOW - 1000),
            _commit("a.s", 3, NOW - 5000),
            {**_commit("a.p", 3, NOW - 25_000), "committed_at_ms": NOW - 10_000},
            {**_commit("a.q", 3, NOW - 40_000), "committed_at_ms": NOW - 30_000},
            _commit("a.u", 3, NOW - 30_000),
            _commit("a.v", 2, NOW - 600_000),
        ],
        {"a.t": 9, "a.s": 7, "a.p": 7, "a.q": 7, "a.u": 7, "a.v": 8},
    )
    rows = {r["table"]: r for r in table_states(snap)}
    assert {t: r["state"] for t, r in rows.items()} == {
        "a.p": "fresh",
        "a.q": "catching_up",
        "a.s": "fresh",
        "a.t": "fresh",
        "a.u": "catching_up",
        "a.v": "stale",
    }
    assert 0.9 < rows["a.t"]["freshness_s"] < 5
    state, problems = pipeline_state(snap, list(rows.values()))
    assert state == "stale"
    assert "a.v is stale" in problems
    assert status_json(snap)["stage"]["received"] == 9


def test_every_rendered_metric_is_documented_and_every_documented_one_rendered(
    tmp_path: Path,
) -> None:
    """The names in /metrics of a snapshot with every source present equal the names in
    docs/metrics.md."""
    snap = _snapshot(tmp_path, [_commit("a.t", 9, NOW - 1000)], {"a.t": 9})
    text = render(snap).decode()
    rendered = set(re.findall(r"^# TYPE (tidelake_\S+) ", text, re.M))
    assert {"process_cpu_seconds_total", "python_info"} <= set(
        re.findall(r"^# TYPE (\S+) ", text, re.M)
    )
    # serve's part of the doc; the processes' own endpoints follow it (runtime/live_metrics.py)
    serve_doc = DOC.read_text().split("## Each process's own endpoint")[0]
    documented = set(re.findall(r"^\| `(tidelake_[a-z_]+)`", serve_doc, re.M))
    assert rendered == documented
    assert 'tidelake_table_freshness_seconds{table="a.t"}' in text
    assert 'tidelake_pipeline_state{state="healthy"} 1.0' in text


def test_a_capture_that_stopped_beating_takes_the_pipeline_down(tmp_path: Path) -> None:
    """tidelake's capture shows up among the processes once it wrote a heartbeat; one older
    than the down threshold makes the pipeline down and /metrics says so."""
    snap = _snapshot(tmp_path, [_commit("a.t", 9, NOW - 1000)], {"a.t": 9})
    assert "capture" not in status_json(snap)["processes"]
    snap.capture = {"state": "running", "updated_at_ms": NOW - 60_000, "last_error": "gone"}
    status = status_json(snap)
    assert status["processes"]["capture"]["up"] is False
    assert status["state"] == "down"
    assert "the capture is down" in status["problems"]
    assert {"source": "capture", "message": "gone"} in status["errors"]
    assert 'tidelake_process_up{stage="capture"} 0.0' in render(snap).decode()


def test_a_table_waiting_on_a_transient_cause_is_listed_among_the_errors(tmp_path: Path) -> None:
    """Probe "after the lake's disk fills and is freed, tables stay paused in memory with
    errors: []": a table the ingest holds back for a retry (lake/failures.py) is listed in
    the status errors with its cause, one entry per table, though it is not paused."""
    snap = _snapshot(tmp_path, [_commit("a.t", 9, NOW - 1000)], {"a.t": 9})
    cause = "OSError: [Errno 28] No space left on device"
    snap.ingest = {
        "state": "retrying",
        "updated_at_ms": NOW,
        "retrying": {"a.t": cause, "b.u": cause},
        "last_error": cause,
    }
    errors = status_json(snap)["errors"]
    expected = [
        {"source": "ingest", "table": "a.t", "message": f"retrying: {cause}"},
        {"source": "ingest", "table": "b.u", "message": f"retrying: {cause}"},
        {"source": "ingest", "message": cause},
    ]
    assert expected == [e for e in errors if e["source"] == "ingest"]
