"""The ``ticdc_*`` golden cases (messages as TiCDC's encoder writes them, see each case's
README.md and tools/ticdc-vectors/) decode into the events the source history implies."""

from __future__ import annotations

import orjson
import pytest

from golden import CASES_DIR, Case, load_case
from tidelake.events import ChangeEvent
from tidelake.formats import decode

CASES = [load_case(p) for p in sorted(CASES_DIR.glob("ticdc_*")) if p.is_dir()]
BY_NAME = {c.name: c for c in CASES}

#: One line per message or event: ``(op, table, key)`` for a row change,
#: ``("ddl", type, database, table)`` for a DDL, ``("skipped", reason)`` for a watermark.
Line = tuple[str, ...]


def _decode(case: Case) -> list[tuple[int, ChangeEvent | str]]:
    """(stream sequence, event or skip reason) in stream order."""
    out: list[tuple[int, ChangeEvent | str]] = []
    for seq, message in enumerate(case.messages, start=1):
        decoded = decode(message, seq=seq)
        if decoded.skipped is not None:
            out.append((seq, decoded.skipped))
        out.extend((seq, e) for e in decoded.events)
    return out


def _line(item: ChangeEvent | str) -> Line:
    if isinstance(item, str):
        return ("skipped", item)
    if item.ddl_type is not None:
        return ("ddl", item.ddl_type, item.database, item.table)
    assert item.key is not None
    return (item.op.value, item.table_id, *(item.key[c] for c in item.pk))


def _events(case: Case) -> list[ChangeEvent]:
    return [e for _, e in _decode(case) if isinstance(e, ChangeEvent)]


