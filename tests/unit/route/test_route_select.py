"""A route's selection and shaping (route/select.py): tables, ops, the ``where`` condition,
keys, masks, drop and rename, Debezium values without schemas."""

from __future__ import annotations

from typing import Any

import pytest

from tidelake.config import RouteConfig
from tidelake.errors import ConfigError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake import ddl
from tidelake.route.select import (
    RouteRefused,
    RouteSelector,
    compile_condition,
    compile_expression,
)

SINK = {"kind": "redis"}
ORDERS = ddl.TableName("shop", "orders")


def route(**fields: Any) -> RouteConfig:
    return RouteConfig.model_validate({"sink": SINK, **fields})


def event(
    op: Op,
    after: dict[str, Any] | None = None,
    before: dict[str, Any] | None = None,
    *,
    table: str = "orders",
    key: dict[str, Any] | None = None,
    pk: tuple[str, ...] = ("id",),
    **extra: Any,
) -> ChangeEvent:
    image = after if op is not Op.DELETE else before
    if key is None and pk and image is not None:
        key = {c: image[c] for c in pk}
    return ChangeEvent(
        source="tidb",
        database="shop",
        table=table,
        op=op,
        position=Position((7, 3, 0)),
        pk=pk,
        key=key,
        before=before,
        after=after,
        seq=42,
        column_types={"id": "int", "status": "varchar(10)", "amount": "decimal(10,2)"},
        **extra,
    )


@pytest.mark.parametrize(
    ("where", "row", "expected"),
    [
        ("status = 'paid'", {"status": "paid"}, True),
        ("status = 'paid'", {"status": "new"}, False),
        ("amount > 10", {"amount": "10.50"}, True),
        ("amount > 10", {"amount": "9.99"}, False),
        # Numbers compare as numbers, not as text ("9" > "10" as text).
        ("amount < 10", {"amount": "9"}, True),
        ("amount >= 10.00", {"amount": "10"}, True),
        ("status IN ('paid', 'shipped')", {"status": "shipped"}, True),
        ("status NOT IN ('paid', 'shipped')", {"status": "new"}, True),
        ("note IS NULL", {"note": None}, True),
        ("note IS NOT NULL", {"note": None}, False),
        ("status LIKE 'pa%'", {"status": "paid"}, True),
        ("status LIKE 'p_d'", {"status": "paid"}, False),
        ("amount BETWEEN 1 AND 5", {"amount": "5.00"}, True),
        ("amount = -1.5", {"amount": "-1.50"}, True),
        ("status = 'paid' AND amount > 10 OR status = 'vip'", {"status": "vip"}, True),
        ("NOT (status = 'paid')", {"status": "paid"}, False),
        # Expressions in a condition: arithmetic over the row, functions of text.
        ("amount * qty > 100", {"amount": "50.01", "qty": "2"}, True),
        ("upper(status) = 'PAID'", {"status": "paid"}, True),
        # SQL's unknown: a NULL compared is neither true nor false; the row is not taken.
        ("amount > 10", {"amount": None}, False),
        ("NOT (amount > 10)", {"amount": None}, False),
        ("amount > 10 OR status = 'paid'", {"amount": None, "status": "paid"}, True),
    ],
)
def test_the_condition_is_sql_over_the_rows_values(
    where: str, row: dict[str, Any], expected: bool
) -> None:
    assert expected is compile_condition(where)(row)


@pytest.mark.parametrize("where", ["sqrt(amount) > 2", "status REGEXP 'a'", "SELECT 1"])
def test_what_the_condition_cannot_evaluate_is_refused_at_start(where: str) -> None:
    with pytest.raises(ConfigError, match="where"):
        compile_condition(where)


def test_tables_and_ops() -> None:
    selector = RouteSelector(route(tables=["shop.ord*"], ops=["insert", "delete"]))
    row = {"id": "1", "status": "new"}
    assert selector.select(event(Op.INSERT, row)) is not None
    assert selector.select(event(Op.UPDATE, row)) is None  # op not taken
    assert selector.select(event(Op.INSERT, row, table="items")) is None  # table not taken


def test_a_row_leaving_the_condition_is_deleted_from_the_sink() -> None:
    selector = RouteSelector(route(where="status = 'paid'"))
    paid = {"id": "1", "status": "paid"}
    refunded = {"id": "1", "status": "refunded"}
    assert selector.select(event(Op.INSERT, refunded)) is None
    inserted = selector.select(event(Op.INSERT, paid))
    assert inserted is not None
    assert inserted.kind == "upsert"
    left = selector.select(event(Op.UPDATE, refunded, paid))
    assert left is not None
    assert left.kind == "delete"
    assert left.key == {"id": "1"}
    assert left.row is None
    # A delete of a row known not to match never reached the sink; one not known is passed.
    assert selector.select(event(Op.DELETE, None, refunded)) is None
    gone = selector.select(event(Op.DELETE, None, paid))
    assert gone is not None
    assert gone.kind == "delete"


