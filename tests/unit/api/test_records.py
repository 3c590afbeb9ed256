"""Incremental readers of the durable record: JSON Lines tails, manifests, commits."""

from __future__ import annotations

from pathlib import Path

import orjson

from tidelake.api.records import Histogram, LakeRecord, StageRecord
from tidelake.config import RetentionConfig
from tidelake.lake.retention import StagedRetention
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, TableFile, table_file_path, write_manifest


def _line(**fields: object) -> bytes:
    return orjson.dumps(fields) + b"\n"


def test_stage_record_sums_each_manifest_once(tmp_path: Path) -> None:
    """Totals and per-table events come from the manifests; a second refresh adds only the
    manifest written since."""
    storage = LocalStorage(tmp_path)

    def manifest(first: int, last: int, dead: int) -> Manifest:
        return Manifest(
            batch_id=f"b{first}",
            seq_first=first,
            seq_last=last,
            created_at_ms=1_000 * last,
            tables=(TableFile("shop", "orders", "x", last - first + 1 - dead),),
            received=last - first + 1,
            staged=last - first + 1 - dead,
            dead_lettered=dead,
            counts_by_reason={"not JSON": dead} if dead else {},
        )

    write_manifest(storage, manifest(1, 10, 1))
    record = StageRecord(storage)
    assert len(record.refresh()) == 1
    write_manifest(storage, manifest(11, 15, 0))
    assert [m.seq_first for m in record.refresh()] == [11]
    assert record.refresh() == []
    t = record.totals
    assert (t.batches, t.received, t.staged, t.dead_lettered) == (2, 15, 14, 1)
    assert t.events_by_table == {"shop.orders": 14}
    assert t.by_reason == {"not JSON": 1}
    assert (t.last_seq, t.last_manifest_ms) == (15, 15_000)


def test_stage_record_totals_stay_whole_across_retention(tmp_path: Path) -> None:
    """Batches retired by the ingest leave their counts in retired/: a running reader and a
    new one both count every batch exactly once."""
    storage = LocalStorage(tmp_path)
    for first, last in [(1, 10), (11, 20), (21, 30)]:
        path = table_file_path(f"b{first}", "shop", "orders")
        storage.put(path, b"{}\n")
        write_manifest(
            storage,
            Manifest(
                batch_id=f"b{first}",
                seq_first=first,
                seq_last=last,
                created_at_ms=1_000 * last,
                tables=(TableFile("shop", "orders", path, 10),),
                received=10,
                staged=10,
            ),
        )
    running = StageRecord(storage)
    running.refresh()
    StagedRetention(storage, RetentionConfig()).retire(20)
    running.refresh()
    fresh = StageRecord(storage)
    fresh.refresh()
    for t in (running.totals, fresh.totals):
        assert (3, 30, 30, {"shop.orders": 30}, 30) == (
            t.batches,
            t.received,
            t.staged,
            t.events_by_table,
            t.last_seq,
        )


def test_lake_record_totals_commits_skips_and_pauses_per_table(tmp_path: Path) -> None:
    """Upserts, deletes, checkpoint, freshness reference and lag per table from
    commits.jsonl; skipped counts from skipped.jsonl only; paused tables from paused.json."""
    (tmp_path / "commits.jsonl").write_bytes(
        _line(
            table="a.t",
            seq=5,
            events=4,
            upserts=3,
            deletes=1,
            committed_at_ms=10_000,
            max_commit_ts_ms=8_000,
            duration_ms=1_200,
            skipped_stale=7,
        )
        + _line(
            table="a.t",
            seq=9,
            events=2,
            upserts=2,
            deletes=0,
            committed_at_ms=20_000,
            max_commit_ts_ms=19_500,
            duration_ms=300,
        )
    )
    (tmp_path / "skipped.jsonl").write_bytes(
        _line(table="a.t", seq_last=9, duplicates=2, stale=1, at_ms=20_000)
    )
    (tmp_path / "paused.json").write_bytes(orjson.dumps({"b.u": "no primary key"}))
    record = LakeRecord(tmp_path)
    record.refresh()
    t = record.tables["a.t"]
    assert (t.commits, t.events, t.upserts, t.deletes) == (2, 6, 5, 1)
    assert (t.checkpoint_seq, t.last_commit_ms, t.max_commit_ts_ms) == (9, 20_000, 19_500)
    assert t.lag_s == 0.5
    assert (t.skipped_duplicates, t.skipped_stale) == (2, 1)
    assert t.commit_duration.count == 2
    assert record.paused == {"b.u": "no primary key"}
    assert "b.u" in record.tables


def test_histogram_buckets_are_cumulative() -> None:
    """Each bucket counts every observation at or below its bound; +Inf counts all."""
    h = Histogram((1.0, 5.0))
    for v in (0.5, 1.0, 3.0, 9.0):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2.0), ("5.0", 3.0), ("+Inf", 4.0)]
    assert h.sum == 13.5
