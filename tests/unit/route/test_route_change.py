"""The sink contract's pure parts (route/change.py): a batch cut at its schema changes, and a
late row change brought forward through the column changes after it."""

from __future__ import annotations

from tidelake.lake import ddl
from tidelake.route.change import RowChange, column_steps, forward, split_at_schema

T = ddl.TableName("shop", "orders")


def _row(seq: int, **row: str) -> RowChange:
    return RowChange("shop.orders", "upsert", {"id": "1"}, {"id": "1", **row}, f"{seq:04d}", seq)


def _schema(seq: int) -> RowChange:
    return RowChange("shop.orders", "schema", {}, None, f"{seq:04d}", seq, operations=(
        ddl.DropColumn(T, "x"),
    ))  # fmt: skip


def test_a_batch_is_cut_at_each_schema_change_in_stream_order() -> None:
    a, s1, b, c, s2 = _row(1), _schema(2), _row(3), _row(4), _schema(5)
    assert split_at_schema([a, s1, b, c, s2]) == [([a], s1), ([b, c], s2), ([], None)]
    assert split_at_schema([a]) == [([a], None)]


def test_forward_moves_drops_and_fills_columns_as_the_ddl_did() -> None:
    steps = [
        *column_steps(ddl.RenameColumn(T, "total", "amount")),
        *column_steps(ddl.DropColumn(T, "tier")),
        *column_steps(ddl.AddColumn(T, ddl.ColumnSpec("note", "text")), "n/a"),
        *column_steps(ddl.ModifyColumn(T, "id", "bigint", new_name="order_id")),
        *column_steps(ddl.ModifyColumn(T, "amount", "decimal(14,2)")),  # no step: same name
    ]
    late = RowChange(
        "shop.orders",
        "upsert",
        {"id": "1"},
        {"id": "1", "total": "9.50", "tier": "gold"},
        "0001",
        1,
        {"id": "int", "total": "decimal(12,2)", "tier": "varchar(8)"},
    )
    moved = forward(late, steps)
    assert moved.key == {"order_id": "1"}
    assert moved.row == {"order_id": "1", "amount": "9.50", "note": "n/a"}
    assert moved.column_types == {"order_id": "int", "amount": "decimal(12,2)"}
    # A row that has the added column already keeps its own value; no steps: the same change.
    assert forward(_row(1, note="mine"), steps).row == {"order_id": "1", "note": "mine"}
    assert forward(late, []) is late
