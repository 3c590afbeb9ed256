"""Debezium envelopes and ExtractNewRecordState rows decode into the one event model."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest

from tidelake.errors import DecodeError
from tidelake.events import Op, Position
from tidelake.formats import decode

KEY = b'{"id": 1}'
MYSQL_SOURCE = {
    "connector": "mysql",
    "db": "shop",
    "table": "t",
    "file": "mysql-bin.000042",
    "pos": 7000,
    "row": 2,
    "ts_ms": 1714929186000,
}
PG_SOURCE = {
    "connector": "postgresql",
    "db": "shopdb",
    "schema": "public",
    "table": "t",
    "lsn": 24023128,
    "sequence": '["24023119","24023128"]',
    "ts_ms": 1714929186001,
}


def envelope(
    op: str, before: Any = None, after: Any = None, source: Any = None, **extra: Any
) -> bytes:
    """A bare Debezium envelope."""
    m = {"before": before, "after": after, "source": source or MYSQL_SOURCE, "op": op, "ts_ms": 1}
    m.update(extra)
    return orjson.dumps(m)


def field(column: str, kind: str, **extra: Any) -> dict[str, Any]:
    """A Connect schema field."""
    return {"type": kind, "optional": True, **extra, "field": column}


@pytest.mark.parametrize(("code", "op"), [("c", Op.INSERT), ("r", Op.INSERT), ("u", Op.UPDATE)])
def test_row_ops_map_to_event_ops(code: str, op: Op) -> None:
    """c and r (snapshot read) are inserts, u is an update; the row is after."""
    decoded = decode(envelope(code, after={"id": 1, "v": "a"}), seq=3, key_json=KEY)
    expected = [(op, {"id": 1}, {"id": 1, "v": "a"}, ("id",), "shop.t", 3, "debezium")]
    actual = [(e.op, e.key, e.row, e.pk, e.table_id, e.seq, decoded.format) for e in decoded.events]
    assert expected == actual


def test_delete_row_is_before() -> None:
    """d deletes the key of the before image."""
    decoded = decode(envelope("d", before={"id": 1, "v": "a"}), seq=1, key_json=KEY)
    expected = [(Op.DELETE, {"id": 1}, {"id": 1, "v": "a"})]
    actual = [(e.op, e.key, e.row) for e in decoded.events]
    assert expected == actual


def test_truncate_is_a_ddl_event() -> None:
    """t is a TRUNCATE DDL event; it needs no key."""
    raw = orjson.dumps({"source": MYSQL_SOURCE, "op": "t", "ts_ms": 1})
    decoded = decode(raw, seq=1)
    expected = [(Op.DDL, "TRUNCATE", "TRUNCATE TABLE `shop`.`t`")]
    actual = [(e.op, e.ddl_type, e.ddl) for e in decoded.events]
    assert expected == actual


def test_mysql_position_is_binlog_file_offset_row() -> None:
    """MySQL: (binlog file number, pos, row, 0); commit time from source.ts_ms."""
    decoded = decode(envelope("c", after={"id": 1}), seq=1, key_json=KEY)
    expected = [(Position((42, 7000, 2, 0)), 1714929186000, "debezium-mysql")]
    actual = [(e.position, e.commit_ts_ms, e.source) for e in decoded.events]
    assert expected == actual


def test_postgres_position_is_commit_lsn_then_lsn() -> None:
    """PostgreSQL: (lastCommitLsn, lsn, 0) from source.sequence; database is the schema."""
    decoded = decode(envelope("c", after={"id": 1}, source=PG_SOURCE), seq=1, key_json=KEY)
    expected = [(Position((24023119, 24023128, 0)), "public.t")]
    actual = [(e.position, e.table_id) for e in decoded.events]
    assert expected == actual


def test_postgres_without_sequence_uses_lsn() -> None:
    """Without sequence the event LSN orders: (lsn, 0)."""
    source = {k: v for k, v in PG_SOURCE.items() if k != "sequence"}
    decoded = decode(envelope("c", after={"id": 1}, source=source), seq=1, key_json=KEY)
    expected = [Position((24023128, 0))]
    actual = [e.position for e in decoded.events]
    assert expected == actual


def test_unknown_connector_falls_back_to_stream_order() -> None:
    """A connector without a known position: (0, seq, 0)."""
    source = {"connector": "sqlserver", "db": "shop", "table": "t"}
    decoded = decode(envelope("c", after={"id": 1}, source=source), seq=77, key_json=KEY)
    expected = [Position((0, 77, 0))]
    actual = [e.position for e in decoded.events]
    assert expected == actual


def test_update_with_changed_key_is_delete_then_update() -> None:
    """op u whose key changed: DELETE of the old key, then UPDATE of the new, in order."""
    raw = envelope("u", before={"id": 1, "v": "a"}, after={"id": 2, "v": "a"})
    decoded = decode(raw, seq=1, key_json=b'{"id": 2}')
    expected = [
        (Op.DELETE, {"id": 1}, Position((42, 7000, 2, 0))),
        (Op.UPDATE, {"id": 2}, Position((42, 7000, 2, 1))),
    ]
    actual = [(e.op, e.key, e.position) for e in decoded.events]
    assert expected == actual


def test_key_with_connect_schema_orders_composite_key() -> None:
    """A key with its Connect schema: the schema's field order is the key order."""
    key = orjson.dumps(
        {
            "schema": {"type": "struct", "fields": [field("b", "int32"), field("a", "int32")]},
            "payload": {"a": 1, "b": 2},
        }
    )
    decoded = decode(envelope("c", after={"a": 1, "b": 2, "v": "x"}), seq=1, key_json=key)
    expected = [(("b", "a"), {"b": 2, "a": 1})]
    actual = [(e.pk, e.key) for e in decoded.events]
    assert expected == actual


