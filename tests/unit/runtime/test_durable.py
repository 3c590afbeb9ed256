"""Acked means durable (issue 23, deliver 1): every local state write a stage acks after
fsyncs the file, its name (the directory) and each directory it had to create.

os.fsync is wrapped to record what each call syncs (a file's name, or ``dir:<path>`` for a
directory, relative to the test's tmp_path), so each test states the exact fsyncs of one
write site. The OS-crash tests (tests/crash/) prove the same on a filesystem that drops
whatever was not synced.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelake.capture.position import PositionStore
from tidelake.lake.ledger import CommitRecord, Ledger
from tidelake.runtime import durable
from tidelake.runtime.storage import LocalStorage


def _recorder(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if target.is_dir():
            rel = target.relative_to(root).as_posix() if target != root else "."
            synced.append(f"dir:{rel}")
        else:
            synced.append(target.name)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_write_atomic_syncs_file_then_directory_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replace: temporary file synced before the rename, the directory after it."""
    (tmp_path / "state.json").write_bytes(b"old")
    synced = _recorder(monkeypatch, tmp_path)
    durable.write_atomic(tmp_path / "state.json", b"new")
    assert ["temporary", "dir:."] == [
        "temporary" if s.startswith(".state.json.") else s for s in synced
    ]
    assert (["state.json"], b"new") == (
        [p.name for p in tmp_path.iterdir()],
        (tmp_path / "state.json").read_bytes(),
    )


def test_make_dirs_syncs_every_directory_it_creates_in_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a/b/c`` made from nothing: c's entry in b, b's in a, a's in the root; a second call
    on the existing directory syncs nothing."""
    synced = _recorder(monkeypatch, tmp_path)
    durable.make_dirs(tmp_path / "a" / "b" / "c")
    durable.make_dirs(tmp_path / "a" / "b" / "c")
    assert ["dir:a/b", "dir:a", "dir:."] == synced


def test_a_staged_file_in_a_new_batch_directory_syncs_the_new_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The founders' probe: a new ``batches/<id>/`` was not synced in its parent. Now the
    first file of a batch syncs the batch directory's entry in ``batches/`` and
    ``batches/``'s in the root, then itself and its name; a manifest into an existing
    directory syncs the file and the directory only."""
    storage = LocalStorage(tmp_path)
    (tmp_path / "manifests").mkdir()
    synced = _recorder(monkeypatch, tmp_path)
    storage.put("batches/b1/shop.orders.jsonl", b"{}\n")
    first = list(synced)
    synced.clear()
    storage.put("manifests/00000000000000000002-00000000000000000001-b1.json", b"{}")
    assert ["dir:batches", "dir:.", "file", "dir:batches/b1"] == [
        "file" if s.startswith(".shop.orders.jsonl.") else s for s in first
    ]
    assert ["file", "dir:manifests"] == ["file" if s.startswith(".0") else s for s in synced]


def test_the_ledger_state_and_commit_log_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ingest's and the API's state files (ledger): a new state directory is synced in
    its parent, a cursor write syncs file + directory, the first commit-log append syncs the
    file and the directory, the next one the file only."""
    synced = _recorder(monkeypatch, tmp_path)
    ledger = Ledger(tmp_path / "_tidelake")
    ledger.save_cursor(7)
    record = CommitRecord(table="shop.orders", instant="1", seq=2, events=1, committed_at_ms=1)
    ledger.append_commit(record)
    ledger.append_commit(record)
    assert [
        "dir:.",
        "temporary",
        "dir:_tidelake",
        "commits.jsonl",
        "dir:_tidelake",
        "commits.jsonl",
    ] == ["temporary" if s.startswith(".cursor.json.") else s for s in synced]


def test_the_capture_position_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture saves its position only after the PubAcks; the save syncs the new
    directory, the file and its name."""
    synced = _recorder(monkeypatch, tmp_path)
    PositionStore(tmp_path / "capture" / "position.json").save({"file": "binlog.000001"})
    assert ["dir:.", "temporary", "dir:capture"] == [
        "temporary" if s.startswith(".position.json.") else s for s in synced
    ]


def test_fsync_paths_syncs_each_file_then_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files written by a process that never syncs (the JVM): each file, then each of their
    directories once; a path already gone is skipped."""
    (tmp_path / "t").mkdir()
    for name in ("a.parquet", "b.parquet"):
        (tmp_path / "t" / name).write_bytes(b"x")
    synced = _recorder(monkeypatch, tmp_path)
    count = durable.fsync_paths(
        [tmp_path / "t" / "a.parquet", tmp_path / "t" / "gone", tmp_path / "t" / "b.parquet"]
    )
    assert (3, ["a.parquet", "b.parquet", "dir:t"]) == (count, synced)
