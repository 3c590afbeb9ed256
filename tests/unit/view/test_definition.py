"""A view's SQL read into its parts, the shapes refused with their reason, renames followed
(view/definition.py)."""

from __future__ import annotations

import pytest

from tidelake.view.definition import (
    ViewDefinitionError,
    compose_renames,
    follow_renames,
    parse_view,
    state_sql,
)

ACTIVITY = (
    "SELECT o.customer_id, COUNT(*) AS orders, SUM(o.order_total) AS spend, "
    "MAX(order_date) AS last_order FROM shop.orders o WHERE o.status <> 'returned' "
    "GROUP BY o.customer_id"
)


def test_the_parts_of_a_view() -> None:
    view = parse_view("activity", ACTIVITY)
    assert view.table == "shop.orders"
    assert view.groups == ("customer_id",)
    assert [(a.alias, a.func, a.column) for a in view.aggregates] == [
        ("orders", "count", None),
        ("spend", "sum", "order_total"),
        ("last_order", "max", "order_date"),
    ]
    assert view.where == "status <> 'returned'"
    assert view.columns == ("customer_id", "order_total", "order_date", "status")
    assert view.group_outputs == ("customer_id",)


def test_the_fingerprint_follows_meaning_not_spacing() -> None:
    spaced = ACTIVITY.replace(" FROM", "\n   FROM").replace("SELECT", "select")
    assert parse_view("a", ACTIVITY).fingerprint == parse_view("a", spaced).fingerprint
    other = ACTIVITY.replace("MAX(order_date)", "MIN(order_date)")
    assert parse_view("a", ACTIVITY).fingerprint != parse_view("a", other).fingerprint


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (
            "SELECT t.a, COUNT(*) AS c FROM shop.t RIGHT JOIN shop.u ON t.a = u.a GROUP BY t.a",
            "RIGHT",
        ),
        (
            "SELECT t.a, COUNT(*) AS c FROM shop.t FULL JOIN shop.u ON t.a = u.a GROUP BY t.a",
            "FULL",
        ),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t CROSS JOIN shop.u GROUP BY t.a", "INNER or LEFT"),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t, shop.u GROUP BY t.a", "INNER or LEFT"),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t JOIN shop.u USING (a) GROUP BY t.a", "ON equal"),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t JOIN shop.u ON t.a < u.a GROUP BY t.a", "equality"),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t JOIN shop.u ON t.a = 1 GROUP BY t.a", "equality"),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t JOIN shop.u ON t.a = t.b GROUP BY t.a", "compare"),
        ("SELECT a, COUNT(*) AS c FROM shop.t JOIN shop.u ON t.a = u.a GROUP BY a", "alias"),
        (
            "SELECT x.a, COUNT(*) AS c FROM shop.t x JOIN shop.t y ON x.a = y.a GROUP BY x.a",
            "itself",
        ),
        ("SELECT t.a, COUNT(*) AS c FROM shop.t JOIN u ON t.a = u.a GROUP BY t.a", "database"),
        (
            "SELECT t.a, COUNT(*) AS c FROM shop.t JOIN shop.u ON t.a = u.a "
            "JOIN shop.v ON t.a = v.a GROUP BY t.a",
            "one join",
        ),
        ("SELECT a + 1 AS k, COUNT(*) AS c FROM shop.t GROUP BY a + 1", "plain column"),
        ("SELECT a, AVG(b) AS c FROM shop.t GROUP BY a", r"AVG\(b\) is not maintained"),
        ("SELECT a, COUNT(*) AS c FROM (SELECT * FROM shop.t) AS s GROUP BY a", "a subquery"),
        ("SELECT a, COUNT(*) FROM shop.t GROUP BY a", "name the aggregate"),
        ("SELECT a, COUNT(*) AS c FROM t GROUP BY a", "with its database"),
        ("SELECT a, COUNT(DISTINCT b) AS c FROM shop.t GROUP BY a", "DISTINCT"),
        ("SELECT a, b, COUNT(*) AS c FROM shop.t GROUP BY a", "neither grouped"),
        ("SELECT COUNT(*) AS c FROM shop.t", "GROUP BY is required"),
        ("SELECT a, COUNT(*) AS c FROM shop.t GROUP BY a HAVING COUNT(*) > 1", "HAVING"),
        ("SELECT a, COUNT(*) AS _tl_rows FROM shop.t GROUP BY a", "reserved"),
        ("SELECT a, SUM(b) AS c FROM shop.t WHERE SUM(b) > 1 GROUP BY a", "aggregate in WHERE"),
        ("DELETE FROM shop.t", "one SELECT"),
    ],
)
def test_shapes_not_kept_are_refused_with_the_reason(sql: str, reason: str) -> None:
    with pytest.raises(ViewDefinitionError, match=reason):
        parse_view("v", sql)


