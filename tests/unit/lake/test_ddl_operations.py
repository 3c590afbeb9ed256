"""DDL text → operations (``lake/ddl.py``): sqlglot in the source's dialect, never executed."""

from __future__ import annotations

import pytest

from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake import ddl
from tidelake.lake.ddl import (
    AddColumn,
    ColumnSpec,
    CreateDatabase,
    CreateTable,
    Default,
    DropColumn,
    DropDatabase,
    DropTable,
    ModifyColumn,
    NoOp,
    RenameColumn,
    RenameTable,
    TableName,
    TruncateTable,
    Unsupported,
    parse_ddl,
)
from tidelake.lake.rules import route

ORDERS = TableName("shop", "orders")


def _mysql(sql: str) -> list[ddl.Operation]:
    return parse_ddl(sql, "mysql", "shop")


@pytest.mark.parametrize(
    ("source", "dialect"),
    [
        ("tidb", "mysql"),
        ("canal", "mysql"),
        ("mysql", "mysql"),
        ("debezium-mysql", "mysql"),
        ("postgres", "postgres"),
        ("debezium-postgresql", "postgres"),
    ],
)
def test_the_dialect_follows_the_event_source(source: str, dialect: str) -> None:
    """TiDB, MySQL and canal DDL parse as MySQL; PostgreSQL sources as PostgreSQL."""
    assert dialect == ddl.dialect_for(source)


def test_add_column_keeps_the_default_existing_rows_read_at_the_source() -> None:
    """A literal DEFAULT, CURRENT_TIMESTAMP, a computed default and MySQL's implicit default
    of a NOT NULL column are told apart; identifiers lose their backticks."""
    ops = _mysql(
        "ALTER TABLE `shop`.`orders` ADD COLUMN `note` VARCHAR(32) NULL DEFAULT 'x' AFTER id, "
        "ADD COLUMN qty INT NOT NULL, ADD COLUMN at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, "
        "ADD COLUMN tag VARCHAR(36) DEFAULT (uuid()), ADD COLUMN price DECIMAL(10,2) DEFAULT -1.5, "
        "ADD COLUMN kind ENUM('a','b') NOT NULL, ADD COLUMN free TEXT"
    )
    expected = [
        AddColumn(ORDERS, ColumnSpec("note", "varchar(32)", Default("value", "x"))),
        AddColumn(ORDERS, ColumnSpec("qty", "int", Default("value", "0"))),
        AddColumn(ORDERS, ColumnSpec("at", "timestamp", Default("current_timestamp"))),
        AddColumn(ORDERS, ColumnSpec("tag", "varchar(36)", Default("expression", "(UUID())"))),
        AddColumn(ORDERS, ColumnSpec("price", "decimal(10,2)", Default("value", "-1.5"))),
        AddColumn(ORDERS, ColumnSpec("kind", "enum('a','b')", Default("value", "a"))),
        AddColumn(ORDERS, ColumnSpec("free", "text", Default("value", None))),
    ]
    assert expected == ops


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("ALTER TABLE orders DROP COLUMN note", [DropColumn(ORDERS, "note")]),
        ("ALTER TABLE orders RENAME COLUMN a TO b", [RenameColumn(ORDERS, "a", "b")]),
        ("ALTER TABLE orders CHANGE COLUMN a b BIGINT", [ModifyColumn(ORDERS, "a", "bigint", "b")]),
        (
            "ALTER TABLE orders MODIFY qty BIGINT UNSIGNED",
            [ModifyColumn(ORDERS, "qty", "bigint unsigned")],
        ),
        (
            "ALTER TABLE orders RENAME TO orders_v2",
            [RenameTable(ORDERS, TableName("shop", "orders_v2"))],
        ),
        (
            "RENAME TABLE shop.a TO shop.b, `c` TO `d x`",
            [
                RenameTable(TableName("shop", "a"), TableName("shop", "b")),
                RenameTable(TableName("shop", "c"), TableName("shop", "d x")),
            ],
        ),
        ("TRUNCATE TABLE `shop`.`orders`", [TruncateTable(ORDERS)]),
        (
            "DROP TABLE IF EXISTS orders, other.t",
            [DropTable(ORDERS), DropTable(TableName("other", "t"))],
        ),
        ("DROP DATABASE shop", [DropDatabase("shop")]),
        ("CREATE INDEX i ON orders (status)", [NoOp(ORDERS, "CREATE INDEX")]),
        ("ALTER TABLE orders ADD INDEX i (status)", [NoOp(ORDERS, "ADD INDEX")]),
        (
            "ALTER TABLE orders ALTER COLUMN qty SET DEFAULT 5",
            [NoOp(ORDERS, "ALTER COLUMN QTY SET DEFAULT")],
        ),
        ("ALTER TABLE orders COMMENT 'x'", [NoOp(ORDERS, "COMMENT")]),
        ("CREATE DATABASE shop", [CreateDatabase("shop")]),
    ],
)
def test_mysql_statements_map_to_operations(sql: str, expected: list[ddl.Operation]) -> None:
    """Each MySQL/TiDB DDL kind becomes its operation(s), in statement order."""
    assert expected == _mysql(sql)


