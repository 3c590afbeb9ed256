"""MySQL/MariaDB column types and values as canal-json carries them.

Two readers produce Python values for the same rows: the binlog decoder
(python-mysql-replication) while streaming, and PyMySQL for the snapshot and ``verify``.
:func:`render` turns either into the one canal-json text canal/TiCDC would emit:

* integers and ``YEAR`` as decimal text, ``BIGINT UNSIGNED`` included;
* ``DECIMAL(p,s)`` with exactly ``s`` decimals (``12.50``);
* ``FLOAT`` as the shortest text that reads back as the same 32-bit float (``1.1``, not
  ``1.100000023841858``), ``DOUBLE`` as the shortest text of the 64-bit value;
* ``DATETIME(fsp)`` / ``TIMESTAMP(fsp)`` as ``YYYY-MM-DD HH:MM:SS`` plus ``fsp`` digits,
  ``TIMESTAMP`` in UTC; ``DATE`` ISO; ``TIME(fsp)`` as ``[-]HH:MM:SS[.f]``; zero dates (and
  dates with a zero month or day) NULL; ``YEAR`` 0000 as ``0``;
* ``BIT(n)`` as its unsigned integer value;
* binary strings and blobs as ISO-8859-1 text, one character per byte, ``BINARY(n)`` padded
  to n bytes with zeros as the server holds it;
* ``SET`` as its members in definition order joined by ``,`` (the empty set as ``''``);
  ``ENUM`` and text as is.

Both readers must give one text per stored value (issue 15, item 9;
tests/integration/capture/test_snapshot_stream_parity.py): where the binlog reader's Python
value differs from PyMySQL's for the same stored value, the differences are undone here or
where the value is read (``capture/mysql.py``).

:func:`binlog_type` names a column's SQL type from binlog table-map metadata
(``binlog_row_metadata=FULL``); :func:`column_type` prefers the ``information_schema``
``COLUMN_TYPE`` when it describes the same kind of column (it keeps lengths such as
``varchar(64)`` and ``tinyint(1)`` that the binlog does not carry) and falls back to the binlog
type when the table changed since (an old event replayed after an ALTER).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

# MySQL protocol field type codes (include/mysql_com.h), as the binlog table map carries them.
_TINY, _SHORT, _LONG, _FLOAT, _DOUBLE = 1, 2, 3, 4, 5
_TIMESTAMP, _LONGLONG, _INT24, _DATE, _TIME, _DATETIME, _YEAR = 7, 8, 9, 10, 11, 12, 13
_VARCHAR, _BIT, _TIMESTAMP2, _DATETIME2, _TIME2 = 15, 16, 17, 18, 19
_JSON, _NEWDECIMAL, _ENUM, _SET = 245, 246, 247, 248
_BLOB, _VAR_STRING, _STRING, _GEOMETRY = 252, 253, 254, 255

_INT_NAMES = {_TINY: "tinyint", _SHORT: "smallint", _INT24: "mediumint", _LONG: "int",
              _LONGLONG: "bigint"}  # fmt: skip

#: Kinds of column: an information_schema type replaces a binlog type of the same kind only.
_KIND = {
    "tinyint": "tinyint", "smallint": "smallint", "mediumint": "mediumint", "int": "int",
    "integer": "int", "bigint": "bigint", "float": "float", "double": "double",
    "decimal": "decimal", "date": "date", "datetime": "datetime", "timestamp": "timestamp",
    "time": "time", "year": "year", "bit": "bit", "char": "text", "varchar": "text",
    "tinytext": "text", "text": "text", "mediumtext": "text", "longtext": "text",
    "json": "text", "binary": "binary", "varbinary": "binary", "tinyblob": "binary",
    "blob": "binary", "mediumblob": "binary", "longblob": "binary", "enum": "enum",
    "set": "set", "geometry": "binary", "point": "binary",
}  # fmt: skip

_TYPE_RE = re.compile(r"^\s*([a-z]+)\s*(?:\((.*)\))?\s*(unsigned)?", re.I)


#: python-mysql-replication gives a TIMESTAMP of 0 seconds (the zero value) as the epoch.
_ZERO_TIMESTAMP = dt.datetime(1970, 1, 1)
#: ... and YEAR's zero (stored as byte 0, shown as 0000) as 1900, which YEAR cannot hold.
_BINLOG_ZERO_YEAR = 1900


def _fsp(column: Any) -> str:
    fsp = int(getattr(column, "fsp", 0) or 0)
    return f"({fsp})" if fsp else ""


def binlog_type(column: Any) -> str:
    """The SQL type of a python-mysql-replication ``Column`` (from FULL row metadata)."""
    code = column.type
    binary = getattr(column, "character_set_name", None) in (None, "binary")
    if code in _INT_NAMES:
        return _INT_NAMES[code] + (" unsigned" if column.unsigned else "")
    if code == _NEWDECIMAL:
        return f"decimal({column.precision},{column.decimals})"
    if code == _FLOAT:
        return "float"
    if code == _DOUBLE:
        return "double"
    if code == _DATE:
        return "date"
    if code in (_DATETIME, _DATETIME2):
        return "datetime" + _fsp(column)
    if code in (_TIMESTAMP, _TIMESTAMP2):
        return "timestamp" + _fsp(column)
    if code in (_TIME, _TIME2):
        return "time" + _fsp(column)
    if code == _YEAR:
        return "year"
    if code == _BIT:
        return f"bit({column.bits})"
    if code in (_VARCHAR, _VAR_STRING):
        return "varbinary" if binary else "varchar"
    if code == _STRING:
        # BINARY(n)'s length: the binlog drops its trailing zero bytes, which render restores.
        return f"binary({column.max_length})" if binary else "char"
    if code == _BLOB:
        return "blob" if binary else "text"
    if code == _JSON:
        return "json"
    if code == _ENUM:
        values = ",".join(f"'{v}'" for v in (column.enum_values or [""])[1:])
        return f"enum({values})"
    if code == _SET:
        values = ",".join(f"'{v}'" for v in column.set_values or [])
        return f"set({values})"
    if code == _GEOMETRY:
        return "geometry"
    return "text"


@lru_cache(maxsize=4096)
def _parse(sql_type: str) -> tuple[str, str | None, bool]:
    match = _TYPE_RE.match(sql_type)
    if not match:
        return sql_type.strip().lower(), None, False
    name, args, unsigned = match.groups()
    return name.lower(), args, unsigned is not None


def column_type(schema_type: str | None, from_binlog: str) -> str:
    """``schema_type`` (information_schema) when it is the same kind as ``from_binlog``."""
    if not schema_type:
        return from_binlog
    s_name, s_args, s_unsigned = _parse(schema_type.lower())
    b_name, b_args, b_unsigned = _parse(from_binlog)
    kind = _KIND.get(s_name)
    if kind is None or kind != _KIND.get(b_name) or s_unsigned != b_unsigned:
        return from_binlog
    if kind in ("decimal", "datetime", "timestamp", "time") and _norm_args(s_args) != _norm_args(
        b_args
    ):
        return from_binlog
    if kind == "binary" and "binary" in (s_name, b_name) and (s_name, s_args) != (b_name, b_args):
        return from_binlog  # a BINARY(n) whose length or kind changed since: padding differs
    return schema_type.lower()


def _norm_args(args: str | None) -> str:
    return (args or "0").replace(" ", "")


def snapshot_select(quote: Callable[[str], str], columns: Sequence[str],
                    types: Mapping[str, str]) -> list[str]:  # fmt: skip
    """The ``SELECT`` list that reads ``columns`` exactly as the binlog carries them.

    A FLOAT column's text in a result set has 6 significant digits (``1.17549e-38``), which
    is not always the stored 32-bit value; read as DOUBLE it is exact, and :func:`render`
    writes the shortest text of the 32-bit value, as it does for the binlog's.
    """
    return [
        f"CAST({quote(c)} AS DOUBLE)" if _parse(types.get(c, "").lower())[0] == "float"
        else quote(c)
        for c in columns
    ]  # fmt: skip


def _float32_text(value: float) -> str:
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        try:
            if struct.pack("<f", float(text)) == packed:
                return text
        except OverflowError:
            continue  # rounded past the largest float (3.4e38 at 4 digits of 3.40282e38)
    return repr(value)


def _fraction(microseconds: int, fsp: int) -> str:
    return f".{microseconds:06d}"[: fsp + 1] if fsp > 0 else ""


@lru_cache(maxsize=1024)
def _decimal_scale(args: str | None) -> int:
    return int(args.split(",")[1]) if args and "," in args else 0


@lru_cache(maxsize=1024)
def _type_fsp(args: str | None) -> int:
    try:
        return int(args) if args else 0
    except ValueError:
        return 0


def _set_members(args: str | None) -> list[str]:
    # COLUMN_TYPE doubles a quote inside a member: set('a','c''d') has the member c'd.
    return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", args or "")]


def _time_text(value: Any, fsp: int) -> str:
    if isinstance(value, dt.timedelta):
        micros = value // dt.timedelta(microseconds=1)
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        seconds, frac = divmod(micros, 1_000_000)
        hours, rest = divmod(seconds, 3600)
        return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}{_fraction(frac, fsp)}"
    if isinstance(value, dt.time):
        return f"{value:%H:%M:%S}{_fraction(value.microsecond, fsp)}"
    return str(value)


def _json_plain(value: Any) -> Any:
    """A binlog JSON document with the reader's bytes (keys, strings) as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {_json_plain(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_plain(v) for v in value]
    return value