def test_schema_gives_column_types_and_canal_text_values() -> None:
    """With a Connect schema: source column types, and every value in canal-json text form."""
    cols = [
        field("id", "int64"),
        field(
            "amount",
            "bytes",
            name="org.apache.kafka.connect.data.Decimal",
            parameters={"scale": "10", "connect.decimal.precision": "38"},
        ),
        field("at", "int64", name="io.debezium.time.Timestamp"),
        field("at_us", "int64", name="io.debezium.time.MicroTimestamp"),
        field("zoned", "string", name="io.debezium.time.ZonedTimestamp"),
        field("day", "int32", name="io.debezium.time.Date"),
        field("raw", "bytes"),
        field("doc", "string", name="io.debezium.data.Json"),
    ]
    schema = {"type": "struct", "fields": [{"type": "struct", "fields": cols, "field": "after"}]}
    unscaled = -12345678901234567890
    after = {
        "id": 1,
        "amount": base64.b64encode(unscaled.to_bytes(9, "big", signed=True)).decode(),
        "at": 1714929186123,
        "at_us": 1714929186000001,
        "zoned": "2024-05-05T19:13:06+02:00",
        "day": 19848,
        "raw": base64.b64encode(bytes([0, 0x80, 0xFF])).decode(),
        "doc": '{"a": 1}',
    }
    payload = {"before": None, "after": after, "source": MYSQL_SOURCE, "op": "c"}
    decoded = decode(orjson.dumps({"schema": schema, "payload": payload}), seq=1, key_json=KEY)
    event = decoded.events[0]
    expected_types = {
        "id": "bigint",
        "amount": "decimal(38,10)",
        "at": "datetime",
        "at_us": "datetime",
        "zoned": "timestamp",
        "day": "date",
        "raw": "varbinary",
        "doc": "json",
    }
    expected_row = {
        "id": "1",
        "amount": "-1234567890.1234567890",
        "at": "2024-05-05 17:13:06.123",
        "at_us": "2024-05-05 17:13:06.000001",
        "zoned": "2024-05-05 17:13:06",
        "day": "2024-05-05",
        "raw": bytes([0, 0x80, 0xFF]).decode("latin-1"),
        "doc": '{"a": 1}',
    }
    expected = (expected_types, expected_row)
    actual = (event.column_types, event.after)
    assert expected == actual


def test_tombstone_is_skipped() -> None:
    """A null value (JSON null, or a wrapper with a null payload) is a skipped tombstone."""
    expected: list[tuple[str, list[object]]] = [("tombstone", []), ("tombstone", [])]
    actual = [
        (d.skipped, d.events)
        for d in (decode(b"null", seq=1), decode(b'{"schema": null, "payload": null}', seq=2))
    ]
    assert expected == actual


