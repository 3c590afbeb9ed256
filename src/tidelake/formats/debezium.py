"""Debezium JSON ⇄ :class:`ChangeEvent`: the change-event envelope and the flattened form.

Envelope: ``before, after, source, op, ts_ms``, bare or inside the JSON converter's
``{"schema": ..., "payload": ...}`` wrapper. ``op``: ``c`` create and ``r`` snapshot read →
INSERT, ``u`` → UPDATE, ``d`` → DELETE, ``t`` → a TRUNCATE DDL event (``ddl`` is a synthesized
``TRUNCATE TABLE`` statement). An update whose key changed becomes DELETE(old key) + UPDATE.

Flattened (``ExtractNewRecordState``): the row itself plus ``__``-prefixed added fields
(``__deleted`` as ``"true"``/``"false"`` or a boolean, ``__op``, ``__db``, ``__table``,
``__lsn``, ``__source_ts_ms`` ...). Every ``__`` field is metadata and is removed from the row.

Primary key: a Debezium value does not name its key columns. They come from the message key
(``key_json``: the Kafka key, or the ``Tidelake-Key`` header over NATS), either bare
(``{"id": 1}``) or with its Connect schema (``{"schema": {"fields": [...]}, "payload": ...}``:
the key schema's field order is the key order). Without a key the message is refused.

Database name: ``source.db``; for PostgreSQL ``source.schema`` (the namespace that plays the
part of a MySQL database; one connector captures one database).

Positions (DESIGN.md §2), each followed by a split component (0, or 1 for the UPDATE half of
a key change, so the DELETE of the old key sorts first):

* MySQL: ``(binlog file number, source.pos, source.row, split)``.
* PostgreSQL: ``(lastCommitLsn, lsn, split)`` from ``source.sequence``: transactions arrive in
  commit order and every event of a transaction carries the previous commit's LSN, so this
  orders by commit, then inside the transaction. Without ``sequence``: ``(lsn, split)``.
* Otherwise ``(0, seq, split)``: the stream order.

With a Connect schema, ``column_types`` holds SQL-like types, and values whose JSON encoding
differs from canal-json's text are converted to it, so the lake types every format alike:
``Decimal`` (base64 unscaled bytes) → decimal text, ``bytes`` (base64) → ISO-8859-1 text (one
character per byte, as TiCDC), ``Timestamp``/``MicroTimestamp``/``NanoTimestamp`` (epoch) →
``YYYY-MM-DD HH:MM:SS[.fraction]``, ``Date`` (epoch days) → ``YYYY-MM-DD``,
``ZonedTimestamp`` → UTC ``YYYY-MM-DD HH:MM:SS[.fraction]``. Other values stay as carried.
A tombstone (null value) is skipped, not dead-lettered.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

import orjson

from tidelake.errors import DecodeError
from tidelake.events import ChangeEvent, Op
from tidelake.formats._common import (
    Decoded,
    JsonObject,
    is_int,
    make_position,
    opt_int,
    opt_object,
    opt_str,
    require_table_name,
    row_key,
)

FORMAT = "debezium"
FLAT_FORMAT = "debezium-flat"
ROW_OPS = {"c": Op.INSERT, "r": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
_W = "debezium: "
_WF = "debezium-flat: "
_EPOCH = dt.datetime(1970, 1, 1)
_DATE_EPOCH = dt.date(1970, 1, 1)

#: Connect logical type names → SQL-like type (the Decimal is handled apart: it has p and s).
_LOGICAL_TYPES = {
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Time": "time",
    "io.debezium.time.MicroTime": "time",
    "io.debezium.time.NanoTime": "time",
    "io.debezium.time.ZonedTime": "time",
    "org.apache.kafka.connect.data.Time": "time",
    "io.debezium.time.Timestamp": "datetime",
    "io.debezium.time.MicroTimestamp": "datetime",
    "io.debezium.time.NanoTimestamp": "datetime",
    "org.apache.kafka.connect.data.Timestamp": "datetime",
    "io.debezium.time.ZonedTimestamp": "timestamp",
    "io.debezium.time.Year": "year",
    "io.debezium.data.Json": "json",
    "io.debezium.data.Uuid": "uuid",
    "io.debezium.data.Enum": "varchar",
    "io.debezium.data.EnumSet": "varchar",
    "io.debezium.data.Bits": "bit",
    "io.debezium.data.VariableScaleDecimal": "decimal",
}
#: Connect primitive types → SQL-like type.
_PRIMITIVE_TYPES = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "varchar",
    "bytes": "varbinary",
    "array": "json",
    "map": "json",
    "struct": "json",
}
#: Epoch-based timestamps: logical name → units per second.
_EPOCH_UNITS = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}


def looks_like_envelope(obj: JsonObject) -> bool:
    """True when ``obj`` is a Debezium change-event envelope (the payload, unwrapped)."""
    has_row = "before" in obj or "after" in obj or obj.get("op") == "t"
    return "op" in obj and "source" in obj and has_row


def looks_like_flat(obj: JsonObject) -> bool:
    """True when ``obj`` is an ExtractNewRecordState row (with its ``__`` fields)."""
    return "__deleted" in obj or "__op" in obj


def parse_key(key_json: bytes | None) -> tuple[tuple[str, ...], JsonObject]:
    """Key column names (in key order) and values from a message key; empty when absent."""
    if key_json is None:
        return (), {}
    try:
        key = orjson.loads(key_json)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{_W}message key is not JSON: {exc}") from exc
    if not isinstance(key, dict):
        raise DecodeError(f"{_W}message key must be a JSON object, got {type(key).__name__}")
    if "payload" in key and set(key) <= {"schema", "payload"}:
        payload = opt_object(key, "payload", _W + "key.") or {}
        schema = opt_object(key, "schema", _W + "key.")
        names = tuple(_field_schemas(schema, _W + "key.")) if schema else ()
        return names or tuple(payload), payload
    return tuple(key), key


def decode_envelope(
    obj: JsonObject, schema: JsonObject | None, *, seq: int, key_json: bytes | None
) -> Decoded:
    """Decode one envelope (``obj`` is the payload; ``schema`` its Connect schema, if any)."""
    op_code = obj.get("op")
    source = opt_object(obj, "source", _W)
    if source is None:
        raise DecodeError(f"{_W}missing source")
    connector = opt_str(source, "connector", _W + "source.") or ""
    db_field = "schema" if connector == "postgresql" else "db"
    database, table = require_table_name(
        opt_str(source, db_field, _W + "source."), opt_str(source, "table", _W + "source."), FORMAT
    )
    table_id = f"{database}.{table}"
    base = _source_position(source, connector, seq)
    origin = f"debezium-{connector}" if connector else "debezium"
    commit_ms = opt_int(source, "ts_ms", _W + "source.")

    if op_code == "t":
        quote = '"' if connector == "postgresql" else "`"
        event = ChangeEvent(
            source=origin,
            database=database,
            table=table,
            op=Op.DDL,
            position=make_position((*base, 0), "source position"),
            commit_ts_ms=commit_ms,
            ddl=f"TRUNCATE TABLE {quote}{database}{quote}.{quote}{table}{quote}",
            ddl_type="TRUNCATE",
            seq=seq,
        )
        return Decoded(events=[event], format=FORMAT)
    if not isinstance(op_code, str) or op_code not in ROW_OPS:
        raise DecodeError(f"{_W}unknown op {op_code!r:.40}")
    op = ROW_OPS[op_code]

    fields = _envelope_row_schema(schema)
    before = _row(obj, "before", fields, _W)
    after = _row(obj, "after", fields, _W)
    pk, key_values = parse_key(key_json)
    if not pk:
        raise DecodeError(
            f"{_W}no primary key known for {table_id}: pass the message key "
            "(Tidelake-Key header); the lake refuses keyless tables"
        )
    common: dict[str, Any] = {
        "source": origin,
        "database": database,
        "table": table,
        "pk": pk,
        "commit_ts_ms": commit_ms,
        "column_types": {name: _sql_type(f) for name, f in fields.items()},
        "seq": seq,
    }
    position = make_position((*base, 0), "source position")
    if op is Op.DELETE:
        if before is None:
            raise DecodeError(f"{_W}delete of {table_id} without a before image")
        key = row_key(pk, before, table_id, key_values)
        return Decoded(
            [ChangeEvent(op=op, position=position, key=key, before=before, **common)], format=FORMAT
        )
    if after is None:
        raise DecodeError(f"{_W}op {op_code} on {table_id} without an after image")
    key = row_key(pk, after, table_id, key_values)
    # A before image without the key columns (PostgreSQL's default replica identity) keeps the key.
    old_key = row_key(pk, before, table_id, key) if before is not None and op is Op.UPDATE else key
    if old_key == key:
        event = ChangeEvent(op=op, position=position, key=key, before=before, after=after, **common)
        return Decoded([event], format=FORMAT)
    split = make_position((*base, 1), "source position")
    return Decoded(
        [
            ChangeEvent(op=Op.DELETE, position=position, key=old_key, before=before, **common),
            ChangeEvent(op=op, position=split, key=key, before=before, after=after, **common),
        ],
        format=FORMAT,
    )


def decode_flat(
    obj: JsonObject, schema: JsonObject | None, *, seq: int, key_json: bytes | None
) -> Decoded:
    """Decode one ExtractNewRecordState row (``schema``: its Connect schema, if any)."""
    meta = {k: v for k, v in obj.items() if k.startswith("__")}
    fields = {k: v for k, v in _field_schemas(schema, _WF).items() if not k.startswith("__")}
    row = _convert_row({k: v for k, v in obj.items() if not k.startswith("__")}, fields, _WF)
    database = _first_str(meta, ("__source_schema", "__schema", "__db", "__source_db"))
    table = _first_str(meta, ("__table", "__source_table"))
    database, table = require_table_name(database, table, FLAT_FORMAT)
    table_id = f"{database}.{table}"

    deleted = meta.get("__deleted", False)
    if deleted in ("true", "false"):
        deleted = deleted == "true"
    if not isinstance(deleted, bool):
        raise DecodeError(f"{_WF}__deleted must be true/false, got {deleted!r:.40}")
    op_code = meta.get("__op")
    if op_code is not None and (not isinstance(op_code, str) or op_code not in ROW_OPS):
        raise DecodeError(f"{_WF}unknown __op {op_code!r:.40}")
    if deleted or op_code == "d":
        op = Op.DELETE
    else:
        op = ROW_OPS[op_code] if isinstance(op_code, str) else Op.UPDATE

    pk, key_values = parse_key(key_json)
    if not pk:
        raise DecodeError(
            f"{_WF}no primary key known for {table_id}: pass the message key "
            "(Tidelake-Key header); the lake refuses keyless tables"
        )
    key = row_key(pk, row, table_id, key_values)
    event = ChangeEvent(
        source="debezium",
        database=database,
        table=table,
        op=op,
        position=make_position((*_flat_position(meta, seq), 0), "source position"),
        pk=pk,
        key=key,
        before=row if op is Op.DELETE else None,
        after=None if op is Op.DELETE else row,
        commit_ts_ms=opt_int(meta, "__source_ts_ms", _WF),
        column_types={name: _sql_type(f) for name, f in fields.items()},
        seq=seq,
    )
    return Decoded([event], format=FLAT_FORMAT)


# --- positions ------------------------------------------------------------------------


def _source_position(source: JsonObject, connector: str, seq: int) -> tuple[int, ...]:
    where = _W + "source."
    if connector == "mysql":
        file = opt_str(source, "file", where)
        pos = opt_int(source, "pos", where)
        if file is not None and pos is not None:
            return (_binlog_number(file), pos, opt_int(source, "row", where) or 0)
        return (0, seq)
    if connector == "postgresql":
        sequence = opt_str(source, "sequence", where)
        if sequence is not None:
            return _pg_sequence(sequence)
        lsn = opt_int(source, "lsn", where)
        return (lsn,) if lsn is not None else (0, seq)
    return (0, seq)


def _flat_position(meta: JsonObject, seq: int) -> tuple[int, ...]:
    sequence = _first_str(meta, ("__source_sequence", "__sequence"))
    if sequence is not None:
        return _pg_sequence(sequence)
    for name in ("__lsn", "__source_lsn"):
        lsn = opt_int(meta, name, _WF)
        if lsn is not None:
            return (lsn,)
    file = _first_str(meta, ("__file", "__source_file"))
    pos = opt_int(meta, "__pos", _WF)
    if pos is None:
        pos = opt_int(meta, "__source_pos", _WF)
    if file is not None and pos is not None:
        row = opt_int(meta, "__row", _WF) or opt_int(meta, "__source_row", _WF) or 0
        return (_binlog_number(file), pos, row)
    return (0, seq)


def _binlog_number(file: str) -> int:
    """``mysql-bin.000042`` → 42."""
    suffix = file.rpartition(".")[2]
    if not suffix.isdecimal() or not suffix.isascii():
        raise DecodeError(f"{_W}binlog file name without a number: {file!r:.80}")
    return int(suffix)


def _pg_sequence(text: str) -> tuple[int, int]:
    """``'["<lastCommitLsn>","<lsn>"]'`` → (lastCommitLsn, lsn); a null part is 0."""
    try:
        parts = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{_W}source.sequence is not JSON: {exc}") from exc
    if not isinstance(parts, list) or len(parts) != 2:
        raise DecodeError(f"{_W}source.sequence must be a list of two LSNs: {text!r:.80}")
    out: list[int] = []
    for part in parts:
        if part is None:
            out.append(0)
        elif isinstance(part, str) and part.isdecimal() and part.isascii():
            out.append(int(part))
        elif is_int(part) and part >= 0:
            out.append(part)
        else:
            raise DecodeError(f"{_W}source.sequence holds a non-LSN: {part!r:.40}")
    return out[0], out[1]


# --- rows, schemas and values -----------------------------------------------------------


def _first_str(meta: JsonObject, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = opt_str(meta, name, _WF)
        if value:
            return value
    return None


def _row(
    obj: JsonObject, name: str, fields: dict[str, JsonObject], where: str
) -> dict[str, Any] | None:
    row = opt_object(obj, name, where)
    return None if row is None else _convert_row(row, fields, where)


def _field_schemas(schema: JsonObject | None, where: str) -> dict[str, JsonObject]:
    """Field name → Connect field schema of a struct schema (empty without a schema)."""
    if schema is None:
        return {}
    fields = schema.get("fields")
    if fields is None:
        return {}
    if not isinstance(fields, list):
        raise DecodeError(f"{where}schema.fields must be a list")
    out: dict[str, JsonObject] = {}
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("field"), str):
            raise DecodeError(f"{where}schema field without a name")
        out[f["field"]] = f
    return out


def _envelope_row_schema(schema: JsonObject | None) -> dict[str, JsonObject]:
    """The column schemas: the ``after`` (or ``before``) struct of the envelope schema."""
    envelope = _field_schemas(schema, _W)
    row_schema = envelope.get("after") or envelope.get("before")
    return _field_schemas(row_schema, _W)


def _sql_type(f: JsonObject) -> str:
    name = f.get("name")
    if name == "org.apache.kafka.connect.data.Decimal":
        params = f.get("parameters")
        params = params if isinstance(params, dict) else {}
        precision = params.get("connect.decimal.precision", "38")
        return f"decimal({precision},{params.get('scale', '0')})"
    if isinstance(name, str) and name in _LOGICAL_TYPES:
        return _LOGICAL_TYPES[name]
    kind = f.get("type")
    return _PRIMITIVE_TYPES.get(kind, "varchar") if isinstance(kind, str) else "varchar"


def _convert_row(row: dict[str, Any], fields: dict[str, JsonObject], where: str) -> dict[str, Any]:
    if not fields:
        return row
    return {col: _convert(value, fields.get(col), col, where) for col, value in row.items()}


def _convert(value: Any, f: JsonObject | None, col: str, where: str) -> Any:
    """A value in canal-json's text form where its Connect encoding differs (see module doc)."""
    if value is None or f is None:
        return value
    name = f.get("name")
    try:
        if name == "org.apache.kafka.connect.data.Decimal":
            params = f.get("parameters")
            scale = params.get("scale", "0") if isinstance(params, dict) else "0"
            return _decimal_text(_b64(value), int(scale))
        if name == "io.debezium.data.VariableScaleDecimal":
            if not isinstance(value, dict) or not is_int(value.get("scale")):
                raise ValueError("a variable-scale decimal needs scale and value")
            return _decimal_text(_b64(value.get("value")), value["scale"])
        if isinstance(name, str) and name in _EPOCH_UNITS:
            return _epoch_text(value, _EPOCH_UNITS[name])
        if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
            if not is_int(value):
                raise ValueError("a date must be epoch days")
            return (_DATE_EPOCH + dt.timedelta(days=value)).isoformat()
        if name == "io.debezium.time.ZonedTimestamp":
            if not isinstance(value, str):
                raise ValueError("a zoned timestamp must be ISO-8601 text")
            moment = dt.datetime.fromisoformat(value)
            if moment.tzinfo is not None:
                moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
            return moment.isoformat(sep=" ")
        if name is None and f.get("type") == "bytes":
            return _b64(value).decode("latin-1")
    except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
        raise DecodeError(f"{where}column {col!r:.60} ({name or f.get('type')}): {exc}") from exc
    return value


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"expected base64 text, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from exc


def _decimal_text(unscaled_bytes: bytes, scale: int) -> str:
    """Big-endian two's-complement unscaled value and scale → ``-123.4500``."""
    if not 0 <= scale <= 1000:
        raise ValueError(f"decimal scale out of range: {scale}")
    unscaled = int.from_bytes(unscaled_bytes, "big", signed=True)
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    if scale == 0:
        return sign + digits
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _epoch_text(value: Any, per_second: int) -> str:
    if not is_int(value):
        raise ValueError("an epoch timestamp must be an integer")
    seconds, fraction = divmod(value, per_second)
    text = (_EPOCH + dt.timedelta(seconds=seconds)).isoformat(sep=" ")
    if fraction:
        width = len(str(per_second)) - 1
        text += "." + str(fraction).rjust(width, "0")
    return text
