"""The one event model: positions sort as encoded text exactly as tuples; events round-trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelake.events import ChangeEvent, Op, Position

PART = st.integers(min_value=0, max_value=10**20 - 1)
PARTS = st.lists(PART, min_size=1, max_size=5).map(tuple)


@given(PARTS, PARTS)
def test_encoded_position_order_equals_tuple_order(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """String order of encode() equals tuple order, also across different lengths."""
    expected = (a < b, a == b)
    encoded_a, encoded_b = Position(a).encode(), Position(b).encode()
    actual = (encoded_a < encoded_b, encoded_a == encoded_b)
    assert expected == actual


@given(PARTS)
def test_position_encode_decode_round_trip(parts: tuple[int, ...]) -> None:
    """decode(encode(p)) == p."""
    expected = Position(parts)
    actual = Position.decode(expected.encode())
    assert expected == actual


@given(PARTS, PARTS)
def test_position_compares_like_its_tuple(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    """Position objects order as their tuples."""
    expected = a < b
    actual = Position(a) < Position(b)
    assert expected == actual


@pytest.mark.parametrize("parts", [(), (-1,), (10**20,), (True,)])
def test_out_of_range_position_is_refused(parts: tuple[int, ...]) -> None:
    """Empty, negative, too wide or boolean components raise ValueError."""
    with pytest.raises(ValueError, match="position"):
        Position(parts)


EVENTS = [
    ChangeEvent(
        source="tidb",
        database="shop",
        table="orders",
        op=Op.UPDATE,
        position=Position((449558396620800001, 7, 1)),
        pk=("id", "line"),
        key={"id": "1", "line": "2"},
        before={"id": "1", "line": "2", "note": None},
        after={"id": "1", "line": "2", "note": "héllo 🚀"},
        commit_ts_ms=1714929186328,
        column_types={"id": "bigint", "line": "int", "note": "varchar(8)"},
        seq=42,
    ),
    ChangeEvent(
        source="canal",
        database="shop",
        table="orders",
        op=Op.DDL,
        position=Position((0, 3, 0)),
        ddl="ALTER TABLE orders ADD COLUMN note varchar(8)",
        ddl_type="ALTER",
        seq=3,
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=["update", "ddl"])
def test_change_event_json_round_trip(event: ChangeEvent) -> None:
    """from_json(to_json(e)) == e."""
    expected = event
    actual = ChangeEvent.from_json(event.to_json())
    assert expected == actual


def test_row_is_before_for_delete_and_after_otherwise() -> None:
    """The row image the lake keeps: before for a delete, after for an upsert."""
    base = EVENTS[0]
    delete = ChangeEvent(**{**base.to_dict(), "op": Op.DELETE, "position": base.position,
                            "pk": base.pk})  # fmt: skip
    expected = (base.after, base.before, "shop.orders")
    actual = (base.row, delete.row, base.table_id)
    assert expected == actual
