"""TiCDC canal-json and tidelake's own capture output decode into the one event model."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tidelake.errors import DecodeError
from tidelake.events import Op, Position
from tidelake.formats import decode

COMMIT_TS = (1714929186000 << 18) + 3
TYPES = {"id": "bigint", "v": "varchar(8)"}


def message(kind: str = "INSERT", **fields: Any) -> bytes:
    """A TiCDC canal-json message with the TiDB extension; ``fields`` override."""
    m: dict[str, Any] = {
        "id": 0,
        "database": "shop",
        "table": "t",
        "pkNames": ["id"],
        "isDdl": False,
        "type": kind,
        "es": 1714929186000,
        "ts": 1714929186009,
        "sql": "",
        "sqlType": {"id": -5, "v": 12},
        "mysqlType": TYPES,
        "data": [{"id": "1", "v": "a"}],
        "old": None,
        "_tidb": {"commitTs": COMMIT_TS},
    }
    m.update(fields)
    return orjson.dumps({k: v for k, v in m.items() if v != "<absent>"})


def test_insert_is_one_event_per_row_with_tidb_position() -> None:
    """Each row of data is an INSERT at (commitTs, seq, 2*row), values kept as text."""
    decoded = decode(message(data=[{"id": "1", "v": "a"}, {"id": "2", "v": None}]), seq=9)
    expected = [
        (Op.INSERT, Position((COMMIT_TS, 9, 0)), {"id": "1"}, {"id": "1", "v": "a"}, "tidb"),
        (Op.INSERT, Position((COMMIT_TS, 9, 2)), {"id": "2"}, {"id": "2", "v": None}, "tidb"),
    ]
    actual = [(e.op, e.position, e.key, e.after, e.source) for e in decoded.events]
    assert expected == actual


def test_event_metadata_comes_from_commit_ts_not_es() -> None:
    """commit_ts_ms is commitTs >> 18; types are mysqlType; the format is named; seq is set."""
    decoded = decode(message(es=1, ts=2), seq=4)
    event = decoded.events[0]
    expected = ("canal-json", 1714929186000, TYPES, ("id",), "shop.t", 4)
    actual = (
        decoded.format,
        event.commit_ts_ms,
        event.column_types,
        event.pk,
        event.table_id,
        event.seq,
    )
    assert expected == actual


def test_update_before_image_overlays_old_values() -> None:
    """canal-json's old holds only changed columns: before = data row overlaid with old."""
    decoded = decode(message("UPDATE", data=[{"id": "1", "v": "b"}], old=[{"v": "a"}]), seq=1)
    expected = [(Op.UPDATE, {"id": "1", "v": "a"}, {"id": "1", "v": "b"})]
    actual = [(e.op, e.before, e.after) for e in decoded.events]
    assert expected == actual


def test_update_of_primary_key_is_delete_then_update() -> None:
    """A key change in old splits into DELETE(old key) then UPDATE(new key), ordered."""
    decoded = decode(message("UPDATE", data=[{"id": "2", "v": "a"}], old=[{"id": "1"}]), seq=5)
    expected = [
        (Op.DELETE, {"id": "1"}, {"id": "1", "v": "a"}, Position((COMMIT_TS, 5, 0))),
        (Op.UPDATE, {"id": "2"}, {"id": "2", "v": "a"}, Position((COMMIT_TS, 5, 1))),
    ]
    actual = [(e.op, e.key, e.row, e.position) for e in decoded.events]
    assert expected == actual


def test_old_with_unchanged_key_value_is_no_split() -> None:
    """A pk column repeated in old with the same value is a plain UPDATE."""
    decoded = decode(
        message("UPDATE", data=[{"id": "1", "v": "b"}], old=[{"id": "1", "v": "a"}]), seq=1
    )
    expected = [Op.UPDATE]
    actual = [e.op for e in decoded.events]
    assert expected == actual


def test_split_positions_sort_before_the_next_row() -> None:
    """Split halves of row 0 sort between row 0's place and row 1's."""
    decoded = decode(
        message(
            "UPDATE",
            data=[{"id": "2", "v": "a"}, {"id": "3", "v": "b"}],
            old=[{"id": "1"}, {"v": "a"}],
        ),
        seq=5,
    )
    positions = [e.position for e in decoded.events]
    expected = [(Op.DELETE, 0), (Op.UPDATE, 1), (Op.UPDATE, 2)]
    actual = [(e.op, e.position.parts[-1]) for e in decoded.events]
    assert expected == actual
    assert sorted(positions) == positions


def test_delete_keeps_the_deleted_row_as_before() -> None:
    """A DELETE's key and before image are the deleted row."""
    decoded = decode(message("DELETE"), seq=1)
    expected = [(Op.DELETE, {"id": "1"}, {"id": "1", "v": "a"}, None)]
    actual = [(e.op, e.key, e.before, e.after) for e in decoded.events]
    assert expected == actual


@pytest.mark.parametrize(
    "kind", ["CREATE", "ALTER", "ERASE", "TRUNCATE", "RENAME", "CINDEX", "DINDEX", "QUERY"]
)
def test_every_ddl_type_is_one_ddl_event(kind: str) -> None:
    """Each TiCDC DDL type is one DDL event carrying the statement and its type."""
    sql = f"{kind} something"
    raw = message(kind, isDdl=True, pkNames=None, mysqlType=None, sqlType=None, data=None, sql=sql)
    decoded = decode(raw, seq=3)
    expected = [(Op.DDL, sql, kind, Position((COMMIT_TS, 3, 0)), "shop.t")]
    actual = [(e.op, e.ddl, e.ddl_type, e.position, e.table_id) for e in decoded.events]
    assert expected == actual


