"""Debezium JSON ⇄ :class:`ChangeEvent`: the change-event envelope and the flattened form.

Every rule below rests on Debezium's or Kafka's own code (github:debezium/debezium,
github:apache/kafka); docs/type-mapping.md and tests/unit/formats/test_debezium.py cite the
file and method of each. Real Debezium Server 3.6 messages are replayed from
tests/fixtures/debezium_server/.

Envelope: ``before, after, source, op, ts_ms``, bare (JsonConverter ``schemas.enable=false``)
or inside ``{"schema": ..., "payload": ...}`` (``schemas.enable=true``). ``op``: ``c`` create
and ``r`` snapshot read → INSERT, ``u`` → UPDATE, ``d`` → DELETE, ``t`` → a TRUNCATE DDL event.
Debezium itself sends a primary-key change as a ``d`` and a ``c`` message
(``RelationalChangeRecordEmitter.emitUpdateRecord``); an ``u`` whose key changed (seen only
with a message key) still becomes DELETE(old key) + UPDATE.

Flattened (``ExtractNewRecordState``): the row plus ``__``-prefixed fields that ``add.fields``
names ``__<field>`` for a bare field and ``__<struct>_<field>`` for a qualified one
(``AbstractExtractNewRecordState.FieldReference``): ``__db``, ``__schema``, ``__table``,
``__lsn``, ``__sequence``, ``__snapshot``, ``__source_ts_ms`` ...; ``__deleted`` is the text
``"true"``/``"false"`` (``AbstractExtractRecordStrategy``). Every ``__`` field is metadata.
The namespace comes from the message (``__schema``/``__source_schema`` first: a PostgreSQL
schema plays the part of a MySQL database; then ``__db``/``__source_db``), else from the NATS
subject (Debezium's topic name ``<topic.prefix>.<schema-or-db>.<table>``: the last two tokens).

Primary key: a Debezium value does not name its key columns. They come from the message key
(``key_json``), bare or with its Connect schema (whose field order is the key order). Debezium
Server's NATS sink publishes no key: the event then has ``pk=()`` and ``key=None`` and the
lake resolves the key (config, existing table, source catalog).

Database name: ``source.db``; for PostgreSQL ``source.schema``.

Values:

* With a Connect schema (``schemas.enable=true``) every column is typed from its schema and
  its value written in canal-json text form (see :func:`value_text` for the forms), so the
  lake types every format alike; ``column_types`` holds the source type as the source
  catalog spells it (``numeric(12,2)``, ``timestamp with time zone``, ``enum('a','b')`` ...),
  taken from ``__debezium.source.column.type`` when ``column.propagate.source.type`` put it
  there.
* Without a schema the values stay as the JsonConverter wrote them and the event says
  ``encoding="debezium-json"``: the lake turns each into text with :func:`value_text` once it
  knows the column's source type.
* Debezium's unavailable-value placeholder (``__debezium_unavailable_value``: an unchanged
  TOASTed PostgreSQL column under REPLICA IDENTITY DEFAULT, in its string, bytes, array and
  hstore forms) is removed from the row and the column listed in ``unchanged``.

Positions (docs/architecture.md §2), each followed by a split component (0, or 1 for the UPDATE
half of a key change, so the DELETE of the old key sorts first):

* MySQL/MariaDB: ``(binlog file number, source.pos, source.row, split)``. Snapshot rows carry
  the binlog position read when the snapshot started, row 0; every row event streamed after
  it lies further in the binlog, so snapshot rows order first.
* PostgreSQL: ``(lastCommitLsn, lsn, split)`` from ``source.sequence``
  (``SourceInfo.sequence``: the end of the previous commit, then the change's LSN; a null
  part is 0). Rows of the initial snapshot all carry ``[<lastCommitLsn or null>,
  <LSN the snapshot started at>]``; they get lsn 0, ``(lastCommitLsn, 0, split)``, so they
  order before every change streamed after them — even a change whose LSN lies before the
  slot's consistent point (a transaction begun before it, committed after). Incremental
  snapshot rows (``snapshot: "incremental"``) are read while streaming and keep their
  position. Without ``sequence``: ``(lsn, split)``, snapshot rows ``(0, split)``.
* Otherwise ``(0, seq, split)``: the stream order.

A tombstone (null value) is skipped, not dead-lettered.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import math
import re
import uuid
from collections.abc import Callable
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
#: ``ChangeEvent.encoding`` of values left as a schemaless JsonConverter wrote them.
ENCODING = "debezium-json"
ROW_OPS = {"c": Op.INSERT, "r": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
_W = "debezium: "
_WF = "debezium-flat: "
_EPOCH = dt.datetime(1970, 1, 1)
_DATE_EPOCH = dt.date(1970, 1, 1)

# --- the unavailable-value placeholder ---------------------------------------------------

#: ``RelationalDatabaseConnectorConfig.DEFAULT_UNAVAILABLE_VALUE_PLACEHOLDER``.
PLACEHOLDER = "__debezium_unavailable_value"
_PLACEHOLDER_BYTES = PLACEHOLDER.encode()
#: The forms ``UnchangedToastedPlaceholder`` (debezium-connector-postgres) gives it, as the
#: JsonConverter writes them: bytes (bytea; MySQL ``BinlogValueConverters.convertBinary``) in
#: base64; text/bytea/uuid arrays as a one-element list; int/bigint arrays as the list of
#: the placeholder's bytes; hstore as a one-entry map, or its JSON text
#: (``hstore.handling.mode=json``); a uuid array element is ``UUID.nameUUIDFromBytes``.
_PLACEHOLDER_B64 = base64.b64encode(_PLACEHOLDER_BYTES).decode()
_PLACEHOLDER_UUID = str(
    uuid.UUID(bytes=hashlib.md5(_PLACEHOLDER_BYTES, usedforsecurity=False).digest(), version=3)
)
_PLACEHOLDER_STRINGS = frozenset(
    {PLACEHOLDER, _PLACEHOLDER_B64, orjson.dumps({PLACEHOLDER: PLACEHOLDER}).decode()}
)
_PLACEHOLDER_LISTS = (
    [PLACEHOLDER],
    [_PLACEHOLDER_B64],
    [_PLACEHOLDER_UUID],
    list(_PLACEHOLDER_BYTES),
)


def is_unavailable(value: Any) -> bool:
    """True when ``value`` is Debezium's unavailable-value placeholder in one of its forms."""
    if isinstance(value, str):
        return value in _PLACEHOLDER_STRINGS
    if isinstance(value, list):
        return value in _PLACEHOLDER_LISTS
    if isinstance(value, dict):
        return value == {PLACEHOLDER: PLACEHOLDER}
    return False


