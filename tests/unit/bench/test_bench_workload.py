"""The ingest bench's change batches: the 70/20/10 mix, each key once, staged as the stager
stages them."""

from pathlib import Path

from tidelake.events import Op
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import list_manifests, read_manifest
from tidelake_bench.changes import FIRST_NEW_ID, ChangeStream


def test_a_batch_is_70_20_10_with_every_key_once(tmp_path: Path) -> None:
    """1,000 changes: 700 updates and 100 deletes of distinct live keys, 200 new keys."""
    stream = ChangeStream(table_rows=5_000, seed=3)
    batch = stream.stage(LocalStorage(tmp_path), 1_000)
    assert (700, 200, 100) == (batch.updates, batch.inserts, batch.deletes)
    keys = [int(e.key["id"]) for e in batch.events if e.key]
    assert len(keys) == len(set(keys)) == 1_000
    ops = {Op.INSERT: 0, Op.UPDATE: 0, Op.DELETE: 0}
    for event in batch.events:
        ops[event.op] += 1
        if event.op is Op.INSERT:
            assert int(event.after["id"]) >= FIRST_NEW_ID  # type: ignore[index]
        else:
            assert 1 <= int(event.key["id"]) <= 5_000  # type: ignore[index]
    assert {Op.INSERT: 200, Op.UPDATE: 700, Op.DELETE: 100} == ops


def test_deleted_keys_are_never_changed_again_and_seqs_increase(tmp_path: Path) -> None:
    """Later batches touch live keys only; stream sequences continue across batches."""
    stream = ChangeStream(table_rows=2_000, seed=5)
    storage = LocalStorage(tmp_path)
    batches = [stream.stage(storage, 500) for _ in range(4)]
    deleted: set[str] = set()
    seqs = []
    for batch in batches:
        for event in batch.events:
            key = event.key["id"]  # type: ignore[index]
            assert key not in deleted
            if event.op is Op.DELETE:
                deleted.add(key)
            seqs.append(event.seq)
    assert list(range(1, 2_001)) == seqs
    assert 2_000 - 4 * 50 + 4 * 100 == stream.live_keys


def test_each_batch_is_one_manifest_naming_its_sequence_range(tmp_path: Path) -> None:
    """What the ingest reads: one manifest per batch, counts that reconcile."""
    stream = ChangeStream(table_rows=1_000, seed=1)
    storage = LocalStorage(tmp_path)
    for _ in range(2):
        stream.stage(storage, 100)
    manifests = [read_manifest(storage, p) for p in list_manifests(storage)]
    assert [(1, 100), (101, 200)] == [(m.seq_first, m.seq_last) for m in manifests]
    assert all(m.received == m.staged == 100 for m in manifests)
    assert [("shop.orders", 100)] * 2 == [(m.tables[0].table_id, m.tables[0].events)
                                          for m in manifests]  # fmt: skip
