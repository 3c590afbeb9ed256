"""The PostgreSQL sink's type mapping: source types → column types, and values → parameters
that PostgreSQL can store only exactly."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.route.sinks.pg_types import (
    RefusedValueError,
    cast_type,
    current_timestamp_text,
    normalise,
    pg_type,
    to_param,
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # MySQL / MariaDB / TiDB
        ("tinyint", "smallint"),
        ("tinyint(1)", "smallint"),
        ("TINYINT(3) UNSIGNED", "smallint"),
        ("smallint", "smallint"),
        ("smallint unsigned", "integer"),
        ("mediumint", "integer"),
        ("mediumint unsigned", "integer"),
        ("int(11)", "integer"),
        ("int unsigned", "bigint"),
        ("int(10) unsigned zerofill", "bigint"),
        ("bigint(20)", "bigint"),
        ("bigint(20) unsigned", "numeric(20,0)"),
        ("year", "smallint"),
        ("decimal(10,2)", "numeric(10,2)"),
        ("decimal(38,9) unsigned", "numeric(38,9)"),
        ("decimal", "numeric"),  # TiCDC names no parameters
        ("decimal(12)", "numeric(12,0)"),
        ("float", "real"),
        ("float(30)", "double precision"),
        ("double", "double precision"),
        ("real", "double precision"),
        ("bit(1)", "text"),
        ("bit(12)", "text"),
        ("char(3)", "text"),
        ("varchar(20)", "text"),
        ("longtext", "text"),
        ("enum('a','b(c)')", "text"),
        ("set('x','y')", "text"),
        ("date", "date"),
        ("datetime", "timestamp without time zone"),
        ("datetime(6)", "timestamp without time zone"),
        ("timestamp", "timestamp with time zone"),
        ("timestamp(3)", "timestamp with time zone"),
        ("time", "time without time zone"),
        ("time(6)", "time without time zone"),
        ("json", "jsonb"),
        ("binary(16)", "bytea"),
        ("varbinary(255)", "bytea"),
        ("blob", "bytea"),
        ("longblob", "bytea"),
        ("geometry", "text"),
        # PostgreSQL format_type names
        ("integer", "integer"),
        ("bigint", "bigint"),
        ("numeric(12,2)", "numeric(12,2)"),
        ("numeric", "numeric"),
        ("double precision", "double precision"),
        ("boolean", "boolean"),
        ("character varying(20)", "text"),
        ("character(5)", "text"),
        ("timestamp without time zone", "timestamp without time zone"),
        ("timestamp(3) without time zone", "timestamp without time zone"),
        ("timestamp with time zone", "timestamp with time zone"),
        ("time with time zone", "time with time zone"),
        ("jsonb", "jsonb"),
        ("bytea", "bytea"),
        ("uuid", "text"),
        ("text[]", "text"),
        # nothing known
        ("mood", "text"),
        ("", "text"),
        (None, "text"),
    ],
)
def test_pg_type(source: str | None, expected: str) -> None:
    """Each source type gets the column type of the docstring's table."""
    assert pg_type(source) == expected


def test_normalise_moves_arguments_out_of_the_name() -> None:
    """Display widths, ``unsigned``/``zerofill`` and a PostgreSQL precision before the zone."""
    assert normalise("BIGINT(20) UNSIGNED ZEROFILL") == ("bigint", "20", True)
    assert normalise("timestamp(3) with time zone") == ("timestamp with time zone", "3", False)
    assert normalise("  Character  Varying(20) ") == ("character varying", "20", False)


def test_cast_type_never_cuts_a_character_value() -> None:
    """An explicit cast to ``varchar(n)`` would truncate; the assignment refuses instead."""
    assert cast_type("character varying(3)") == "text"
    assert cast_type("character(3)") == "text"
    assert cast_type("numeric(10,2)") == "numeric(10,2)"
    assert cast_type("integer") == "integer"


