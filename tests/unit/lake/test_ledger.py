"""The ledger: typed, versioned records of the ingest's state files, written durably."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tidelake.errors import Terminal
from tidelake.lake.ledger import (
    LEDGER_VERSION,
    BlockedDdl,
    CommitRecord,
    DatabaseState,
    Ledger,
    LedgerError,
    LedgerVersionError,
    SkippedRecord,
    durable_append,
    durable_write,
)


def _commit(**fields: object) -> CommitRecord:
    base: dict[str, object] = {"table": "shop.orders", "seq": 12, "committed_at_ms": 1000}
    return CommitRecord.model_validate({**base, **fields})


def test_commit_records_round_trip_through_the_log(tmp_path: Path) -> None:
    """A row commit and a DDL commit come back equal, each line carrying ``v``."""
    ledger = Ledger(tmp_path)
    rows = _commit(instant="20240101", events=3, upserts=2, deletes=1, dead_lettered=1)
    ddl = _commit(ddl=1, ddl_type="ALTER TABLE", ddl_action="added", ddl_changes=["add c"])
    ledger.append_commit(rows)
    ledger.append_commit(ddl)
    assert [rows, ddl] == ledger.commits()
    lines = (tmp_path / "commits.jsonl").read_bytes().splitlines()
    assert [LEDGER_VERSION] * 2 == [orjson.loads(line)["v"] for line in lines]


def test_a_line_written_before_the_ledger_is_read_as_version_0(tmp_path: Path) -> None:
    """Lines without ``v`` (any of the three shapes the ingest used to build) upgrade
    explicitly: same keys, ``v`` = the current version."""
    old = {"table": "shop.orders", "seq": 4, "committed_at_ms": 9, "ddl": 1, "ddl_type": "X"}
    (tmp_path / "commits.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    assert [CommitRecord(table="shop.orders", seq=4, committed_at_ms=9, ddl=1, ddl_type="X")] == (
        Ledger(tmp_path).commits()
    )


def test_a_newer_version_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A record from a newer tidelake is not half-understood: a terminal error says so."""
    path = tmp_path / "commits.jsonl"
    path.write_bytes(orjson.dumps({"v": LEDGER_VERSION + 1, "table": "a.b"}) + b"\n")
    with pytest.raises(LedgerVersionError, match=r"commits\.jsonl.*newer") as caught:
        Ledger(tmp_path).commits()
    assert isinstance(caught.value, Terminal)


@pytest.mark.parametrize(
    ("name", "content", "read"),
    [
        ("paused.json", b"{not json", lambda lg: lg.paused()),
        ("paused.json", b'{"v": 1, "tables": {"a.b": 3}}', lambda lg: lg.paused()),
        ("dropped.json", b"[1, 2]", lambda lg: lg.tombstones()),
        ("ddl_blocked.json", b'{"a.b": {"reason": "no seq"}}', lambda lg: lg.blocked()),
        ("commits.jsonl", b'{"table": "a.b"}\n', lambda lg: lg.commits()),
        ("skipped.jsonl", b'{"table": "a.b", "seq_last": "x"}\n', lambda lg: lg.skipped()),
    ],
)
def test_malformed_state_is_a_terminal_error_naming_the_file(
    tmp_path: Path, name: str, content: bytes, read: object
) -> None:
    """Not JSON, the wrong shape or a missing field: LedgerError (terminal) with the path."""
    (tmp_path / name).write_bytes(content)
    with pytest.raises(LedgerError, match=re.escape(name)) as caught:
        read(Ledger(tmp_path))  # type: ignore[operator]
    assert isinstance(caught.value, Terminal)


def test_an_unreadable_cursor_is_a_hint_lost_not_an_error(tmp_path: Path) -> None:
    """The cursor only saves listing work: garbage reads as 0, a saved one comes back."""
    ledger = Ledger(tmp_path)
    assert 0 == ledger.cursor()
    (tmp_path / "cursor.json").write_bytes(b"{garbage")
    assert 0 == ledger.cursor()
    ledger.save_cursor(41)
    assert (41, {"v": 1, "seq": 41}) == (
        ledger.cursor(),
        orjson.loads((tmp_path / "cursor.json").read_bytes()),
    )


def test_an_unreadable_control_file_is_no_request_as_documented(tmp_path: Path) -> None:
    """control.json not JSON: no requests (its documented contract); one bad entry is
    dropped, the others stay."""
    (tmp_path / "control.json").write_bytes(b"{oops")
    assert {} == Ledger(tmp_path).requests()
    good = {"action": "pause", "reason": "", "at_ms": 5}
    data = {"tables": {"a.b": good, "a.c": {"action": "explode", "at_ms": 1}}}
    (tmp_path / "control.json").write_bytes(orjson.dumps(data))
    assert ["a.b"] == list(Ledger(tmp_path).requests())


