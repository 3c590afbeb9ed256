"""The documented type mapping: one row per source type, with an example value.

``docs/type-mapping.md`` holds :func:`type_mapping_markdown` and
``tests/unit/lake/test_type_mapping.py`` runs one test per row of :data:`TYPE_MAPPING`
(the Spark type of ``lake/schema.py`` and the stored value of the example), so the document
and the code cannot drift apart.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

MYSQL = "MySQL / TiDB"
POSTGRES = "PostgreSQL"


@dataclass(frozen=True, slots=True)
class TypeRow:
    """One source type: what arrives (``example``, wire text) and what the lake stores."""

    source: str
    source_type: str
    example: str
    spark: str
    stored: Any
    note: str = ""


def _utc(
    year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int = 0
) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.UTC)


TYPE_MAPPING: tuple[TypeRow, ...] = (
    TypeRow(MYSQL, "tinyint", "-128", "tinyint", -128),
    TypeRow(MYSQL, "tinyint(1)", "2", "tinyint", 2, "not boolean: MySQL stores -128..127 in it"),
    TypeRow(MYSQL, "tinyint unsigned", "255", "smallint", 255, "unsigned widens one step"),
    TypeRow(MYSQL, "smallint", "-32768", "smallint", -32768),
    TypeRow(MYSQL, "smallint unsigned", "65535", "int", 65535),
    TypeRow(MYSQL, "mediumint", "-8388608", "int", -8388608, "24 bits, signed or not"),
    TypeRow(MYSQL, "int", "-2147483648", "int", -2147483648),
    TypeRow(MYSQL, "int unsigned", "4294967295", "bigint", 4294967295),
    TypeRow(MYSQL, "bigint", "-9223372036854775808", "bigint", -9223372036854775808),
    TypeRow(
        MYSQL,
        "bigint unsigned",
        "18446744073709551615",
        "decimal(20,0)",
        Decimal("18446744073709551615"),
        "no Spark integer holds 2^64-1",
    ),
    TypeRow(MYSQL, "decimal(10,2)", "12.5", "decimal(10,2)", Decimal("12.50"), "scale kept"),
    TypeRow(
        MYSQL,
        "decimal(38,10)",
        "1234567890123456789012345678.0123456789",
        "decimal(38,10)",
        Decimal("1234567890123456789012345678.0123456789"),
        "up to Spark's 38 digits: exact",
    ),
    TypeRow(
        MYSQL,
        "decimal(65,30)",
        "12345678901234567890123456789012345.000000000000000000000000000001",
        "string",
        "12345678901234567890123456789012345.000000000000000000000000000001",
        "more than 38 digits: the exact text (cast to decimal in a query if it fits)",
    ),
    TypeRow(MYSQL, "float", "1.5", "float", 1.5),
    TypeRow(MYSQL, "double", "2.25", "double", 2.25),
    TypeRow(MYSQL, "bit(1)", "1", "boolean", True),
    TypeRow(MYSQL, "bit(12)", "2049", "bigint", 2049, "the bits as an unsigned number"),
    TypeRow(MYSQL, "date", "2024-05-05", "date", dt.date(2024, 5, 5)),
    TypeRow(MYSQL, "date", "0000-00-00", "date", None, "zero dates become NULL"),
    TypeRow(
        MYSQL,
        "datetime",
        "2024-05-05 12:34:56",
        "timestamp",
        _utc(2024, 5, 5, 12, 34, 56),
        "zone-less: the wall-clock text stored as that instant in UTC (reads back as the same "
        "text in a UTC session); not timestamp_ntz, which hudi-rs 0.5.0 cannot read",
    ),
    TypeRow(
        MYSQL,
        "datetime(6)",
        "2024-05-05 12:34:56.123456",
        "timestamp",
        _utc(2024, 5, 5, 12, 34, 56, 123456),
        "microseconds kept",
    ),
    TypeRow(
        MYSQL,
        "timestamp",
        "2024-05-05 12:34:56",
        "timestamp",
        _utc(2024, 5, 5, 12, 34, 56),
        "an instant: canal-json renders it in the TiCDC server's zone, "
        "`lake.source_timezone` (UTC by default)",
    ),
    TypeRow(MYSQL, "time", "-01:02:03", "string", "-01:02:03", "MySQL TIME spans ±838 hours"),
    TypeRow(MYSQL, "year", "2024", "int", 2024),
    TypeRow(MYSQL, "char(3)", "abc", "string", "abc"),
    TypeRow(MYSQL, "varchar(255)", "Zoë 李雷", "string", "Zoë 李雷"),
    TypeRow(MYSQL, "longtext", "…", "string", "…"),
    TypeRow(MYSQL, "json", '{"a": [1, 2]}', "string", '{"a": [1, 2]}', "the JSON text as sent"),
    TypeRow(
        MYSQL,
        "enum('new','paid')",
        "paid",
        "string",
        "paid",
        "the label (TiCDC sends the 1-based index: the label comes from the column definition)",
    ),
    TypeRow(MYSQL, "set('x','y','z')", "x,z", "string", "x,z", "comma-separated members"),
    TypeRow(
        MYSQL,
        "varbinary(4)",
        "\x00\xff",
        "binary",
        b"\x00\xff",
        "canal-json carries bytes as ISO-8859-1 text: turned back into the bytes",
    ),
    TypeRow(MYSQL, "blob", "\x01\x02", "binary", b"\x01\x02"),
    TypeRow(POSTGRES, "smallint", "-32768", "smallint", -32768),
    TypeRow(POSTGRES, "integer", "2147483647", "int", 2147483647),
    TypeRow(POSTGRES, "bigint", "9223372036854775807", "bigint", 9223372036854775807),
    TypeRow(POSTGRES, "numeric(12,2)", "12.5", "decimal(12,2)", Decimal("12.50")),
    TypeRow(
        POSTGRES,
        "numeric",
        "3.14159265358979323846264338327950288419716939937510",
        "string",
        "3.14159265358979323846264338327950288419716939937510",
        "unconstrained: any precision, so the exact text",
    ),
    TypeRow(POSTGRES, "real", "1.5", "float", 1.5),
    TypeRow(POSTGRES, "double precision", "2.25", "double", 2.25),
    TypeRow(POSTGRES, "boolean", "t", "boolean", True),
    TypeRow(POSTGRES, "date", "2024-05-05", "date", dt.date(2024, 5, 5)),
    TypeRow(
        POSTGRES,
        "timestamp without time zone",
        "2024-05-05 12:34:56.5",
        "timestamp",
        _utc(2024, 5, 5, 12, 34, 56, 500000),
        "zone-less: as MySQL DATETIME",
    ),
    TypeRow(
        POSTGRES,
        "timestamp with time zone",
        "2024-05-05 12:34:56+02",
        "timestamp",
        _utc(2024, 5, 5, 10, 34, 56),
        "the instant, in UTC",
    ),
    TypeRow(POSTGRES, "time without time zone", "12:34:56", "string", "12:34:56"),
    TypeRow(
        POSTGRES,
        "uuid",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "string",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    TypeRow(POSTGRES, "jsonb", '{"a": 1}', "string", '{"a": 1}', "the JSON text as sent"),
    TypeRow(POSTGRES, "bytea", "\\x00ff", "binary", b"\x00\xff", "hex text turned into bytes"),
    TypeRow(
        POSTGRES,
        "text[]",
        '{a,"b c"}',
        "string",
        '{a,"b c"}',
        "arrays: the source's array text (PostgreSQL literal; Debezium's JSON array)",
    ),
    TypeRow(POSTGRES, "integer[]", "{1,2,3}", "string", "{1,2,3}"),
    TypeRow(POSTGRES, "interval", "1 day 02:00:00", "string", "1 day 02:00:00"),
    TypeRow(POSTGRES, "inet", "192.0.2.1/32", "string", "192.0.2.1/32"),
)


def _cell(value: Any) -> str:
    """A stored value as a reader sees it, for the table."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + " UTC"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _wire(text: str) -> str:
    if not text.isprintable():
        return "ISO-8859-1 text of 0x" + text.encode("latin-1").hex()
    return text


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def type_mapping_markdown() -> str:
    """The table of docs/type-mapping.md."""
    lines = [
        "| source | source type | wire value (example) | Spark / Hudi type | stored | note |",
        "|---|---|---|---|---|---|",
    ]
    for row in TYPE_MAPPING:
        cells = [
            row.source,
            f"`{row.source_type}`",
            f"`{_wire(row.example)}`",
            f"`{row.spark}`",
            f"`{_cell(row.stored)}`",
            row.note,
        ]
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