def _json_text(value: Any) -> str:
    """A JSON column's text. MariaDB's JSON is text on both paths and stays as written;
    MySQL's binlog carries binary JSON, which the reader parses: it is written back the way
    MySQL's SELECT prints a JSON value, members and elements separated by ``", "`` and keys
    by ``": "``, keys in the document's stored order, non-ASCII characters as they are.
    (No MySQL server runs here: the MariaDB parity test cannot exercise this path; see
    tests/unit/capture/test_mysql_values.py.)"""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    return json.dumps(_json_plain(value), ensure_ascii=False, separators=(", ", ": "))


_ZERO_PART = re.compile(r"^(?:0000-|\d{4}-00-|\d{4}-\d{2}-00)")


def _date_text(text: str) -> str | None:
    """A date PyMySQL left as text: NULL when it is the zero date or has a zero month or day
    ('2024-00-00', sql_mode permitting), as the binlog reader gives those."""
    return None if _ZERO_PART.match(text) else text


#: Types whose values render as ``str(value)``: ints of an integer type, strs of a text type.
_PLAIN_INT = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_PLAIN_STR = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"})


@lru_cache(maxsize=4096)
def _plain_type(sql_type: str) -> type | None:
    name = _parse(sql_type)[0]
    return int if name in _PLAIN_INT else str if name in _PLAIN_STR else None


