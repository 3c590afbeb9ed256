"""What every wire-format decoder shares: the :class:`Decoded` result and strict field readers.

The readers raise :class:`~tidelake.errors.DecodeError` with a reason naming the field, so a
malformed message reaches the dead-letter stream with an explanation instead of crashing the
stager with a ``KeyError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidelake.errors import DecodeError
from tidelake.events import ChangeEvent, Position

#: A parsed JSON object.
JsonObject = dict[str, Any]

#: Largest value one position component can hold (see ``events.Position``).
_POSITION_LIMIT = 10**20


@dataclass(frozen=True, slots=True)
class Decoded:
    """What one message holds: its change events, or nothing (``skipped`` names why).

    A message that carries no row (a TiCDC ``TIDB_WATERMARK``, a Debezium tombstone) has no
    events and a ``skipped`` reason: it is counted, never staged and never dead-lettered.
    """

    events: list[ChangeEvent] = field(default_factory=list)
    skipped: str | None = None
    format: str = ""


def make_position(parts: tuple[int, ...], what: str) -> Position:
    """A :class:`Position`, or a DecodeError naming ``what`` when a component is out of range."""
    if min(parts) < 0 or max(parts) >= _POSITION_LIMIT:
        for p in parts:
            if p < 0 or p >= _POSITION_LIMIT:
                raise DecodeError(f"{what} out of range for a position: {p}")
    return Position(parts)


def is_int(value: Any) -> bool:
    """True for a JSON integer (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def opt_int(obj: Mapping[str, Any], name: str, where: str) -> int | None:
    """``obj[name]`` as a non-negative int, None when absent or null."""
    value = obj.get(name)
    if value is None:
        return None
    if not is_int(value) or value < 0:
        raise DecodeError(f"{where}{name} must be a non-negative integer, got {value!r:.80}")
    return int(value)


def opt_str(obj: Mapping[str, Any], name: str, where: str) -> str | None:
    """``obj[name]`` as a string, None when absent or null."""
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError(f"{where}{name} must be a string, got {type(value).__name__}")
    return value


def opt_object(obj: Mapping[str, Any], name: str, where: str) -> JsonObject | None:
    """``obj[name]`` as a JSON object, None when absent or null."""
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DecodeError(f"{where}{name} must be an object, got {type(value).__name__}")
    return value


def require_table_name(database: str | None, table: str | None, fmt: str) -> tuple[str, str]:
    """Database and table names, both non-empty, or a DecodeError saying which is missing."""
    if not database:
        raise DecodeError(f"{fmt}: missing database name")
    if not table:
        raise DecodeError(f"{fmt}: missing table name for {database}")
    return database, table


def row_key(
    pk: tuple[str, ...],
    row: Mapping[str, Any],
    table_id: str,
    fallback: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The primary-key values of ``row``; a NULL or absent key column is a DecodeError.

    ``fallback`` supplies a key column the row image lacks (a Debezium message key).
    """
    key: dict[str, Any] = {}
    for col in pk:
        value = row.get(col)
        if value is None and fallback is not None:
            value = fallback.get(col)
        if value is None:
            raise DecodeError(f"NULL or missing primary key column {col!r} in {table_id}")
        key[col] = value
    return key
