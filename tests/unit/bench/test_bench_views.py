"""The views part's workload, step-phase clock and summary (bench/tidelake_bench/views.py)."""

import datetime as dt
import time
from collections import Counter
from decimal import Decimal
from types import SimpleNamespace

import pytest

from tidelake.events import Op
from tidelake_bench.report import BenchResult, render_markdown, views_markdown
from tidelake_bench.views import (
    DATE_DAYS,
    FIRST_DATE,
    REGIONS,
    Customers,
    KeptCounter,
    Orders,
    PhaseClock,
    SizeRun,
    StepRun,
    ViewsPlan,
    ViewsResult,
    base_row,
    canal_values,
    customer_changes,
    customer_row,
    extreme_kept,
    headline,
    patched,
    round_mix,
)


def test_base_rows_are_a_function_of_the_id_and_spread_over_customers() -> None:
    """Every customer gets the same number of orders, with scattered dates: the group's MAX
    is one order, not a tie of many."""
    rows = [base_row(i, 100) for i in range(1, 10_001)]
    assert base_row(42, 100) == base_row(42, 100)
    assert {100} == set(Counter(r["customer_id"] for r in rows).values())
    assert all(
        FIRST_DATE <= r["order_date"] < FIRST_DATE + dt.timedelta(days=DATE_DAYS) for r in rows
    )
    by_customer: dict[int, list[dt.date]] = {}
    for r in rows:
        by_customer.setdefault(r["customer_id"], []).append(r["order_date"])
    tied = sum(dates.count(max(dates)) > 1 for dates in by_customer.values())
    assert tied <= 10  # a few of 100 customers at most
    assert isinstance(rows[0]["amount"], Decimal)
    assert rows[0]["amount"].as_tuple().exponent == -2


def test_canal_values_are_text() -> None:
    row = {"id": 7, "amount": Decimal("3.5"), "order_date": dt.date(2024, 2, 29), "x": None}
    assert {"id": "7", "amount": "3.50", "order_date": "2024-02-29", "x": None} == canal_values(row)


@pytest.mark.parametrize(
    ("keys", "mix"),
    [(100, (85, 10, 5)), (1_000, (850, 100, 50)), (20, (17, 2, 1)), (5, (5, 0, 0))],
)
def test_round_mix_adds_up(keys: int, mix: tuple[int, int, int]) -> None:
    assert mix == round_mix(keys, 0.10, 0.05)
    assert keys == sum(round_mix(keys, 0.10, 0.05))


def test_changes_touch_distinct_live_keys_and_keep_the_live_set() -> None:
    """Updates and deletes pick live orders once each; inserts are new ids dated after every
    base order; a deleted order is never changed again."""
    orders = Orders(rows=1_000, customers=50, seed=3)
    deleted: set[int] = set()
    for _ in range(5):
        changes = orders.changes(100, 0.10, 0.05)
        ids = [row["id"] for _, row in changes]
        assert len(ids) == len(set(ids)) == 100
        assert not deleted & set(ids)
        ops = Counter(op for op, _ in changes)
        assert {Op.UPDATE: 85, Op.INSERT: 10, Op.DELETE: 5} == ops
        for op, row in changes:
            if op is Op.INSERT:
                assert row["id"] > 1_000
                assert row["order_date"] >= FIRST_DATE + dt.timedelta(days=DATE_DAYS)
            elif op is Op.UPDATE:
                assert row["order_date"] == orders.row(row["id"])["order_date"]
            else:
                deleted.add(row["id"])
    assert 1_000 + 5 * (10 - 5) == len(orders)


def test_an_update_keeps_the_row_but_its_amount() -> None:
    orders = Orders(rows=10, customers=3, seed=1)
    _op, row = next(c for c in orders.changes(1, 0.0, 0.0) if c[0] is Op.UPDATE)
    base = base_row(row["id"], 3)
    assert {k: v for k, v in row.items() if k != "amount"} == {
        k: v for k, v in base.items() if k != "amount"
    }
    assert orders.row(row["id"]) == row


