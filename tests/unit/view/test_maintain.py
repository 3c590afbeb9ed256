"""A group's new row from its stored row and its change, or the verdict that only the base
table knows it (view/maintain.py ``_merge``: the arithmetic of an incremental step)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tidelake.view.definition import parse_view
from tidelake.view.maintain import _merge

VIEW = parse_view(
    "v",
    "SELECT c, COUNT(*) AS n, SUM(x) AS total, MAX(d) AS latest, MIN(d) AS first "
    "FROM shop.t GROUP BY c",
)


def _change(rows: int, n_x: int, sum_x: str | None, **extremes: Any) -> dict[str, Any]:
    base = {
        "_tl_key": '["1"]',
        "c": 1,
        "d_rows": rows,
        "d_n_total": n_x,
        "d_sum_total": None if sum_x is None else Decimal(sum_x),
        "d_n_latest": rows,
        "d_n_first": rows,
        "add_latest": None,
        "gone_latest": None,
        "add_first": None,
        "gone_first": None,
    }
    return base | extremes


STORED = {
    "_tl_rows": 3,
    "n": 3,
    "total": Decimal("10.00"),
    "_tl_n_total": 3,
    "latest": 20,
    "_tl_n_latest": 3,
    "first": 5,
    "_tl_n_first": 3,
}


def test_counts_and_sums_add_up() -> None:
    new = _merge(VIEW, _change(1, 1, "2.50", add_latest=7, add_first=7), STORED)
    assert new is not None
    assert (new["n"], new["total"], new["latest"], new["first"]) == (4, Decimal("12.50"), 20, 5)


def test_a_sum_of_no_values_is_null() -> None:
    stored = STORED | {"_tl_n_total": 1, "total": Decimal("1.00")}
    new = _merge(VIEW, _change(0, -1, "-1.00"), stored)
    assert new is not None
    assert new["total"] is None
    assert new["n"] == 3


def test_a_group_whose_extreme_goes_is_read_again() -> None:
    assert _merge(VIEW, _change(-1, -1, "-1.00", gone_latest=20), STORED) is None
    assert _merge(VIEW, _change(-1, -1, "-1.00", gone_first=5), STORED) is None


def test_an_added_value_reaching_the_gone_extreme_is_the_new_one() -> None:
    new = _merge(VIEW, _change(0, 0, "0", gone_latest=20, add_latest=20), STORED)
    assert new is not None
    assert new["latest"] == 20
    new = _merge(VIEW, _change(0, 0, "0", gone_latest=20, add_latest=25), STORED)
    assert new is not None
    assert new["latest"] == 25
    assert _merge(VIEW, _change(0, 0, "0", gone_latest=20, add_latest=19), STORED) is None


def test_taking_away_rows_the_view_does_not_hold_is_read_again() -> None:
    assert _merge(VIEW, _change(-1, -1, "-1.00"), None) is None
    assert _merge(VIEW, _change(-4, -3, "-10.00"), STORED) is None


def test_a_first_sum_of_zero_is_a_decimal_zero() -> None:
    """A group whose values were all NULL gains a 0.00: its SUM is 0.00, not the int 0 (which
    a DECIMAL column refuses) and not NULL."""
    stored = STORED | {"total": None, "_tl_n_total": 0}
    new = _merge(VIEW, _change(1, 1, "0.00", add_latest=7, add_first=7), stored)
    assert new is not None
    assert new["total"] == Decimal("0.00")
    assert isinstance(new["total"], Decimal)
    assert new["_tl_n_total"] == 1


def test_an_emptied_group_is_deleted_without_reading_it_again() -> None:
    """Its MAX went with its last rows: nothing is left to look for in the base table."""
    new = _merge(VIEW, _change(-3, -3, "-10.00", gone_latest=20, gone_first=5), STORED)
    assert new is not None
    assert new["_tl_rows"] == 0
