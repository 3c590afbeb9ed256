"""Staged batches retired once every table passed them (lake/retention.py), on a real local
staging root."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tidelake.config import RetentionConfig
from tidelake.lake.retention import StagedRetention
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import (
    Manifest,
    TableFile,
    read_retired,
    table_file_path,
    write_manifest,
)


def _stage(storage: LocalStorage, first: int, last: int, batch_id: str) -> Manifest:
    path = table_file_path(batch_id, "shop", "orders")
    storage.put(path, b'{"op":"c"}\n' * (last - first + 1))
    manifest = Manifest(
        batch_id=batch_id,
        seq_first=first,
        seq_last=last,
        created_at_ms=1_000 * last,
        tables=(TableFile("shop", "orders", path, last - first + 1),),
        received=last - first + 1,
        staged=last - first + 1,
        counts_by_reason={"x": 1},
    )
    write_manifest(storage, manifest)
    return manifest


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_batches_at_or_below_the_bound_go_and_their_counts_stay(tmp_path: Path) -> None:
    """Manifests ending at or below the bound are deleted with their files and folders; the
    retired totals hold their counts; later batches stay."""
    storage = LocalStorage(tmp_path)
    _stage(storage, 1, 10, "a")
    _stage(storage, 11, 20, "b")
    kept = _stage(storage, 21, 30, "c")
    retired = StagedRetention(storage, RetentionConfig()).retire(20)
    assert (20, 2, 2) == (retired.through_seq, retired.manifests, retired.files)
    assert [
        kept.tables[0].path,
        kept.name,
        "retired/00000000000000000020.json",
    ] == _files(tmp_path)
    assert ["c"] == [p.name for p in (tmp_path / "batches").iterdir()]
    path, totals = read_retired(storage)
    assert "retired/00000000000000000020.json" == path
    assert (20, 2, 20, 20, {"shop.orders": 20}, {"x": 2}, 20_000) == (
        totals.through_seq,
        totals.batches,
        totals.received,
        totals.staged,
        totals.events_by_table,
        totals.counts_by_reason,
        totals.last_manifest_ms,
    )


def test_totals_cumulate_and_a_crash_leftover_is_not_counted_twice(tmp_path: Path) -> None:
    """A manifest left behind by a crash after the totals were written (its bound already
    counted) is deleted by the next pass without being added again; older totals go."""
    storage = LocalStorage(tmp_path)
    _stage(storage, 1, 10, "a")
    StagedRetention(storage, RetentionConfig()).retire(10)
    leftover = _stage(storage, 1, 10, "a-restaged")  # as if its delete never happened
    _stage(storage, 11, 20, "b")
    retention = StagedRetention(storage, RetentionConfig())  # a new process
    assert 2 == retention.retire(25).manifests
    path, totals = read_retired(storage)
    assert ("retired/00000000000000000025.json", 2, 20) == (path, totals.batches, totals.received)
    assert not storage.exists(leftover.name)
    assert ["retired/00000000000000000025.json"] == storage.list("retired")


def test_archive_mode_moves_batches_under_the_prefix(tmp_path: Path) -> None:
    """Archive mode keeps a copy of the manifest and its files under the archive prefix."""
    storage = LocalStorage(tmp_path)
    manifest = _stage(storage, 1, 10, "a")
    StagedRetention(storage, RetentionConfig(mode="archive", archive_prefix="old")).retire(10)
    assert [
        f"old/{manifest.tables[0].path}",
        f"old/{manifest.name}",
        "retired/00000000000000000010.json",
    ] == _files(tmp_path)


def test_nothing_passed_changes_nothing(tmp_path: Path) -> None:
    """A bound below every manifest retires nothing and writes no totals."""
    storage = LocalStorage(tmp_path)
    _stage(storage, 11, 20, "b")
    assert 0 == StagedRetention(storage, RetentionConfig()).retire(15).manifests
    assert [] == storage.list("retired")


def test_an_archive_prefix_inside_staging_folders_is_refused() -> None:
    """Archiving into manifests/ or batches/ would make retired batches exist again."""
    with pytest.raises(ValueError, match="archive_prefix"):
        RetentionConfig(mode="archive", archive_prefix="manifests/old")


def test_due_waits_for_the_interval(tmp_path: Path) -> None:
    """Passes run at most every interval_s."""
    retention = StagedRetention(LocalStorage(tmp_path), RetentionConfig(interval_s=10))
    assert retention.due()
    retention.retire(0)
    now = time.monotonic()
    assert (False, True) == (retention.due(now + 5), retention.due(now + 10))