def render(value: Any, sql_type: str) -> str | None:
    """The canal-json text of one value of a column of ``sql_type`` (None stays None)."""
    if value is None:
        return None
    # The most common values first: what the branches below give them, without walking them.
    plain = _plain_type(sql_type)
    if plain is not None and type(value) is plain:
        return str(value)
    name, args, _ = _parse(sql_type)
    if name in ("datetime", "timestamp"):
        if name == "timestamp" and value == _ZERO_TIMESTAMP:
            # The binlog's 0 seconds: TIMESTAMP's zero value '0000-00-00 00:00:00' (the type
            # starts at 1970-01-01 00:00:01 UTC), which a SELECT returns as the zero date.
            return None
        if isinstance(value, dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
            # isoformat is strftime's text for the years DATETIME holds (1000-9999), faster.
            text = (
                value.isoformat(" ", "seconds")
                if value.year >= 1000
                else f"{value:%Y-%m-%d %H:%M:%S}"
            )
            return f"{text}{_fraction(value.microsecond, _type_fsp(args))}"
        return _date_text(str(value))
    if name == "date":
        if isinstance(value, dt.date):
            return value.isoformat()
        return _date_text(str(value))
    if name == "time":
        return _time_text(value, _type_fsp(args))
    if name == "decimal" and isinstance(value, Decimal):
        return f"{value:.{_decimal_scale(args)}f}"
    if name == "float" and isinstance(value, float):
        return _float32_text(value)
    if name == "double" and isinstance(value, float):
        return repr(value)
    if name == "bit":
        if isinstance(value, bytes):
            return str(int.from_bytes(value, "big"))
        if isinstance(value, str):
            return str(int(value, 2)) if value else "0"
        return str(int(value))
    if name == "set":
        if isinstance(value, set | frozenset):
            return ",".join(m for m in _set_members(args) if m in value)
        return str(value)
    if name == "json":
        return _json_text(value)
    if name == "year" and value == _BINLOG_ZERO_YEAR:
        return "0"
    if isinstance(value, bool):
        return "1" if value else "0"
    if value == "" and _KIND.get(name) == "binary":
        value = b""  # the binlog reader's empty binary string is '' (b"".decode never fails)
    if isinstance(value, bytes | bytearray):
        raw = bytes(value)
        if name == "binary" and args and args.strip().isdigit():
            # BINARY(n) holds n bytes, zero padded; the binlog leaves the padding out.
            raw = raw.ljust(int(args), b"\0")
        return raw.decode("latin-1")
    if isinstance(value, float):
        return repr(value)
    return str(value)