@pytest.mark.parametrize(
    ("value", "column", "source", "expected"),
    [
        (None, "integer", "int", None),
        (42, "integer", "int", "42"),
        ("abc", "integer", "int", "abc"),  # the server refuses it, by its own parser
        ("12.50", "numeric(10,2)", "decimal(10,2)", "12.50"),
        ("12.5000", "numeric(10,2)", "decimal(10,2)", "12.5000"),  # same number, no rounding
        (
            "12345678901234567890.123456789",
            "numeric(38,9)",
            "decimal(38,9)",
            "12345678901234567890.123456789",
        ),
        ("18446744073709551615", "numeric(20,0)", "bigint unsigned", "18446744073709551615"),
        ("1.123456789", "numeric", "numeric", "1.123456789"),
        (True, "boolean", "boolean", "true"),
        ("t", "boolean", "boolean", "t"),
        ({"a": [1, "é"]}, "jsonb", "json", '{"a":[1,"é"]}'),
        ('{"a": 1}', "jsonb", "json", '{"a": 1}'),
        ("2024-01-02 03:04:05.123456", "timestamp without time zone", "datetime(6)", None),
        (1.5, "double precision", "double", "1.5"),
        ("\xff\x00\x10", "bytea", "blob", b"\xff\x00\x10"),
        ("\\x00ff", "bytea", "bytea", b"\x00\xff"),
        ("\\x00ff", "bytea", "blob", b"\\x00ff"),  # MySQL bytes that happen to read \x
        (b"\x01\x02", "bytea", None, b"\x01\x02"),
    ],
)
def test_to_param(value: Any, column: str, source: str | None, expected: Any) -> None:
    """Values go as text for PostgreSQL's own parser, bytes for ``bytea``."""
    got = to_param(value, column, source)
    assert got == (value if expected is None and value is not None else expected)


@pytest.mark.parametrize(
    ("value", "column", "source", "why"),
    [
        ("12.345", "numeric(10,2)", "decimal(10,2)", "more than 2 decimal places"),
        ("1.5", "numeric(20,0)", "bigint unsigned", "more than 0 decimal places"),
        ("0.000001", "numeric(10,2)", "decimal(10,2)", "more than 2 decimal places"),
        ("x", "numeric(10,2)", "decimal(10,2)", "not a number"),
        ("2024-01-02 03:04:05.1234567", "timestamp without time zone", "datetime", "6 fractional"),
        ("a\x00b", "text", "varchar(5)", "NUL"),
        ("\u20ac", "bytea", "blob", "ISO-8859-1"),
        ("00ff", "bytea", "bytea", "hex form"),
        ("\\xzz", "bytea", "bytea", "bad hex"),
        (b"\xff", "text", "text", "not UTF-8"),
    ],
)
def test_to_param_refuses_what_postgres_would_store_inexactly(
    value: Any, column: str, source: str, why: str
) -> None:
    """Rounding, cutting or reinterpreting a value is refused with the reason."""
    with pytest.raises(RefusedValueError, match=why):
        to_param(value, column, source)


@pytest.mark.parametrize(
    ("column_type", "expected"),
    [
        ("timestamp with time zone", "2024-05-29 16:26:40+00"),
        ("timestamptz", "2024-05-29 16:26:40+00"),
        ("timestamp without time zone", "2024-05-29 16:26:40"),
        ("date", "2024-05-29 16:26:40"),
        ("text", "2024-05-29 16:26:40"),
    ],
)
def test_current_timestamp_is_the_commit_time_to_the_second(
    column_type: str, expected: str
) -> None:
    """As the lake takes it: the commit time cut to the second (never rounded up), in UTC;
    an instant for ``timestamptz``, a wall clock otherwise."""
    assert current_timestamp_text(1_717_000_000_999, column_type) == expected


def test_current_timestamp_before_the_epoch() -> None:
    assert current_timestamp_text(-1, "timestamp without time zone") == "1969-12-31 23:59:59"
