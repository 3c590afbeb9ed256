"""A view update killed (SIGKILL of the ingest's process group: Python and its JVM) before
its commit or while Hudi writes it is applied exactly once by the next ingest: the view's
checkpoint lives in the same Hudi commit as its rows (view/table.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from lakekit import Lake, event, ingest_in_subprocess

from tidelake.view.keeper import ViewKeeper, read_state
from tidelake.view.maintain import ViewMaintainer
from tidelake.view.table import CRASH_HOOK_ENV, ViewTable

REPO = Path(__file__).resolve().parents[3]
TYPES = {"id": "bigint", "customer_id": "bigint", "amount": "decimal(10,2)"}
SQL = (
    "SELECT customer_id, COUNT(*) AS orders, SUM(amount) AS spend FROM shop.orders "
    "GROUP BY customer_id"
)


def _order(op: str, oid: int, pos: int, customer: int, amount: str) -> object:
    values = {"customer_id": str(customer), "amount": amount}
    return event(op, oid, pos, pos, values=values, types=TYPES)


@pytest.mark.parametrize(
    "point",
    [
        # Before the commit: the lifecycle view's crash test covers it in `make test`.
        pytest.param("before_commit", marks=pytest.mark.long),
        "in_commit",
    ],
)
def test_killed_view_update_lands_once(
    point: str, lake_factory: Callable[..., Lake], tmp_path: Path
) -> None:
    lake = lake_factory(TIDELAKE_VIEWS__SPEND__SQL=SQL)
    lake.stage([_order("insert", 1, 1, 10, "1.50"), _order("insert", 2, 2, 11, "2.00")])
    ingestor = lake.ingestor()
    ingestor.after_round = ViewKeeper(lake.config, lake.spark)
    ingestor.run_once()
    assert read_state(lake.config)["spend"]["outcome"] == "rebuild"

    lake.stage([_order("update", 1, 3, 10, "4.00"), _order("delete", 2, 4, 11, "2.00")])
    lake.stage([_order("insert", 3, 5, 10, "0.25")])
    log = tmp_path / "ingest.log"
    returncode = ingest_in_subprocess(lake, log, **{CRASH_HOOK_ENV: point})
    assert -signal.SIGKILL == returncode, log.read_text()[-3000:]
    table = ViewTable(lake.config, lake.spark, "spend")
    assert table.checkpoint() is not None
    # The base table committed the round; the view did not.
    base = table.checkpoint().base["shop.orders"]  # type: ignore[union-attr]
    assert lake.checkpoint() is not None
    if point == "in_commit":  # killed while Hudi wrote it: an instant left in flight
        timeline = Path(table.path) / ".hoodie" / "timeline"
        done = {p.name.split("_")[0] for p in timeline.glob("*.commit")}
        done |= {p.name.split("_")[0] for p in timeline.glob("*.replacecommit")}
        assert {p.name.split(".")[0] for p in timeline.glob("*.inflight")} - done

    restarted = lake.ingestor()
    restarted.after_round = ViewKeeper(lake.config, lake.spark)
    restarted.run_once()  # nothing staged: the keeper catches up on its first call
    state = read_state(lake.config)["spend"]
    assert state["outcome"] == "step", state
    assert state["base"]["shop.orders"] > base
    m = ViewMaintainer(lake.config, lake.spark)
    assert m.verify("spend").ok
    rows = {r["customer_id"]: (r["orders"], r["spend"]) for r in table.read().collect()}
    assert rows == {10: (2, Decimal("4.25"))}
