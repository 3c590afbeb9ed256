"""Join views kept by steps equal their full recomputation (view/maintain.py
``_join_changes``): a LEFT join grouped by the left table's columns and an INNER join grouped
by a column of the joined table, through changes on either side — an order moved to another
customer, a customer's region changed (every one of its orders moves group), a customer with
no orders, a customer deleted under its orders, an order whose customer does not exist, a NULL
join key — then a column renamed in one table only."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from lakekit import Lake, ddl_event, event

from tidelake.view.maintain import ViewMaintainer
from tidelake.view.table import ViewTable

ORDERS = {"id": "bigint", "customer_id": "bigint", "amount": "decimal(10,2)"}
CUSTOMERS = {"id": "bigint", "region": "varchar(16)"}
#: Every customer with its orders (none: 0 orders, NULL spend).
BY_CUSTOMER = (
    "SELECT c.id AS customer, c.region, COUNT(o.id) AS orders, SUM(o.amount) AS spend, "
    "MAX(o.amount) AS biggest FROM shop.customers c LEFT JOIN shop.orders o "
    "ON o.customer_id = c.id GROUP BY c.id, c.region"
)
#: The orders of known customers per region.
BY_REGION = (
    "SELECT c.region, COUNT(*) AS orders, SUM(o.amount) AS spend, MIN(o.amount) AS smallest "
    "FROM shop.orders o JOIN shop.customers c ON o.customer_id = c.id "
    "WHERE o.amount > 0 GROUP BY c.region"
)
VIEWS = ("by_customer", "by_region")


def _order(op: str, oid: int, pos: int, customer: int | None, amount: str) -> Any:
    values = {"customer_id": None if customer is None else str(customer), "amount": amount}
    return event(op, oid, pos, pos, values=values, types=ORDERS)


def _customer(op: str, cid: int, pos: int, region: str) -> Any:
    return event(
        op, cid, pos, pos, table="shop.customers", values={"region": region}, types=CUSTOMERS
    )


def _rows(m: ViewMaintainer, view: str, key: str) -> dict[Any, dict[str, Any]]:
    return {r[key]: r.asDict() for r in ViewTable(m.config, m.spark, view).read().collect()}


def _step_all(m: ViewMaintainer, expected: str) -> None:
    for name in VIEWS:
        result = m.step(name)
        assert result.outcome == expected, result
        check = m.verify(name)
        assert check.ok, check


@pytest.fixture
def views(lake_factory: Callable[..., Lake]) -> tuple[Lake, ViewMaintainer]:
    lake = lake_factory(
        TIDELAKE_VIEWS__BY_CUSTOMER__SQL=BY_CUSTOMER, TIDELAKE_VIEWS__BY_REGION__SQL=BY_REGION
    )
    return lake, ViewMaintainer(lake.config, lake.spark)


def test_join_views_follow_both_tables(views: tuple[Lake, ViewMaintainer]) -> None:
    lake, m = views
    lake.stage(
        [
            _customer("insert", 1, 1, "north"),
            _customer("insert", 2, 2, "south"),
            _customer("insert", 3, 3, "north"),  # no orders yet
            _order("insert", 10, 4, 1, "5.00"),
            _order("insert", 11, 5, 1, "7.50"),
            _order("insert", 12, 6, 2, "1.25"),
            _order("insert", 13, 7, 9, "4.00"),  # customer 9 does not exist
            _order("insert", 14, 8, None, "2.00"),  # no customer at all
        ]
    )
    lake.ingest()
    _step_all(m, "rebuild")
    customers = _rows(m, "by_customer", "customer")
    assert (customers[3]["orders"], customers[3]["spend"]) == (0, None)
    assert customers[1]["spend"] == Decimal("12.50")
    regions = _rows(m, "by_region", "region")
    assert regions["north"]["orders"] == 2
    assert regions["south"]["spend"] == Decimal("1.25")

    # Orders only: one moves from customer 1 to 3 (its MAX goes), one is deleted, the unknown
    # customer's order gets a known one, the NULL one stays unmatched.
    lake.stage(
        [
            _order("update", 11, 9, 3, "7.50"),
            _order("delete", 12, 10, 2, "1.25"),
            _order("update", 13, 11, 2, "4.00"),
            _order("update", 14, 12, None, "3.00"),
        ]
    )
    lake.ingest()
    _step_all(m, "step")
    customers = _rows(m, "by_customer", "customer")
    assert (customers[1]["orders"], customers[1]["biggest"]) == (1, Decimal("5.00"))
    assert (customers[3]["orders"], customers[3]["spend"]) == (1, Decimal("7.50"))
    assert customers[2]["spend"] == Decimal("4.00")

    # Customers only: customer 1 moves region (its order moves group in both views), customer
    # 2 is deleted under its order, a new one arrives; one order's amount falls out of WHERE.
    lake.stage(
        [
            _customer("update", 1, 13, "south"),
            _customer("delete", 2, 14, "south"),
            _customer("insert", 4, 15, "east"),
            _order("update", 10, 16, 1, "0.00"),
        ]
    )
    lake.ingest()
    _step_all(m, "step")
    customers = _rows(m, "by_customer", "customer")
    assert 2 not in customers
    assert customers[1]["region"] == "south"
    assert customers[4]["orders"] == 0
    regions = _rows(m, "by_region", "region")
    assert set(regions) == {"north"}  # 1's only order is 0.00; 2 is gone; 4 has none
    assert regions["north"]["smallest"] == Decimal("7.50")

    assert all(m.step(name).outcome == "current" for name in VIEWS)

    # A column renamed in one table only: a rebuild that follows it, then steps again.
    rename = "ALTER TABLE shop.orders RENAME COLUMN amount TO total"
    renamed = {"id": "bigint", "customer_id": "bigint", "total": "decimal(10,2)"}
    lake.stage([ddl_event("shop.orders", rename, "ALTER", 17, 17)])
    lake.ingest()
    for name in VIEWS:
        rebuilt = m.step(name)
        assert rebuilt.outcome == "rebuild", rebuilt
        assert rebuilt.checkpoint is not None
        assert dict(rebuilt.checkpoint.renamed) == {"shop.orders": {"amount": "total"}}
    values = {"customer_id": "4", "total": "9.00"}
    lake.stage([event("insert", 15, 18, 18, values=values, types=renamed)])
    lake.ingest()
    _step_all(m, "step")
    assert _rows(m, "by_customer", "customer")[4]["spend"] == Decimal("9.00")
    assert _rows(m, "by_region", "region")["east"]["orders"] == 1
