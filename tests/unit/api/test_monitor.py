"""What the monitor makes of the pipeline's state: a table the capture skips
(capture/keys.py) is listed as skipped with its reason, never stale, and keeps the pipeline
healthy (``status --check``); messages on subjects no stager takes (bus/coverage.py) make it
stale, in the bus state, the status, /metrics and ``tidelake status``."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from tidelake.api.jetstream import UNSTAGED_SHOWN, unstaged_state
from tidelake.api.metrics import render
from tidelake.api.monitor import Snapshot, status_json
from tidelake.api.records import LakeRecord, StageRecord
from tidelake.bus.coverage import Coverage
from tidelake.cli.operate import render_status
from tidelake.runtime.storage import LocalStorage

NOW = int(time.time() * 1000)
ADVICE = (
    "they expire from the stream without reaching the lake. Add each subject to a worker's "
    "bus.consumer.filter_subjects and its table to that worker's ingest.tables "
    '(docs/operations.md, "Messages no stager takes")'
)


def _snapshot(tmp_path: Path, unstaged: dict[str, Any] | None) -> Snapshot:
    """One fresh table, both processes up, the bus answering with ``unstaged``."""
    lake = tmp_path / "lake"
    lake.mkdir(parents=True)
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
        "unstaged": unstaged,
        "last_by_table": {"shop.orders": {"seq": 9, "time_ms": NOW}},
    }
    return Snapshot(NOW, stage, record, beat, beat, bus, None, 60.0, {})


def _metric(text: str, name: str) -> str | None:
    lines = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return lines[0].split()[1] if lines else None


def test_skipped_table_is_listed_as_skipped_and_the_pipeline_stays_healthy(
    tmp_path: Path,
) -> None:
    """The capture's heartbeat names shop.log as skipped: status lists it with state
    ``skipped`` and the reason, beside a fresh table, and the pipeline is healthy."""
    snap = _snapshot(tmp_path, None)
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


def test_the_bus_state_lists_the_subjects_with_most_messages_first_and_counts_all() -> None:
    """Up to UNSTAGED_SHOWN subjects, most messages first (then by name); the count and the
    messages are of every unstaged subject; None when coverage is unknown."""
    unstaged = {f"cdc.db.t{i:02}": i for i in range(1, 31)} | {"cdc.db.z": 30}
    state = unstaged_state(Coverage(("w1", "w2"), unstaged))
    assert state is not None
    expected_first = ["cdc.db.t30", "cdc.db.z", "cdc.db.t29"]
    assert expected_first == list(state["subjects"])[:3]
    assert UNSTAGED_SHOWN == len(state["subjects"])
    assert 30 == state["subjects"]["cdc.db.z"]
    assert (31, sum(range(1, 31)) + 30, ["w1", "w2"]) == (
        state["subject_count"],
        state["messages"],
        state["stagers"],
    )
    assert unstaged_state(None) is None


def test_unstaged_messages_make_the_pipeline_stale_with_what_to_do(tmp_path: Path) -> None:
    """Five unstaged subjects: the pipeline is stale (``status --check`` fails on anything
    but healthy), the problem names the messages, the subjects' count, the first three and
    what to do; the status carries the subjects under ``bus.unstaged``."""
    subjects = {"cdc.crm.a": 40, "cdc.crm.b": 30, "cdc.crm.c": 20, "cdc.crm.d": 10, "x": 1}
    unstaged = unstaged_state(Coverage(("w1",), subjects))
    status = status_json(_snapshot(tmp_path, unstaged))
    expected = (
        "101 message(s) on 5 subject(s) no stager takes: cdc.crm.a, cdc.crm.b, cdc.crm.c "
        f"(+2 more); {ADVICE}"
    )
    assert ("stale", [expected]) == (status["state"], status["problems"])
    assert unstaged == status["bus"]["unstaged"]
    assert ["fresh"] == [t["state"] for t in status["tables"]]


def test_full_or_unknown_coverage_leaves_the_pipeline_healthy(tmp_path: Path) -> None:
    """Every subject taken, or no stager marked (an older deployment): healthy, no problem."""
    covered = unstaged_state(Coverage(("tidelake-stager",), {}))
    for unstaged in (covered, None):
        status = status_json(_snapshot(tmp_path / str(unstaged is None), unstaged))
        assert ("healthy", []) == (status["state"], status["problems"])


def test_metrics_show_unstaged_subjects_and_messages_only_when_coverage_is_known(
    tmp_path: Path,
) -> None:
    """The two gauges hold the unstaged subjects and their messages; 0 when everything is
    taken; absent when coverage is unknown."""
    unstaged = unstaged_state(Coverage(("w1",), {"cdc.a.b": 3, "cdc.c.d": 4}))
    covered = unstaged_state(Coverage(("w1",), {}))
    names = ("tidelake_bus_unstaged_subjects", "tidelake_bus_unstaged_messages")
    actual = []
    for i, state in enumerate((unstaged, covered, None)):
        text = render(_snapshot(tmp_path / str(i), state)).decode()
        actual.append(tuple(_metric(text, name) for name in names))
    assert [("2.0", "7.0"), ("0.0", "0.0"), (None, None)] == actual


def test_status_prints_every_listed_unstaged_subject_with_its_messages(tmp_path: Path) -> None:
    """``tidelake status`` (piped) prints the problem and a line with each listed subject and
    its messages, and how many more there are."""
    unstaged = unstaged_state(Coverage(("w1",), {f"cdc.db.t{i:02}": 1 for i in range(25)}))
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=False, width=80, color_system=None)
    render_status(status_json(_snapshot(tmp_path, unstaged)), out)
    lines = buf.getvalue().splitlines()
    assert "pipeline stale" == lines[0].split("  at")[0]
    line = next(x for x in lines if x.startswith("unstaged:"))
    listed = ", ".join(f"cdc.db.t{i:02} (1)" for i in range(20))
    expected = f"unstaged: 25 messages on 25 subjects no stager takes: {listed} (+5 more)"
    assert expected == line