def test_create_table_records_columns_types_and_primary_key() -> None:
    """Column types come out as canal-json's mysqlType spells them; the key from either form."""
    ops = _mysql(
        "CREATE TABLE `shop`.`coupons` (`id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, "
        "`code` VARCHAR(32) COLLATE utf8mb4_bin DEFAULT NULL, amt DECIMAL(40, 2), "
        "PRIMARY KEY (`id`), KEY k (code)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )
    assert 1 == len(ops)
    op = ops[0]
    assert isinstance(op, CreateTable)
    expected = (TableName("shop", "coupons"), ("id",))
    assert expected == (op.table, op.primary_key)
    expected_types = [("id", "bigint unsigned"), ("code", "varchar(32)"), ("amt", "decimal(40,2)")]
    assert expected_types == [(c.name, c.source_type) for c in op.columns]
    like = _mysql("CREATE TABLE t3 LIKE t2")
    assert [CreateTable(TableName("shop", "t3"), (), (), TableName("shop", "t2"))] == like


def test_postgresql_ddl_parses_in_its_own_dialect() -> None:
    """PostgreSQL types and syntax (ALTER COLUMN … TYPE, casts in defaults, arrays,
    unconstrained numeric) map like the MySQL ones."""
    table = TableName("public", "t")
    ops = parse_ddl(
        "ALTER TABLE public.t ADD COLUMN c character varying(20) DEFAULT 'x'::character varying, "
        "ALTER COLUMN n TYPE bigint",
        "postgres",
        "public",
    )
    expected: list[ddl.Operation] = [
        AddColumn(table, ColumnSpec("c", "varchar(20)", Default("value", "x"))),
        ModifyColumn(table, "n", "bigint"),
    ]
    assert expected == ops
    created = parse_ddl(
        "CREATE TABLE public.t (id uuid PRIMARY KEY, tags text[], at timestamptz, n numeric)",
        "postgres",
        "public",
    )
    assert isinstance(created[0], CreateTable)
    expected_types = [("id", "uuid"), ("tags", "text[]"), ("at", "timestamptz"), ("n", "numeric")]
    assert expected_types == [(c.name, c.source_type) for c in created[0].columns]


@pytest.mark.parametrize(
    "sql",
    [
        "this is not sql",
        "ALTER TABLE orders TRUNCATE PARTITION p0",
        "CREATE TABLE t AS SELECT * FROM u",
    ],
)
def test_what_cannot_be_mapped_is_unsupported_with_a_reason(sql: str) -> None:
    """Unparsable or unmapped statements become one Unsupported (which pauses the table)."""
    ops = _mysql(sql)
    assert any(isinstance(op, Unsupported) and op.reason for op in ops), ops


def test_identifiers_with_backticks_and_dots_survive() -> None:
    """Quoted names keep their dots and doubled backticks as the one character they are."""
    ops = _mysql("ALTER TABLE `we.ird` RENAME COLUMN `a``b` TO `c.d`")
    assert [RenameColumn(TableName("shop", "we.ird"), "a`b", "c.d")] == ops


def _ddl_event(sql: str, table: str) -> ChangeEvent:
    return ChangeEvent(
        source="tidb", database="shop", table=table, op=Op.DDL, position=Position((1,)), ddl=sql
    )


def test_a_ddl_is_routed_to_the_table_its_last_step_changes() -> None:
    """RENAME a TO b is decided by a's checkpoint (its tombstone ends the rename), whichever
    table the source named in the message; plain ALTERs stay with their table."""
    assert "shop.a" == route(_ddl_event("RENAME TABLE a TO b", "b"))
    assert "shop.b" == route(_ddl_event("DROP TABLE a, b", "a"))
    assert "shop.orders" == route(_ddl_event("ALTER TABLE orders ADD COLUMN x INT", "orders"))
