"""MySQL values rendered as canal-json text, from the binlog's and PyMySQL's Python values."""

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace

import pytest

from tidelake.capture.mysql import _read_time2
from tidelake.capture.mysql_values import binlog_type, column_type, render, snapshot_select


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


@pytest.mark.parametrize(
    ("binlog", "snapshot", "sql_type", "text"),
    [
        # The binlog drops BINARY(n)'s trailing zero bytes (an empty one arrives as '').
        (b"ab", b"ab\x00\x00", "binary(4)", "ab\x00\x00"),
        ("", b"\x00\x00\x00\x00", "binary(4)", "\x00\x00\x00\x00"),
        # TIMESTAMP's zero value is 0 seconds in the binlog, the zero date in a SELECT.
        (dt.datetime(1970, 1, 1), "0000-00-00 00:00:00", "timestamp", None),
        # YEAR 0000 is byte 0, which the binlog reader turns into 1900; a SELECT gives 0.
        (1900, 0, "year", "0"),
        # A date with a zero month: None from the binlog reader, text from PyMySQL.
        (None, "2024-00-10", "date", None),
        (None, "2024-01-00 10:00:00", "datetime", None),
        # A set member with a quote: COLUMN_TYPE doubles it.
        ({"c'd"}, "c'd", "set('a','c''d')", "c'd"),
        # FLOAT: the snapshot reads it as DOUBLE (snapshot_select), the binlog as float32.
        (3.4028234663852886e38, 3.4028234663852886e38, "float", "3.4028235e+38"),
    ],
)
def test_binlog_and_select_values_of_one_stored_value_render_alike(
    binlog: object, snapshot: object, sql_type: str, text: str | None
) -> None:
    """The binlog reader's and PyMySQL's Python values for the same stored value give one text
    (tests/integration/capture/test_snapshot_stream_parity.py found each of these)."""
    assert (text, text) == (render(binlog, sql_type), render(snapshot, sql_type))


def test_snapshot_select_reads_float_columns_as_double() -> None:
    """A FLOAT column is read as DOUBLE (its result-set text has only 6 digits)."""
    types = {"id": "int(11)", "f": "float", "g": "float unsigned", "d": "double"}
    assert ["`id`", "CAST(`f` AS DOUBLE)", "CAST(`g` AS DOUBLE)", "`d`"] == snapshot_select(
        lambda c: f"`{c}`", list(types), types
    )


def test_binary_n_keeps_its_length_from_the_binlog() -> None:
    """A BINARY(n) column's table-map length makes its type binary(n), so it can be padded."""
    assert "binary(4)" == binlog_type(_col(254, character_set_name="binary", max_length=4))
    assert "binary(4)" == column_type("binary(4)", "binary(4)")
    assert "binary(8)" == column_type("binary(4)", "binary(8)")
    assert "varbinary(8)" == column_type("varbinary(8)", "varbinary")


class _Packet:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, n: int) -> bytes:
        out, self.data = self.data[:n], self.data[n:]
        return out


def _time2(fsp: int, packed: int) -> bytes:
    """TIME(fsp) as MySQL writes it (my_time_packed_to_binary): the packed value
    ``int << 24 | frac`` with the integer part offset by 0x800000."""
    # C's ``nr % (1 << 24)`` keeps the dividend's sign; ``>>`` floors, as in Python.
    intpart = packed >> 24
    frac = -(-packed % (1 << 24)) if packed < 0 else packed % (1 << 24)
    if fsp >= 5:
        return (packed + 0x800000000000).to_bytes(6, "big")
    head = (intpart + 0x800000).to_bytes(3, "big")
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + (frac // 10000 % 0x100).to_bytes(1, "big")  # (unsigned char) (char)
    return head + (frac // 100 % 0x10000).to_bytes(2, "big")  # mi_int2store of an int


def _packed(seconds: int, micros: int) -> int:
    hms = (seconds // 3600) << 12 | (seconds // 60 % 60) << 6 | seconds % 60
    return (hms << 24) + micros


@pytest.mark.parametrize(
    ("fsp", "value"),
    [
        (0, dt.timedelta(hours=838, minutes=59, seconds=59)),
        (0, -dt.timedelta(seconds=1)),
        (2, -dt.timedelta(seconds=1, microseconds=10000)),
        (2, -dt.timedelta(microseconds=990000)),
        (3, -dt.timedelta(hours=838, minutes=59, seconds=58, microseconds=999000)),
        (4, dt.timedelta(seconds=3, microseconds=123400)),
        (6, -dt.timedelta(hours=1, minutes=2, seconds=3, microseconds=456789)),
        (6, -dt.timedelta(microseconds=500000)),
        (5, dt.timedelta(hours=12, microseconds=999990)),
    ],
)
def test_time2_reader_decodes_negative_fractions(fsp: int, value: dt.timedelta) -> None:
    """The TIME(fsp) binlog reader that replaces python-mysql-replication's: negative values
    with a fraction included (the library gave -01:02:03.456789 as -01:02:03.543211)."""
    micros = value // dt.timedelta(microseconds=1)
    sign = -1 if micros < 0 else 1
    seconds, frac = divmod(abs(micros), 1_000_000)
    event = SimpleNamespace(packet=_Packet(_time2(fsp, sign * _packed(seconds, frac))))
    assert value == _read_time2(event, SimpleNamespace(fsp=fsp))
    assert b"" == event.packet.data


def test_binlog_json_is_written_as_mysql_prints_it() -> None:
    """MySQL's binary JSON, parsed by the binlog reader (bytes keys and strings), comes out
    with MySQL's separators; MariaDB's JSON (text on both paths) stays as written."""
    parsed = {b"a": 1, b"bb": [1, 2.5, None, True, b"\xc3\xa9"]}
    assert '{"a": 1, "bb": [1, 2.5, null, true, "é"]}' == render(parsed, "json")
    assert '{"b":1,  "a":2}' == render('{"b":1,  "a":2}', "json")