def test_more_changes_than_live_orders_are_refused() -> None:
    with pytest.raises(ValueError, match="live orders"):
        Orders(rows=10, customers=3).changes(40, 0.0, 0.0)


def test_customers_spread_over_regions_and_move_to_another_one() -> None:
    rows = [customer_row(i) for i in range(1, 5_001)]
    assert customer_row(42) == customer_row(42)
    assert set(REGIONS) == {r["region"] for r in rows}
    assert min(Counter(r["region"] for r in rows).values()) > 500
    customers = Customers(count=50, seed=3)
    seen: dict[int, str] = {}
    for _ in range(5):
        changes = customers.changes(4)
        assert 4 == len({row["id"] for _, row in changes})
        for op, row in changes:
            assert op is Op.UPDATE
            before = seen.get(row["id"], customer_row(row["id"])["region"])
            assert row["region"] != before
            assert {k: v for k, v in row.items() if k != "region"} == {
                k: v for k, v in customer_row(row["id"]).items() if k != "region"
            }
            seen[row["id"]] = row["region"]
            assert customers.row(row["id"]) == row


def test_customer_changes_per_round() -> None:
    assert (2, 20, 1) == tuple(customer_changes(k, 0.02) for k in (100, 1_000, 10))


def test_the_orders_changes_do_not_depend_on_the_customers() -> None:
    """The customers draw from their own generator: the orders' changes stay those of the
    aggregate-only bench, so its numbers stay comparable."""
    plain = Orders(rows=1_000, customers=50, seed=7)
    beside = Orders(rows=1_000, customers=50, seed=7)
    customers = Customers(count=50, seed=7)
    for _ in range(3):
        customers.changes(5)
        assert plain.changes(100, 0.1, 0.05) == beside.changes(100, 0.1, 0.05)


def test_phase_clock_counts_each_phase_without_the_calls_inside_it() -> None:
    clock = PhaseClock()

    def inner() -> str:
        time.sleep(0.02)
        return "in"

    timed_inner = clock.wrap("inner", inner)

    def outer() -> str:
        time.sleep(0.01)
        return timed_inner()

    assert "in" == clock.wrap("outer", outer)()
    took = clock.take()
    assert 0.02 <= took["inner"] < 0.2
    assert 0.01 <= took["outer"] < 0.02 + 0.01  # its own sleep, not the inner one
    assert {} == clock.take()  # taken: starts again


def test_phase_clock_counts_a_call_that_raises() -> None:
    clock = PhaseClock()

    def boom() -> None:
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        clock.wrap("boom", boom)()
    assert "boom" in clock.take()


def test_patched_restores_the_originals() -> None:
    class Owner:
        def work(self) -> int:
            return 1

    original = Owner.__dict__["work"]
    clock = PhaseClock()
    with patched([(Owner, "work", "w")], clock):
        assert 1 == Owner().work()
        assert Owner.__dict__["work"] is not original
    assert Owner.__dict__["work"] is original
    assert "w" in clock.take()
    module = SimpleNamespace(f=lambda: 2)
    f = module.f
    with patched([(module, "f", "f")], clock):
        assert 2 == module.f()
    assert module.f is f


def _size(
    rows: int,
    seconds: dict[int, list[float]],
    rebuild_s: float,
    join: dict[int, list[float]] | None = None,
) -> SizeRun:
    run = SizeRun(rows=rows, rebuild_s=rebuild_s, verified=True)
    for keys, times in seconds.items():
        for i, s in enumerate(times):
            run.steps.append(
                StepRun(keys, s, keys, keys - 5, i, {"recompute": s / 2, "view_write": 0.5})
            )
    for keys, times in (join or {}).items():
        run.customer_changes[keys] = customer_changes(keys, 0.02)
        run.join_rebuild_s = 2 * rebuild_s
        for s in times:
            run.join_steps.append(StepRun(keys, s, keys + 2, keys + 4, 0, {"join_changes": s / 2}))
    return run


