"""A faster row image reader for python-mysql-replication, installed by :func:`install`
(``capture/mysql.py`` calls it at import).

python-mysql-replication 1.0.x reads every column of every row image through
``RowsEvent.__read_values_name``: two lookups of the column's name through the table map, a
bitmap helper call per column and an ``if``/``elif`` chain of some twenty type tests before the
value is read. That was about a fifth of the MariaDB capture's CPU time after the table map
cache (py-spy, docs/benchmarks.md "Capture throughput").

:func:`read_column_data` replaces ``RowsEvent._read_column_data`` for the common column types
(TINYINT, SMALLINT, INT, BIGINT signed and unsigned; VARCHAR/CHAR with a character set) and
hands every other column to the library's own reader, so each value is exactly what the
library gives: integers as MySQL's ``Rows_log_event`` stores them (little-endian, 1/2/4/8
bytes, "Binary Log: Row Events" of the MySQL manual; MariaDB's ``log_event.cc`` writes the
same), strings as a 1-byte length (2 when the column's maximum length in bytes exceeds 255)
then the bytes, decoded with the column's character set as the library does. NULLs and
columns missing from a MINIMAL image are recorded in the event's ``none_sources`` the same
way. Partial JSON updates (MySQL's PARTIAL_UPDATE_ROWS_EVENT) keep the library's reader.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable
from typing import Any

from pymysqlreplication.bitmap import BitCount
from pymysqlreplication.constants import BINLOG, FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import RowsEvent

_library_reader = RowsEvent._read_column_data

#: ``struct`` readers of the integer types, by (type code, unsigned).
_INTS: dict[tuple[int, bool], tuple[int, Callable[[bytes], tuple[int, ...]]]] = {
    (FIELD_TYPE.TINY, False): (1, struct.Struct("<b").unpack),
    (FIELD_TYPE.TINY, True): (1, struct.Struct("<B").unpack),
    (FIELD_TYPE.SHORT, False): (2, struct.Struct("<h").unpack),
    (FIELD_TYPE.SHORT, True): (2, struct.Struct("<H").unpack),
    (FIELD_TYPE.LONG, False): (4, struct.Struct("<i").unpack),
    (FIELD_TYPE.LONG, True): (4, struct.Struct("<I").unpack),
    (FIELD_TYPE.LONGLONG, False): (8, struct.Struct("<q").unpack),
    (FIELD_TYPE.LONGLONG, True): (8, struct.Struct("<Q").unpack),
}
_STRINGS = (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING)
#: How a column is read: 0 by the library, 1 integer, 2 string.
_LIBRARY, _INT, _STRING = 0, 1, 2

#: A column's plan: (name, how, column, unsigned, size, unpack or encoding).
Plan = list[tuple[str, int, Any, bool, int, Any]]
_plans: dict[int, tuple[list[Any], Plan]] = {}


def _plan(event: RowsEvent) -> Plan | None:
    """How to read each column of ``event``'s table map (None: leave it all to the library)."""
    columns = event.columns
    known = _plans.get(id(columns))
    if known is not None and known[0] is columns:
        return known[1]
    plan: Plan = []
    for column in columns:
        if not column.name:
            return None  # the library fetches missing names itself
        unsigned = bool(column.unsigned)
        entry: tuple[str, int, Any, bool, int, Any] = (
            column.name,
            _LIBRARY,
            column,
            unsigned,
            0,
            None,
        )
        reader = _INTS.get((column.type, unsigned))
        if reader is not None:
            entry = (column.name, _INT, column, unsigned, reader[0], reader[1])
        elif column.type in _STRINGS and column.character_set_name is not None:
            encoding = event.charset_to_encoding(column.character_set_name)
            try:
                codecs.lookup(encoding)
            except LookupError:
                encoding = None  # the library keeps the bytes: so does its reader
            if encoding is not None:
                size = 2 if column.max_length > 255 else 1
                entry = (column.name, _STRING, column, unsigned, size, encoding)
        plan.append(entry)
    if len(_plans) >= 1024:
        _plans.clear()
    _plans[id(columns)] = (columns, plan)
    return plan


def read_column_data(self: RowsEvent, cols_bitmap: bytes, row_image_type: Any = None) -> Any:
    """One row image as ``{column name: value}``, as ``RowsEvent._read_column_data`` reads it."""
    plan = None if self.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT else _plan(self)
    if plan is None:
        return _library_reader(self, cols_bitmap, row_image_type)
    self.is_partial_json_update = False
    packet = self.packet
    read = packet.read
    null_bitmap = read((BitCount(cols_bitmap) + 7) // 8)
    none_sources = self._RowsEvent__none_sources
    library = self._RowsEvent__read_values_name
    errors = "ignore" if self._ignore_decode_errors else "strict"
    values: dict[str, Any] = {}
    at = 0  # the column's bit in the NULL bitmap: only present columns have one
    for i, (name, how, column, unsigned, size, how_to) in enumerate(plan):
        if not cols_bitmap[i >> 3] & (1 << (i & 7)):
            none_sources[name] = NONE_SOURCE.COLS_BITMAP
            values[name] = None
            continue
        if null_bitmap[at >> 3] & (1 << (at & 7)):
            none_sources[name] = NONE_SOURCE.NULL
            values[name] = None
        elif how == _INT:
            values[name] = how_to(read(size))[0]
        elif how == _STRING:
            length = int.from_bytes(read(size), "little")
            values[name] = read(length).decode(how_to, errors)
        else:
            values[name] = library(column, null_bitmap, at, False, cols_bitmap, unsigned, i)
        at += 1
    return values


def install() -> None:
    """Replace ``RowsEvent._read_column_data`` by :func:`read_column_data` (idempotent)."""
    RowsEvent._read_column_data = read_column_data