def test_change_carries_position_seq_and_types() -> None:
    change = RouteSelector(route()).select(event(Op.INSERT, {"id": "1", "amount": "1.10"}))
    assert change is not None
    assert change.position == Position((7, 3, 0)).encode()
    assert change.seq == 42
    assert change.table == "shop.orders"
    assert change.row == {"id": "1", "amount": "1.10"}
    assert change.column_types["amount"] == "decimal(10,2)"


def test_drop_rename_and_mask() -> None:
    selector = RouteSelector(
        route(
            drop=["secret"], rename={"id": "order_id", "status": "state"}, mask={"email": "hash"}
        ),
        pii_key=b"k",
    )
    change = selector.select(
        event(Op.INSERT, {"id": "1", "status": "new", "secret": "x", "email": "a@b.c"})
    )
    assert change is not None
    assert change.key == {"order_id": "1"}
    assert change.row is not None
    assert set(change.row) == {"order_id", "state", "email"}
    assert change.row["email"] != "a@b.c"
    assert len(change.row["email"]) > 10
    assert "secret" not in change.column_types
    assert "order_id" in change.column_types
    # The same value hashes the same way (a join key stays a join key).
    again = selector.select(event(Op.INSERT, {"id": "2", "status": "x", "email": "a@b.c"}))
    assert again is not None
    assert again.row is not None
    assert again.row["email"] == change.row["email"]


def test_hash_without_a_key_and_drop_of_a_key_are_refused() -> None:
    with pytest.raises(ConfigError, match="PII_KEY"):
        RouteSelector(route(mask={"email": "hash"}))
    selector = RouteSelector(route(drop=["id"]))
    with pytest.raises(RouteRefused, match="key column id"):
        selector.select(event(Op.INSERT, {"id": "1"}))


def test_keys_come_from_the_event_else_from_the_route() -> None:
    keyless = event(Op.INSERT, {"a": "1", "b": "x", "v": "2"}, pk=(), key=None)
    with pytest.raises(RouteRefused, match="names no primary key"):
        RouteSelector(route()).select(keyless)
    change = RouteSelector(route(keys={"shop.orders": ["a", "b"]})).select(keyless)
    assert change is not None
    assert change.key == {"a": "1", "b": "x"}
    assert change.key_text() == "1\x1fx"


def test_debezium_values_without_schemas_take_their_text_form_from_the_column_type() -> None:
    raw = ChangeEvent(
        source="debezium-mysql",
        database="shop",
        table="orders",
        op=Op.INSERT,
        position=Position((1, 2, 0)),
        pk=("id",),
        key={"id": 1},
        after={"id": 1, "amount": "AOI=", "day": 19000},  # precise decimal 2.26, date days
        column_types={"id": "int", "amount": "decimal(10,2)", "day": "date"},
        encoding="debezium-json",
    )
    change = RouteSelector(route()).select(raw)
    assert change is not None
    assert change.row is not None
    assert change.row == {"id": "1", "amount": "2.26", "day": "2022-01-08"}
    untyped = ChangeEvent(
        source="debezium-mysql",
        database="shop",
        table="orders",
        op=Op.INSERT,
        position=Position((1, 2, 0)),
        pk=("id",),
        key={"id": 1},
        after={"id": 1, "note": "x"},
        column_types={"id": "int"},
        encoding="debezium-json",
    )
    with pytest.raises(RouteRefused, match="no source type"):
        RouteSelector(route()).select(untyped)


@pytest.mark.parametrize(
    ("expression", "row", "expected"),
    [
        ("amount * qty", {"amount": "12.50", "qty": "3"}, "37.50"),
        # Exact beyond a float's digits, and beyond Python's default 28 digits.
        (
            "a + b",
            {"a": "12345678901234567890.123456789", "b": "0.000000001"},
            "12345678901234567890.123456790",
        ),
        (
            "a * b",
            {"a": "99999999999999999999999999999.9", "b": "10"},
            "999999999999999999999999999999.0",
        ),
        ("a / 4", {"a": "1"}, "0.25"),
        ("a / 0", {"a": "1"}, None),
        ("upper(code) || '-' || id", {"code": "ab", "id": "7"}, "AB-7"),
        ("concat(a, b)", {"a": "x", "b": None}, None),
        ("coalesce(a, b, 'none')", {"a": None, "b": None}, "none"),
        ("CASE WHEN amount > 100 THEN 'big' ELSE 'small' END", {"amount": "250.00"}, "big"),
        ("CASE WHEN amount > 100 THEN 'big' END", {"amount": "5"}, None),
        ("trim(lower(name))", {"name": "  Zoë "}, "zoë"),
        ("qty - 1", {"qty": None}, None),
    ],
)
def test_computed_columns(expression: str, row: dict[str, Any], expected: str | None) -> None:
    assert expected == compile_expression(expression, "compute.x")(row)