def test_flattened_rows_strip_metadata_and_honour_deleted() -> None:
    """Flattened: __ fields are metadata; __deleted "true" or true is a delete; __lsn orders."""
    base = {"__db": "shop", "__table": "t", "__lsn": 99, "__source_ts_ms": 5}
    rows = [
        {"id": 1, "v": "a", "__op": "c", "__deleted": "false", **base},
        {"id": 1, "v": "b", "__op": "u", "__deleted": False, **base},
        {"id": 1, "v": "b", "__op": "d", "__deleted": "true", **base},
        {"id": 1, "v": "b", "__deleted": True, **base},
        {"id": 1, "v": "c", "__deleted": "false", **base},
    ]
    decoded = [decode(orjson.dumps(r), seq=i, key_json=KEY) for i, r in enumerate(rows)]
    expected = [
        (Op.INSERT, {"id": 1, "v": "a"}, Position((99, 0)), 5, "debezium-flat"),
        (Op.UPDATE, {"id": 1, "v": "b"}, Position((99, 0)), 5, "debezium-flat"),
        (Op.DELETE, {"id": 1, "v": "b"}, Position((99, 0)), 5, "debezium-flat"),
        (Op.DELETE, {"id": 1, "v": "b"}, Position((99, 0)), 5, "debezium-flat"),
        (Op.UPDATE, {"id": 1, "v": "c"}, Position((99, 0)), 5, "debezium-flat"),
    ]
    actual = [
        (e.op, e.row, e.position, e.commit_ts_ms, d.format) for d in decoded for e in d.events
    ]
    assert expected == actual


def test_flattened_without_lsn_orders_by_sequence() -> None:
    """A flattened row without position fields: (0, seq, 0)."""
    raw = orjson.dumps({"id": 1, "__op": "c", "__db": "shop", "__table": "t"})
    expected = [Position((0, 12, 0))]
    actual = [e.position for e in decode(raw, seq=12, key_json=KEY).events]
    assert expected == actual


def test_flattened_mysql_fields_order_by_binlog() -> None:
    """Flattened with __file/__pos/__row: the MySQL position."""
    raw = orjson.dumps(
        {"id": 1, "__op": "c", "__db": "shop", "__table": "t", "__file": "bin.000007",
         "__pos": 120, "__row": 1}
    )  # fmt: skip
    expected = [Position((7, 120, 1, 0))]
    actual = [e.position for e in decode(raw, seq=1, key_json=KEY).events]
    assert expected == actual


@pytest.mark.parametrize(
    ("raw", "key", "reason"),
    [
        (envelope("c", after={"v": 1}), b'{"id": null}', "NULL or missing primary key column 'id'"),
        (envelope("c", after=None), KEY, "op c on shop.t without an after image"),
        (envelope("d", before=None), KEY, "delete of shop.t without a before image"),
        (envelope("x", after={"id": 1}), KEY, "unknown op 'x'"),
        (envelope("c", after={"id": 1}), b"[1]", "message key must be a JSON object"),
        (envelope("c", after={"id": 1}), b"{", "message key is not JSON"),
        (envelope("c", after={"id": 1}, source={"connector": "mysql", "table": "t"}), KEY,
         "missing database name"),
        (envelope("c", after={"id": 1}, source=dict(MYSQL_SOURCE, file="nofile")), KEY,
         "binlog file name without a number"),
        (envelope("c", after={"id": 1}, source=dict(PG_SOURCE, sequence="[1]")), KEY,
         "source.sequence must be a list of two LSNs"),
        (orjson.dumps({"id": 1, "__deleted": "maybe", "__db": "s", "__table": "t"}), KEY,
         "__deleted must be true/false"),
        (orjson.dumps({"id": 1, "__op": "c"}), KEY, "missing database (schema) name"),
    ],
)  # fmt: skip
def test_malformed_debezium_is_a_decode_error_with_reason(
    raw: bytes, key: bytes | None, reason: str
) -> None:
    """Each malformation raises DecodeError whose reason says what is wrong."""
    with pytest.raises(DecodeError) as info:
        decode(raw, seq=1, key_json=key)
    expected = True
    actual = reason in info.value.reason
    assert expected == actual, info.value.reason