def test_state_sql_adds_the_hidden_counts() -> None:
    sql = state_sql(parse_view("activity", ACTIVITY), "base")
    assert "FROM base WHERE status <> 'returned'" in sql
    assert "COUNT(*) AS _tl_rows" in sql
    assert "COUNT(`order_total`) AS _tl_n_spend" in sql


def test_renames_are_followed_and_outputs_keep_their_names() -> None:
    view = parse_view("activity", ACTIVITY)
    renamed = compose_renames({}, [("order_total", "amount"), ("amount", "total_amount")])
    assert renamed == {"order_total": "total_amount"}
    followed = follow_renames(view, {"shop.orders": renamed | {"customer_id": "cust"}})
    assert followed.groups == ("cust",)
    assert [o.alias for o in followed.outputs] == ["customer_id", "orders", "spend", "last_order"]
    assert followed.columns == ("cust", "total_amount", "order_date", "status")
    assert follow_renames(view, {}) is view


CUSTOMERS = (
    "SELECT c.region, c.customer_id, COUNT(o.order_id) AS orders, SUM(o.total) AS spend, "
    "MAX(o.placed) AS last_order FROM shop.customers c LEFT JOIN shop.orders AS o "
    "ON o.customer_id = c.customer_id AND c.tenant = o.tenant WHERE c.region <> 'test' "
    "GROUP BY c.region, c.customer_id"
)


def test_a_join_view_reads_joined_rows_named_by_alias() -> None:
    view = parse_view("customers", CUSTOMERS)
    assert view.tables == ("shop.customers", "shop.orders")
    assert view.join is not None
    assert view.join.kind == "left"
    assert view.join.on == (("customer_id", "customer_id"), ("tenant", "tenant"))
    # Join columns first, then the others the view reads.
    assert view.join.left.columns == ("customer_id", "tenant", "region")
    assert view.join.right.columns == ("customer_id", "tenant", "order_id", "total", "placed")
    assert view.groups == ("c__region", "c__customer_id")
    assert [o.alias for o in view.outputs] == [
        "region",
        "customer_id",
        "orders",
        "spend",
        "last_order",
    ]
    assert view.where == "c__region <> 'test'"
    sql = state_sql(view, "joined")
    assert "FROM joined WHERE c__region <> 'test' GROUP BY c__region, c__customer_id" in sql
    assert "COUNT(`o__order_id`) AS _tl_n_orders" in sql
    inner = parse_view("i", CUSTOMERS.replace("LEFT JOIN", "INNER JOIN"))
    assert inner.join is not None
    assert inner.join.kind == "inner"


def test_a_join_view_follows_renames_per_table() -> None:
    view = parse_view("customers", CUSTOMERS)
    # The same column name in both tables, renamed in one of them only.
    followed = follow_renames(view, {"shop.orders": {"customer_id": "buyer", "total": "amount"}})
    assert followed.join is not None
    assert followed.join.on == (("customer_id", "buyer"), ("tenant", "tenant"))
    assert followed.join.right.columns == ("buyer", "tenant", "order_id", "amount", "placed")
    assert followed.groups == ("c__region", "c__customer_id")
    assert [o.alias for o in followed.outputs] == [o.alias for o in view.outputs]
    renamed_key = follow_renames(view, {"shop.customers": {"region": "area"}})
    assert renamed_key.groups == ("c__area", "c__customer_id")
    assert next(o.alias for o in renamed_key.outputs) == "region"