def test_the_maps_of_version_0_are_read_and_rewritten_with_an_envelope(tmp_path: Path) -> None:
    """paused.json, dropped.json, ddl_blocked.json and databases.json were bare mappings;
    the ledger reads them and writes ``{"v": 1, ...}``."""
    (tmp_path / "paused.json").write_bytes(orjson.dumps({"a.b": "failures"}))
    (tmp_path / "dropped.json").write_bytes(orjson.dumps({"a.old": '{"seq": 3}'}))
    (tmp_path / "ddl_blocked.json").write_bytes(orjson.dumps({"a.b": {"seq": 7, "ddl": "X"}}))
    (tmp_path / "databases.json").write_bytes(orjson.dumps({"a": {"seq": 2, "exists": True}}))
    ledger = Ledger(tmp_path)
    assert (
        {"a.b": "failures"},
        {"a.old": '{"seq": 3}'},
        {"a.b": BlockedDdl(seq=7, ddl="X")},
        {"a": DatabaseState(seq=2, exists=True)},
    ) == (ledger.paused(), ledger.tombstones(), ledger.blocked(), ledger.databases())
    ledger.save_paused({})
    ledger.remove_tombstone("a.old")
    assert ({"v": 1, "tables": {}}, {"v": 1, "tables": {}}) == (
        orjson.loads((tmp_path / "paused.json").read_bytes()),
        orjson.loads((tmp_path / "dropped.json").read_bytes()),
    )


def test_skipped_lines_and_the_tail_read_only_what_is_new(tmp_path: Path) -> None:
    """The tail returns each complete line once; a half-written line waits for its newline."""
    ledger = Ledger(tmp_path)
    tail = ledger.skipped_tail()
    first = SkippedRecord(table="a.b", seq_last=5, duplicates=2, at_ms=1)
    ledger.append_skipped(first)
    assert [first] == tail.read_new()
    with (tmp_path / "skipped.jsonl").open("ab") as f:
        f.write(b'{"table": "a.b", "seq_la')
    assert [] == tail.read_new()
    with (tmp_path / "skipped.jsonl").open("ab") as f:
        f.write(b'st": 6, "stale": 1, "at_ms": 2}\n')
    assert [SkippedRecord(table="a.b", seq_last=6, stale=1, at_ms=2)] == tail.read_new()


def test_the_tail_starts_over_when_the_file_is_replaced(tmp_path: Path) -> None:
    """A log that was removed and written again is read from its start; ``reset`` says so."""
    ledger = Ledger(tmp_path)
    tail = ledger.commit_tail()
    ledger.append_commit(_commit(seq=1))
    ledger.append_commit(_commit(seq=2))
    assert ([1, 2], False) == ([c.seq for c in tail.read_new()], tail.reset)
    (tmp_path / "commits.jsonl").unlink()
    ledger.append_commit(_commit(seq=9))
    assert ([9], True) == ([c.seq for c in tail.read_new()], tail.reset)


def test_an_append_after_a_torn_line_starts_a_new_line(tmp_path: Path) -> None:
    """A crash mid-append leaves a line without newline: the next record is not glued to
    it, and the torn fragment (not JSON) is skipped on read."""
    ledger = Ledger(tmp_path)
    (tmp_path / "commits.jsonl").write_bytes(b'{"table": "a.b", "se')
    record = _commit()
    ledger.append_commit(record)
    assert [record] == ledger.commits()


def test_database_ddl_is_recorded_once_per_sequence(tmp_path: Path) -> None:
    """A replayed (older or equal) database DDL changes nothing."""
    ledger = Ledger(tmp_path)
    assert (True, False, True) == (
        ledger.record_database("shop", 5, exists=True),
        ledger.record_database("shop", 5, exists=False),
        ledger.record_database("shop", 6, exists=False),
    )
    assert {"shop": DatabaseState(seq=6, exists=False)} == ledger.databases()


def test_the_ingest_heartbeat_is_written_and_read_back(tmp_path: Path) -> None:
    """The ledger writes the ingest's heartbeat (with ``v``) where ``serve`` reads it."""
    ledger = Ledger(tmp_path)
    ledger.write_heartbeat("idle", cursor=3)
    beat = ledger.heartbeat() or {}
    assert ("ingest", "idle", 3, 1) == tuple(beat.get(k) for k in ("stage", "state", "cursor", "v"))


def _fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record what every os.fsync call syncs: 'dir' or the file's name."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        synced.append("dir" if os.path.isdir(target) else Path(target).name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_a_durable_write_fsyncs_the_file_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temporary file synced, renamed into place, directory synced; no temporary left."""
    synced = _fsynced(monkeypatch)
    durable_write(tmp_path / "paused.json", b"{}")
    assert 2 == len(synced)
    assert (synced[0].startswith(".paused.json."), "dir") == (True, synced[1])
    assert ["paused.json"] == [p.name for p in tmp_path.iterdir()]


def test_an_append_fsyncs_the_file_and_the_directory_only_when_it_created_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First append: file and directory; later appends: the file only."""
    synced = _fsynced(monkeypatch)
    durable_append(tmp_path / "commits.jsonl", b"{}")
    durable_append(tmp_path / "commits.jsonl", b"{}")
    assert ["commits.jsonl", "dir", "commits.jsonl"] == synced


def test_the_ledger_the_control_and_the_api_import_no_spark() -> None:
    """The API and the CLI read the ingest's state without starting a JVM: importing the
    ledger, the control and the server loads neither pyspark nor py4j."""
    code = (
        "import sys, tidelake.lake.ledger, tidelake.lake.control, tidelake.api.server; "
        "print(sorted(m for m in ('pyspark', 'py4j') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == proc.stdout.strip()
