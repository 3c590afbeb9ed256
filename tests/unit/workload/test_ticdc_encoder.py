"""The canal-json encoder's column types: built once per column list, never stale."""

from __future__ import annotations

import orjson

from tidelake.workload.ticdc import TicdcEncoder


def _types_of(encoder: TicdcEncoder, types: dict[str, str]) -> tuple[object, object]:
    row = dict.fromkeys(types, "1")
    body = orjson.loads(encoder.row("t", "INSERT", row, 1 << 18, types, ["id"]).payload)
    return body["sqlType"], body["mysqlType"]


def test_types_follow_a_column_list_changed_in_place() -> None:
    """The DDL workload changes a table's columns in place (add, widen): the next message
    names the new columns and types, not the ones of the first message."""
    encoder = TicdcEncoder("db")
    types = {"id": "bigint", "total": "decimal(12,2)"}
    first = _types_of(encoder, types)
    types["note"] = "varchar(64)"
    types["total"] = "decimal(14,2)"
    types["id"] = "int"
    second = _types_of(encoder, types)
    assert (
        ({"id": -5, "total": 3}, {"id": "bigint", "total": "decimal"}),
        ({"id": 4, "total": 3, "note": 12}, {"id": "int", "total": "decimal", "note": "varchar"}),
    ) == (first, second)