def test_a_computed_column_is_added_before_rename_and_typed_as_text() -> None:
    selector = RouteSelector(
        route(compute={"total": "amount * 2", "label": "status || '!'"}, rename={"total": "t"})
    )
    change = selector.select(event(Op.INSERT, {"id": "1", "status": "new", "amount": "1.10"}))
    assert change is not None
    assert change.row == {
        "id": "1",
        "status": "new",
        "amount": "1.10",
        "t": "2.20",
        "label": "new!",
    }
    assert change.column_types["t"] == "text"
    with pytest.raises(ConfigError, match=r"compute\.bad"):
        RouteSelector(route(compute={"bad": "sqrt(amount)"}))


@pytest.mark.parametrize(
    ("statement", "ddl_type", "expected"),
    [
        # canal-json's type (TiCDC); Debezium's op t and our captures carry the SQL.
        ("TRUNCATE TABLE `shop`.`orders`", "TRUNCATE", ddl.TruncateTable(ORDERS)),
        ("TRUNCATE shop.orders", None, ddl.TruncateTable(ORDERS)),
        ("DROP TABLE `orders`", "ERASE", ddl.DropTable(ORDERS)),
        ("ALTER TABLE orders DROP COLUMN note", "ALTER", ddl.DropColumn(ORDERS, "note")),
        # The route's rename: the sink's column has the route's name.
        ("ALTER TABLE orders RENAME COLUMN email TO mail", "ALTER",
         ddl.RenameColumn(ORDERS, "contact", "mail")),
        # A column the route leaves out is not the sink's business.
        ("ALTER TABLE orders DROP COLUMN secret", "ALTER", None),
        ("CREATE INDEX i ON orders (note)", "CINDEX", None),
    ],
)  # fmt: skip
def test_ddl_becomes_the_schema_change_the_sink_applies(
    statement: str, ddl_type: str | None, expected: ddl.Operation | None
) -> None:
    """A DDL event of a route's table reaches the sink as its operations, named as the
    sink's columns are (``rename``, ``drop``); none of it when nothing concerns the sink."""
    event_ = ChangeEvent(
        source="tidb",
        database="shop",
        table="orders",
        op=Op.DDL,
        position=Position((1,)),
        ddl=statement,
        ddl_type=ddl_type,
        seq=7,
    )
    selector = RouteSelector(route(drop=["secret"], rename={"email": "contact"}))
    change = selector.select(event_)
    if expected is None:
        assert change is None
    else:
        assert change is not None
        assert (change.kind, change.operations, change.statement, change.seq) == (
            "schema", (expected,), statement, 7
        )  # fmt: skip
    # A route that does not take the table is not concerned.
    assert RouteSelector(route(tables=["shop.items"])).select(event_) is None


def test_ddl_the_lake_cannot_map_is_dead_lettered_with_its_reason() -> None:
    """A primary-key change pauses a lake table; a route refuses it the same way."""
    event_ = ChangeEvent(
        source="tidb",
        database="shop",
        table="orders",
        op=Op.DDL,
        position=Position((1,)),
        ddl="ALTER TABLE orders DROP PRIMARY KEY",
    )
    with pytest.raises(RouteRefused, match="orders"):
        RouteSelector(route()).select(event_)


def test_a_rename_into_the_routes_tables_is_refused_out_of_them_a_drop() -> None:
    """The sink never had the rows of a table the route does not take."""
    rename = ChangeEvent(
        source="tidb",
        database="shop",
        table="orders",
        op=Op.DDL,
        position=Position((1,)),
        ddl="RENAME TABLE shop.orders TO shop.orders_old",
    )
    change = RouteSelector(route(tables=["shop.orders"])).select(rename)
    assert change is not None
    assert change.operations == (ddl.DropTable(ORDERS),)
    with pytest.raises(RouteRefused, match="never had its rows"):
        RouteSelector(route(tables=["shop.orders_old"])).select(rename)


def test_a_result_exact_arithmetic_cannot_give_is_dead_lettered_not_rounded() -> None:
    """A product past 200 digits: the message goes to the route's dead letters with the
    reason (a crash here would stop the route on the same message for ever)."""
    selector = RouteSelector(route(compute={"square": "big * big"}))
    huge = event(Op.INSERT, {"id": "1", "big": "9" * 150})
    with pytest.raises(RouteRefused, match=r"compute\.square .*Inexact"):
        selector.select(huge)
    assert selector.select(event(Op.INSERT, {"id": "2", "big": "12"})) is not None
