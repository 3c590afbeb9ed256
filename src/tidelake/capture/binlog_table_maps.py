"""A cache of decoded binlog table maps, installed into python-mysql-replication by
:func:`install` (``capture/mysql.py`` calls it at import).

MySQL and MariaDB write a ``TABLE_MAP_EVENT`` before the row events of every table in every
transaction (MySQL's "Binary Log" documentation of the Rows_log_event family: a row event
is decoded against the table map that precedes it). python-mysql-replication 1.0.x decodes
each one from scratch: column metadata, the optional metadata block (names, signedness, key,
charsets), and two ``Table`` objects whose constructor scans every column's attribute
dictionary. With one- and two-row OLTP transactions that was about a fifth of the capture's
CPU time (py-spy, docs/benchmarks.md "Capture throughput").

The cache is keyed by the event's body bytes (everything after the 19-byte event header,
checksum excluded): the table id, schema and table name, column types and metadata, and the
optional metadata with names, signedness and primary key. Equal bytes decode to equal
metadata, so reusing the first decoding is exact; any schema change (a new table id, a new
column, another type, a renamed column) changes the bytes and is decoded afresh. The header
(timestamp, log position) is not part of the key and is read per event as before.

Only the unfiltered reader tidelake uses is cached (no ``only_tables``/``only_schemas``/
``ignored_*``/``freeze_schema``): with a filter the library may skip the table, which the
cache does not record.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

#: Decoded table maps kept at most (a full cache starts again empty).
MAX_ENTRIES = 4_096
#: The packet before an event's body: pymysql's OK byte, then the binlog v4 event header
#: (timestamp 4, type 1, server id 4, event size 4, next position 4, flags 2 = 19 bytes).
_BODY_OFFSET = 20
#: Keyword arguments that make the library skip tables: not cached.
_FILTERS = ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas", "freeze_schema")
#: What ``BinLogEvent.__init__`` sets for each event (header fields, connection): never
#: taken from the cache.
_PER_EVENT = frozenset(
    {
        "packet", "table_map", "event_type", "timestamp", "event_size",
        "_post_header_lengths", "_ctl_connection", "mysql_version", "_ignore_decode_errors",
        "_verify_checksum", "_is_event_valid", "_processed", "complete", "dbms",
    }
)  # fmt: skip

_decode = TableMapEvent.__init__
_cache: dict[bytes, dict[str, Any]] = {}


def _cached_init(
    self: TableMapEvent,
    from_packet: Any,
    event_size: int,
    table_map: dict[int, Any],
    ctl_connection: Any,
    **kwargs: Any,
) -> None:
    if any(kwargs.get(name) for name in _FILTERS):
        _decode(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        return
    data = from_packet.packet.get_all_data()
    key = bytes(data[_BODY_OFFSET : _BODY_OFFSET + event_size])
    known = _cache.get(key)
    if known is None:
        _decode(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        if self._processed:
            if len(_cache) >= MAX_ENTRIES:
                _cache.clear()
            _cache[key] = {k: v for k, v in vars(self).items() if k not in _PER_EVENT}
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
    vars(self).update(known)


def install() -> None:
    """Replace ``TableMapEvent.__init__`` by the cached one (idempotent)."""
    TableMapEvent.__init__ = _cached_init


def size() -> int:
    """How many decoded table maps are kept."""
    return len(_cache)


def clear() -> None:
    """Forget every decoded table map."""
    _cache.clear()
