"""The PostgreSQL sink's pure DDL logic: which row changes a table's recorded positions let
through (and with which columns), and the value existing rows take for an added column."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.lake import ddl
from tidelake.route.change import RowChange
from tidelake.route.sinks.postgres import (
    _added_value,
    _database_of,
    _DdlRefusedError,
    _guard,
    _Marks,
    _op_tables,
    _schema_reason,
)

COLUMNS = {"id", "title", "_tl_position"}


def change(n: int, kind: str = "upsert", **row: Any) -> RowChange:
    """A change of ``shop.items`` key 1 at position ``n``."""
    return RowChange(
        table="shop.items",
        kind=kind,  # type: ignore[arg-type]
        key={"id": 1},
        row={"id": 1, **row} if kind == "upsert" else None,
        position=f"{n:05d}",
        seq=n,
    )


def test_a_change_below_the_cleared_position_is_skipped() -> None:
    """Upserts and deletes older than a truncate or drop are skipped, newer ones pass."""
    marks = _Marks(ddl="00010", cleared="00010")
    assert _guard(change(9, name="a"), marks, COLUMNS) is None
    assert _guard(change(9, "delete"), marks, COLUMNS) is None
    assert _guard(change(9, name="a"), marks, None) is None
    newer = change(10, title="a")
    assert _guard(newer, marks, COLUMNS) is newer


def test_a_change_older_than_the_ddl_keeps_only_the_tables_columns() -> None:
    """Below ddl_position a change cannot add back a column the DDL removed; at or above it
    a change brings every column it carries."""
    marks = _Marks(ddl="00010")
    old = _guard(change(5, name="a", title="t"), marks, COLUMNS)
    assert old is not None
    assert old.row == {"id": 1, "title": "t"}
    assert old.position == "00005"
    fits = change(5, title="t")
    assert _guard(fits, marks, COLUMNS) is fits
    newer = change(11, name="a")
    assert _guard(newer, marks, COLUMNS) is newer
    assert _guard(change(5, "delete"), marks, COLUMNS) is not None


def test_an_old_change_whose_key_column_is_gone_is_skipped() -> None:
    """A key column renamed by the DDL: an older change keyed by the old name is skipped."""
    marks = _Marks(ddl="00010")
    assert _guard(change(5, title="t"), marks, {"ref", "title"}) is None
    assert _guard(change(5, "delete"), marks, {"ref", "title"}) is None


def test_without_a_table_an_old_change_makes_it_whole() -> None:
    """No table (dropped by hand, or never made): the change is kept as it is."""
    old = change(5, name="a")
    assert _guard(old, _Marks(ddl="00010"), None) is old


def test_no_marks_let_everything_through() -> None:
    """A table without recorded positions guards nothing beyond the rows' own."""
    c = change(1, name="a")
    assert _guard(c, _Marks(), COLUMNS) is c


def spec(source_type: str, kind: str = "value", text: str | None = None) -> ddl.ColumnSpec:
    return ddl.ColumnSpec("c", source_type, ddl.Default(kind, text))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column", "column_type", "expected"),
    [
        (spec("int", text="5"), "integer", "5"),
        (spec("varchar(9)"), "text", None),
        (spec("decimal(8,3)", text="1.250"), "numeric(8,3)", "1.250"),
        (spec("json", text="null"), "jsonb", "null"),
        (spec("varbinary(4)", text="\x00\xff"), "bytea", b"\x00\xff"),
        (
            spec("timestamp", "current_timestamp"),
            "timestamp with time zone",
            "2024-05-29 16:26:40+00",
        ),
        (
            spec("datetime(3)", "current_timestamp"),
            "timestamp without time zone",
            "2024-05-29 16:26:40",
        ),
    ],
)
def test_the_value_existing_rows_take(
    column: ddl.ColumnSpec, column_type: str, expected: Any
) -> None:
    """The source's literal converted as row values are; the commit time to the second."""
    assert _added_value(column, column_type, 1_717_000_000_999) == expected


@pytest.mark.parametrize(
    ("column", "column_type", "ts", "match"),
    [
        (spec("varchar(36)", "expression", "uuid()"), "text", 1, "computed per row"),
        (spec("timestamp", "current_timestamp"), "timestamp with time zone", None, "commit time"),
        (spec("decimal(4,1)", text="1.25"), "numeric(4,1)", 1, "would round"),
        (spec("text", text="a\x00b"), "text", 1, "NUL"),
    ],
)
def test_a_value_the_sink_cannot_know_or_hold_is_refused(
    column: ddl.ColumnSpec, column_type: str, ts: int | None, match: str
) -> None:
    """A default computed per row, CURRENT_TIMESTAMP without a commit time, a value the
    column would round: refused, as the lake refuses what it cannot know."""
    with pytest.raises(_DdlRefusedError, match=match):
        _added_value(column, column_type, ts)


def test_the_tables_an_operation_names() -> None:
    """A rename names both tables, a database operation none."""
    a, b = ddl.TableName("shop", "a"), ddl.TableName("crm", "b")
    assert _op_tables(ddl.RenameTable(a, b)) == [a, b]
    assert _op_tables(ddl.DropColumn(a, "x")) == [a]
    assert _op_tables(ddl.DropDatabase("shop")) == []
    assert _op_tables(ddl.NoOp(None, "index")) == []


def test_the_database_of_a_source_table() -> None:
    assert _database_of("shop.items") == "shop"
    assert _database_of("`a.b`.c") == "a.b"
    assert _database_of(None) is None
    assert _database_of("nodot") is None


def test_a_refused_ddl_names_its_statement() -> None:
    """The reason says which message, which statement, and why."""
    c = RowChange(
        "shop.items", "schema", {}, None, "00001", 7, statement="ALTER TABLE items\n  DROP x"
    )
    assert _schema_reason(c, "no") == "seq 7 shop.items DDL 'ALTER TABLE items DROP x': no"
