"""What a schema change does to a sink's stored rows (route/schema.py), shared by the sinks:
the steps of each operation, a stored row rewritten, a late row brought forward."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.lake import ddl
from tidelake.route import schema
from tidelake.route.change import RowChange, split_at_schema

ORDERS = ddl.TableName("shop", "orders")
#: 2024-05-06 07:08:09.123 UTC.
COMMIT_MS = 1714979289123


def test_applied_marks_sort_by_operation_and_below_any_later_position() -> None:
    p1, p2 = "00000000000000000010", "00000000000000000011"
    assert schema.applied_mark(p1, 0) < schema.applied_mark(p1, 2) < schema.applied_mark(p1, 10)
    assert schema.applied_mark(p1, 9999) < p2 < schema.applied_mark(p2, 0)
    longer = "00000000000000000010.00000000000000000001"
    assert schema.applied_mark(p1, 5) < longer


@pytest.mark.parametrize(
    ("source_type", "zone", "text"),
    [
        ("datetime", "UTC", "2024-05-06 07:08:09"),
        ("timestamp", "Europe/Paris", "2024-05-06 09:08:09"),
        # To the second, as the lake: the commit's milliseconds are not the statement's clock.
        ("datetime(3)", "UTC", "2024-05-06 07:08:09.000"),
        ("DATETIME(6)", "UTC", "2024-05-06 07:08:09.000000"),
        ("timestamp(1) with time zone", "Europe/Paris", "2024-05-06 07:08:09.0"),
        ("timestamptz", "Asia/Tokyo", "2024-05-06 07:08:09"),
        ("date", "Asia/Tokyo", "2024-05-06"),
        ("date", "America/Los_Angeles", "2024-05-06"),
        ("time(2)", "UTC", "07:08:09.00"),
    ],
)
def test_current_timestamp_text(source_type: str, zone: str, text: str) -> None:
    assert text == schema.current_timestamp_text(source_type, COMMIT_MS, schema.source_zone(zone))


@pytest.mark.parametrize(
    ("source_type", "scale"),
    [
        ("decimal(12,2)", 2),
        ("DECIMAL(12, 4) UNSIGNED", 4),
        ("numeric(5)", 0),
        ("decimal(10,0)", 0),
        ("numeric", None),
        ("int(11)", None),
        ("varchar(20)", None),
    ],
)
def test_decimal_scale(source_type: str, scale: int | None) -> None:
    assert scale == schema.decimal_scale(source_type)


@pytest.mark.parametrize(
    ("value", "scale", "text"),
    [
        ("1.5", 2, "1.50"),
        ("12", 2, "12.00"),
        (7, 1, "7.0"),
        ("-1.005", 2, "-1.01"),
        ("1.005", 2, "1.01"),
        ("-0.001", 2, "0.00"),
        ("123456789012345678901234567890.1", 3, "123456789012345678901234567890.100"),
        (b"2.25", 1, "2.3"),
        ("abc", 2, "abc"),
        ("NaN", 2, "NaN"),
        (True, 2, True),
    ],
)
def test_rescaled(value: Any, scale: int, text: Any) -> None:
    assert text == schema.rescaled(value, scale)


def test_column_steps_from_operations() -> None:
    zone = schema.source_zone("UTC")
    ops: list[ddl.Operation] = [
        ddl.AddColumn(ORDERS, ddl.ColumnSpec("note", "varchar(20)", ddl.Default("value", "n/a"))),
        ddl.AddColumn(ORDERS, ddl.ColumnSpec("gone", "int", ddl.NULL_DEFAULT)),
        ddl.AddColumn(ORDERS, ddl.ColumnSpec("at", "datetime", ddl.Default("current_timestamp"))),
        ddl.DropColumn(ORDERS, "old"),
        ddl.RenameColumn(ORDERS, "a", "b"),
        ddl.ModifyColumn(ORDERS, "price", "decimal(12,3)", new_name="cost"),
        ddl.ModifyColumn(ORDERS, "label", "varchar(99)"),
    ]
    assert [
        schema.ColumnStep("set", "note", value="n/a"),
        schema.ColumnStep("set", "at", value="2024-05-06 07:08:09"),
        schema.ColumnStep("drop", "old"),
        schema.ColumnStep("rename", "a", to="b"),
        schema.ColumnStep("rename", "price", to="cost"),
        schema.ColumnStep("rescale", "cost", scale=3),
    ] == schema.column_steps(ops, COMMIT_MS, zone)


@pytest.mark.parametrize(
    ("default", "commit_ms", "reason"),
    [
        (ddl.Default("expression", "(uuid())"), COMMIT_MS, "computed per row"),
        (ddl.Default("current_timestamp"), None, "no commit time"),
    ],
)
def test_column_steps_refuse_values_the_sink_cannot_know(
    default: ddl.Default, commit_ms: int | None, reason: str
) -> None:
    op = ddl.AddColumn(ORDERS, ddl.ColumnSpec("x", "datetime", default))
    with pytest.raises(schema.SchemaRefusedError, match=reason):
        schema.column_steps([op], commit_ms, schema.source_zone("UTC"))
    change = RowChange(
        "shop.orders", "schema", {}, None, "00000000000000000009", 9, commit_ts_ms=commit_ms,
        operations=(op,),
    )  # fmt: skip
    assert reason in (schema.schema_refusal(change, schema.source_zone("UTC")) or "")


def test_rewrite_row() -> None:
    steps = [
        schema.ColumnStep("rename", "a", to="b"),
        schema.ColumnStep("set", "a", value="1"),
        schema.ColumnStep("drop", "old"),
        schema.ColumnStep("rescale", "price", scale=2),
        schema.ColumnStep("rescale", "missing", scale=2),
    ]
    row = {"id": "1", "a": "x", "old": "o", "price": "2.5", "z": "z"}
    assert {"id": "1", "b": "x", "price": "2.50", "z": "z", "a": "1"} == schema.rewrite_row(
        row, steps
    )
    assert ["id", "b", "price", "z", "a"] == list(schema.rewrite_row(row, steps))
    # A row without the renamed column (NULL: no field) gets only the rest.
    assert {"id": "2", "a": "1"} == schema.rewrite_row({"id": "2"}, steps)


def test_a_batch_is_cut_at_each_schema_change_in_stream_order() -> None:
    def row(seq: int) -> RowChange:
        return RowChange("shop.orders", "upsert", {"id": "1"}, {"id": "1"}, f"{seq:04d}", seq)

    def ddl_at(seq: int) -> RowChange:
        drop = ddl.DropColumn(ORDERS, "x")
        return RowChange("shop.orders", "schema", {}, None, f"{seq:04d}", seq, operations=(drop,))

    a, s1, b, c, s2 = row(1), ddl_at(2), row(3), row(4), ddl_at(5)
    assert split_at_schema([a, s1, b, c, s2]) == [([a], s1), ([b, c], s2), ([], None)]
    assert split_at_schema([a]) == [([a], None)]


def test_forward_brings_a_late_row_into_the_tables_present_shape() -> None:
    """A dead letter of before the DDL, re-processed after it: moved, dropped, filled."""
    ops = [
        ddl.RenameColumn(ORDERS, "total", "amount"),
        ddl.DropColumn(ORDERS, "tier"),
        ddl.AddColumn(ORDERS, ddl.ColumnSpec("note", "text", ddl.Default("value", "n/a"))),
        ddl.ModifyColumn(ORDERS, "id", "bigint", new_name="order_id"),
        ddl.ModifyColumn(ORDERS, "amount", "decimal(14,3)"),
    ]
    steps = schema.column_steps(ops, COMMIT_MS, schema.source_zone("UTC"))
    late = RowChange(
        "shop.orders",
        "upsert",
        {"id": "1"},
        {"id": "1", "total": "9.50", "tier": "gold"},
        "0001",
        1,
        {"id": "int", "total": "decimal(12,2)", "tier": "varchar(8)"},
    )
    moved = schema.forward(late, steps)
    assert moved.key == {"order_id": "1"}
    assert moved.row == {"order_id": "1", "amount": "9.500", "note": "n/a"}
    assert moved.column_types == {"order_id": "int", "amount": "decimal(12,2)"}
    # The steps survive a sink's log; no steps: the same change.
    assert schema.steps_from_json(schema.steps_json(steps)) == steps
    assert schema.forward(late, []) is late
