"""Row typing (``lake/rows.py``): collapsed events become typed Spark rows; values that do not
fit their column are refused with the reason."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from order_events import TYPES, ev
from pyspark.sql.types import DecimalType

from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.rows import TableTypes, build_batch


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