def test_medians_per_k_and_growth_large_over_small() -> None:
    plan = ViewsPlan(table_rows=(1_000, 10_000), customers=50, keys=(10, 100))
    small = _size(1_000, {10: [1.0, 3.0, 2.0], 100: [2.0, 2.0, 9.0]}, 4.0)
    large = _size(10_000, {10: [3.0, 3.0, 5.0], 100: [5.0, 4.0, 4.0]}, 20.0)
    by_keys = small.by_keys()
    assert 2.0 == by_keys[10]["step_s"]
    assert 1.0 == by_keys[10]["recomputed"]
    assert {"recompute": 1.0, "view_write": 0.5} == by_keys[10]["phases_s"]
    n = headline(plan, [small, large])
    assert 10.0 == n["views_size_ratio"]
    assert 1.5 == n["view_step_growth[k=10]"]
    assert 2.0 == n["view_step_growth[k=100]"]
    assert 95 == n["view_step_groups[large,k=100]"]
    assert 20.0 == n["view_rebuild_s[large]"]
    assert "view_step_growth[k=10]" not in headline(plan, [small])


def test_markdown_shows_each_size_and_k_with_its_growth() -> None:
    plan = ViewsPlan(table_rows=(1_000, 10_000), customers=50, keys=(10,), rounds=3)
    runs = [_size(1_000, {10: [2.0] * 3}, 4.0), _size(10_000, {10: [3.0] * 3}, 20.0)]
    details = ViewsResult(plan, runs).to_json()
    lines = views_markdown(details)
    assert any(line.startswith("| 1,000 | 10 | 2 | 10 | 5 | 1 | 4 | 1 |") for line in lines)
    assert any(line.startswith("| 10,000 | 10 | 3 | 10 | 5 | 1 | 20 | 1.5 |") for line in lines)
    result = BenchResult(quick=True, numbers=headline(plan, runs), details={"views": details})
    text = render_markdown(result)
    assert "view step at 1,000 vs 10,000 base rows" in text
    assert "| 10,000 | 10 | 3 |" in text
    assert [] == views_markdown({"sizes": []})


def test_set_up_runs_only_for_the_parts_that_use_it() -> None:
    """The views part needs neither the NATS CLI nor the Hudi 0.14 contenders."""
    from tidelake_bench.runner import PARTS, needs_setup

    assert "views" in PARTS
    assert not needs_setup(("views",))
    assert not needs_setup(("freshness", "views"))
    assert needs_setup(("stage",))
    assert needs_setup(PARTS)


MAX = [("max", "last")]


@pytest.mark.parametrize(
    ("added", "gone", "kept"),
    [
        (5, 5, True),  # the update left the MAX column as it was
        (7, 5, True),  # a bigger value came in with it
        (4, 5, False),  # the MAX really went: read the group again
        (None, 5, False),  # deleted
        (9, 3, False),  # the MAX was not touched: not a recompute for it
    ],
)
def test_extreme_kept(added: int | None, gone: int, kept: bool) -> None:
    change = {"add_last": added, "gone_last": gone}
    assert kept is extreme_kept(MAX, change, {"last": 5})


def test_extreme_kept_for_min_and_without_a_stored_row() -> None:
    assert extreme_kept([("min", "first")], {"add_first": 1, "gone_first": 1}, {"first": 1})
    assert not extreme_kept([("min", "first")], {"add_first": 2, "gone_first": 1}, {"first": 1})
    assert not extreme_kept(MAX, {"add_last": 5, "gone_last": 5}, None)


def test_kept_counter_counts_only_recomputed_groups() -> None:
    view = SimpleNamespace(aggregates=[SimpleNamespace(func="max", alias="last")])
    counter = KeptCounter()
    merge = counter.wrap(lambda v, change, stored: None if change["r"] else {"ok": 1})
    merge(view, {"r": True, "add_last": 5, "gone_last": 5}, {"last": 5})
    merge(view, {"r": True, "add_last": 4, "gone_last": 5}, {"last": 5})
    assert {"ok": 1} == merge(view, {"r": False, "add_last": 5, "gone_last": 5}, {"last": 5})
    assert 1 == counter.take()
    assert 0 == counter.take()