def test_bad_decimal_encoding_names_the_column() -> None:
    """A Decimal value that is not base64 is refused, naming the column."""
    cols = [field("id", "int64"), field("d", "bytes", name="org.apache.kafka.connect.data.Decimal")]
    schema = {"type": "struct", "fields": [{"type": "struct", "fields": cols, "field": "after"}]}
    payload = {"after": {"id": 1, "d": "!!"}, "source": MYSQL_SOURCE, "op": "c"}
    with pytest.raises(DecodeError) as info:
        decode(orjson.dumps({"schema": schema, "payload": payload}), seq=1, key_json=KEY)
    expected = True
    actual = "column 'd'" in info.value.reason
    assert expected == actual, info.value.reason


# --- keys -------------------------------------------------------------------------------


def test_without_message_key_the_lake_resolves_the_key() -> None:
    """Debezium Server's NATS sink publishes no key: the event has pk=() and key=None, and
    the row image is kept whole (no key-change split is attempted)."""
    raw = envelope("u", before={"id": 1, "v": "a"}, after={"id": 2, "v": "b"})
    decoded = decode(raw, seq=4)
    expected = [(Op.UPDATE, (), None, {"id": 2, "v": "b"}, "debezium-json")]
    actual = [(e.op, e.pk, e.key, e.row, e.encoding) for e in decoded.events]
    assert expected == actual


def test_delete_without_message_key_keeps_the_before_image() -> None:
    """A keyless delete keeps its before image for the lake to take the key from."""
    decoded = decode(envelope("d", before={"id": 3, "v": None}), seq=1)
    expected = [(Op.DELETE, (), None, {"id": 3, "v": None})]
    actual = [(e.op, e.pk, e.key, e.row) for e in decoded.events]
    assert expected == actual


# --- the unavailable-value placeholder --------------------------------------------------

PLACEHOLDER_B64 = base64.b64encode(b"__debezium_unavailable_value").decode()


@pytest.mark.parametrize(
    "form",
    [
        "__debezium_unavailable_value",  # text, json, jsonb (PostgresValueConverter.convertString)
        PLACEHOLDER_B64,  # bytea, bytes mode (convertBinaryToBytes → getToastPlaceholderBinary)
        ["__debezium_unavailable_value"],  # text[] (UNCHANGED_TEXT_ARRAY_TOAST_VALUE)
        [PLACEHOLDER_B64],  # bytea[] (UNCHANGED_BINARY_ARRAY_TOAST_VALUE)
        list(b"__debezium_unavailable_value"),  # int[]/bigint[]: the placeholder's bytes
        ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"],  # uuid[]: UUID.nameUUIDFromBytes
        {"__debezium_unavailable_value": "__debezium_unavailable_value"},  # hstore map
        '{"__debezium_unavailable_value":"__debezium_unavailable_value"}',  # hstore json mode
    ],
)
def test_unavailable_placeholder_is_removed_and_listed(form: Any) -> None:
    """UnchangedToastedPlaceholder's forms of __debezium_unavailable_value: the column leaves
    the after image and is listed in ``unchanged`` (the lake keeps its stored value)."""
    raw = envelope("u", after={"id": 1, "n": 2, "note": form}, source=PG_SOURCE)
    event = decode(raw, seq=1).events[0]
    expected = ({"id": 1, "n": 2}, ("note",))
    actual = (event.after, event.unchanged)
    assert expected == actual


def test_placeholder_uuid_is_name_uuid_from_bytes() -> None:
    """The uuid[] form is Java's UUID.nameUUIDFromBytes (MD5, version 3) of the placeholder."""
    import hashlib
    import uuid

    digest = hashlib.md5(b"__debezium_unavailable_value", usedforsecurity=False).digest()
    expected = "b68a35a7-17ad-35b3-af2a-ae46edb4545a"
    actual = str(uuid.UUID(bytes=digest, version=3))
    assert expected == actual


# --- flattened namespace ------------------------------------------------------------------


def test_flattened_namespace_comes_from_the_subject() -> None:
    """add.fields=op,table,lsn,source.ts_ms names no database: the subject
    <topic.prefix>.<schema>.<table> gives it (the prefix may hold dots)."""
    raw = orjson.dumps({"id": 1, "__op": "c", "__table": "orders", "__lsn": 5})
    decoded = decode(raw, seq=1, subject="cdc.pg.main.public.orders")
    expected = [("public.orders", Position((5, 0)), "debezium-postgresql")]
    actual = [(e.table_id, e.position, e.source) for e in decoded.events]
    assert expected == actual


