"""Source column types → Spark types, and canal-json text → typed values."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampType,
)

from tidelake.lake.schema import (
    LINEAGE_FIELDS,
    convert_value,
    is_safe_widening,
    schema_for,
    spark_type,
)

TYPE_CASES: list[tuple[str, DataType]] = [
    ("int", IntegerType()),
    ("int unsigned", LongType()),
    ("bigint", LongType()),
    ("bigint unsigned", DecimalType(20, 0)),
    ("BIGINT(20) UNSIGNED", DecimalType(20, 0)),
    ("tinyint(1)", ByteType()),
    ("tinyint unsigned", ShortType()),
    ("smallint", ShortType()),
    ("mediumint", IntegerType()),
    ("decimal(38,10)", DecimalType(38, 10)),
    ("decimal", DecimalType(10, 0)),
    ("numeric(12,2)", DecimalType(12, 2)),
    ("numeric", StringType()),
    ("decimal(65,2)", StringType()),
    ("float", FloatType()),
    ("double", DoubleType()),
    ("double precision", DoubleType()),
    ("varchar(255)", StringType()),
    ("text", StringType()),
    ("json", StringType()),
    ("jsonb", StringType()),
    ("uuid", StringType()),
    ("enum('a','b')", StringType()),
    ("set('x','y')", StringType()),
    ("time", StringType()),
    ("datetime", TimestampType()),
    ("datetime(6)", TimestampType()),
    ("timestamp", TimestampType()),
    ("timestamp with time zone", TimestampType()),
    ("timestamp without time zone", TimestampType()),
    ("date", DateType()),
    ("year", IntegerType()),
    ("varbinary(16)", BinaryType()),
    ("blob", BinaryType()),
    ("bytea", BinaryType()),
    ("boolean", BooleanType()),
    ("integer", IntegerType()),
    ("bit(1)", BooleanType()),
    ("bit(8)", LongType()),
    ("integer[]", StringType()),
    ("geography_of_mars", StringType()),
]


@pytest.mark.parametrize(("source_type", "expected"), TYPE_CASES)
def test_spark_type_of_each_source_type(source_type: str, expected: DataType) -> None:
    """Each MySQL / PostgreSQL type maps to the documented Spark type."""
    assert expected == spark_type(source_type)


VALUE_CASES: list[tuple[str, Any, Any]] = [
    ("bigint unsigned", "18446744073709551615", Decimal(2**64 - 1)),
    ("decimal(38,10)", "1234567890123456789012345678.0123456789",
     Decimal("1234567890123456789012345678.0123456789")),
    ("decimal(10,2)", "-0.5", Decimal("-0.50")),
    ("int", "-42", -42),
    ("int", 7, 7),
    ("tinyint(1)", "1", 1),
    ("double", "2.5", 2.5),
    ("boolean", "t", True),
    ("boolean", "false", False),
    ("bit(1)", "\x01", True),
    ("bit(8)", "255", 255),
    ("varchar(64)", "héllo 日本語 🚀", "héllo 日本語 🚀"),
    ("json", '{"a": [1]}', '{"a": [1]}'),
    ("json", {"a": [1]}, '{"a":[1]}'),
    ("varbinary(16)", "\u0000\u0001\u00ffA", b"\x00\x01\xffA"),
    ("bytea", "\\x00ff", b"\x00\xff"),
    ("date", "2024-02-29", dt.date(2024, 2, 29)),
    ("date", "0000-00-00", None),
    ("date", 19782, dt.date(2024, 2, 29)),
    ("datetime", "2024-05-05 12:34:56.5", dt.datetime(2024, 5, 5, 12, 34, 56, 500000, dt.UTC)),
    ("datetime", "0000-00-00 00:00:00", None),
    ("timestamp", "2024-05-05 12:34:56", dt.datetime(2024, 5, 5, 12, 34, 56, tzinfo=dt.UTC)),
    ("timestamp with time zone", "2024-05-05 14:34:56+02",
     dt.datetime(2024, 5, 5, 12, 34, 56, tzinfo=dt.UTC)),
    ("timestamp", 1_714_912_496_000, dt.datetime(2024, 5, 5, 12, 34, 56, tzinfo=dt.UTC)),
    ("year", "2024", 2024),
    ("time", "-838:59:59", "-838:59:59"),
    ("varchar(8)", None, None),
    ("unknown_type", 12, "12"),
]  # fmt: skip


@pytest.mark.parametrize(("source_type", "text", "expected"), VALUE_CASES)
def test_convert_value_from_wire_text(source_type: str, text: Any, expected: Any) -> None:
    """Canal text (or an already typed value) converts to the value Spark stores."""
    assert expected == convert_value(text, source_type)


def test_timestamp_text_is_read_in_the_configured_source_zone() -> None:
    """MySQL TIMESTAMP text is in the TiCDC server zone; DATETIME text is always UTC."""
    expected = (
        dt.datetime(2024, 5, 5, 10, 34, 56, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 5, 12, 34, 56, tzinfo=dt.UTC),
    )
    actual = (
        convert_value("2024-05-05 12:34:56", "timestamp", "Europe/Paris"),
        convert_value("2024-05-05 12:34:56", "datetime", "Europe/Paris"),
    )
    assert expected == actual


def test_schema_puts_source_columns_first_then_lineage() -> None:
    """All columns nullable; lineage columns last, in their documented order."""
    schema = schema_for({"id": "bigint", "note": "text"})
    expected = ["id", "note", *(f.name for f in LINEAGE_FIELDS)]
    assert expected == schema.names
    assert all(f.nullable for f in schema.fields)


@pytest.mark.parametrize(
    ("old", "new", "safe"),
    [
        ("int", "bigint", True),
        ("tinyint", "int", True),
        ("bigint", "int", False),
        ("bigint", "bigint unsigned", True),
        ("int", "decimal(10,0)", True),
        ("int", "decimal(9,0)", False),
        ("decimal(10,2)", "decimal(12,2)", True),
        ("decimal(10,2)", "decimal(12,4)", True),
        ("decimal(10,2)", "decimal(10,3)", False),
        ("decimal(12,2)", "decimal(10,2)", False),
        ("float", "double", True),
        ("double", "float", False),
        ("int", "double", True),
        ("bigint", "double", False),
        ("date", "datetime", True),
        ("datetime", "date", False),
        ("int", "varchar(20)", True),
        ("decimal(10,2)", "text", True),
        ("datetime", "varchar(32)", True),
        ("varchar(3)", "int", False),
        ("double", "varchar(32)", False),
        ("blob", "text", False),
        ("varchar(16)", "varchar(64)", True),
    ],
)
def test_safe_widenings_are_the_type_changes_that_keep_every_value(
    old: str, new: str, safe: bool
) -> None:
    """MODIFY / ALTER COLUMN TYPE is applied only when no existing value can change."""
    assert safe == is_safe_widening(spark_type(old), spark_type(new))


def test_debezium_typed_bigint_unsigned_wraps_back_and_instants_are_utc() -> None:
    """Debezium with a schema writes BIGINT UNSIGNED 2^64-1 as int64 -1
    (bigint.unsigned.handling.mode=long) and a TIMESTAMP as UTC (ZonedTimestamp): typed by the
    column's known type, the lake stores the source's values, whatever source_timezone says."""
    from decimal import Decimal

    from tidelake.lake.schema import DEBEZIUM_TYPED_FORM, converter

    unsigned = converter("bigint unsigned", "UTC", DEBEZIUM_TYPED_FORM)
    zoned = converter("timestamp", "Asia/Shanghai", DEBEZIUM_TYPED_FORM)
    expected = (Decimal(2**64 - 1), dt.datetime(2024, 5, 5, 12, 0, tzinfo=dt.UTC))
    assert expected == (unsigned("-1"), zoned("2024-05-05 12:00:00"))


def test_an_unsigned_value_out_of_its_range_is_refused() -> None:
    """A negative value for an unsigned column from a text producer is not wrapped: refused."""
    from tidelake.lake.schema import converter

    with pytest.raises(ValueError, match="does not fit"):
        converter("int unsigned", "UTC")("99999999999999999999")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("-838:59:59", "-838:59:59.000000"), ("12:00:00.5", "12:00:00.500000"),
     ("01:02:03.123456", "01:02:03.123456")],
)  # fmt: skip
def test_a_mysql_time_keeps_its_declared_fraction_digits(text: str, expected: str) -> None:
    """MySQL shows TIME(6) with six fraction digits; Debezium's MicroTime drops trailing
    zeros: with the column's type known, every producer's value lands as MySQL shows it."""
    from tidelake.lake.schema import converter

    assert expected == converter("time(6)")(text)


def test_a_time_fraction_beyond_its_declared_digits_is_refused() -> None:
    """A digit TIME(2) cannot hold is refused, never cut."""
    from tidelake.lake.schema import converter

    with pytest.raises(ValueError, match="more than 2 fraction digits"):
        converter("time(2)")("01:02:03.123")