def test_step_probe_times_its_targets_and_counts_kept_extremes_meanwhile() -> None:
    """Inside ``around()`` the targets are timed and the merge counted; outside, untouched."""
    from tidelake_bench.views import StepProbe

    view = SimpleNamespace(aggregates=[SimpleNamespace(func="max", alias="last")])
    owner = SimpleNamespace(
        work=lambda: "done", merge=lambda v, change, stored: None
    )  # a merge that always asks for a recomputation
    work, merge = owner.work, owner.merge
    probe = StepProbe(lambda: [(owner, "work", "w")], owner, "merge")
    with probe.around():
        assert "done" == owner.work()
        owner.merge(view, {"add_last": 5, "gone_last": 5}, {"last": 5})
    assert (owner.work, owner.merge) == (work, merge)
    phases, kept = probe.take()
    assert ["w"] == list(phases)
    assert 1 == kept


def test_a_views_only_run_shows_no_empty_tables() -> None:
    plan = ViewsPlan(table_rows=(1_000, 10_000), customers=50, keys=(10,), rounds=3)
    runs = [_size(1_000, {10: [2.0] * 3}, 4.0), _size(10_000, {10: [3.0] * 3}, 20.0)]
    details = ViewsResult(plan, runs).to_json()
    result = BenchResult(quick=True, numbers=headline(plan, runs), details={"views": details})
    text = render_markdown(result)
    assert "| measurement | value |" not in text
    assert "| target | value | met |" not in text
    assert text.endswith("|\n")
    assert "\n\n\n" not in text


def test_the_join_view_adds_its_own_keys_and_keeps_the_aggregate_ones() -> None:
    plan = ViewsPlan(table_rows=(1_000, 10_000), customers=50, keys=(10, 100))
    seconds = {10: [1.0, 3.0, 2.0], 100: [2.0, 2.0, 9.0]}
    plain = [_size(1_000, seconds, 4.0), _size(10_000, seconds, 20.0)]
    joined = [
        _size(1_000, seconds, 4.0, {10: [2.0, 2.0, 2.0], 100: [3.0, 4.0, 5.0]}),
        _size(10_000, seconds, 20.0, {10: [6.0, 6.0, 7.0], 100: [8.0, 8.0, 8.0]}),
    ]
    n, before = headline(plan, joined), headline(plan, plain)
    assert before == {k: v for k, v in n.items() if k in before}
    assert not any("join" in k or "customer_changes" in k for k in before)
    assert 6.0 == n["view_join_step_s[large,k=10]"]
    assert 4.0 == n["view_join_step_s[small,k=100]"]
    assert 3.0 == n["view_join_step_growth[k=10]"]
    assert 2.0 == n["view_join_step_growth[k=100]"]
    assert 104 == n["view_join_step_groups[large,k=100]"]
    assert 102 == n["view_join_step_records[small,k=100]"]
    assert 40.0 == n["view_join_rebuild_s[large]"]
    assert 2 == n["views_customer_changes[k=100]"]
    details = ViewsResult(plan, joined).to_json()
    assert "LEFT JOIN" in details["join_sql"]
    assert {"10": 1, "100": 2} == details["sizes"][0]["customer_changes"]
    lines = views_markdown(details)
    join_at = next(i for i, line in enumerate(lines) if line.startswith("Join view:"))
    assert "1 at K=10, 2 at K=100" in lines[join_at]
    assert "| 10,000 | 10 | 6 | 12 | 14 | 0 | 40 | 3 |" in lines[join_at:]
    assert any("join_changes" in line for line in lines[join_at:])
    assert "| 1,000 | 10 | 2 | 10 | 5 | 1 | 4 | 1 |" in lines[:join_at]
    assert not any(line.startswith("Join view:") for line in views_markdown(
        ViewsResult(plan, plain).to_json()))  # fmt: skip
