"""The source catalog (``capture/catalog.py``) against real MariaDB and PostgreSQL servers:
column types as the server spells them, in column order, and the primary key in key order."""

from __future__ import annotations

import pytest

from tidelake.capture.catalog import CatalogUnavailableError, TableDefinition, read_catalog
from tidelake.capture.servers import MariaDBServer, PostgresServer

pytestmark = pytest.mark.integration


def test_mariadb_catalog_gives_column_types_and_key_order(mariadb: MariaDBServer) -> None:
    """``information_schema.COLUMNS.COLUMN_TYPE`` as is (display widths, unsigned, enum and
    set labels, bit width) and the key in the order of ``PRIMARY KEY (b, a)``, not of the
    columns; tables of two databases in one call; a missing table is left out."""
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE cat1")
        cur.execute("CREATE DATABASE cat2")
        cur.execute(
            "CREATE TABLE cat1.orders (a int, b varchar(10), amount decimal(12,2), "
            "state enum('new','paid','it''s'), tags set('x','y'), flags bit(12), "
            "n bigint unsigned, at datetime(3), PRIMARY KEY (b, a))"
        )
        cur.execute("CREATE TABLE cat2.plain (id bigint PRIMARY KEY, doc json, f float)")
        cur.execute("CREATE TABLE cat2.keyless (v text)")
    conn.close()
    got = read_catalog(
        f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        mariadb.password,
        ["cat1.orders", "cat2.plain", "cat2.keyless", "cat2.missing"],
    )
    assert {
        "cat1.orders": TableDefinition(
            {
                "a": "int(11)",
                "b": "varchar(10)",
                "amount": "decimal(12,2)",
                "state": "enum('new','paid','it''s')",
                "tags": "set('x','y')",
                "flags": "bit(12)",
                "n": "bigint(20) unsigned",
                "at": "datetime(3)",
            },
            ("b", "a"),
        ),
        # MariaDB's JSON is LONGTEXT: that is what information_schema says it holds.
        "cat2.plain": TableDefinition(
            {"id": "bigint(20)", "doc": "longtext", "f": "float"}, ("id",)
        ),
        "cat2.keyless": TableDefinition({"v": "text"}, ()),
    } == got
    assert ["a", "b", "amount", "state", "tags", "flags", "n", "at"] == list(
        got["cat1.orders"].columns
    )


def test_postgres_catalog_gives_format_type_and_key_order(postgres: PostgresServer) -> None:
    """``format_type`` text (typmods, arrays, unconstrained numeric, enum and domain names)
    and the key in ``pg_index.indkey`` order, for tables of two schemas in one call."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA cat")
        cur.execute("CREATE TYPE cat.mood AS ENUM ('sad', 'ok')")
        cur.execute(
            "CREATE TABLE cat.orders (a integer, b text, amount numeric(12,2), total numeric, "
            "code character(5), at timestamp(3), zoned timestamptz, tags text[], "
            "feeling cat.mood, dropped integer, PRIMARY KEY (b, a))"
        )
        cur.execute("ALTER TABLE cat.orders DROP COLUMN dropped")
        cur.execute("CREATE TABLE public.items (id bigint PRIMARY KEY, price real)")
    conn.close()
    got = read_catalog(postgres.dsn, None, ["cat.orders", "public.items", "cat.missing"])
    assert {
        "cat.orders": TableDefinition(
            {
                "a": "integer",
                "b": "text",
                "amount": "numeric(12,2)",
                "total": "numeric",
                "code": "character(5)",
                "at": "timestamp(3) without time zone",
                "zoned": "timestamp with time zone",
                "tags": "text[]",
                "feeling": "cat.mood",
            },
            ("b", "a"),
        ),
        "public.items": TableDefinition({"id": "bigint", "price": "real"}, ("id",)),
    } == got


def test_catalog_of_an_unreachable_source_says_which() -> None:
    """A source that refuses the connection raises an error naming the DSN (no password)."""
    with pytest.raises(CatalogUnavailableError, match=r"postgresql://u@127\.0\.0\.1:1/db"):
        read_catalog("postgresql://u:secret@127.0.0.1:1/db", None, ["s.t"])
