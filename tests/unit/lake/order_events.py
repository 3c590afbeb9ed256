"""Change events of one ``shop.orders`` table (id, status) for the rules and rows tests."""

from __future__ import annotations

from typing import Any

from tidelake.events import ChangeEvent, Op, Position

TYPES = {"id": "bigint", "status": "varchar(8)"}


def ev(
    op: str,
    key: int,
    pos: tuple[int, ...],
    seq: int,
    status: str | None = None,
    before: dict[str, Any] | None = None,
) -> ChangeEvent:
    """One row event of ``shop.orders`` at ``pos`` with stream sequence ``seq``."""
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
    """The record key of a row image."""
    return (int(image["id"]),)