EXPECTED_LINES: dict[str, list[Line]] = {
    "ticdc_binary_strings": [
        ("ddl", "CREATE", "shop", "blobs"),
        ("insert", "shop.blobs", "1"),
        ("insert", "shop.blobs", "2"),
    ],
    "ticdc_bit": [
        ("ddl", "CREATE", "shop", "flags"),
        ("insert", "shop.flags", "1"),
        ("insert", "shop.flags", "2"),
        ("insert", "shop.flags", "3"),
    ],
    "ticdc_composite_key_order": [
        ("ddl", "CREATE", "shop", "order_lines"),
        ("insert", "shop.order_lines", "10", "1"),
        ("insert", "shop.order_lines", "10", "2"),
        ("insert", "shop.order_lines", "11", "1"),
        ("update", "shop.order_lines", "10", "2"),
        ("delete", "shop.order_lines", "11", "1"),
    ],
    "ticdc_create_database": [
        ("ddl", "QUERY", "analytics", ""),
        ("ddl", "QUERY", "tmpdb", ""),
        ("ddl", "QUERY", "tmpdb", ""),
    ],
    "ticdc_ddl_add_column_default": [
        ("ddl", "CREATE", "shop", "items"),
        ("insert", "shop.items", "1"),
        ("insert", "shop.items", "2"),
        ("ddl", "ALTER", "shop", "items"),
        ("insert", "shop.items", "3"),
        ("update", "shop.items", "1"),
    ],
    "ticdc_ddl_drop_table": [
        ("ddl", "CREATE", "shop", "doomed"),
        ("ddl", "CREATE", "shop", "kept"),
        ("insert", "shop.doomed", "1"),
        ("insert", "shop.kept", "1"),
        ("ddl", "ERASE", "shop", "doomed"),
    ],
    "ticdc_ddl_index_and_view": [
        ("ddl", "CREATE", "shop", "notes"),
        ("insert", "shop.notes", "1"),
        ("ddl", "CINDEX", "shop", "notes"),
        ("insert", "shop.notes", "2"),
        ("ddl", "DINDEX", "shop", "notes"),
        ("ddl", "QUERY", "shop", "notes_a"),
        ("update", "shop.notes", "2"),
    ],
    "ticdc_ddl_rename": [
        ("ddl", "CREATE", "shop", "old_name"),
        ("insert", "shop.old_name", "1"),
        # The message names the table after the rename (the DDL event's TableInfo).
        ("ddl", "RENAME", "shop", "new_name"),
        ("insert", "shop.new_name", "2"),
        ("update", "shop.new_name", "1"),
    ],
    "ticdc_ddl_truncate": [
        ("ddl", "CREATE", "shop", "scratch"),
        ("insert", "shop.scratch", "1"),
        ("insert", "shop.scratch", "2"),
        ("ddl", "TRUNCATE", "shop", "scratch"),
        ("insert", "shop.scratch", "2"),
    ],
    "ticdc_decimal_default_mysqltype": [
        ("ddl", "CREATE", "shop", "prices"),
        ("insert", "shop.prices", "1"),
        ("insert", "shop.prices", "2"),
        ("insert", "shop.prices", "3"),
        ("update", "shop.prices", "1"),
    ],
    "ticdc_drop_database": [
        ("ddl", "QUERY", "tmpdb", ""),
        ("ddl", "CREATE", "tmpdb", "a"),
        ("ddl", "CREATE", "tmpdb", "b"),
        ("ddl", "CREATE", "shop", "kept"),
        ("insert", "tmpdb.a", "1"),
        ("insert", "tmpdb.b", "1"),
        ("insert", "shop.kept", "1"),
        ("ddl", "QUERY", "tmpdb", ""),
    ],
    "ticdc_enum_set": [
        ("ddl", "CREATE", "shop", "parcels"),
        ("insert", "shop.parcels", "1"),
        ("insert", "shop.parcels", "2"),
        ("insert", "shop.parcels", "3"),
        ("insert", "shop.parcels", "4"),
        ("update", "shop.parcels", "2"),
    ],
    "ticdc_float_double": [
        ("ddl", "CREATE", "shop", "measures"),
        *[("insert", "shop.measures", k) for k in "1234"],
    ],
    "ticdc_json": [
        ("ddl", "CREATE", "shop", "docs"),
        *[("insert", "shop.docs", k) for k in "1234"],
    ],
    "ticdc_no_extension": [
        ("ddl", "CREATE", "shop", "plain"),
        ("insert", "shop.plain", "1"),
        ("insert", "shop.plain", "2"),
        ("update", "shop.plain", "1"),
        ("delete", "shop.plain", "2"),
        ("insert", "shop.plain", "3"),
        ("delete", "shop.plain", "1"),
    ],
    "ticdc_split_pk_update": [
        ("ddl", "CREATE", "shop", "accounts"),
        ("ddl", "CREATE", "shop", "tickets"),
        ("insert", "shop.accounts", "A1"),
        ("insert", "shop.accounts", "B1"),
        # One transaction: the key change split, then ordered DELETE < UPDATE < INSERT.
        ("delete", "shop.accounts", "A1"),
        ("update", "shop.accounts", "B1"),
        ("insert", "shop.accounts", "A2"),
        ("insert", "shop.tickets", "1"),
        ("delete", "shop.tickets", "1"),
        ("insert", "shop.tickets", "2"),
    ],
    "ticdc_split_uk_update": [
        ("ddl", "CREATE", "shop", "users"),
        ("insert", "shop.users", "1"),
        ("insert", "shop.users", "2"),
        # Unique-key changes split although the primary key stays: both halves, same key.
        ("delete", "shop.users", "1"),
        ("delete", "shop.users", "2"),
        ("insert", "shop.users", "1"),
        ("insert", "shop.users", "2"),
        ("update", "shop.users", "2"),
    ],
    "ticdc_table_before_changefeed": [
        ("insert", "shop.legacy", "1"),
        ("insert", "shop.legacy", "2"),
        ("update", "shop.legacy", "2"),
    ],
    "ticdc_time_year": [
        ("ddl", "CREATE", "shop", "shifts"),
        *[("insert", "shop.shifts", k) for k in "123"],
    ],
    "ticdc_timestamp_server_tz": [
        ("ddl", "CREATE", "shop", "visits"),
        ("insert", "shop.visits", "1"),
        ("insert", "shop.visits", "2"),
    ],
    "ticdc_undefined_type_dead_letter": [
        ("insert", "shop.mystery", "1"),
        ("insert", "shop.mystery_enum", "1"),
    ],
    "ticdc_unsigned_extremes": [
        ("ddl", "CREATE", "shop", "counters"),
        ("insert", "shop.counters", "18446744073709551615"),
        ("insert", "shop.counters", "9223372036854775807"),
    ],
    "ticdc_watermarks": [
        ("ddl", "CREATE", "shop", "stock"),
        ("skipped", "watermark"),
        ("insert", "shop.stock", "1"),
        ("skipped", "watermark"),
        ("update", "shop.stock", "1"),
        ("insert", "shop.stock", "2"),
        ("skipped", "watermark"),
        ("delete", "shop.stock", "2"),
        ("skipped", "watermark"),
    ],
}