def test_flattened_schema_field_wins_over_db() -> None:
    """PostgreSQL: __schema (the namespace) is preferred to __db (the database name)."""
    raw = orjson.dumps({"id": 1, "__op": "c", "__db": "postgres", "__schema": "s", "__table": "t"})
    expected = ["s.t"]
    actual = [e.table_id for e in decode(raw, seq=1).events]
    assert expected == actual


def test_flattened_without_namespace_names_the_fix() -> None:
    """No namespace field and no usable subject: the reason says what to add."""
    raw = orjson.dumps({"id": 1, "__op": "c", "__table": "t"})
    with pytest.raises(DecodeError) as info:
        decode(raw, seq=1, subject="cdc")
    expected = True
    actual = "add.fields=db,table" in info.value.reason and "<topic.prefix>" in info.value.reason
    assert expected == actual, info.value.reason


# --- positions -----------------------------------------------------------------------------


def test_postgres_snapshot_rows_order_before_the_first_streamed_change() -> None:
    """SourceInfo.sequence of a snapshot row is [lastCommitLsn|null, <LSN the snapshot
    started at>] (PostgresSnapshotChangeEventSource.updateOffsetForSnapshot); the lsn part
    becomes 0 so every change streamed after it — even one whose LSN lies before the slot's
    consistent point — sorts after. Incremental snapshot rows keep their position."""
    snap = dict(PG_SOURCE, snapshot="last", sequence='[null,"22116704"]', lsn=22116704)
    incremental = dict(PG_SOURCE, snapshot="incremental", sequence='["900","950"]', lsn=950)
    first_stream = dict(PG_SOURCE, snapshot="false", sequence='[null,"22116600"]', lsn=22116600)
    positions = [
        decode(envelope(op, after={"id": 1}, source=src), seq=1).events[0].position
        for op, src in (("r", snap), ("r", incremental), ("c", first_stream))
    ]
    expected = [Position((0, 0, 0)), Position((900, 950, 0)), Position((0, 22116600, 0))]
    actual = positions
    assert expected == actual


def test_mariadb_connector_positions_by_binlog() -> None:
    """connector "mariadb" (MariaDbConnector) carries file/pos/row like MySQL's."""
    source = dict(MYSQL_SOURCE, connector="mariadb", file="binlog.000001", pos=6446, row=0)
    expected = [(Position((1, 6446, 0, 0)), "debezium-mariadb")]
    actual = [
        (e.position, e.source)
        for e in decode(envelope("c", after={"id": 1}, source=source), seq=1).events
    ]
    assert expected == actual


def test_flattened_snapshot_row_orders_first() -> None:
    """A flattened r row (no snapshot field: the initial snapshot) gets lsn 0; __snapshot
    "incremental" keeps the real one."""
    base = {"id": 1, "__op": "r", "__schema": "s", "__table": "t", "__lsn": 77}
    rows = [base, {**base, "__snapshot": "incremental"}, {**base, "__op": "c"}]
    expected = [Position((0, 0)), Position((77, 0)), Position((77, 0))]
    actual = [decode(orjson.dumps(r), seq=1).events[0].position for r in rows]
    assert expected == actual


# --- value_text: one schemaless value → canal-json text -------------------------------------


