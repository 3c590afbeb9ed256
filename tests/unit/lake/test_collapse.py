"""Pure ingest logic: checkpoint filtering, collapsing by position, typed rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from tidelake.errors import TableRefused
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.ingest import build_batch, collapse, filter_events

TYPES = {"id": "bigint", "status": "varchar(8)"}


def ev(
    op: str,
    key: int,
    pos: tuple[int, ...],
    seq: int,
    status: str | None = None,
    before: dict[str, Any] | None = None,
) -> ChangeEvent:
    row = {"id": str(key), "status": status}
    return ChangeEvent(
        source="test",
        database="shop",
        table="orders",
        op=Op(op),
        position=Position(pos),
        pk=("id",),
        key={"id": str(key)},
        before=row if op == "delete" else before,
        after=None if op == "delete" else row,
        commit_ts_ms=1_000,
        column_types=TYPES,
        seq=seq,
    )


def key_of(image: Any) -> tuple[Any, ...]:
    return (int(image["id"]),)


def test_filter_drops_what_the_checkpoint_covers_by_sequence_and_by_position() -> None:
    """seq <= checkpoint seq: duplicate; row position <= watermark: stale; DDL is not stale."""
    checkpoint = TableCheckpoint(seq=5, position=Position((50, 0)).encode())
    events = [
        ev("insert", 1, (40, 0), 4),  # redelivered
        ev("update", 1, (45, 0), 6),  # republished, older than the watermark
        ev("update", 1, (50, 0), 7),  # republished, equal to the watermark
        ev("update", 1, (51, 0), 8),  # new
        ev("update", 1, (51, 0), 8),  # the same message twice in one round
    ]
    ddl = ChangeEvent("test", "shop", "orders", Op.DDL, Position((49, 0)), ddl="x", seq=9)
    out = filter_events([*events, ddl], checkpoint)
    expected = ([8, 9], 2, 2)
    assert expected == ([e.seq for e in out.kept], out.duplicates, out.stale)


def test_filter_without_checkpoint_keeps_everything_once() -> None:
    """A table never written keeps every event (only exact copies are dropped)."""
    events = [ev("insert", 1, (1, 0), 1), ev("insert", 2, (2, 0), 2), ev("insert", 2, (2, 0), 2)]
    out = filter_events(events, None)
    expected = ([1, 2], 1, 0)
    assert expected == ([e.seq for e in out.kept], out.duplicates, out.stale)


def test_collapse_keeps_the_last_change_by_position_not_by_file_order() -> None:
    """Two updates in one transaction (same commit, same millisecond): the row index decides."""
    events = [
        ev("insert", 1, (10, 0), 1, "new"),
        ev("update", 1, (11, 1), 3, "second"),
        ev("update", 1, (11, 0), 2, "first"),
    ]
    changes = collapse(events, key_of)
    expected = [((1,), False, "second")]
    assert expected == [(c.key, c.delete, c.row["status"]) for c in changes]


def test_collapse_last_delete_wins_and_delete_then_reinsert_is_an_upsert() -> None:
    """A key whose last event is a DELETE is deleted; DELETE then INSERT is an upsert."""
    events = [
        ev("insert", 1, (1, 0), 1, "a"),
        ev("delete", 1, (2, 0), 2, "a"),
        ev("insert", 2, (3, 0), 3, "b"),
        ev("delete", 2, (4, 0), 4, "b"),
        ev("insert", 2, (5, 0), 5, "b2"),
    ]
    expected = [((1,), True), ((2,), False)]
    assert expected == [(c.key, c.delete) for c in collapse(events, key_of)]


def test_collapse_a_key_changing_update_deletes_the_old_key() -> None:
    """A binlog UPDATE whose ``before`` holds another key: old key deleted, new key upserted."""
    events = [ev("update", 20, (7, 0), 1, "x", before={"id": "2", "status": "x"})]
    expected = [((2,), True), ((20,), False)]
    assert expected == sorted((c.key, c.delete) for c in collapse(events, key_of))


def test_build_batch_types_rows_and_marks_deletes() -> None:
    """Rows carry typed values, the lineage columns and ``_hoodie_is_deleted``."""
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    events = [ev("insert", 1, (1, 0), 7, "a"), ev("delete", 2, (2, 0), 8, "b")]
    batch = build_batch("shop.orders", events, ("id",), ingest_ts=now)
    expected_names = [
        "id",
        "status",
        "_tl_op",
        "_tl_position",
        "_tl_commit_ts",
        "_tl_ingest_ts",
        "_tl_seq",
        "_hoodie_is_deleted",
    ]
    assert expected_names == batch.schema.names
    commit_ts = dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
    expected_rows = [
        (1, "a", "insert", Position((1, 0)).encode(), commit_ts, now, 7, False),
        (2, "b", "delete", Position((2, 0)).encode(), commit_ts, now, 8, True),
    ]
    assert expected_rows == batch.rows
    expected_counts = (1, 1)
    assert expected_counts == (batch.upserts, batch.deletes)


def test_build_batch_refuses_a_value_that_does_not_fit_its_type() -> None:
    """A malformed value pauses the table with a message naming column and type."""
    bad = ChangeEvent(
        "test",
        "shop",
        "orders",
        Op.INSERT,
        Position((1, 0)),
        pk=("id",),
        key={"id": "1"},
        after={"id": "1", "amount": "lots"},
        column_types={"id": "bigint", "amount": "decimal(10,2)"},
        seq=1,
    )
    with pytest.raises(TableRefused, match=r"column amount is not a valid decimal\(10,2\)"):
        build_batch("shop.orders", [bad], ("id",))


def test_build_batch_unions_columns_across_events() -> None:
    """Events naming different columns (ADD COLUMN mid-round) give one schema, NULL-filled."""
    first = ev("insert", 1, (1, 0), 1, "a")
    wider = ChangeEvent(
        "test",
        "shop",
        "orders",
        Op.INSERT,
        Position((2, 0)),
        pk=("id",),
        key={"id": "2"},
        after={"id": "2", "status": "b", "price": "1.50"},
        column_types={**TYPES, "price": "decimal(10,2)"},
        seq=2,
    )
    batch = build_batch("shop.orders", [first, wider], ("id",))
    expected = [(1, "a", None), (2, "b", Decimal("1.50"))]
    assert expected == [row[:3] for row in batch.rows]