# --- detection and keys ------------------------------------------------------------------


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


def subject_table(subject: str | None) -> tuple[str, str] | None:
    """``cdc.shop.public.orders`` → ``("public", "orders")``: Debezium names a table's topic
    ``<topic.prefix>.<schema-or-db>.<table>`` (the prefix may hold dots); None when the
    subject has fewer than three tokens."""
    if not subject:
        return None
    tokens = subject.split(".")
    if len(tokens) < 3 or not tokens[-2] or not tokens[-1]:
        return None
    return tokens[-2], tokens[-1]


# --- envelope ----------------------------------------------------------------------------


def decode_envelope(
    obj: JsonObject,
    schema: JsonObject | None,
    *,
    seq: int,
    key_json: bytes | None,
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
    snapshot = _initial_snapshot(source.get("snapshot"))
    base = _source_position(source, connector, seq, snapshot)
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
    typed = schema is not None and bool(fields)
    before, _ = _image(obj, "before", fields, connector, _W)
    after, after_unchanged = _image(obj, "after", fields, connector, _W)
    pk, key_values = parse_key(key_json)
    common: dict[str, Any] = {
        "source": origin,
        "database": database,
        "table": table,
        "pk": pk,
        "commit_ts_ms": commit_ms,
        "column_types": _column_types(fields, connector),
        "seq": seq,
        "encoding": "" if typed else ENCODING,
    }
    position = make_position((*base, 0), "source position")
    if op is Op.DELETE:
        if before is None:
            raise DecodeError(f"{_W}delete of {table_id} without a before image")
        key = row_key(pk, before, table_id, key_values) if pk else None
        return Decoded(
            [ChangeEvent(op=op, position=position, key=key, before=before, **common)], format=FORMAT
        )
    if after is None:
        raise DecodeError(f"{_W}op {op_code} on {table_id} without an after image")
    common["unchanged"] = after_unchanged
    if not pk:
        event = ChangeEvent(op=op, position=position, before=before, after=after, **common)
        return Decoded([event], format=FORMAT)
    key = row_key(pk, after, table_id, key_values)
    # A before image without the key columns (PostgreSQL's default replica identity) keeps the key.
    old_key = row_key(pk, before, table_id, key) if before is not None and op is Op.UPDATE else key
    if old_key == key:
        event = ChangeEvent(op=op, position=position, key=key, before=before, after=after, **common)
        return Decoded([event], format=FORMAT)
    split = make_position((*base, 1), "source position")
    deleted = {**common, "unchanged": ()}
    return Decoded(
        [
            ChangeEvent(op=Op.DELETE, position=position, key=old_key, before=before, **deleted),
            ChangeEvent(op=op, position=split, key=key, before=before, after=after, **common),
        ],
        format=FORMAT,
    )


# --- flattened ---------------------------------------------------------------------------

#: add.fields names of the namespace, PostgreSQL's schema before any database name.
_NAMESPACE_FIELDS = ("__source_schema", "__schema", "__db", "__source_db")
_TABLE_FIELDS = ("__table", "__source_table")


def decode_flat(
    obj: JsonObject,
    schema: JsonObject | None,
    *,
    seq: int,
    key_json: bytes | None,
    subject: str | None = None,
) -> Decoded:
    """Decode one ExtractNewRecordState row (``schema``: its Connect schema, if any)."""
    meta = {k: v for k, v in obj.items() if k.startswith("__")}
    connector = _first_str(meta, ("__connector", "__source_connector")) or _flat_connector(meta)
    fields = {k: v for k, v in _field_schemas(schema, _WF).items() if not k.startswith("__")}
    typed = schema is not None and bool(fields)
    row, unchanged = _convert_row(
        {k: v for k, v in obj.items() if not k.startswith("__")}, fields, connector, _WF
    )
    database = _first_str(meta, _NAMESPACE_FIELDS)
    table = _first_str(meta, _TABLE_FIELDS)
    if database is None or table is None:
        from_subject = subject_table(subject)
        if from_subject is None:
            missing = "database (schema) name" if database is None else "table name"
            raise DecodeError(
                f"{_WF}missing {missing}: add it to the row (ExtractNewRecordState "
                "add.fields=db,table, or schema,table for PostgreSQL) or publish to a subject "
                f"<topic.prefix>.<schema-or-db>.<table> (subject {subject!r:.120})"
            )
        database = database or from_subject[0]
        table = table or from_subject[1]
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
    snapshot_flag = meta.get("__snapshot", meta.get("__source_snapshot"))
    # Without a snapshot field an ``r`` is taken for the initial snapshot: incremental
    # snapshots are opt-in (a signal), the initial snapshot is Debezium's default.
    snapshot = _initial_snapshot(snapshot_flag) if snapshot_flag is not None else op_code == "r"

    pk, key_values = parse_key(key_json)
    key = row_key(pk, row, table_id, key_values) if pk else None
    event = ChangeEvent(
        source=f"debezium-{connector}" if connector else "debezium",
        database=database,
        table=table,
        op=op,
        position=make_position((*_flat_position(meta, seq, snapshot), 0), "source position"),
        pk=pk,
        key=key,
        before=row if op is Op.DELETE else None,
        after=None if op is Op.DELETE else row,
        commit_ts_ms=opt_int(meta, "__source_ts_ms", _WF),
        column_types=_column_types(fields, connector),
        seq=seq,
        encoding="" if typed else ENCODING,
        unchanged=() if op is Op.DELETE else unchanged,
    )
    return Decoded([event], format=FLAT_FORMAT)


def _flat_connector(meta: JsonObject) -> str:
    """The connector a flattened row's position fields betray ("" when none)."""
    if any(k in meta for k in ("__lsn", "__source_lsn", "__sequence", "__source_sequence")):
        return "postgresql"
    if any(k in meta for k in ("__file", "__source_file")):
        return "mysql"
    return ""


# --- positions ---------------------------------------------------------------------------


def _initial_snapshot(flag: Any) -> bool:
    """True for a row of the initial snapshot: ``source.snapshot`` is one of SnapshotRecord's
    ``true``/``first``/``first_in_data_collection``/``last_in_data_collection``/``last``;
    ``false``, ``incremental`` or absent is not."""
    if isinstance(flag, bool):
        return flag
    return isinstance(flag, str) and flag.lower() not in ("false", "incremental", "")


def _source_position(
    source: JsonObject, connector: str, seq: int, snapshot: bool
) -> tuple[int, ...]:
    where = _W + "source."
    if connector in ("mysql", "mariadb"):
        file = opt_str(source, "file", where)
        pos = opt_int(source, "pos", where)
        if file is not None and pos is not None:
            return (_binlog_number(file), pos, opt_int(source, "row", where) or 0)
        return (0, seq)
    if connector == "postgresql":
        sequence = opt_str(source, "sequence", where)
        if sequence is not None:
            last_commit, lsn = _pg_sequence(sequence)
            return (last_commit, 0 if snapshot else lsn)
        event_lsn = opt_int(source, "lsn", where)
        if event_lsn is not None:
            return (0 if snapshot else event_lsn,)
        return (0, seq)
    return (0, seq)


def _flat_position(meta: JsonObject, seq: int, snapshot: bool) -> tuple[int, ...]:
    sequence = _first_str(meta, ("__source_sequence", "__sequence"))
    if sequence is not None:
        last_commit, lsn = _pg_sequence(sequence)
        return (last_commit, 0 if snapshot else lsn)
    for name in ("__lsn", "__source_lsn"):
        event_lsn = opt_int(meta, name, _WF)
        if event_lsn is not None:
            return (0 if snapshot else event_lsn,)
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
    return _decimal_component(suffix, "binlog file number")


#: Digits of the largest position component (``_common.make_position`` bounds it below
#: 10**20): a longer number is out of range, and int() of thousands of digits raises
#: ValueError (Python's int_max_str_digits), which must be a DecodeError like any bad field.
_MAX_POSITION_DIGITS = 20


def _decimal_component(digits: str, what: str) -> int:
    """ASCII decimal ``digits`` as a position component, or a DecodeError when too long."""
    if len(digits.lstrip("0")) > _MAX_POSITION_DIGITS:
        raise DecodeError(f"{_W}{what} out of range for a position: {digits:.40}…")
    return int(digits)


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
            out.append(_decimal_component(part, "source.sequence LSN"))
        elif is_int(part) and part >= 0:
            out.append(part)
        else:
            raise DecodeError(f"{_W}source.sequence holds a non-LSN: {part!r:.40}")
    return out[0], out[1]


# --- rows and schemas --------------------------------------------------------------------


def _first_str(meta: JsonObject, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = opt_str(meta, name, _WF)
        if value:
            return value
    return None


def _image(
    obj: JsonObject, name: str, fields: dict[str, JsonObject], connector: str, where: str
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    row = opt_object(obj, name, where)
    if row is None:
        return None, ()
    return _convert_row(row, fields, connector, where)


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


def _convert_row(
    row: dict[str, Any], fields: dict[str, JsonObject], connector: str, where: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The row without placeholder columns (values as text when typed), and those columns."""
    unchanged = tuple(col for col, value in row.items() if is_unavailable(value))
    if unchanged:
        row = {col: value for col, value in row.items() if col not in unchanged}
    if not fields:
        return row, unchanged
    out: dict[str, Any] = {}
    for col, value in row.items():
        f = fields.get(col)
        if f is None or value is None:
            out[col] = value
            continue
        try:
            out[col] = _schema_converter(f, connector)(value)
        except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
            kind = f.get("name") or f.get("type")
            raise DecodeError(f"{where}column {col!r:.60} ({kind}): {exc}") from exc
    return out, unchanged


def _column_types(fields: dict[str, JsonObject], connector: str) -> dict[str, str]:
    return {name: schema_source_type(f, connector) for name, f in fields.items()}


# --- Connect schema → source type and converter -------------------------------------------

_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
#: Epoch-based timestamps (``io.debezium.time.*``, Kafka's Timestamp): units per second.
_EPOCH_UNITS = {
    "io.debezium.time.Timestamp": 1_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
#: Times of day as a count past midnight: units per second.
_TIME_UNITS = {
    "io.debezium.time.Time": 1_000,
    "org.apache.kafka.connect.data.Time": 1_000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
}
_DATES = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})
#: Connect logical name → (PostgreSQL type, MySQL type) where the name alone decides it.
_LOGICAL_TYPES: dict[str, tuple[str, str]] = {
    "io.debezium.time.ZonedTimestamp": ("timestamp with time zone", "timestamp"),
    "io.debezium.time.ZonedTime": ("time with time zone", "time"),
    "io.debezium.time.MicroDuration": ("interval", "interval"),
    "io.debezium.time.Interval": ("interval", "interval"),
    "io.debezium.time.Year": ("integer", "year"),
    "io.debezium.data.Json": ("json", "json"),
    "io.debezium.data.Uuid": ("uuid", "uuid"),
    "io.debezium.data.Xml": ("xml", "text"),
    _VARIABLE_DECIMAL: ("numeric", "decimal"),
}
#: Connect primitive type (as JsonConverter's schema spells it) → (PostgreSQL, MySQL) type.
_PRIMITIVE_TYPES: dict[str, tuple[str, str]] = {
    "int8": ("smallint", "tinyint"),
    "int16": ("smallint", "smallint"),
    "int32": ("integer", "int"),
    "int64": ("bigint", "bigint"),
    # JsonConverter's JsonSchema names FLOAT32 "float" and FLOAT64 "double"; Connect's own
    # Schema.Type names are accepted too.
    "float": ("real", "float"),
    "float32": ("real", "float"),
    "double": ("double precision", "double"),
    "float64": ("double precision", "double"),
    "boolean": ("boolean", "boolean"),
    "string": ("text", "varchar"),
    "bytes": ("bytea", "varbinary"),
    "map": ("json", "json"),
    "struct": ("json", "json"),
}
_PROPAGATED_TYPE = "__debezium.source.column.type"
_PROPAGATED_LENGTH = "__debezium.source.column.length"
_PROPAGATED_SCALE = "__debezium.source.column.scale"
#: PostgreSQL internal type names (what ``column.propagate.source.type`` carries) → the
#: ``format_type`` spelling.
_PG_TYPE_NAMES = {
    "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
    "float8": "double precision", "bool": "boolean", "bpchar": "character",
    "varchar": "character varying", "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone", "time": "time without time zone",
    "timetz": "time with time zone", "varbit": "bit varying", "serial": "integer",
    "bigserial": "bigint", "smallserial": "smallint",
}  # fmt: skip
#: pgjdbc reports an unconstrained ``numeric`` with this length (PostgresValueConverter).
_PG_UNCONSTRAINED_LENGTH = "131089"
_LENGTH_TYPES = frozenset(
    {"character", "character varying", "bit", "bit varying", "char", "varchar", "binary",
     "varbinary"}
)  # fmt: skip
_FSP_TYPES = frozenset({"datetime", "time", "timestamp"})


def _params(f: JsonObject) -> dict[str, str]:
    params = f.get("parameters")
    if not isinstance(params, dict):
        return {}
    return {k: v for k, v in params.items() if isinstance(v, str)}


def _quoted_labels(labels: str) -> str:
    """``"a,b"`` (Debezium's ``allowed`` parameter) → ``'a','b'``."""
    return ",".join("'" + label.replace("'", "''") + "'" for label in labels.split(","))


def schema_source_type(f: JsonObject, connector: str) -> str:
    """The source SQL type of a column from its Connect field schema (see module docstring)."""
    params = _params(f)
    propagated = params.get(_PROPAGATED_TYPE)
    if propagated:
        return _propagated_type(propagated, params, connector)
    pg = connector == "postgresql"
    name = f.get("name")
    if name == _DECIMAL:
        scale = params.get("scale", "0")
        precision = params.get("connect.decimal.precision")
        if precision is None:
            # PostgreSQL money (PostgresValueConverter.moneySchema) has a scale and no
            # precision: no precision is invented, the lake keeps the exact text.
            return "numeric"
        return f"{'numeric' if pg else 'decimal'}({precision},{scale})"
    if name == "io.debezium.data.Enum":
        return f"enum({_quoted_labels(params.get('allowed', ''))})"
    if name == "io.debezium.data.EnumSet":
        return f"set({_quoted_labels(params.get('allowed', ''))})"
    if name == "io.debezium.data.Bits":
        return f"bit({params.get('length', '1')})"
    if name in _DATES:
        return "date"
    if name in _TIME_UNITS:
        return "time without time zone" if pg else "time"
    if name in _EPOCH_UNITS:
        return "timestamp without time zone" if pg else "datetime"
    if isinstance(name, str) and name in _LOGICAL_TYPES:
        return _LOGICAL_TYPES[name][0 if pg else 1]
    kind = f.get("type")
    if kind == "array":
        items = f.get("items")
        element = schema_source_type(items, connector) if isinstance(items, dict) else "text"
        return f"{element}[]" if pg else "json"
    if isinstance(kind, str) and kind in _PRIMITIVE_TYPES:
        return _PRIMITIVE_TYPES[kind][0 if pg else 1]
    return "text"


def _propagated_type(type_name: str, params: dict[str, str], connector: str) -> str:
    """``column.propagate.source.type`` parameters → the catalog's spelling of the type."""
    name = type_name.strip().lower()
    length = params.get(_PROPAGATED_LENGTH)
    scale = params.get(_PROPAGATED_SCALE)
    if connector == "postgresql":
        if name.startswith("_"):  # pg_type names an array type after its element, "_int4"
            inner = _propagated_type(name[1:], {}, connector)
            return f"{inner}[]"
        name = _PG_TYPE_NAMES.get(name, name)
    if name in ("numeric", "decimal"):
        if length in (None, "0", "-1", _PG_UNCONSTRAINED_LENGTH) and scale in (None, "0"):
            return name
        return f"{name}({length},{scale or 0})"
    if name in ("enum", "set") and params.get("allowed") is not None:
        return f"{name}({_quoted_labels(params['allowed'])})"
    sized = name in _LENGTH_TYPES or (
        connector != "postgresql" and (name in _FSP_TYPES or name == "tinyint")
    )
    if sized and length and length not in ("0", "-1"):
        return f"{name}({length})"
    return name


def _schema_converter(f: JsonObject, connector: str) -> Callable[[Any], str]:
    """The function writing one value of a Connect-typed column in canal-json text form."""
    pg = connector == "postgresql"
    name = f.get("name")
    params = _params(f)
    propagated = (params.get(_PROPAGATED_TYPE) or "").lower()
    if name == _DECIMAL:
        scale = int(params.get("scale", "0"))
        return lambda v: _fixed_decimal(v, scale)
    if name == _VARIABLE_DECIMAL:
        return _variable_decimal
    if name in _DATES:
        return _date_text
    if isinstance(name, str) and name in _TIME_UNITS:
        units = _TIME_UNITS[name]
        return lambda v: _time_of_day_text(v, units, None)
    if isinstance(name, str) and name in _EPOCH_UNITS:
        units = _EPOCH_UNITS[name]
        return lambda v: _epoch_text(v, units, None)
    if name == "io.debezium.time.ZonedTimestamp":
        return _zoned_timestamp_text
    if name == "io.debezium.time.MicroDuration":
        return _interval_text
    if name == "io.debezium.data.Bits":
        return _bits_text
    kind = f.get("type")
    if kind in ("int8", "int16", "int32", "int64"):
        if kind == "int64" and "unsigned" in propagated:
            return _unsigned_bigint_text
        return _int_text
    if kind in ("float", "double", "float32", "float64"):
        return _float_text
    if kind == "boolean":
        return _bool_text
    if kind == "bytes":
        return _bytea_text if pg else _latin1_bytes_text
    return _plain_text


# --- value_text: one schemaless value → canal-json text -----------------------------------

_TYPE_ARGS_RE = re.compile(r"\(([^)]*)\)")


def _split_type(source_type: str) -> tuple[str, str | None, bool]:
    """``"timestamp(3) without time zone"`` → ``("timestamp without time zone", "3", False)``;
    ``"bigint(20) unsigned"`` → ``("bigint", "20", True)``; arrays keep their ``[]``."""
    text = source_type.strip().lower()
    if text.endswith("[]"):
        return text, None, False
    args = None
    match = _TYPE_ARGS_RE.search(text)
    if match:
        args = match.group(1)
        text = f"{text[: match.start()]} {text[match.end() :]}"
    words = text.split()
    unsigned = "unsigned" in words
    name = " ".join(w for w in words if w not in ("unsigned", "zerofill"))
    return name, args, unsigned


_INT_TYPES = frozenset(
    {"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "int1", "int2", "int3",
     "int4", "int8", "middleint", "serial", "smallserial", "bigserial", "oid"}
)  # fmt: skip
_FLOAT_TYPES = frozenset({"float", "real", "float4", "double", "double precision", "float8"})
_DECIMAL_TYPES = frozenset({"decimal", "numeric", "dec", "fixed"})
_BINARY_TYPES = frozenset(
    {"bytea", "binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob"}
)
_WALL_CLOCK = frozenset({"datetime", "timestamp without time zone"})
_ZONED = frozenset({"timestamp with time zone", "timestamptz"})
_TIMES = frozenset({"time", "time without time zone"})
#: ``money.fraction.digits`` default (PostgresConnectorConfig.MONEY_FRACTION_DIGITS).
_MONEY_SCALE = 2


def value_text(value: Any, source_type: str, connector: str) -> str | None:
    """One value of a schemaless JsonConverter message → its canal-json text form.

    ``source_type`` is the column's type as the source catalog spells it (PostgreSQL
    ``format_type``: ``numeric(12,2)``, ``timestamp(3) without time zone``; MySQL
    ``COLUMN_TYPE``: ``decimal(12,2)``, ``datetime(6)``, ``bit(1)``, ``enum('a','b')``);
    ``connector`` is ``postgresql`` or ``mysql``/``mariadb``. Debezium's default modes are
    assumed: ``decimal.handling.mode=precise``, ``time.precision.mode`` ``adaptive``
    (PostgreSQL) / ``adaptive_time_microseconds`` (MySQL), ``binary.handling.mode=bytes``,
    ``bigint.unsigned.handling.mode=long`` (MySQL). Forms: integers and years as decimal text;
    decimals with exactly their scale; floats as the shortest text of the double (``NaN``,
    ``Infinity``, ``-Infinity`` as JsonConverter writes them); booleans and ``bit(1)`` as
    ``1``/``0``; ``bit(n)`` as its unsigned value; dates ``YYYY-MM-DD``; timestamps
    ``YYYY-MM-DD HH:MM:SS[.fraction]`` (zoned ones in UTC); times ``[-]HH:MM:SS[.fraction]``
    (MySQL: ``fsp`` digits; PostgreSQL: trailing zeros dropped, as PostgreSQL prints it);
    ``bytea`` as PostgreSQL's ``\\x`` hex, MySQL binary strings as ISO-8859-1 text (one
    character per byte, as TiCDC); intervals (``MicroDuration``) as ``[N days ]HH:MM:SS[.f]``;
    arrays, maps and structs as JSON text; text, JSON, UUID, ENUM and SET labels as sent.

    Raises ValueError with a reason when the value does not fit the type's Debezium encoding
    or something needed is unknown (a precise decimal whose scale the type does not give).
    """
    if value is None:
        return None
    try:
        return _value_text(value, source_type, connector)
    except (TypeError, OverflowError, ArithmeticError) as exc:
        # Out-of-range dates and the like: the caller dead-letters on ValueError only.
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


def _value_text(value: Any, source_type: str, connector: str) -> str:
    pg = connector == "postgresql"
    name, args, unsigned = _split_type(source_type)
    if name.endswith("[]"):
        return _plain_text(value)
    if name in _INT_TYPES:
        # bigint.unsigned.handling.mode=long writes BIGINT UNSIGNED as a Java long
        # (BinlogValueConverters.converter → convertBigInt): values above 2^63-1 wrap.
        return (
            _unsigned_bigint_text(value)
            if unsigned and name in ("bigint", "int8")
            else (_int_text(value))
        )
    if name in _DECIMAL_TYPES:
        if isinstance(value, dict):
            return _variable_decimal(value)
        if isinstance(value, str):
            scale = _decimal_scale(args)
            if scale is None:
                raise ValueError(
                    f"a precise decimal (base64 unscaled bytes) of type {source_type!r} needs its "
                    "scale: give the column type with (precision,scale) in config or the catalog"
                )
            return _fixed_decimal(value, scale)
        return _float_text(value)  # decimal.handling.mode=double
    if name == "money":
        return _fixed_decimal(value, _MONEY_SCALE) if isinstance(value, str) else _plain_text(value)
    if name in _FLOAT_TYPES:
        return _float_text(value)
    if name in ("bool", "boolean"):
        return _bool_text(value)
    if name in ("bit", "bit varying", "varbit"):
        return _bits_text(value)
    if name == "year":
        return _int_text(value)
    if name == "date":
        return _date_text(value)
    if name in _TIMES:
        fsp = _fsp(args, 6 if pg else 0)
        # PostgreSQL adaptive: time(p≤3) → Time (ms), else MicroTime; MySQL
        # adaptive_time_microseconds: always MicroTime (TemporalPrecisionMode).
        units = 1_000 if pg and fsp <= 3 else 1_000_000
        return _time_of_day_text(value, units, None if pg else fsp)
    if name in ("time with time zone", "timetz"):
        return _plain_text(value)  # ZonedTime: ISO-8601 text in UTC
    if name in _WALL_CLOCK or name in _ZONED or name == "timestamp":
        if isinstance(value, str):  # ZonedTimestamp (timestamptz, MySQL TIMESTAMP)
            return _zoned_timestamp_text(value)
        fsp = _fsp(args, 6 if pg else 0)
        units = 1_000 if fsp <= 3 else 1_000_000 if fsp <= 6 else 1_000_000_000
        return _epoch_text(value, units, None if pg else fsp)
    if name == "interval":
        return _interval_text(value)
    if name in _BINARY_TYPES:
        return _bytea_text(value) if name == "bytea" or pg else _latin1_bytes_text(value)
    return _plain_text(value)


def _decimal_scale(args: str | None) -> int | None:
    if args is None:
        return None
    parts = [p.strip() for p in args.split(",")]
    try:
        return int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def _fsp(args: str | None, default: int) -> int:
    try:
        return int(args) if args else default
    except ValueError:
        return default


# --- value forms -------------------------------------------------------------------------


def _int_text(value: Any) -> str:
    if not is_int(value):
        raise ValueError(f"expected a JSON integer, got {type(value).__name__}")
    return str(value)


def _unsigned_bigint_text(value: Any) -> str:
    if isinstance(value, str):  # bigint.unsigned.handling.mode=precise: Decimal(20,0)
        return _fixed_decimal(value, 0)
    if not is_int(value):
        raise ValueError(f"expected a JSON integer, got {type(value).__name__}")
    return str(value + 2**64 if value < 0 else value)


def _float_text(value: Any) -> str:
    if isinstance(value, str):
        # Jackson writes non-finite doubles as strings (QUOTE_NON_NUMERIC_NUMBERS).
        if value in ("NaN", "Infinity", "-Infinity"):
            return value
        raise ValueError(f"expected a JSON number, got text {value!r:.40}")
    if is_int(value):
        return str(value)
    if not isinstance(value, float):
        raise ValueError(f"expected a JSON number, got {type(value).__name__}")
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _bool_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if is_int(value):
        return "1" if value else "0"
    raise ValueError(f"expected a JSON boolean, got {type(value).__name__}")


def _plain_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if is_int(value):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    return orjson.dumps(value).decode()


def _b64(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"expected base64 text, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from exc


def _fixed_decimal(value: Any, scale: int) -> str:
    """Connect Decimal: base64 of the big-endian two's-complement unscaled value."""
    if is_int(value) or isinstance(value, float):
        return _float_text(value)  # decimal.handling.mode=double
    return _decimal_text(_b64(value), scale)


def _variable_decimal(value: Any) -> str:
    """VariableScaleDecimal: ``{"scale": s, "value": base64 unscaled}``."""
    if not isinstance(value, dict) or not is_int(value.get("scale")):
        raise ValueError("a variable-scale decimal needs scale and value")
    return _decimal_text(_b64(value.get("value")), value["scale"])


def _decimal_text(unscaled_bytes: bytes, scale: int) -> str:
    """Big-endian two's-complement unscaled value and scale → ``-123.4500``."""
    if not -1000 <= scale <= 1000:
        raise ValueError(f"decimal scale out of range: {scale}")
    unscaled = int.from_bytes(unscaled_bytes, "big", signed=True)
    if scale < 0:
        return str(unscaled * 10**-scale)
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    if scale == 0:
        return sign + digits
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _date_text(value: Any) -> str:
    if not is_int(value):
        raise ValueError("a date must be epoch days (an integer)")
    return (_DATE_EPOCH + dt.timedelta(days=value)).isoformat()


def _fraction(fraction: int, per_second: int, fsp: int | None) -> str:
    """``.ffffff`` without trailing zeros, padded to ``fsp`` digits when given (MySQL prints
    ``fsp`` digits); a digit the value has is never dropped."""
    width = len(str(per_second)) - 1
    digits = str(fraction).rjust(width, "0").rstrip("0")
    if fsp is not None:
        digits = digits.ljust(fsp, "0")
    return f".{digits}" if digits else ""


def _epoch_text(value: Any, per_second: int, fsp: int | None) -> str:
    if not is_int(value):
        raise ValueError("an epoch timestamp must be an integer")
    seconds, fraction = divmod(value, per_second)
    text = (_EPOCH + dt.timedelta(seconds=seconds)).isoformat(sep=" ")
    return text + _fraction(fraction, per_second, fsp)


def _time_of_day_text(value: Any, per_second: int, fsp: int | None) -> str:
    """A count past midnight → ``[-]HH:MM:SS[.f]``; MySQL TIME may be negative or over 24h."""
    if not is_int(value):
        raise ValueError("a time must be an integer count past midnight")
    sign = "-" if value < 0 else ""
    seconds, fraction = divmod(abs(value), per_second)
    hours, rest = divmod(seconds, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return text + _fraction(fraction, per_second, fsp)


_ZONED_RE = re.compile(
    r"^(\d{4,}-\d{2}-\d{2})T(\d{2}:\d{2}(?::\d{2})?)(?:\.(\d{1,9}))?(Z|[+-]\d{2}(?::?\d{2}){0,2})$"
)


def _zoned_timestamp_text(value: Any) -> str:
    """ZonedTimestamp (ISO-8601 with offset, up to 9 fraction digits) → UTC wall clock."""
    if not isinstance(value, str):
        raise ValueError("a zoned timestamp must be ISO-8601 text")
    match = _ZONED_RE.match(value)
    if not match:
        raise ValueError(f"not an ISO-8601 timestamp with offset: {value!r:.60}")
    day, clock, fraction, offset = match.groups()
    if len(clock) == 5:
        clock += ":00"
    zone = "+00:00" if offset == "Z" else offset
    moment = dt.datetime.fromisoformat(f"{day}T{clock}{zone}")
    moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    text = moment.isoformat(sep=" ")
    digits = (fraction or "").rstrip("0")
    return f"{text}.{digits}" if digits else text


def _interval_text(value: Any) -> str:
    """MicroDuration → ``[N days ]HH:MM:SS[.f]`` (PostgreSQL's ``postgres`` style for a
    day-time interval). Debezium already folded years and months into microseconds at
    365.25/12 days a month (``MicroDuration.durationMicros``, ``DAYS_PER_MONTH_AVG``), so
    they come back as days; ``interval.handling.mode=string`` values pass as sent."""
    if isinstance(value, str):
        return value
    if not is_int(value):
        raise ValueError("an interval must be a count of microseconds")
    sign = "-" if value < 0 else ""
    days, micros = divmod(abs(value), 86_400_000_000)
    clock = _time_of_day_text(micros, 1_000_000, None)
    if not days:
        return sign + clock
    unit = "day" if days == 1 and not sign else "days"  # PostgreSQL: "-1 days"
    return f"{sign}{days} {unit} {sign}{clock}"


def _bits_text(value: Any) -> str:
    """Bits (little-endian bytes, JdbcValueConverters.convertBits) → unsigned value;
    BIT(1) is a boolean."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(int.from_bytes(_b64(value), "little"))


def _bytea_text(value: Any) -> str:
    """PostgreSQL's ``bytea_output=hex`` form, the one tidelake's own capture carries."""
    return "\\x" + _b64(value).hex()


def _latin1_bytes_text(value: Any) -> str:
    return _b64(value).decode("latin-1")
