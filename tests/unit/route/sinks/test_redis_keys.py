"""The Redis sink's pure parts (route/sinks/redis.py): key names and their escaping, the text
form of values, the script call's arguments, which Redis errors are transient, and how a schema
change's column operations rewrite a stored row. The sink's behaviour against Redis is tested
on a real server (tests/integration/route/sinks)."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import pytest
import redis.exceptions as rex
from hypothesis import given
from hypothesis import strategies as st

from tidelake.route.change import ChangesRejected, RowChange
from tidelake.route.sinks import redis as sink


def _unescape(text: str) -> str:
    """The inverse of ``escape_part``, written here from its definition."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "%":
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _change(
    kind: str = "upsert",
    key: dict[str, Any] | None = None,
    row: dict[str, Any] | None = None,
    position: str = "00000000000000000001",
    seq: int = 1,
    table: str = "shop.orders",
) -> RowChange:
    key = key or {"id": 1}
    if kind == "upsert" and row is None:
        row = {**key, "status": "paid"}
    return RowChange(table, kind, key, row, position, seq)  # type: ignore[arg-type]


# --- keys ---------------------------------------------------------------------------------------


def test_row_tombstone_and_schema_keys() -> None:
    assert "tl:shop.orders:7" == sink.row_key("tl", "shop.orders", "7")
    assert "tl:shop.orders:%tombstones" == sink.tombstone_key("tl", "shop.orders")
    assert "tl:shop.orders:%schema" == sink.schema_key("tl", "shop.orders")
    assert "tl:shop.orders:*" == sink.table_pattern("tl", "shop.orders")
    assert "t\\*l:a\\?b\\[c\\]%3A:*" == sink.table_pattern("t*l", "a?b[c]:")


def test_colons_and_percent_in_table_or_key_are_escaped() -> None:
    """``a:b`` + ``c`` and ``a`` + ``b:c`` are two keys, not one."""
    assert sink.row_key("p", "a:b", "c") != sink.row_key("p", "a", "b:c")
    assert "p:a%3Ab:c" == sink.row_key("p", "a:b", "c")
    assert "p:a:b%3Ac" == sink.row_key("p", "a", "b:c")
    assert "p:t:100%25" == sink.row_key("p", "t", "100%")


def test_composite_key_separator_is_escaped() -> None:
    change = _change(key={"a": 1, "b": "x"})
    assert "1\x1fx" == change.key_text()
    assert "p:shop.orders:1%1Fx" == sink.row_key("p", change.table, change.key_text())


def test_a_key_text_like_the_tombstone_segment_is_still_a_row_key() -> None:
    assert "p:t:%25tombstones" == sink.row_key("p", "t", "%tombstones")
    assert sink.row_key("p", "t", "%tombstones") != sink.tombstone_key("p", "t")


@given(st.text())
def test_escape_is_reversible_and_colon_free(text: str) -> None:
    escaped = sink.escape_part(text)
    assert ":" not in escaped
    assert text == _unescape(escaped)


@given(st.text(), st.text(), st.text(), st.text())
def test_distinct_table_and_key_give_distinct_row_keys(t1: str, k1: str, t2: str, k2: str) -> None:
    same = sink.row_key("p", t1, k1) == sink.row_key("p", t2, k2)
    assert same == ((t1, k1) == (t2, k2))


@given(st.text(), st.text(), st.text())
def test_no_row_key_is_a_tombstone_or_schema_key(table: str, other: str, key: str) -> None:
    assert sink.row_key("p", table, key) != sink.tombstone_key("p", other)
    assert sink.row_key("p", table, key) != sink.schema_key("p", other)


@given(st.text())
def test_unescape_reverses_escape(text: str) -> None:
    assert text == sink.unescape_part(sink.escape_part(text))


# --- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("abc", "abc"),
        ("", ""),
        ("null", "null"),
        ("12.50", "12.50"),
        (42, "42"),
        (-7, "-7"),
        (1.5, "1.5"),
        (True, "true"),
        (False, "false"),
        (decimal.Decimal("12.500"), "12.500"),
        (b"\x00\xff", "0x00ff"),
        (dt.date(2024, 2, 29), "2024-02-29"),
        (dt.datetime(2024, 2, 29, 12, 30, 1, 5), "2024-02-29T12:30:01.000005"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        ({"b": 1, "a": ["é", None]}, '{"b":1,"a":["é",null]}'),
        ([decimal.Decimal("1.10")], '["1.10"]'),
    ],
)
def test_value_text(value: Any, text: str) -> None:
    assert text == sink.encode_value(value)


def test_null_is_no_field() -> None:
    assert sink.encode_value(None) is None
    assert ["id", "1", "note", "null"] == sink.encode_row({"id": 1, "gone": None, "note": "null"})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), decimal.Decimal("NaN"), object()])
def test_values_without_text_are_refused(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        sink.encode_value(value)


def test_the_position_field_is_not_a_column() -> None:
    with pytest.raises(ValueError, match="_tl_position"):
        sink.encode_row({sink.POSITION_FIELD: "x"})
    assert f"'{sink.POSITION_FIELD}'" in sink._APPLY_LUA


# --- the script call ----------------------------------------------------------------------------


def test_script_call_layout() -> None:
    upsert = _change(row={"id": 1, "status": "paid", "note": None}, seq=5)
    delete = _change("delete", key={"id": 2}, position="00000000000000000002", seq=6)
    keys, args = sink.script_call("tl", [upsert, delete], ttl_s=60)
    assert [
        "tl:shop.orders:1",
        "tl:shop.orders:%tombstones",
        "tl:shop.orders:%schema",
        "tl:shop.orders:2",
        "tl:shop.orders:%tombstones",
        "tl:shop.orders:%schema",
    ] == keys
    assert [
        "60",
        *["u", "1", "00000000000000000001", "2", "id", "1", "status", "paid"],
        *["d", "2", "00000000000000000002", "0"],
    ] == args


def test_script_call_without_ttl() -> None:
    _keys, args = sink.script_call("tl", [_change()], ttl_s=None)
    assert "0" == args[0]


def test_unencodable_changes_are_rejected_by_seq() -> None:
    good = _change(seq=1)
    bad = _change(row={"id": 2, "x": object()}, key={"id": 2}, seq=2)
    reserved = _change(row={"id": 3, "_tl_position": "9"}, key={"id": 3}, seq=3)
    with pytest.raises(ChangesRejected) as info:
        sink.script_call("tl", [good, bad, reserved], ttl_s=None)
    assert (2, 3) == info.value.seqs
    assert "column 'x'" in info.value.reason
    assert "_tl_position" in info.value.reason


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        rex.ConnectionError("refused"),
        rex.TimeoutError("timed out"),
        rex.BusyLoadingError("Redis is loading the dataset in memory"),
        rex.AuthenticationError("invalid password"),
        rex.ReadOnlyError("You can't write against a read only replica."),
        rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
        rex.ResponseError("BUSY Redis is busy running a script."),
        rex.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's ..."),
        rex.ResponseError("NOREPLICAS Not enough good replicas to write."),
    ],
)
def test_transient_errors(exc: rex.RedisError) -> None:
    assert sink._transient(exc)


@pytest.mark.parametrize(
    "exc",
    [
        rex.ResponseError("ERR Error compiling script"),
        rex.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        rex.DataError("Invalid input"),
    ],
)
def test_permanent_errors(exc: rex.RedisError) -> None:
    assert not sink._transient(exc)
