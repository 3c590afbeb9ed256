"""Index names, field mappings, documents, bulk items and the schema-change checks of the
OpenSearch sink (pure)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from tidelake.route.change import RowChange
from tidelake.route.sinks.opensearch import (
    DATETIME_FORMAT,
    DELETE_BELOW_SCRIPT,
    GUARD_SCRIPT,
    REWRITE_SCRIPT,
    alias_name,
    bulk_lines,
    check_column,
    document,
    encode_value,
    escape_name,
    field_mapping,
    index_name,
    item_outcome,
    same_field,
    schema_index,
    script_lines,
    table_of_index,
    unescape_name,
    value_fits,
)

TEXT = {"type": "keyword", "ignore_above": 8191, "fields": {"text": {"type": "text"}}}


@pytest.mark.parametrize(
    ("source_type", "expected"),
    [
        ("int(11)", {"type": "long"}),
        ("TINYINT(1)", {"type": "long"}),
        ("int unsigned", {"type": "long"}),
        ("bigint(20)", {"type": "long"}),
        ("bigint(20) unsigned", {"type": "unsigned_long"}),
        ("year", {"type": "long"}),
        ("decimal(10,2)", {"type": "keyword", "fields": {"number": {"type": "double"}}}),
        ("numeric", {"type": "keyword", "fields": {"number": {"type": "double"}}}),
        ("double precision", {"type": "double"}),
        ("float", {"type": "double"}),
        ("boolean", {"type": "boolean"}),
        ("date", {"type": "date", "format": "uuuu-MM-dd"}),
        ("datetime(6)", {"type": "date", "format": DATETIME_FORMAT}),
        ("timestamp", {"type": "date", "format": DATETIME_FORMAT}),
        ("timestamp(3) without time zone", {"type": "date", "format": DATETIME_FORMAT}),
        ("timestamp with time zone", TEXT),
        ("time(3)", TEXT),
        ("jsonb", {"type": "object", "enabled": False}),
        ("longblob", {"type": "keyword", "index": False, "doc_values": False}),
        ("varchar(20)", TEXT),
        ("enum('a','b')", TEXT),
        ("uuid", TEXT),
        (None, TEXT),
        ("", TEXT),
    ],
)
def test_field_mapping_from_the_source_type(source_type: str | None, expected: Any) -> None:
    assert expected == field_mapping(source_type)


def test_datetime_format_takes_zero_to_nine_fraction_digits_and_iso() -> None:
    formats = DATETIME_FORMAT.split("||")
    assert "uuuu-MM-dd HH:mm:ss" == formats[0]
    assert "uuuu-MM-dd HH:mm:ss.SSSSSSSSS" in formats
    assert "strict_date_optional_time" == formats[-1]
    assert 11 == len(formats)


def test_names_are_lower_case_and_a_bijection() -> None:
    assert "tl-shop.orders" == alias_name("tl-", "shop.orders")
    assert "tl-shop.orders%versions" == index_name("tl-", "shop.orders")
    assert "%53hop.%4frders" == escape_name("Shop.Orders")
    assert "a%25b" == escape_name("a%b")
    assert "caf%c3%a9" == escape_name("café")
    assert escape_name("a%b") != escape_name("a%25b")
    names = ["shop.orders", "Shop.orders", "shop.Orders", "shop.orders%versions", "a b"]
    assert len(names) == len({escape_name(n) for n in names})
    # "%v" is never produced by the escape: no alias is another table's concrete index.
    assert all("%v" not in escape_name(n) for n in names)


@pytest.mark.parametrize("column", ["_tl_position", "_tl_deleted", "_id", "_source", "a.b", ""])
def test_columns_that_are_not_fields_here_are_refused(column: str) -> None:
    with pytest.raises(ValueError, match="column"):
        check_column(column)


def test_a_column_starting_with_an_underscore_is_fine() -> None:
    check_column("_created")


def test_values() -> None:
    boolean = {"type": "boolean"}
    assert encode_value("t", boolean) is True
    assert encode_value("0", boolean) is False
    assert encode_value(1, boolean) is True
    assert "maybe" == encode_value("maybe", boolean)  # the server refuses it, per item
    assert "t" == encode_value("t", TEXT)
    assert "12.50" == encode_value(Decimal("12.50"), {})
    assert "0x00ff" == encode_value(b"\x00\xff", {})
    assert {"a": [1]} == encode_value({"a": [1]}, {})
    assert None is encode_value(None, boolean)
    with pytest.raises(ValueError, match="no JSON form"):
        encode_value(float("nan"), {})
    with pytest.raises(ValueError, match="no exact text"):
        encode_value(Decimal("NaN"), {})
    with pytest.raises(TypeError):
        encode_value(object(), {})


def _change(kind: str = "upsert", **row: Any) -> RowChange:
    return RowChange(
        "shop.orders",
        kind,  # type: ignore[arg-type]
        {"id": 1, "region": "eu"},
        None if kind == "delete" else {"id": 1, "region": "eu", **row},
        "00000000000000000042.00000000000000000000",
        7,
    )


def test_documents_and_tombstones_carry_the_position() -> None:
    pos = "00000000000000000042.00000000000000000000"
    doc = document(_change(ok="f"), {"ok": {"type": "boolean"}})
    assert {"id": 1, "region": "eu", "ok": False, "_tl_position": pos} == doc
    assert {"_tl_deleted": True, "_tl_position": pos} == document(_change("delete"), {})
    with pytest.raises(ValueError, match="_tl_position"):
        document(_change(_tl_position="x"), {})


def test_bulk_lines_are_one_guarded_scripted_upsert() -> None:
    change = _change(n=3)
    action, body = (json.loads(line) for line in bulk_lines("i%versions", change, {"n": 3}))
    assert {"_index": "i%versions", "_id": "1\x1feu", "retry_on_conflict": 3} == action["update"]
    assert body["scripted_upsert"] is True
    assert {} == body["upsert"]
    assert "painless" == body["script"]["lang"]
    assert "compareTo(params.pos)" in body["script"]["source"]
    assert {"pos": change.position, "doc": {"n": 3}} == body["script"]["params"]
    # With the table's cleared position, the same script refuses anything at or below it.
    _action, body = (json.loads(line) for line in bulk_lines("i", change, {}, cleared="00009"))
    assert {"pos": change.position, "doc": {}, "cleared": "00009"} == body["script"]["params"]
    assert "params.cleared.compareTo(params.pos) >= 0" in GUARD_SCRIPT


def test_script_lines_update_an_existing_document() -> None:
    action, body = (
        json.loads(line) for line in script_lines("i", "1\x1f2", DELETE_BELOW_SCRIPT, {"pos": "9"})
    )
    assert {"_index": "i", "_id": "1\x1f2", "retry_on_conflict": 3} == action["update"]
    assert "upsert" not in body  # a document gone meanwhile stays gone
    assert {"lang": "painless", "source": DELETE_BELOW_SCRIPT, "params": {"pos": "9"}} == body[
        "script"
    ]
    assert "ctx.op = 'delete'" in DELETE_BELOW_SCRIPT
    assert "params.expect" in REWRITE_SCRIPT


def test_schema_index_and_table_names() -> None:
    assert "tl-%schema" == schema_index("tl-")
    assert "tl-%schema" != alias_name("tl-", "%schema")
    assert "Shop.Orders" == table_of_index("tl-", index_name("tl-", "Shop.Orders"))
    assert "café.`a.b`" == table_of_index("tl-", index_name("tl-", "café.`a.b`"))
    assert table_of_index("tl-", alias_name("tl-", "shop.orders")) is None
    assert table_of_index("tl-", "other-shop.orders%versions") is None
    assert table_of_index("tl-", schema_index("tl-")) is None


@pytest.mark.parametrize("name", ["shop.orders", "Shop.Orders", "a%b", "café", "x\x1fy", "é%25"])
def test_unescape_name_reverses_escape_name(name: str) -> None:
    assert name == unescape_name(escape_name(name))


def test_same_field() -> None:
    assert same_field(field_mapping("int"), field_mapping("bigint"))
    assert same_field(field_mapping("varchar(20)"), field_mapping("text"))
    assert same_field({"enabled": False}, field_mapping("json"))
    assert not same_field(field_mapping("int"), field_mapping("decimal(10,2)"))
    assert not same_field(field_mapping("date"), field_mapping("datetime"))


@pytest.mark.parametrize(
    ("value", "source_type", "fits"),
    [
        ("12", "int", True),
        ("-9223372036854775809", "bigint", False),
        ("abc", "int", False),
        ("18446744073709551615", "bigint unsigned", True),
        ("-1", "bigint unsigned", False),
        ("1.5e3", "double", True),
        (True, "boolean", True),
        ("maybe", "boolean", False),
        ("2024-02-29", "date", True),
        ("2023-02-29", "date", False),
        ("0000-00-00", "date", False),
        ("2024-05-06 07:08:09", "date", False),
        ("2024-05-06 07:08:09.123456", "datetime(6)", True),
        ("2024-05-06", "datetime", True),
        ("0000-00-00 00:00:00", "datetime", False),
        ("2024-05-06 24:00:00", "datetime", False),
        ("anything", "varchar(3)", True),
        (None, "int", True),
    ],
)
def test_value_fits(value: Any, source_type: str, fits: bool) -> None:
    field = field_mapping(source_type)
    assert fits == value_fits(encode_value(value, field), field)


@pytest.mark.parametrize(
    ("item", "outcome"),
    [
        ({"update": {"status": 200, "result": "noop"}}, "ok"),
        ({"update": {"status": 201, "result": "created"}}, "ok"),
        (
            {"update": {"status": 400, "error": {"type": "mapper_parsing_exception"}}},
            "reject",
        ),
        ({"update": {"status": 429, "error": {"type": "x"}}}, "retry"),
        ({"update": {"status": 503, "error": {"type": "x"}}}, "retry"),
        ({"update": {"status": 409, "error": {"type": "x"}}}, "retry"),
        ({"update": {"status": 404, "error": {"type": "index_not_found_exception"}}}, "retry"),
        ({"update": {"status": 400, "error": {"type": "cluster_block_exception"}}}, "retry"),
    ],
)
def test_bulk_item_outcomes(item: dict[str, Any], outcome: str) -> None:
    assert outcome == item_outcome(item)[0]


def test_a_rejected_item_names_its_cause() -> None:
    error = {
        "type": "mapper_parsing_exception",
        "reason": "failed to parse field [n]",
        "caused_by": {"type": "number_format_exception", "reason": 'For input string: "abc"'},
    }
    outcome, reason = item_outcome({"update": {"status": 400, "error": error}})
    assert "reject" == outcome
    assert "mapper_parsing_exception" in reason
    assert "abc" in reason
