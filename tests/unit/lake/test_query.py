"""The JVM-free query engine's planning (lake/query.py): which tables a statement reads, which
the lake holds, and the refusal of an unknown one, before any table is read."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tidelake.config import load_config
from tidelake.lake.query import QueryError, known_tables, referenced_tables, run_duckdb


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT count(*) FROM shop.orders", [("shop", "orders")]),
        # A CTE's name is no table; the table inside it is.
        ("WITH x AS (SELECT * FROM shop.orders) SELECT * FROM x JOIN shop.items i ON true",
         [("shop", "orders"), ("shop", "items")]),
        ("SELECT (SELECT max(id) FROM shop.a) FROM shop.b WHERE id IN (SELECT id FROM shop.c)",
         [("shop", "a"), ("shop", "b"), ("shop", "c")]),
        ('SELECT * FROM "my db"."T.x", shop.a, shop.a', [("my db", "T.x"), ("shop", "a")]),
        ("DESCRIBE shop.orders", [("shop", "orders")]),
        # Not serialized by DuckDB: parsed by sqlglot instead.
        ("CREATE TEMP TABLE t AS SELECT * FROM shop.orders", [("shop", "orders")]),
        ("SELECT 1", []),
        ("SELECT * FROM orders", []),
    ],
)  # fmt: skip
def test_referenced_tables_are_the_qualified_tables_read(
    sql: str, expected: list[tuple[str, str]]
) -> None:
    """Every schema-qualified table, once, in order of appearance; CTEs and unqualified
    names are left to the engine."""
    with duckdb.connect(":memory:") as con:
        assert expected == referenced_tables(sql, con)


def _lake(home: Path, *tables: tuple[str, str]) -> None:
    for database, table in tables:
        hoodie = home / "lake" / database / table / ".hoodie"
        hoodie.mkdir(parents=True)
        (hoodie / "hoodie.properties").write_text("hoodie.table.name=x\n")


def test_known_tables_decode_the_lake_paths_and_skip_the_state_dir(tmp_path: Path) -> None:
    """``<lake>/<db>/<table>`` segments are decoded to source names; ``_tidelake`` (the
    ingest's state) is not a table."""
    _lake(tmp_path, ("shop", "orders"), ("my%20db", "T.x"), ("_tidelake", "state"))
    expected = ["my db.`T.x`", "shop.orders"]
    assert expected == known_tables(str(tmp_path / "lake"))


def test_an_unknown_table_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    """The refusal comes before any read, with the lake's tables listed."""
    _lake(tmp_path, ("shop", "orders"), ("shop", "items"))
    config = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    with pytest.raises(QueryError) as caught:
        run_duckdb(config, "SELECT * FROM shop.nosuch", 10)
    assert "unknown table shop.nosuch; known: shop.items, shop.orders" == str(caught.value)
