"""The batch accumulator: cuts, the DDL barrier, the files-then-manifest order, the counts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tidelake.events import ChangeEvent, Op, Position
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.batch import Batch, BatchLimits
from tidelake.stage.manifest import list_manifests, read_manifest, table_file_path


def _row(table: str, key: int, op: Op = Op.INSERT) -> ChangeEvent:
    return ChangeEvent(
        source="tidb",
        database="shop",
        table=table,
        op=op,
        position=Position((1000 + key, key)),
        pk=("id",),
        key={"id": key},
        after={"id": key},
    )


def _ddl(table: str, key: int) -> ChangeEvent:
    return ChangeEvent(
        source="tidb",
        database="shop",
        table=table,
        op=Op.DDL,
        position=Position((1000 + key, key)),
        ddl=f"ALTER TABLE {table} ADD COLUMN c INT",
        ddl_type="ALTER",
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cut_by_message_count() -> None:
    """A batch is due once it holds max_events messages, not before."""
    b: Batch[int] = Batch(BatchLimits(max_events=3, max_bytes=10**9, max_age_s=60))
    for seq in (1, 2):
        b.add_events(seq, seq, 10, [_row("t", seq)])
    assert not b.is_due()
    b.add_events(3, 3, 10, [_row("t", 3)])
    assert b.is_due()
    assert b.room() == 0


def test_cut_by_payload_bytes() -> None:
    """Payload bytes count too: two large messages fill the batch."""
    b: Batch[int] = Batch(BatchLimits(max_events=1000, max_bytes=2048, max_age_s=60))
    b.add_events(1, 1, 1024, [_row("t", 1)])
    assert not b.is_due()
    b.add_dead_lettered(2, 2, 1024, "not JSON: x")
    assert b.is_due()


def test_cut_by_age_of_the_first_message() -> None:
    """The age limit runs from the first message; an empty batch is never due."""
    clock = FakeClock()
    b: Batch[int] = Batch(BatchLimits(max_events=1000, max_age_s=1.0), clock=clock)
    clock.now += 5
    assert not b.is_due()
    b.add_events(1, 1, 10, [_row("t", 1)])
    clock.now += 0.6
    assert not b.is_due()
    assert b.time_left_s() == pytest.approx(0.4)
    clock.now += 0.5
    assert b.is_due()


def test_ddl_closes_the_batch_and_is_its_last_event(tmp_path: Path) -> None:
    """A DDL is a barrier: it is the table file's last line and listed in manifest.ddl;
    nothing more may be added."""
    storage = LocalStorage(tmp_path)
    b: Batch[int] = Batch(BatchLimits())
    b.add_events(1, 1, 10, [_row("orders", 1)])
    b.add_events(2, 2, 10, [_ddl("orders", 2)])
    assert b.closed
    assert b.is_due()
    with pytest.raises(RuntimeError, match="DDL barrier"):
        b.add_events(3, 3, 10, [_row("orders", 3)])
    m = b.flush(storage, batch_id="b1")
    lines = storage.get(table_file_path("b1", "shop", "orders")).splitlines()
    assert [orjson.loads(x)["op"] for x in lines] == ["insert", "ddl"]
    assert [d["ddl_type"] for d in m.ddl] == ["ALTER"]
    assert (m.seq_first, m.seq_last) == (1, 2)


def test_flush_writes_files_first_then_the_manifest(tmp_path: Path) -> None:
    """When the files are written the manifest does not exist yet; afterwards it names
    every file with its row count, and every line carries its stream sequence."""
    storage = LocalStorage(tmp_path)
    b: Batch[str] = Batch(BatchLimits())
    b.add_events("m5", 5, 10, [_row("orders", 1), _row("orders", 2)])
    b.add_events("m6", 6, 10, [_row("customers", 3)])
    b.add_skipped("m7", 7, 10, "watermark")
    b.add_dead_lettered("m8", 8, 10, "not JSON: bad")
    seen_at_files: list[list[str]] = []
    m = b.flush(storage, batch_id="b2", after_files=lambda: seen_at_files.append(
        list_manifests(storage)
    ))  # fmt: skip
    assert seen_at_files == [[]]
    assert list_manifests(storage) == [m.name]
    assert read_manifest(storage, m.name) == m
    assert {t.table_id: t.events for t in m.tables} == {"shop.orders": 2, "shop.customers": 1}
    seqs = [orjson.loads(x)["seq"] for x in storage.get(m.tables[1].path).splitlines()]
    assert (m.tables[1].table_id, seqs) == ("shop.orders", [5, 5])
    assert (m.received, m.staged, m.skipped, m.dead_lettered) == (4, 2, 1, 1)
    assert m.counts_by_reason == {"not JSON": 1, "skipped:watermark": 1}
    assert b.messages == ["m5", "m6", "m7", "m8"]


def test_a_batch_of_only_dead_letters_still_gets_a_manifest(tmp_path: Path) -> None:
    """The manifest records the sequence range and counts even with no table file, so the
    ingest checkpoint can move past it."""
    storage = LocalStorage(tmp_path)
    b: Batch[int] = Batch(BatchLimits())
    b.add_dead_lettered(1, 9, 3, "invalid UTF-8 at byte 0")
    m = b.flush(storage)
    assert (m.tables, m.seq_first, m.seq_last, m.received, m.dead_lettered) == ((), 9, 9, 1, 1)


def test_empty_batch_is_not_flushed(tmp_path: Path) -> None:
    """Flushing nothing is a bug in the caller, not an empty manifest."""
    b: Batch[int] = Batch(BatchLimits())
    with pytest.raises(ValueError, match="empty"):
        b.flush(LocalStorage(tmp_path))
