"""Source column types → PostgreSQL column types, and wire values → query parameters, for
the PostgreSQL sink (:mod:`tidelake.route.sinks.postgres`).

A source type is a MySQL/MariaDB/TiDB ``mysqlType`` (``"bigint(20) unsigned"``,
``"decimal(10,2)"``) or a PostgreSQL ``format_type`` name (``"character varying(20)"``,
``"timestamp(3) with time zone"``). Case, display widths and ``zerofill`` do not matter.

==================================================  ================  ======================
source type                                         PostgreSQL type   note
==================================================  ================  ======================
tinyint [unsigned], smallint, int2, smallserial,    smallint
year
smallint unsigned, mediumint [unsigned], int,       integer
integer, int4, serial
int unsigned, bigint, int8, bigserial               bigint
bigint unsigned                                     numeric(20,0)     2^64-1 fits no bigint
decimal(p,s), dec, fixed, numeric(p,s)              numeric(p,s)
decimal, numeric (no precision)                     numeric           any scale, exact
float, float4, float(p ≤ 24)                        real
double, double precision, float8, real,             double precision  MySQL ``real`` is a
float(p > 24)                                                         double
bool, boolean                                       boolean           ``t``/``f``, ``true``
date                                                date
datetime, timestamp without time zone               timestamp         wall-clock text
timestamp (MySQL), timestamp with time zone,        timestamptz       zone-less text is UTC
timestamptz
time, time without time zone                        time
time with time zone, timetz                         timetz
json, jsonb                                         jsonb
binary, varbinary, (tiny/medium/long)blob, bytea    bytea             see :func:`to_param`
char, varchar, character varying, text types,       text              no length limit
enum, set, uuid, bit(n), arrays, anything else
==================================================  ================  ======================

Choices worth knowing:

* A type without parameters (TiCDC's default ``mysqlType`` is ``decimal``, not
  ``decimal(12,2)``) gets the unconstrained PostgreSQL type: ``decimal`` → ``numeric``, which
  holds any value exactly, where MySQL's own default ``(10,0)`` would refuse every cent.
* Strings become ``text``, not ``varchar(n)``: PostgreSQL silently cuts trailing spaces that
  overflow ``varchar(n)``, and a route's transforms (masking, hashing) may lengthen a value.
* ``datetime(p)``/``timestamp(p)``/``time(p)`` lose their precision: PostgreSQL rounds input to
  a column's precision, its default (6 digits) never rounds a source value; a value with more
  than 6 fractional digits is refused here instead of rounded.
* ``bit(n)`` (``bit(1)`` too) and ``tinyint(1)`` are not booleans: the wire form of ``bit`` differs
  by producer (a number, or the bytes as ISO-8859-1 text), so it is kept as the text it came as,
  and ``tinyint(1)`` holds -128..127 in MySQL.
* ``enum``/``set`` are kept as the text the producer sent (TiCDC sends an enum's index).

Values go to PostgreSQL as text parsed by the column type's own input function (so ``"abc"``
for an ``integer`` column, ``"1.5"`` for an ``integer`` or a zero date are refused by the
server, never coerced), except ``bytea`` (bytes) and what PostgreSQL would round or cut without
an error, which :func:`to_param` refuses with :class:`RefusedValueError`: more decimal places than
a ``numeric(p,s)`` holds, more than 6 fractional seconds, a NUL character in text.

A column added by the source's DDL with ``DEFAULT CURRENT_TIMESTAMP`` gives existing rows the
DDL's commit time (:func:`current_timestamp_text`), to the second, as the lake does
(``lake/evolve.py``). The sink knows no ``lake.source_timezone``: it reads every zone-less
timestamp text as UTC (the session's ``TimeZone``), a MySQL ``TIMESTAMP``'s included. So a
``timestamptz`` column gets the commit instant itself, exactly, written with its ``+00``
offset (right whatever the source's zone); a wall-clock column (``DATETIME`` → ``timestamp``)
gets that instant's UTC wall clock — the lake's value when ``lake.source_timezone`` is UTC,
its default; a source whose sessions run in another zone wrote its own wall clock.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

#: PostgreSQL's widest numeric precision with a type modifier.
_MAX_NUMERIC_PRECISION = 1000
_FRACTION_TOO_LONG = re.compile(r"\.\d{7,}")
_NUMERIC_TYPE = re.compile(r"^numeric\((\d+)(?:,\s*(-?\d+))?\)$")


class RefusedValueError(ValueError):
    """A value its column cannot hold exactly; the message says why."""


def normalise(source_type: str) -> tuple[str, str | None, bool]:
    """``"BIGINT(20) UNSIGNED ZEROFILL"`` → ``("bigint", "20", True)``;
    ``"timestamp(3) with time zone"`` → ``("timestamp with time zone", "3", False)``."""
    text = " ".join(source_type.strip().lower().split())
    args: str | None = None
    start, end = text.find("("), text.rfind(")")
    if 0 <= start < end:
        args = text[start + 1 : end].strip()
        text = f"{text[:start]} {text[end + 1 :]}"
    words = text.split()
    unsigned = "unsigned" in words
    name = " ".join(w for w in words if w not in ("unsigned", "zerofill", "signed"))
    return name, args, unsigned


def _decimal_args(args: str | None) -> tuple[int, int] | None:
    """``"10,2"`` → ``(10, 2)``, ``"10"`` → ``(10, 0)``; None when absent or not numbers."""
    if args is None:
        return None
    parts = [p.strip() for p in args.split(",")]
    try:
        precision = int(parts[0])
        scale = int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None
    return precision, scale


_SMALLINT = frozenset({"tinyint", "smallint", "int2", "smallserial", "year"})
_INTEGER = frozenset({"mediumint", "int", "integer", "int4", "serial"})
_BIGINT = frozenset({"bigint", "int8", "bigserial"})
_DECIMAL = frozenset({"decimal", "dec", "fixed", "numeric"})
_REAL = frozenset({"float4"})
_DOUBLE = frozenset({"double", "double precision", "float8", "real"})
_TIMESTAMP = frozenset({"datetime", "timestamp without time zone", "smalldatetime"})
_TIMESTAMPTZ = frozenset({"timestamp", "timestamp with time zone", "timestamptz"})
_TIME = frozenset({"time", "time without time zone"})
_TIMETZ = frozenset({"time with time zone", "timetz"})
_BINARY = frozenset({"binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob", "bytea"})


def pg_type(source_type: str | None) -> str:
    """The PostgreSQL column type the sink creates for a column of ``source_type`` (None or
    unknown → ``text``), as the table in the module docstring says."""
    if not source_type:
        return "text"
    name, args, unsigned = normalise(source_type)
    if name in _SMALLINT:
        return "integer" if unsigned and name == "smallint" else "smallint"
    if name in _INTEGER:
        return "bigint" if unsigned and name in ("int", "integer") else "integer"
    if name in _BIGINT:
        return "numeric(20,0)" if unsigned else "bigint"
    if name in _DECIMAL:
        dec = _decimal_args(args)
        if dec is None:  # TiCDC's mysqlType names no parameters: any scale, exactly
            return "numeric"
        precision, scale = dec
        if not 0 < precision <= _MAX_NUMERIC_PRECISION or not 0 <= scale <= precision:
            return "numeric"
        return f"numeric({precision},{scale})"
    if name == "float":
        dec = _decimal_args(args)
        return "double precision" if dec is not None and dec[0] > 24 else "real"
    if name in _REAL:
        return "real"
    if name in _DOUBLE:
        return "double precision"
    if name in ("bool", "boolean"):
        return "boolean"
    if name == "date":
        return "date"
    if name in _TIMESTAMP:
        return "timestamp without time zone"
    if name in _TIMESTAMPTZ:
        return "timestamp with time zone"
    if name in _TIME:
        return "time without time zone"
    if name in _TIMETZ:
        return "time with time zone"
    if name in ("json", "jsonb"):
        return "jsonb"
    if name in _BINARY:
        return "bytea"
    return "text"


def cast_type(column_type: str) -> str:
    """The type a parameter is cast to in a ``VALUES`` list for a column of ``column_type``
    (its ``format_type``): the column type itself, but ``text`` for ``character varying(n)``
    and ``character(n)``, whose explicit cast would cut a long value silently (the
    assignment to the column then refuses it instead)."""
    name, _, _ = normalise(column_type)
    if name in ("character varying", "character", "varchar", "char", "bpchar"):
        return "text"
    return column_type


def _numeric_scale(column_type: str) -> tuple[int, int] | None:
    match = _NUMERIC_TYPE.match(column_type.strip().lower())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2) or 0)


def _check_decimal(text: str, precision: int, scale: int) -> None:
    try:
        number = Decimal(text.strip())
    except InvalidOperation as exc:
        raise RefusedValueError(f"not a number: {text!r}") from exc
    if not number.is_finite():
        return  # PostgreSQL decides (NaN is allowed, an infinity is not)
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    beyond = -exponent - scale  # digits written past the column's scale
    if beyond > 0 and any(digits[-beyond:]):
        raise RefusedValueError(
            f"{text} has more than {scale} decimal places: numeric({precision},{scale}) would "
            "round it"
        )


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RefusedValueError(f"bytes that are not UTF-8 text: {exc}") from exc
    return str(value)


def _as_bytes(value: Any, source_type: str | None) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    text = _as_text(value)
    if source_type is not None and normalise(source_type)[0] == "bytea":
        if not text.startswith("\\x"):
            raise RefusedValueError(f"bytea not in PostgreSQL's \\x hex form: {text[:40]!r}")
        try:
            return bytes.fromhex(text[2:])
        except ValueError as exc:
            raise RefusedValueError(f"bytea with bad hex: {exc}") from exc
    # canal-json (and Debezium's MySQL binary) carry bytes as ISO-8859-1 text, one char a byte.
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise RefusedValueError(
            "binary value is not ISO-8859-1 text (a character above U+00FF)"
        ) from exc


def to_param(value: Any, column_type: str, source_type: str | None = None) -> Any:
    """The query parameter of ``value`` for a column of ``column_type`` (its ``format_type``):
    None, bytes for ``bytea``, else text for PostgreSQL to parse. Raises
    :class:`RefusedValueError` for a value PostgreSQL would store inexactly without an error."""
    if value is None:
        return None
    name, _, _ = normalise(column_type)
    if name == "bytea":
        return _as_bytes(value, source_type)
    text = _as_text(value)
    if "\x00" in text:
        raise RefusedValueError(f"PostgreSQL {column_type} cannot hold a NUL character")
    if name == "numeric":
        numeric = _numeric_scale(column_type)
        if numeric is not None:
            _check_decimal(text, *numeric)
    elif name.startswith("time") and _FRACTION_TOO_LONG.search(text):
        raise RefusedValueError(
            f"{text!r} has more than 6 fractional digits: {column_type} would round it"
        )
    return text


def current_timestamp_text(commit_ts_ms: int, column_type: str) -> str:
    """The text of the DDL commit time ``commit_ts_ms`` (milliseconds since the epoch) for a
    column of ``column_type`` (its ``format_type``) added with ``DEFAULT CURRENT_TIMESTAMP``:
    to the second, as the lake takes it; in UTC, with the ``+00`` offset for a
    ``timestamptz`` (an instant) and without it for any other type (a wall clock, a date…)."""
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=commit_ts_ms)
    text = instant.strftime("%Y-%m-%d %H:%M:%S")
    name, _, _ = normalise(column_type)
    if name in ("timestamp with time zone", "timestamptz"):
        return text + "+00"
    return text