@pytest.mark.parametrize(
    ("value", "source_type", "connector", "text"),
    [
        # JdbcValueConverters.schemaBuilder: SMALLINT/INTEGER/BIGINT → int16/int32/int64
        (-32768, "smallint", "postgresql", "-32768"),
        (-9223372036854775808, "bigint", "postgresql", "-9223372036854775808"),
        # BinlogValueConverters.converter: BIGINT UNSIGNED in the default
        # bigint.unsigned.handling.mode=long is convertBigInt, a Java long: 2^64-1 arrives as -1
        (-1, "bigint(20) unsigned", "mariadb", "18446744073709551615"),
        (4294967295, "int unsigned", "mysql", "4294967295"),  # convertUnsignedInt → int64
        # SpecialValueDecimal.builder(PRECISE): Decimal, base64 two's-complement unscaled
        ("40Fm5ew=", "numeric(12,2)", "postgresql", "-1234567890.12"),
        ("HgK8HpeFi9xsuVBY80JNfTp/7HsD4maOPwrS", "decimal(65,30)", "mariadb",
         "12345678901234567890123456789012345.123456789012345678901234567890"),
        # PostgresValueConverter.numericSchema: unconstrained numeric is VariableScaleDecimal
        ({"scale": 21, "value": "/w=="}, "numeric", "postgresql", "-0.000000000000000000001"),
        # PostgresValueConverter.moneySchema: Decimal of scale money.fraction.digits (2)
        ("AeJA", "money", "postgresql", "1234.56"),
        # float32/float64; Jackson writes non-finite doubles as strings
        (3.14159, "real", "postgresql", "3.14159"),
        (1e300, "double precision", "postgresql", "1e+300"),
        ("NaN", "real", "postgresql", "NaN"),
        ("-Infinity", "double", "mysql", "-Infinity"),
        (True, "boolean", "postgresql", "1"),
        # JdbcValueConverters.schemaBuilder: BIT(1) is a boolean, BIT(n) Bits; convertBits
        # reverses the binlog's big-endian bytes to little-endian
        (True, "bit(1)", "mariadb", "1"),
        ("qgo=", "bit(12)", "mariadb", "2730"),
        (1, "tinyint(1)", "mariadb", "1"),
        (2024, "year", "mariadb", "2024"),  # Year: int32
        # io.debezium.time.Date: epoch days
        (19782, "date", "postgresql", "2024-02-29"),
        (-354285, "date", "mariadb", "1000-01-01"),
        # TemporalPrecisionMode.ADAPTIVE (PostgreSQL): time(p≤3) → Time (ms), else MicroTime
        (49556123456, "time without time zone", "postgresql", "13:45:56.123456"),
        (49556500, "time(1) without time zone", "postgresql", "13:45:56.5"),
        # ADAPTIVE_TIME_MICROSECONDS (MySQL default): MicroTime, negative and over 24 h allowed
        (-3020399000000, "time(6)", "mariadb", "-838:59:59.000000"),
        (1, "time(6)", "mariadb", "00:00:00.000001"),
        # Timestamp (p≤3, ms) / MicroTimestamp (p≤6, µs), the wall clock
        (1709214356789, "timestamp(3) without time zone", "postgresql", "2024-02-29 13:45:56.789"),
        (1709214356123456, "timestamp without time zone", "postgresql",
         "2024-02-29 13:45:56.123456"),
        (-1, "timestamp(3) without time zone", "postgresql", "1969-12-31 23:59:59.999"),
        (1709214356000, "datetime", "mariadb", "2024-02-29 13:45:56"),
        (253402300799999999, "datetime(6)", "mariadb", "9999-12-31 23:59:59.999999"),
        # ZonedTimestamp: ISO-8601 with offset → UTC wall clock
        ("2024-02-29T11:45:56.123456Z", "timestamp with time zone", "postgresql",
         "2024-02-29 11:45:56.123456"),
        ("2024-02-29T13:45:56.789Z", "timestamp(3)", "mariadb", "2024-02-29 13:45:56.789"),
        ("11:45:56.5Z", "time with time zone", "postgresql", "11:45:56.5Z"),  # ZonedTime as sent
        # MicroDuration: µs with a month of 365.25/12 days (MicroDuration.durationMicros)
        (37091106789000, "interval", "postgresql", "429 days 07:05:06.789"),
        (-86401000000, "interval", "postgresql", "-1 days -00:00:01"),
        # binary.handling.mode=bytes: base64; BINARY(n) right-padded by normalizeBinaryData
        ("AP8Q", "bytea", "postgresql", "\\x00ff10"),
        ("AP8QAA==", "binary(4)", "mariadb", "\x00\xff\x10\x00"),
        ("", "blob", "mariadb", ""),
        ("happy", "mood", "postgresql", "happy"),  # Enum: the label
        ("a,c", "set('a','b','c')", "mariadb", "a,c"),  # EnumSet: the label list
        ('{"a": 1}', "jsonb", "postgresql", '{"a": 1}'),
        ([1, 2, 3], "integer[]", "postgresql", "[1,2,3]"),
        (["x", "y z", None], "text[]", "postgresql", '["x","y z",null]'),
        (None, "numeric(12,2)", "postgresql", None),
    ],
)  # fmt: skip
def test_value_text_follows_debeziums_default_encodings(
    value: Any, source_type: str, connector: str, text: str | None
) -> None:
    """Each raw JsonConverter value, with the column's catalog type, gives canal-json text;
    the comment above each case names the Debezium converter it rests on."""
    from tidelake.formats.debezium import value_text

    expected = text
    actual = value_text(value, source_type, connector)
    assert expected == actual


