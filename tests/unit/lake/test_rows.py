"""Pure ingest logic: checkpoint filtering, collapsing by position, typed rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import DecimalType

from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.ingest import TableTypes, build_batch, collapse, filter_events

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
    """seq <= checkpoint seq: duplicate; row position < watermark: stale; a position equal
    to the watermark is kept (it may be a new event sharing it); DDL is not stale."""
    checkpoint = TableCheckpoint(seq=5, position=Position((50, 0)).encode())
    events = [
        ev("insert", 1, (40, 0), 4),  # redelivered
        ev("update", 1, (45, 0), 6),  # republished, older than the watermark
        ev("update", 2, (50, 0), 7),  # equal to the watermark: a snapshot row sharing it
        ev("update", 1, (51, 0), 8),  # new
        ev("update", 1, (51, 0), 8),  # the same message twice in one round
    ]
    ddl = ChangeEvent("test", "shop", "orders", Op.DDL, Position((49, 0)), ddl="x", seq=9)
    out = filter_events([*events, ddl], checkpoint)
    expected = ([7, 8, 9], 2, 1)
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


def _row_event(
    key: int,
    pos: tuple[int, ...],
    seq: int,
    after: dict[str, Any],
    types: dict[str, str],
    **kw: Any,
) -> ChangeEvent:
    return ChangeEvent(
        kw.pop("source", "test"),
        "shop",
        "orders",
        kw.pop("op", Op.INSERT),
        Position(pos),
        pk=("id",),
        key={"id": str(key)},
        after={"id": str(key), **after},
        column_types={"id": "bigint", **types},
        seq=seq,
        **kw,
    )


def test_build_batch_dead_letters_a_value_that_does_not_fit_its_type() -> None:
    """A malformed value is refused with a reason naming table, column and value; the other
    rows of the batch land."""
    bad = _row_event(1, (1, 0), 1, {"amount": "lots"}, {"amount": "decimal(10,2)"})
    good = _row_event(2, (2, 0), 2, {"amount": "1.25"}, {"amount": "decimal(10,2)"})
    batch = build_batch("shop.orders", [bad, good], ("id",))
    assert [(2, Decimal("1.25"))] == [row[:2] for row in batch.rows]
    assert [bad] == [r.event for r in batch.rejected]
    assert "shop.orders: value 'lots' of column amount cannot be stored exactly" in (
        batch.rejected[0].reason
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("12.375", "more than 2 decimal places"),
        ("123456789.5", "does not fit in decimal(10,2)"),
        ("NaN", "not a finite number"),
    ],
)
def test_a_decimal_is_never_rounded_or_overflowed(text: str, why: str) -> None:
    """A value its DECIMAL cannot hold exactly is refused, never rounded (12.375 → 12.38) or
    left for Spark to fail the whole write on."""
    event = _row_event(1, (1, 0), 1, {"amount": text}, {"amount": "decimal(10,2)"})
    batch = build_batch("shop.orders", [event], ("id",))
    assert [] == batch.rows
    assert why in batch.rejected[0].reason


def test_a_refused_event_leaves_the_keys_previous_change_in_the_batch() -> None:
    """Refusing the last change of a key applies the key's change before it, as if the
    refused event never came."""
    first = _row_event(1, (1, 0), 1, {"amount": "1.00"}, {"amount": "decimal(10,2)"})
    bad = _row_event(1, (2, 0), 2, {"amount": "1.001"}, {"amount": "decimal(10,2)"}, op=Op.UPDATE)
    batch = build_batch("shop.orders", [first, bad], ("id",))
    assert [(1, Decimal("1.00"))] == [row[:2] for row in batch.rows]
    assert [bad] == [r.event for r in batch.rejected]


def test_ticdc_enum_index_and_set_mask_become_labels() -> None:
    """TiCDC writes ENUM as its 1-based index and SET as a bit mask (``canalJSONFormatColumn``
    in pingcap/tiflow pkg/sink/codec/canal/canal_json_message.go parses them back with
    ParseInt / ParseUint); the lake stores the labels of the column definition."""
    types = TableTypes(
        {"id": "bigint", "status": "enum('new','paid','it''s')", "tags": "set('a','b','c')"}
    )
    event = _row_event(1, (1, 0), 1, {"status": "3", "tags": "5"}, {}, source="tidb")
    batch = build_batch("shop.orders", [event], ("id",), types=types)
    assert [(1, "it's", "a,c")] == [row[:3] for row in batch.rows]


def test_an_enum_index_without_labels_is_dead_lettered() -> None:
    """TiCDC's default mysqlType says only ``enum``: with no definition anywhere, the index is
    refused with the reason, never stored as '2'."""
    event = _row_event(1, (1, 0), 1, {"status": "2"}, {"status": "enum"}, source="tidb")
    batch = build_batch(
        "shop.orders", [event], ("id",), types=TableTypes({"id": "bigint", "status": "enum"})
    )
    assert [] == batch.rows
    assert "labels of 'enum' are unknown" in batch.rejected[0].reason


def test_a_column_of_unknown_type_refuses_values_but_not_nulls() -> None:
    """A bare ``decimal`` hint types nothing: a value is refused naming where to define the
    column; a row whose value is NULL lands without the column."""
    types = TableTypes({"id": "bigint", "amount": None}, hints={"amount": "decimal"})
    valued = _row_event(1, (1, 0), 1, {"amount": "12.37"}, {"amount": "decimal"}, source="tidb")
    null = _row_event(2, (2, 0), 2, {"amount": None}, {"amount": "decimal"}, source="tidb")
    batch = build_batch("shop.orders", [valued, null], ("id",), types=types)
    assert [2] == [row[0] for row in batch.rows]
    assert ["id"] == [f.name for f in batch.schema.fields][:1]
    assert "amount" not in [f.name for f in batch.schema.fields]
    reason = batch.rejected[0].reason
    assert "type of column amount is not known (the message says only 'decimal')" in reason


def test_a_stored_column_keeps_its_type_whatever_the_message_says() -> None:
    """A column the table stores as DECIMAL(12,2) is typed so, even when the message's hint
    is a bare ``decimal`` (TiCDC default): 12.37 lands as 12.37, not 12.00."""
    types = TableTypes({"id": "bigint", "amount": None}, {"amount": DecimalType(12, 2)})
    event = _row_event(1, (1, 0), 1, {"amount": "12.37"}, {"amount": "decimal"}, source="tidb")
    batch = build_batch("shop.orders", [event], ("id",), types=types)
    assert [(1, Decimal("12.37"))] == [row[:2] for row in batch.rows]


def test_unchanged_columns_come_from_the_batch_or_the_stored_row() -> None:
    """An update that did not send a column (Debezium's unavailable placeholder) keeps the
    value: from the key's previous upsert in the batch, else from the lake's stored row."""
    types = TableTypes({"id": "bigint", "status": "text", "doc": "text"})
    insert = _row_event(1, (1, 0), 1, {"status": "a", "doc": "big"}, {})
    update = _row_event(1, (2, 0), 2, {"status": "b"}, {}, op=Op.UPDATE, unchanged=("doc",))
    other = _row_event(2, (3, 0), 3, {"status": "c"}, {}, op=Op.UPDATE, unchanged=("doc",))
    asked: list[Any] = []

    def current(keys: Any, columns: Any) -> dict[tuple[Any, ...], dict[str, Any]]:
        asked.append((list(keys), list(columns)))
        return {(2,): {"doc": "stored"}}

    batch = build_batch(
        "shop.orders", [insert, update, other], ("id",), types=types, current=current
    )
    assert [(1, "b", "big"), (2, "c", "stored")] == [row[:3] for row in batch.rows]
    assert [([(2,)], ["doc"])] == asked


def test_an_unchanged_column_of_a_row_the_lake_lacks_is_dead_lettered() -> None:
    """No stored row to take the unsent value from: refused with the reason, never NULL."""
    types = TableTypes({"id": "bigint", "status": "text", "doc": "text"})
    update = _row_event(1, (2, 0), 2, {"status": "b"}, {}, op=Op.UPDATE, unchanged=("doc",))
    batch = build_batch("shop.orders", [update], ("id",), types=types, current=lambda k, c: {})
    assert [] == batch.rows
    assert "the lake holds no row for key (1,)" in batch.rejected[0].reason


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


def _lake_after(batches: list[list[ChangeEvent]]) -> dict[int, str | None]:
    """The lake a sequence of ingest rounds leaves: filter by the checkpoint, collapse, merge
    each key by position as Hudi's event-time ordering does (ties: the incoming record)."""
    lake: dict[int, tuple[Position, str | None, bool]] = {}
    checkpoint: TableCheckpoint | None = None
    for batch in batches:
        kept = filter_events(batch, checkpoint).kept
        for change in collapse(kept, key_of):
            held = lake.get(change.key[0])
            if held is None or held[0] <= change.event.position:
                lake[change.key[0]] = (
                    change.event.position,
                    change.row.get("status"),
                    change.delete,
                )
        positions = [e.position.encode() for e in batch]
        if checkpoint is not None and checkpoint.position:
            positions.append(checkpoint.position)
        checkpoint = TableCheckpoint(max(e.seq for e in batch), max(positions))
    return {k: v[1] for k, v in sorted(lake.items()) if not v[2]}


def test_a_snapshot_sharing_one_position_lands_whole_wherever_batches_are_cut() -> None:
    """Debezium gives every snapshot row of a table one source position: cut into any number
    of batches, every row lands (none is taken for a republished copy), and so does a change
    streamed after it."""
    snapshot = [ev("insert", k, (7, 0), k, f"s{k}") for k in range(1, 41)]
    stream = [ev("update", 3, (9, 0), 41, "u3"), ev("delete", 5, (9, 1), 42)]
    events = snapshot + stream
    whole = _lake_after([events])
    assert 39 == len(whole)
    assert "u3" == whole[3]
    for size in (1, 2, 3, 7, 13, 40):
        batches = [events[i : i + size] for i in range(0, len(events), size)]
        assert whole == _lake_after(batches), f"batches of {size}"


def test_a_key_change_split_by_a_batch_cut_lands_whole() -> None:
    """A primary-key change that Debezium sends as a delete of the old key and a create of the
    new one at the same source position: a cut between the two changes nothing."""
    events = [
        ev("insert", 1, (5, 0), 1, "a"),
        ev("delete", 1, (8, 0), 2),
        ev("insert", 2, (8, 0), 3, "a"),
        ev("update", 2, (9, 0), 4, "b"),
    ]
    whole = _lake_after([events])
    assert {2: "b"} == whole
    for cut in range(1, len(events)):
        assert whole == _lake_after([events[:cut], events[cut:]]), f"cut at {cut}"


def test_a_group_redelivered_after_a_cut_changes_nothing() -> None:
    """Republishing a whole equal-position group after part of it was applied (a producer
    restarted mid-snapshot) leaves the same lake: the copies at the watermark re-apply the
    same images; those below it are dropped."""
    group = [ev("insert", k, (7, 0), k, f"s{k}") for k in range(1, 6)]
    again = [ev("insert", k, (7, 0), 10 + k, f"s{k}") for k in range(1, 6)]
    whole = _lake_after([group])
    for cut in range(1, len(group) + 1):
        assert whole == _lake_after([group[:cut], again])
