"""A view kept by steps equals its full recomputation through inserts, updates that move a row
between groups or out of the WHERE, deletes of a group's MAX, an emptied group, several base
commits in one step, a base-table rewrite (DDL) and a changed definition (view/maintain.py)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from lakekit import Lake, ddl_event, event

from tidelake.view.maintain import ViewMaintainer

TYPES = {
    "id": "bigint",
    "customer_id": "bigint",
    "status": "varchar(16)",
    "amount": "decimal(10,2)",
}
SQL = (
    "SELECT customer_id, COUNT(*) AS orders, SUM(amount) AS spend, MAX(amount) AS biggest, "
    "MIN(status) AS first_status, COUNT(amount) AS priced FROM shop.orders o "
    "WHERE o.status <> 'void' GROUP BY customer_id"
)


def _order(op: str, oid: int, pos: int, customer: int, status: str, amount: str | None) -> Any:
    return event(
        op,
        oid,
        pos,
        pos,
        values={"customer_id": str(customer), "status": status, "amount": amount},
        types=TYPES,
    )


def _view_rows(m: ViewMaintainer) -> dict[int, dict[str, Any]]:
    from tidelake.view.table import ViewTable

    rows = ViewTable(m.config, m.spark, "activity").read().collect()
    return {r["customer_id"]: r.asDict() for r in rows}


def _latest(m: ViewMaintainer) -> dict[str, str]:
    """The base table's latest commit as a step reports it: table → Hudi instant (requested
    time; the checkpoint holds its completion time)."""
    from tidelake.lake.store import completed_instants

    base = m.base_path(m.definition("activity").table)
    return {"shop.orders": completed_instants(m.spark, base, metadata_of=())[-1].requested}


@pytest.fixture
def views(lake_factory: Callable[..., Lake]) -> tuple[Lake, ViewMaintainer]:
    lake = lake_factory(TIDELAKE_VIEWS__ACTIVITY__SQL=SQL)
    return lake, ViewMaintainer(lake.config, lake.spark)


def test_steps_equal_the_recomputation(views: tuple[Lake, ViewMaintainer]) -> None:
    lake, m = views
    lake.stage(
        [
            _order("insert", 1, 1, 10, "new", "5.25"),
            _order("insert", 2, 2, 10, "paid", "7.50"),
            _order("insert", 3, 3, 11, "new", "1.00"),
            _order("insert", 4, 4, 12, "void", "3.00"),
            _order("insert", 5, 5, 13, "new", None),
        ]
    )
    lake.ingest()
    first = m.step("activity")
    assert first.outcome == "rebuild", first
    assert _latest(m) == first.instants  # what the view's span names (view/trace.py)
    assert m.verify("activity").ok
    rows = _view_rows(m)
    assert rows[10]["spend"] == Decimal("12.75")
    assert rows[10]["biggest"] == Decimal("7.50")
    assert 12 not in rows  # only a void order: not in the view
    assert rows[13]["spend"] is None
    assert rows[13]["priced"] == 0
    assert rows[13]["orders"] == 1

    # The biggest order of customer 10 deleted (its MAX is read again), order 3 moves to
    # customer 12 (11 empties), order 4 leaves 'void' (12 appears), one order is priced.
    lake.stage(
        [
            _order("delete", 2, 6, 10, "paid", "7.50"),
            _order("update", 3, 7, 12, "new", "1.00"),
            _order("update", 4, 8, 12, "paid", "3.00"),
            _order("update", 5, 9, 13, "paid", "0.10"),
            _order("insert", 6, 10, 10, "new", "2.00"),
        ]
    )
    lake.ingest()
    second = m.step("activity")
    assert second.outcome == "step", second
    assert _latest(m) == second.instants
    assert first.instants != second.instants
    assert second.recomputed >= 1  # customer 10's MAX went away
    assert m.verify("activity").ok
    rows = _view_rows(m)
    assert 11 not in rows
    assert rows[10]["biggest"] == Decimal("5.25")
    assert rows[10]["orders"] == 2
    assert rows[12]["orders"] == 2
    assert rows[12]["spend"] == Decimal("4.00")
    assert rows[13]["spend"] == Decimal("0.10")

    current = m.step("activity")
    assert ("current", second.instants) == (current.outcome, current.instants)

    # Two base commits read by one step; an update that changes no view column cancels out;
    # one that raises the group's MAX (5.25 taken away, 6.00 added) needs no base read.
    lake.stage([_order("update", 1, 11, 10, "new", "6.00")])
    lake.ingest()
    lake.stage(
        [_order("insert", 7, 12, 14, "new", "9.99"), _order("update", 6, 13, 10, "new", "2.00")]
    )
    lake.ingest()
    third = m.step("activity")
    assert (third.outcome, third.recomputed) == ("step", 0), third
    assert m.verify("activity").ok
    assert _view_rows(m)[10]["spend"] == Decimal("8.00")
    assert _view_rows(m)[10]["biggest"] == Decimal("6.00")

    # Inserts only: every group follows from its stored row, none is read again.
    lake.stage([_order("insert", 8, 14, 10, "new", "1.00"), _order("insert", 9, 15, 15, "a", "2")])
    lake.ingest()
    fourth = m.step("activity")
    assert (fourth.outcome, fourth.recomputed, fourth.groups) == ("step", 0, 2), fourth
    assert m.verify("activity").ok
    assert _view_rows(m)[10]["first_status"] == "new"
    assert _view_rows(m)[15]["orders"] == 1


def test_rewrite_and_new_definition_rebuild(
    views: tuple[Lake, ViewMaintainer], lake_factory: Callable[..., Lake]
) -> None:

    lake, m = views
    lake.stage([_order("insert", 1, 1, 10, "new", "5.25"), _order("insert", 2, 2, 11, "new", "1")])
    lake.ingest()
    assert m.step("activity").outcome == "rebuild"
    lake.stage(
        [
            ddl_event(
                "shop.orders",
                "ALTER TABLE shop.orders ADD COLUMN note varchar(8) NOT NULL DEFAULT 'x'",
                "ALTER",
                3,
                3,
            ),
            event(
                "insert",
                3,
                4,
                4,
                values={"customer_id": "10", "status": "new", "amount": "2.75", "note": "y"},
                types={**TYPES, "note": "varchar(8)"},
            ),
        ]
    )
    lake.ingest()
    after_ddl = m.step("activity")
    assert after_ddl.outcome == "rebuild", after_ddl
    assert "rewritten" in after_ddl.reason
    assert m.verify("activity").ok
    assert _view_rows(m)[10]["spend"] == Decimal("8.00")

    changed = lake_factory(
        TIDELAKE_HOME=str(lake.config.home),
        TIDELAKE_VIEWS__ACTIVITY__SQL=SQL.replace("MAX(amount)", "MIN(amount)"),
    )
    m2 = ViewMaintainer(changed.config, changed.spark)
    result = m2.step("activity")
    assert result.outcome == "rebuild"
    assert result.reason == "the definition changed"
    assert m2.verify("activity").ok
    assert _view_rows(m2)[10]["biggest"] == Decimal("2.75")


def test_the_view_follows_a_renamed_column(views: tuple[Lake, ViewMaintainer]) -> None:
    """As a PostgreSQL view does: RENAME COLUMN rewrites the base table (a rebuild), and the
    view reads the column under its new name from then on, its own columns unchanged."""
    lake, m = views
    lake.stage([_order("insert", 1, 1, 10, "new", "5.25"), _order("insert", 2, 2, 10, "new", "1")])
    lake.ingest()
    assert m.step("activity").outcome == "rebuild"
    rename = "ALTER TABLE shop.orders RENAME COLUMN amount TO total"
    renamed = {**TYPES, "total": TYPES["amount"]}
    del renamed["amount"]
    lake.stage([ddl_event("shop.orders", rename, "ALTER", 3, 3)])
    lake.stage(
        [
            event(
                "insert",
                3,
                4,
                4,
                values={"customer_id": "10", "status": "new", "total": "0.50"},
                types=renamed,
            )
        ]
    )
    lake.ingest()
    rebuilt = m.step("activity")
    assert rebuilt.outcome == "rebuild", rebuilt
    assert rebuilt.checkpoint is not None
    assert dict(rebuilt.checkpoint.renamed) == {"shop.orders": {"amount": "total"}}
    values = {"customer_id": "10", "status": "new", "total": "9.00"}
    lake.stage([event("update", 1, 5, 5, values=values, types=renamed)])
    lake.ingest()
    stepped = m.step("activity")
    assert stepped.outcome == "step", stepped
    assert m.verify("activity").ok
    row = _view_rows(m)[10]
    assert (row["orders"], row["spend"], row["biggest"]) == (3, Decimal("10.50"), Decimal("9.00"))