@pytest.mark.parametrize(
    ("value", "source_type", "reason"),
    [
        ("40Fm5ew=", "numeric", "needs its scale"),
        ("40Fm5ew=", "decimal", "needs its scale"),
        ("x", "integer", "expected a JSON integer"),
        ("!!", "bytea", "not base64"),
        ("2024-02-29 13:45", "timestamp with time zone", "not an ISO-8601 timestamp"),
        (1.5, "date", "epoch days"),
    ],
)
def test_value_text_refuses_what_it_cannot_read(value: Any, source_type: str, reason: str) -> None:
    """value_text raises ValueError naming what is missing (the lake dead-letters on it)."""
    from tidelake.formats.debezium import value_text

    with pytest.raises(ValueError, match=reason):
        value_text(value, source_type, "postgresql")


# --- real Debezium Server 3.6.0 output (tests/fixtures/debezium_server) ----------------------

FIXTURES = Path(__file__).parents[2] / "fixtures" / "debezium_server"
#: The captured tables' columns as the catalogs spell them (tests/integration/debezium_server/
#: dbzkit.py PG_SCHEMA, MARIADB_SCHEMA). MariaDB TIME(6) is given without fsp: the typed path
#: does not know it either, so both paths drop trailing zeros alike.
CATALOG = {
    "postgresql": {
        "id": "integer", "c_smallint": "smallint", "c_integer": "integer", "c_bigint": "bigint",
        "c_numeric": "numeric(12,2)", "c_numeric_free": "numeric", "c_real": "real",
        "c_double": "double precision", "c_boolean": "boolean", "c_char": "character(5)",
        "c_varchar": "character varying(40)", "c_text": "text", "c_bytea": "bytea",
        "c_date": "date", "c_time": "time without time zone", "c_timetz": "time with time zone",
        "c_timestamp3": "timestamp(3) without time zone",
        "c_timestamp": "timestamp without time zone",
        "c_timestamptz": "timestamp with time zone", "c_interval": "interval", "c_uuid": "uuid",
        "c_json": "json", "c_jsonb": "jsonb", "c_int_array": "integer[]",
        "c_text_array": "text[]", "c_inet": "inet", "c_mood": "mood", "c_money": "money",
        "name": "text", "balance": "numeric(12,2)", "n": "integer", "note": "text",
        "a": "integer", "b": "character varying(10)", "v": "integer",
    },
    "mariadb": {
        "id": "int(11)", "c_tinyint": "tinyint(4)", "c_bool": "tinyint(1)",
        "c_smallint": "smallint(6)", "c_mediumint": "mediumint(9)", "c_int": "int(11)",
        "c_int_u": "int(10) unsigned", "c_bigint": "bigint(20)",
        "c_bigint_u": "bigint(20) unsigned", "c_dec": "decimal(12,2)",
        "c_dec_wide": "decimal(65,30)", "c_float": "float", "c_double": "double",
        "c_bit1": "bit(1)", "c_bit12": "bit(12)", "c_char": "char(5)", "c_varchar": "varchar(40)",
        "c_text": "text", "c_binary": "binary(4)", "c_varbinary": "varbinary(16)",
        "c_blob": "blob", "c_date": "date", "c_datetime": "datetime(6)", "c_datetime0": "datetime",
        "c_timestamp": "timestamp(3)", "c_time": "time", "c_year": "year(4)",
        "c_enum": "enum('small','medium','large')", "c_set": "set('a','b','c')",
        "c_json": "longtext", "name": "varchar(64)", "balance": "decimal(12,2)",
        "a": "int(11)", "b": "varchar(10)", "v": "int(11)",
    },
}  # fmt: skip


def _captured(name: str) -> list[tuple[bytes, str]]:
    """The messages of one capture, each with the subject it was published on."""
    messages = (FIXTURES / name / "messages.jsonl").read_bytes().splitlines()
    envelopes = (FIXTURES / name / "envelope.jsonl").read_bytes().splitlines()
    return [(m, orjson.loads(e)["subject"]) for m, e in zip(messages, envelopes, strict=True)]


