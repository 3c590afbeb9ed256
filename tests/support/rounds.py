"""A minimal staged row event for the ingest's unit tests (rounds, beats, table isolation,
view traces): an insert of key ``id`` = ``seq`` at position ``(seq,)``."""

from __future__ import annotations

from tidelake.events import ChangeEvent, Op, Position
from tidelake.names import split_table_id


def insert_event(seq: int, table: str = "shop.orders") -> ChangeEvent:
    database, name = split_table_id(table)
    return ChangeEvent(
        source="tidb",
        database=database,
        table=name,
        op=Op.INSERT,
        position=Position((seq,)),
        pk=("id",),
        key={"id": str(seq)},
        after={"id": str(seq)},
        seq=seq,
    )
