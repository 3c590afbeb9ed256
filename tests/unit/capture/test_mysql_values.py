"""MySQL values rendered as canal-json text, from the binlog's and PyMySQL's Python values."""

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace

import pytest

from tidelake.capture.mysql_values import binlog_type, column_type, render


@pytest.mark.parametrize(
    ("value", "sql_type", "text"),
    [
        (18446744073709551615, "bigint unsigned", "18446744073709551615"),
        (Decimal("13"), "decimal(12,2)", "13.00"),
        (Decimal("12.5"), "decimal(12,2)", "12.50"),
        (1.100000023841858, "float", "1.1"),
        (2.2, "double", "2.2"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 120000), "datetime(3)", "2024-01-02 03:04:05.120"),
        (dt.datetime(2024, 1, 2, 3, 4, 5), "datetime", "2024-01-02 03:04:05"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 500000), "timestamp(6)", "2024-01-02 03:04:05.500000"),
        (dt.date(2024, 1, 2), "date", "2024-01-02"),
        ("0000-00-00", "date", None),
        ("0000-00-00 00:00:00", "datetime", None),
        (dt.timedelta(days=-1, seconds=82676, microseconds=500000), "time(2)", "-01:02:03.50"),
        (dt.timedelta(hours=30), "time", "30:00:00"),
        ("00101", "bit(5)", "5"),
        (b"\x05", "bit(5)", "5"),
        (b"\x00\xffA", "varbinary(8)", "\x00\xffA"),
        ({"z", "x"}, "set('x','y','z')", "x,z"),
        ("b", "enum('a','b')", "b"),
        ("héllo", "text", "héllo"),
        (2024, "year", "2024"),
        (None, "int", None),
    ],
)
def test_render_matches_canal_text(value: object, sql_type: str, text: str | None) -> None:
    """Every common type renders as canal/TiCDC would carry it."""
    assert text == render(value, sql_type)


def test_float_from_server_text_and_binlog_agree() -> None:
    """PyMySQL's 1.1 and the binlog's float32 1.100000023841858 give the same text."""
    assert render(1.1, "float") == render(1.100000023841858, "float")


def _col(code: int, **kw: object) -> SimpleNamespace:
    base = {"unsigned": False, "character_set_name": None, "fsp": 0}
    return SimpleNamespace(type=code, **{**base, **kw})


@pytest.mark.parametrize(
    ("column", "sql_type"),
    [
        (_col(8, unsigned=True), "bigint unsigned"),
        (_col(246, precision=12, decimals=2), "decimal(12,2)"),
        (_col(18, fsp=3), "datetime(3)"),
        (_col(17), "timestamp"),
        (_col(15, character_set_name="binary"), "varbinary"),
        (_col(15, character_set_name="utf8"), "varchar"),
        (_col(252, character_set_name="binary"), "blob"),
        (_col(16, bits=5), "bit(5)"),
        (_col(248, set_values=["x", "y"]), "set('x','y')"),
    ],
)
def test_binlog_type_names_the_sql_type(column: SimpleNamespace, sql_type: str) -> None:
    """Table-map metadata (binlog_row_metadata=FULL) gives the column's SQL type."""
    assert sql_type == binlog_type(column)


def test_schema_type_kept_only_for_the_same_kind_of_column() -> None:
    """information_schema refines a binlog type of the same kind; a changed column keeps the
    binlog type the event was written with."""
    assert column_type("varchar(64)", "varchar") == "varchar(64)"
    assert column_type("tinyint(1)", "tinyint") == "tinyint(1)"
    assert column_type("varchar(10)", "int") == "int"
    assert column_type("decimal(14,4)", "decimal(12,2)") == "decimal(12,2)"
    assert column_type("bigint(20)", "bigint unsigned") == "bigint unsigned"
    assert column_type(None, "varchar") == "varchar"