def _row_messages(name: str) -> list[tuple[bytes, str]]:
    """The row-change messages (MariaDB's schema-change messages carry no op)."""
    out = []
    for message, subject in _captured(name):
        obj = orjson.loads(message)
        payload = obj.get("payload", obj)
        if "op" in payload:
            out.append((message, subject))
    return out


@pytest.mark.parametrize("capture", ["postgres-plain", "postgres-schemas", "mariadb-plain",
                                     "mariadb-schemas"])  # fmt: skip
def test_every_captured_row_message_decodes_keyless(capture: str) -> None:
    """Every row message Debezium Server 3.6.0 published decodes without a key: pk=(), the
    encoding says whether values are typed, positions never go backwards."""
    events = [
        e for seq, (m, subj) in enumerate(_row_messages(capture), 1)
        for e in decode(m, seq=seq, subject=subj).events
    ]  # fmt: skip
    by_table: dict[str, list[Position]] = {}
    for e in events:
        by_table.setdefault(e.table_id, []).append(e.position)
    encoding = "" if capture.endswith("schemas") else "debezium-json"
    expected = (True, {()}, {encoding}, True)
    actual = (
        len(events) > 20,
        {e.pk for e in events},
        {e.encoding for e in events},
        all(p == sorted(p) for p in by_table.values()),
    )
    assert expected == actual


@pytest.mark.parametrize(("connector", "plain", "typed"),
                         [("postgresql", "postgres-plain", "postgres-schemas"),
                          ("mariadb", "mariadb-plain", "mariadb-schemas")])  # fmt: skip
def test_typed_values_equal_value_text_of_the_schemaless_capture(
    connector: str, plain: str, typed: str
) -> None:
    """The same SQL captured with and without schemas: every typed value equals value_text of
    the schemaless value given the catalog type — the two decoding paths agree."""
    from tidelake.formats.debezium import value_text

    catalog = CATALOG[connector]
    plain_rows = [
        e.row for m, s in _row_messages(plain) for e in decode(m, seq=1, subject=s).events
    ]
    typed_rows = [
        e.row for m, s in _row_messages(typed) for e in decode(m, seq=1, subject=s).events
    ]
    # BIGINT UNSIGNED is a plain int64 in the schema (bigint.unsigned.handling.mode=long):
    # nothing in a typed message says the -1 is 2^64-1, only the catalog type does.
    wrapped = {"c_bigint_u"}
    expected = [
        None if row is None else {c: v for c, v in row.items() if c not in wrapped}
        for row in typed_rows
    ]
    actual = [
        None
        if row is None
        else {c: value_text(v, catalog[c], connector) for c, v in row.items() if c not in wrapped}
        for row in plain_rows
    ]
    assert expected == actual


def test_captured_toast_placeholder_is_unchanged() -> None:
    """postgres-plain: the updates of toasted.n leave note unchanged (REPLICA IDENTITY
    DEFAULT): note is not in the row and is listed in unchanged."""
    events = [e for m, s in _row_messages("postgres-plain") for e in decode(m, seq=1).events]
    toasted = [(e.op, e.row, e.unchanged) for e in events if e.table == "toasted"]
    expected = [
        (Op.UPDATE, {"id": 1, "n": 1}, ("note",)),
        (Op.UPDATE, {"id": 2, "n": 7}, ("note",)),
    ]
    actual = [t for t in toasted if t[2]]
    assert expected == actual


def test_captured_snapshot_orders_before_streaming() -> None:
    """postgres-plain: every snapshot row is (0, 0, 0); the first streamed change
    [null,"22116840"] is (0, 22116840, 0); MariaDB snapshot rows share binlog.000001:5612."""
    pg = [e.position for m, s in _row_messages("postgres-plain") for e in decode(m, seq=1).events]
    maria = [e.position for m, s in _row_messages("mariadb-plain") for e in decode(m, seq=1).events]
    expected = (Position((0, 0, 0)), Position((0, 22116840, 0)), Position((1, 5612, 0, 0)))
    actual = (pg[0], min(p for p in pg if p != pg[0]), maria[0])
    assert expected == actual
