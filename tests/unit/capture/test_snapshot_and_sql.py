"""Snapshot keyset queries, the SQL workload's statements, DSNs and table filters."""

import orjson
import pytest

from tidelake.capture.dsn import parse_dsn
from tidelake.capture.snapshot import SnapshotProgress, keyset_params, keyset_query
from tidelake.capture.tables import TableFilter
from tidelake.errors import ConfigError
from tidelake.workload.sql import _Change, schema_statements, statements


def q(name: str) -> str:
    return f"`{name}`"


def test_keyset_query_composite_key() -> None:
    """A composite key resumes strictly after the last key, in key order."""
    sql = keyset_query(q, "`s`.`t`", ["a", "b", "c"], ["a", "b"], after=True, limit=10)
    assert sql == (
        "SELECT `a`, `b`, `c` FROM `s`.`t` WHERE (`s`.`t`.`a` > %s) OR "
        "(`s`.`t`.`a` = %s AND `s`.`t`.`b` > %s) ORDER BY `s`.`t`.`a`, `s`.`t`.`b` LIMIT 10"
    )
    assert keyset_params([1, 2]) == [1, 1, 2]
    first = keyset_query(q, "t", ["a"], ["a"], after=False, limit=5)
    assert first == "SELECT `a` FROM t ORDER BY t.`a` LIMIT 5"


def test_snapshot_progress_round_trips() -> None:
    """The progress saved with each chunk reads back the same."""
    p = SnapshotProgress(["s.a"], "s.b", ["42"], 1042)
    assert p == SnapshotProgress.from_dict(orjson.loads(orjson.dumps(p.to_dict())))


def _c(table: str, kind: str, **row: str | None) -> _Change:
    return _Change(table, kind, row)


def test_renumbering_becomes_one_primary_key_update() -> None:
    """TiCDC's DELETE + INSERT of a renumbered order runs as one UPDATE of the key."""
    changes = [
        _c("orders", "DELETE", id="5", status="new"),
        _c("orders", "INSERT", id="9", status="new"),
        _c("orders", "UPDATE", id="9", status="paid"),
        _c("order_items", "DELETE", order_id="9", line_no="1"),
    ]
    assert list(statements(changes)) == [
        ("UPDATE shop.orders SET id = %s, status = %s WHERE id = %s", ("9", "new", "5")),
        ("UPDATE shop.orders SET status = %s WHERE id = %s", ("paid", "9")),
        ("DELETE FROM shop.order_items WHERE order_id = %s AND line_no = %s", ("9", "1")),
    ]


def test_schema_statements_per_dialect() -> None:
    """MariaDB gets a database and MySQL types; PostgreSQL a schema and its own type names."""
    mysql = schema_statements("mysql")
    pg = schema_statements("postgres")
    assert mysql[0].startswith("CREATE DATABASE")
    assert pg[0].startswith("CREATE SCHEMA")
    assert "order_total decimal(12,2)" in mysql[2]
    assert "order_total numeric(12,2)" in pg[2]
    assert "updated_at timestamp" in pg[2]
    assert "PRIMARY KEY (order_id, line_no)" in pg[3]


def test_dsn_parsing_and_redaction() -> None:
    """DSNs name kind, host, port, user; the redacted form never shows the password."""
    d = parse_dsn("mysql://app:s3cret@db.local:3307/")
    assert (d.kind, d.host, d.port, d.user) == ("mysql", "db.local", 3307, "app")
    assert d.password == "s3cret"
    assert "s3cret" not in d.redacted()
    p = parse_dsn("postgresql://u@h/shopdb", password="fromenv")
    assert (p.kind, p.port, p.database, p.password) == ("postgres", 5432, "shopdb", "fromenv")
    with pytest.raises(ConfigError):
        parse_dsn("oracle://h/x")


def test_table_filter() -> None:
    """Patterns select tables; no pattern takes every non-system table."""
    f = TableFilter(["shop.*", "crm.accounts"])
    assert (f("shop", "x"), f("crm", "accounts"), f("crm", "other")) == (True, True, False)
    assert f.databases() == ["crm", "shop"]
    anything = TableFilter([])
    assert anything("app", "t")
    assert not anything("mysql", "user")
    assert not anything("pg_catalog", "pg_class")
