"""``tidelake query``'s two engines answer alike: DuckDB over hudi-rs (no JVM) and Spark SQL.

Same statements, same lake (DECIMAL, DATETIME/TIMESTAMP, DATE, binary, NULL, updates and
deletes; copy-on-write and merge-on-read), same rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from lakekit import Lake, event

from tidelake.lake.query import QueryError, run_duckdb, run_spark

TYPES = {
    "id": "bigint",
    "d": "decimal(38,10)",
    "amount": "decimal(10,2)",
    "s": "varchar(64)",
    "dt": "datetime",
    "ts": "timestamp",
    "day": "date",
    "b": "varbinary(16)",
}

STATEMENTS = [
    "SELECT id, d, amount, s, dt, ts, day, b FROM shop.types ORDER BY id",
    "SELECT count(*) AS n, sum(d) AS d_total, sum(amount) AS total, max(ts) AS last "
    "FROM shop.types",
    "SELECT t.id, t.amount, o.status FROM shop.types t JOIN shop.orders o ON o.id = t.id "
    "WHERE t.amount IS NOT NULL ORDER BY t.id",
    "SELECT status, count(*) AS n FROM shop.orders GROUP BY status ORDER BY status",
]


def _value(value: Any) -> Any:
    """One engine-independent form: instants in UTC, bytes as bytes."""
    if isinstance(value, dt.datetime):
        # PySpark gives TIMESTAMP as a naive local datetime, DuckDB a UTC-aware one.
        return value.astimezone(dt.UTC)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _build(lake: Lake) -> None:
    """Two tables; rows inserted, updated and deleted over two ingests."""
    full = {
        "d": "1234567890123456789012345678.0123456789",
        "amount": "12.50",
        "s": "héllo 🚀",
        "dt": "2024-05-05 12:34:56.123456",
        "ts": "2024-05-05 12:34:56",
        "day": "2024-02-29",
        "b": "\u0000\u00ffA",
    }
    lake.stage(
        [
            *(
                event(
                    "insert",
                    i,
                    10 + i,
                    i,
                    table="shop.types",
                    types=TYPES,
                    values={**full, "amount": f"{i}.25"},
                )
                for i in range(1, 5)
            ),
            event("insert", 5, 15, 5, table="shop.types", types=TYPES, values=dict.fromkeys(full)),
            *(
                event("insert", i, 20 + i, 10 + i, values={"status": "new", "amount": "1.00"})
                for i in range(1, 5)
            ),
        ]
    )
    lake.ingest()
    lake.stage(
        [
            event(
                "update",
                2,
                40,
                20,
                table="shop.types",
                types=TYPES,
                values={**full, "amount": "99.99", "ts": "2025-01-01 00:00:00"},
            ),
            event("delete", 3, 41, 21, table="shop.types", types=TYPES, values=full),
            event("update", 1, 42, 22, values={"status": "paid", "amount": "1.00"}),
            event("delete", 4, 43, 23, values={"status": "new", "amount": "1.00"}),
        ]
    )
    lake.ingest()


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_duckdb_and_spark_return_the_same_rows(
    lake_factory: Callable[..., Lake], table_type: str
) -> None:
    """Every statement gives equal rows through both engines, and the DuckDB rows are the
    ones expected (the update applied, the deletes gone, DECIMAL exact, NULLs kept)."""
    lake = lake_factory(TIDELAKE_LAKE__TABLE_TYPE=table_type)
    _build(lake)
    for sql in STATEMENTS:
        fast = run_duckdb(lake.config, sql, 100)
        slow = run_spark(lake.config, sql, 100, spark=lake.spark)
        expected = [tuple(_value(v) for v in row) for row in slow.rows]
        assert expected == [tuple(_value(v) for v in row) for row in fast.rows], sql
    rows = run_duckdb(lake.config, STATEMENTS[0], 100).rows
    expected_ids_amounts = [
        (1, Decimal("1.25")),
        (2, Decimal("99.99")),
        (4, Decimal("4.25")),
        (5, None),
    ]
    assert expected_ids_amounts == [(r[0], r[2]) for r in rows]
    assert Decimal("1234567890123456789012345678.0123456789") == rows[0][1]
    assert dt.datetime(2025, 1, 1, tzinfo=dt.UTC) == _value(rows[1][5])


def test_duckdb_reads_only_the_tables_a_statement_names(lake: Lake) -> None:
    """A table the statement does not name is not read: one the hudi-rs reader would refuse
    (schema-on-read evolution marker) does not stop a query of another table."""
    _build(lake)
    from pathlib import Path

    schema_dir = Path(lake.path("shop.types")) / ".hoodie" / ".schema"
    schema_dir.mkdir(parents=True, exist_ok=True)
    (schema_dir / "1_2.schemacommit").write_text("{}")
    result = run_duckdb(lake.config, "SELECT count(*) FROM shop.orders", 10)
    assert [(3,)] == result.rows
    with pytest.raises(QueryError, match="schema-on-read"):
        run_duckdb(lake.config, "SELECT count(*) FROM shop.types", 10)


def test_an_unknown_table_is_named_with_the_known_ones(lake: Lake) -> None:
    """``FROM shop.nosuch``: the error names it and lists the lake's tables."""
    _build(lake)
    with pytest.raises(QueryError) as caught:
        run_duckdb(lake.config, "SELECT * FROM shop.nosuch", 10)
    assert "unknown table shop.nosuch; known: shop.orders, shop.types" == str(caught.value)