def test_every_ticdc_case_is_checked_here() -> None:
    """Each ``tests/cases/ticdc_*`` directory has its decoded lines below, and vice versa."""
    expected = set(EXPECTED_LINES)
    actual = set(BY_NAME)
    assert expected == actual


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_decodes_to_the_source_history(case: Case) -> None:
    """Ops, tables, keys (in ``pkNames`` order), DDL types and skipped watermarks, in order."""
    expected = EXPECTED_LINES[case.name]
    actual = [_line(item) for _, item in _decode(case)]
    assert expected == actual


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_positions_follow_the_stream_and_never_repeat(case: Case) -> None:
    """Stream order is commit order: positions strictly increase, split halves included."""
    positions = [e.position for e in _events(case)]
    expected = (sorted(positions), len(positions))
    actual = (positions, len(set(positions)))
    assert expected == actual


@pytest.mark.parametrize("case", [c for c in CASES if c.name != "ticdc_no_extension"])
def test_extension_commit_time_is_the_tso_physical_part(case: Case) -> None:
    """With ``_tidb``, an event's commit time is ``commitTs >> 18``, which TiCDC also writes
    as ``es`` (convertToCanalTs)."""
    pairs: list[tuple[int, int | None]] = []
    for seq, message in enumerate(case.messages, start=1):
        obj = orjson.loads(message)
        pairs.extend((obj["es"], e.commit_ts_ms) for e in decode(message, seq=seq).events)
    expected = [(es, es) for es, _ in pairs]
    assert expected == pairs


def test_split_halves_share_the_commit_ts_delete_first() -> None:
    """A unique-key UPDATE arrives as DELETE (old image) then INSERT (new image), one commitTs."""
    events = [e for e in _events(BY_NAME["ticdc_split_uk_update"]) if e.op.value != "ddl"]
    first, second = events[2], events[4]
    expected = ("delete", "a@x", "insert", "c@x", True)
    actual = (
        first.op.value,
        first.before["email"] if first.before else None,
        second.op.value,
        second.after["email"] if second.after else None,
        first.commit_ts_ms == second.commit_ts_ms and first.position < second.position,
    )
    assert expected == actual


def test_composite_key_is_listed_in_column_order() -> None:
    """``pkNames`` follows the table's column order, not the PRIMARY KEY clause order."""
    case = BY_NAME["ticdc_composite_key_order"]
    ddl = next(e for e in _events(case) if e.ddl_type == "CREATE")
    rows = [e for e in _events(case) if e.ddl_type is None]
    expected = ({("order_id", "line_no")}, True)
    actual = ({e.pk for e in rows}, "PRIMARY KEY(`line_no`, `order_id`)" in (ddl.ddl or ""))
    assert expected == actual


def test_default_mysql_types_carry_no_parameters() -> None:
    """content-compatible=false: ``decimal``, ``enum``, ``set``, ``bit`` without parameters."""
    types: dict[str, str] = {}
    for name in ("ticdc_decimal_default_mysqltype", "ticdc_enum_set", "ticdc_bit"):
        for e in _events(BY_NAME[name]):
            types.update(e.column_types)
    expected = {"amount": "decimal", "status": "enum", "tags": "set", "b12": "bit"}
    actual = {k: types[k] for k in expected}
    assert expected == actual


def test_ddl_text_is_tidb_restored() -> None:
    """The DDL text is TiDB's restored SQL: back-quotes, charset introducers, special
    comments, and the session's unqualified table name kept as written."""
    add = next(
        e.ddl for e in _events(BY_NAME["ticdc_ddl_add_column_default"]) if e.ddl_type == "ALTER"
    )
    create = next(
        e.ddl for e in _events(BY_NAME["ticdc_split_pk_update"]) if e.ddl_type == "CREATE"
    )
    expected = (
        "ALTER TABLE `items` ADD COLUMN `label` VARCHAR(16) NOT NULL DEFAULT _UTF8MB4'new'",
        "CREATE TABLE `shop`.`accounts` (`code` VARCHAR(8) PRIMARY KEY "
        "/*T![clustered_index] NONCLUSTERED */,`owner` VARCHAR(16))",
    )
    actual = (add, create)
    assert expected == actual


def test_binary_values_are_one_character_per_byte() -> None:
    """VARBINARY bytes 0x00..0xff arrive as the ISO-8859-1 text of 256 characters."""
    row = _events(BY_NAME["ticdc_binary_strings"])[1].after
    assert row is not None
    expected = bytes(range(256))
    actual = str(row["vb"]).encode("latin-1")
    assert expected == actual