def test_database_level_ddl_has_an_empty_table() -> None:
    """CREATE DATABASE names no table: the event's table is empty."""
    raw = message("QUERY", isDdl=True, table="", data=None, sql="CREATE DATABASE shop")
    expected = [("shop", "")]
    actual = [(e.database, e.table) for e in decode(raw, seq=1).events]
    assert expected == actual


def test_watermark_is_skipped() -> None:
    """TIDB_WATERMARK carries no rows: skipped with reason "watermark"."""
    raw = message("TIDB_WATERMARK", database="", table="", pkNames=None, data=None,
                  _tidb={"watermarkTs": COMMIT_TS})  # fmt: skip
    expected: tuple[list[object], str, str] = ([], "watermark", "canal-json")
    decoded = decode(raw, seq=1)
    actual = (decoded.events, decoded.skipped, decoded.format)
    assert expected == actual


def test_without_tidb_extension_position_falls_back_to_sequence() -> None:
    """Plain canal-json: position (0, seq, 2*row), commit time from es, source "canal"."""
    decoded = decode(message(_tidb="<absent>", es=1714929186123), seq=42)
    expected = [(Position((0, 42, 0)), 1714929186123, "canal")]
    actual = [(e.position, e.commit_ts_ms, e.source) for e in decoded.events]
    assert expected == actual


def test_tidelake_extension_position_is_used_as_is() -> None:
    """Our capture's _tidelake.position is the event position, with its source and time."""
    given = Position((3, 1234, 0))
    ext = {"position": given.encode(), "source": "mysql", "commit_ts_ms": 1700000000000}
    decoded = decode(message(_tidb="<absent>", _tidelake=ext), seq=8)
    expected = [(given, "mysql", 1700000000000, 8)]
    actual = [(e.position, e.source, e.commit_ts_ms, e.seq) for e in decoded.events]
    assert expected == actual


def test_tidelake_extension_multi_row_appends_row_index() -> None:
    """Several rows under one given position get the row index appended."""
    ext = {"position": Position((3, 1234)).encode(), "source": "postgres", "commit_ts_ms": 1}
    data = [{"id": "1", "v": "a"}, {"id": "2", "v": "b"}]
    decoded = decode(message(_tidb="<absent>", _tidelake=ext, data=data), seq=8)
    expected = [Position((3, 1234, 0)), Position((3, 1234, 1))]
    actual = [e.position for e in decoded.events]
    assert expected == actual


def test_tidelake_extension_key_change_orders_delete_first() -> None:
    """A key change under a given position: DELETE at p, UPDATE at p + (1,)."""
    ext = {"position": Position((3, 1234, 0)).encode(), "source": "mysql", "commit_ts_ms": 1}
    raw = message("UPDATE", _tidb="<absent>", _tidelake=ext, data=[{"id": "2", "v": "a"}],
                  old=[{"id": "1"}])  # fmt: skip
    expected = [(Op.DELETE, Position((3, 1234, 0))), (Op.UPDATE, Position((3, 1234, 0, 1)))]
    actual = [(e.op, e.position) for e in decode(raw, seq=1).events]
    assert expected == actual


def test_binary_value_is_kept_as_iso_8859_1_text() -> None:
    """A varbinary value stays the ISO-8859-1 text TiCDC sent (converted later by the lake)."""
    text = bytes([0, 0x80, 0xFF]).decode("latin-1")
    decoded = decode(message(data=[{"id": "1", "v": text}]), seq=1)
    expected = bytes([0, 0x80, 0xFF])
    actual = decoded.events[0].after["v"].encode("latin-1")  # type: ignore[index]
    assert expected == actual


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"pkNames": None}, "no primary key"),
        ({"pkNames": []}, "no primary key"),
        ({"data": [{"id": None, "v": "a"}]}, "NULL or missing primary key column 'id'"),
        ({"data": [{"v": "a"}]}, "NULL or missing primary key column 'id'"),
        ({"data": {"id": "1"}}, "data must be a list"),
        ({"data": [{"id": 1}]}, "must be a string or null"),
        ({"data": None}, "data is missing"),
        ({"database": None}, "missing database name"),
        ({"table": ""}, "missing table name"),
        ({"type": "UPSERT"}, "unknown message type"),
        ({"type": 5}, "type must be a string"),
        ({"_tidb": {"commitTs": -1}}, "commitTs must be a non-negative integer"),
        ({"_tidb": {"commitTs": "1"}}, "commitTs must be a non-negative integer"),
        ({"_tidelake": {"position": "x.y"}}, "_tidelake.position"),
        ({"mysqlType": {"id": 5}}, "mysqlType values must be strings"),
        ({"isDdl": "no"}, "isDdl must be a boolean"),
    ],
)
def test_malformed_message_is_a_decode_error_with_reason(
    fields: dict[str, Any], reason: str
) -> None:
    """Each malformation raises DecodeError whose reason says what is wrong."""
    with pytest.raises(DecodeError) as info:
        decode(message(**fields), seq=1)
    expected = True
    actual = reason in info.value.reason
    assert expected == actual, info.value.reason


def test_update_with_mismatched_old_length_is_refused() -> None:
    """old must align with data row for row."""
    with pytest.raises(DecodeError) as info:
        decode(message("UPDATE", old=[{"v": "x"}, {"v": "y"}]), seq=1)
    expected = "canal-json: old has 2 rows but data has 1"
    actual = info.value.reason
    assert expected == actual


def test_ddl_without_sql_is_refused() -> None:
    """A DDL message must carry its statement."""
    with pytest.raises(DecodeError) as info:
        decode(message("ALTER", isDdl=True, sql="", data=None), seq=1)
    expected = "canal-json: DDL message ALTER without sql"
    actual = info.value.reason
    assert expected == actual
