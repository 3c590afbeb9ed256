"""TiCDC canal-json (and tidelake's own capture output) ⇄ :class:`ChangeEvent`.

Fields read: ``database, table, pkNames, isDdl, type, es, sql, mysqlType, data, old`` and the
extensions ``_tidb`` (TiCDC ``enable-tidb-extension``: ``commitTs``, ``watermarkTs``) and
``_tidelake`` (tidelake's capture: ``position``, ``source``, ``commit_ts_ms``). ``ts`` (the
encoder's clock) and ``es`` are never ordering (docs/architecture.md §2); ``sqlType`` is not needed.

Positions, one shape per source:

* ``_tidb`` present: ``(commitTs, seq, 2*row_index [+1])``. TiCDC gives no index inside the
  transaction, so events of one commitTs are ordered by stream sequence ``seq``, then by their
  row inside the message.
* no extension (plain canal-json): ``(0, seq, 2*row_index [+1])``, the same shape, so order
  falls back to the stream sequence alone.
* ``_tidelake.position`` present: that position as is. Our capture emits one row per message;
  should a message carry several rows, ``row_index`` is appended as an extra component.

The row component is doubled because a primary-key UPDATE becomes two events (DELETE of the
old key, then the new row as UPDATE: "old key deleted, new key present", docs/architecture.md §1):
the DELETE takes ``2*row_index``, the UPDATE ``2*row_index + 1``. With ``_tidelake.position`` the
DELETE keeps the row's position ``p`` and the UPDATE takes ``p + (1,)``, which sorts right
after ``p`` and before the next row's position.

Values stay the text canal-json carries (NULL is None). Binary columns (``binary``,
``varbinary``, ``blob`` ...) arrive as ISO-8859-1 text, one character per byte; they are kept
as given and ``lake/schema.py`` converts them by ``mysqlType``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidelake.errors import DecodeError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.formats._common import (
    Decoded,
    JsonObject,
    make_position,
    opt_int,
    opt_object,
    opt_str,
    require_table_name,
    row_key,
)

FORMAT = "canal-json"
DDL_TYPES = frozenset(
    {"CREATE", "ALTER", "ERASE", "TRUNCATE", "RENAME", "CINDEX", "DINDEX", "QUERY"}
)
ROW_TYPES = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
WATERMARK_TYPE = "TIDB_WATERMARK"
#: TSO layout: physical milliseconds above 18 logical bits.
_TSO_LOGICAL_BITS = 18

_W = "canal-json: "


def looks_like(obj: JsonObject) -> bool:
    """True when ``obj`` has the canal-json shape (used by format detection)."""
    return "isDdl" in obj or "pkNames" in obj or ("type" in obj and "data" in obj)


def decode_object(obj: JsonObject, *, seq: int) -> Decoded:
    """Decode one parsed canal-json message; ``seq`` is its stream sequence."""
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise DecodeError(f"{_W}type must be a string, got {type(kind).__name__}")
    tidb = opt_object(obj, "_tidb", _W)
    if kind == WATERMARK_TYPE:
        return Decoded(skipped="watermark", format=FORMAT)
    ours = opt_object(obj, "_tidelake", _W)
    is_ddl = obj.get("isDdl", False)
    if not isinstance(is_ddl, bool):
        raise DecodeError(f"{_W}isDdl must be a boolean, got {type(is_ddl).__name__}")

    database = opt_str(obj, "database", _W)
    table = opt_str(obj, "table", _W)
    pk = _pk_names(obj)
    column_types = _column_types(obj)
    source, base, commit_ts_ms, given = _origin(obj, tidb, ours, seq)

    if is_ddl or kind in DDL_TYPES:
        if not database:
            raise DecodeError(f"{_W}missing database name in a DDL message")
        sql = opt_str(obj, "sql", _W)
        if not sql:
            raise DecodeError(f"{_W}DDL message {kind} without sql")
        event = ChangeEvent(
            source=source,
            database=database,
            # A database-level DDL (CREATE DATABASE ...) names no table.
            table=table or "",
            op=Op.DDL,
            position=_row_position(base, given, 0, 1, split=False),
            pk=pk,
            commit_ts_ms=commit_ts_ms,
            column_types=column_types,
            ddl=sql,
            ddl_type=kind,
            seq=seq,
        )
        return Decoded(events=[event], format=FORMAT)

    op = ROW_TYPES.get(kind)
    if op is None:
        raise DecodeError(f"{_W}unknown message type {kind!r:.40}")
    database, table = require_table_name(database, table, FORMAT)
    table_id = f"{database}.{table}"
    if not pk:
        raise DecodeError(
            f"{_W}{table_id} has no primary key (pkNames empty): the lake refuses keyless tables"
        )
    rows = _rows(obj, "data", nullable_items=False)
    olds = _rows(obj, "old", nullable_items=True) if op is Op.UPDATE else []
    if olds and len(olds) != len(rows):
        raise DecodeError(f"{_W}old has {len(olds)} rows but data has {len(rows)}")
    if not rows:
        return Decoded(skipped="no rows", format=FORMAT)

    common: dict[str, Any] = {
        "source": source,
        "database": database,
        "table": table,
        "pk": pk,
        "commit_ts_ms": commit_ts_ms,
        "column_types": column_types,
        "seq": seq,
    }
    n_rows = len(rows)
    events: list[ChangeEvent] = []
    for i, row in enumerate(rows):
        key = row_key(pk, row, table_id)
        pos = _row_position(base, given, i, n_rows, split=False)
        if op is Op.UPDATE:
            old = olds[i] if olds else None
            place = (base, given, i, n_rows)
            events.extend(_update_events(row, old, key, pos, place, table_id, common))
            continue
        before, after = (row, None) if op is Op.DELETE else (None, row)
        events.append(
            ChangeEvent(
                source=source,
                database=database,
                table=table,
                op=op,
                position=pos,
                pk=pk,
                key=key,
                before=before,
                after=after,
                commit_ts_ms=commit_ts_ms,
                column_types=column_types,
                seq=seq,
            )
        )
    return Decoded(events=events, format=FORMAT)


def _update_events(
    row: dict[str, Any],
    old: dict[str, Any] | None,
    key: dict[str, Any],
    pos: Position,
    place: tuple[tuple[int, ...], bool, int, int],
    table_id: str,
    common: dict[str, Any],
) -> list[ChangeEvent]:
    """The events of one updated row; ``place`` = (position prefix, given position?, index,
    rows)."""
    pk: tuple[str, ...] = common["pk"]
    before = {**row, **old} if old else dict(row)
    old_key = row_key(pk, before, table_id)
    if old_key == key:
        return [
            ChangeEvent(op=Op.UPDATE, position=pos, key=key, before=before, after=row, **common)
        ]
    # The key changed: the old key is deleted, then the new row is written (docs/architecture.md
    # §1).
    update_pos = _row_position(*place, split=True)
    return [
        ChangeEvent(op=Op.DELETE, position=pos, key=old_key, before=before, **common),
        ChangeEvent(op=Op.UPDATE, position=update_pos, key=key, before=before, after=row, **common),
    ]


def _row_position(
    base: tuple[int, ...], given_position: bool, index: int, n_rows: int, *, split: bool
) -> Position:
    """The position of row ``index`` (``split``: the UPDATE half of a key change)."""
    if given_position:
        parts = (*base, index) if n_rows > 1 else base
        return make_position((*parts, 1) if split else parts, "_tidelake.position")
    return make_position((*base, 2 * index + int(split)), "row index")


def _origin(
    obj: JsonObject, tidb: JsonObject | None, ours: JsonObject | None, seq: int
) -> tuple[str, tuple[int, ...], int | None, bool]:
    """Source name, position prefix, commit time (ms), and whether the position is given."""
    es = opt_int(obj, "es", _W)
    if ours is not None:
        text = opt_str(ours, "position", _W + "_tidelake.")
        source = opt_str(ours, "source", _W + "_tidelake.") or "tidelake"
        commit_ms = opt_int(ours, "commit_ts_ms", _W + "_tidelake.")
        if text is not None:
            try:
                parts = Position.decode(text).parts
            except ValueError as exc:
                raise DecodeError(f"{_W}_tidelake.position: {exc}") from exc
            return source, parts, commit_ms if commit_ms is not None else es, True
        return source, (0, seq), commit_ms if commit_ms is not None else es, False
    if tidb is not None:
        commit_ts = opt_int(tidb, "commitTs", _W + "_tidb.")
        if commit_ts is not None:
            return "tidb", (commit_ts, seq), commit_ts >> _TSO_LOGICAL_BITS, False
        return "tidb", (0, seq), es, False
    return "canal", (0, seq), es, False


def _pk_names(obj: JsonObject) -> tuple[str, ...]:
    names = obj.get("pkNames")
    if names is None:
        return ()
    if not isinstance(names, list) or not _only_str(names):
        raise DecodeError(f"{_W}pkNames must be a list of strings")
    return tuple(names)


def _column_types(obj: JsonObject) -> dict[str, str]:
    types = opt_object(obj, "mysqlType", _W)
    if types is None:
        return {}
    if not _only_str(types.values()):
        raise DecodeError(f"{_W}mysqlType values must be strings")
    return types


#: What a JSON parser gives for a canal-json value: text or NULL.
_VALUE_TYPES = frozenset({str, type(None)})


def _only_str(values: Iterable[Any]) -> bool:
    """True when every value is a string (the set of types is built at C speed)."""
    kinds = {*map(type, values)}
    return kinds <= {str} or all(isinstance(v, str) for v in values)


def _rows(obj: JsonObject, name: str, *, nullable_items: bool) -> list[dict[str, Any]]:
    """``data`` or ``old``: a list of rows whose values are strings or NULL."""
    rows = obj.get(name)
    if rows is None:
        if nullable_items:
            return []
        raise DecodeError(f"{_W}{name} is missing in a row-change message")
    if not isinstance(rows, list):
        raise DecodeError(f"{_W}{name} must be a list, got {type(rows).__name__}")
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        if row is None and nullable_items:
            out.append({})
            continue
        if not isinstance(row, dict):
            raise DecodeError(f"{_W}{name}[{i}] must be an object, got {type(row).__name__}")
        if not {*map(type, row.values())} <= _VALUE_TYPES:
            for col, value in row.items():
                if value is not None and not isinstance(value, str):
                    raise DecodeError(
                        f"{_W}{name}[{i}].{col:.60} must be a string or null, "
                        f"got {type(value).__name__}"
                    )
        out.append(row)
    return out
