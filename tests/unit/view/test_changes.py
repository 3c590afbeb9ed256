"""Change-log values typed exactly or refused, and the ranges the change log can answer
(view/changes.py; the encodings are Hudi 1.1.1's, found by running it)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pyspark.sql import types as T  # noqa: N812

from tidelake.lake.store import CompletedInstant
from tidelake.view.changes import (
    UndecodableImageError,
    UnreadableRangeError,
    decode_value,
    plan_range,
    renames_after,
)


@pytest.mark.parametrize(
    ("value", "data_type", "expected"),
    [
        ([0, 0, 0, 0, 0, 125], T.DecimalType(12, 2), Decimal("1.25")),
        ([0, 0, 0, 0, 0, -126], T.DecimalType(12, 2), Decimal("1.30")),  # 0x82 = 130
        ([0, 0, 0, 0, 3, -25], T.DecimalType(12, 2), Decimal("9.99")),
        ([-1, -1, -1, -1, -1, -125], T.DecimalType(12, 2), Decimal("-1.25")),
        (19782, T.DateType(), dt.date(2024, 2, 29)),
        (1709212455123456, T.TimestampType(), dt.datetime(2024, 2, 29, 13, 14, 15, 123456, dt.UTC)),
        (1709212455123456, T.TimestampNTZType(), dt.datetime(2024, 2, 29, 13, 14, 15, 123456)),
        (7, T.LongType(), 7),
        (1.5, T.DoubleType(), 1.5),
        ("NaN", T.DoubleType(), None),
        ("paid", T.StringType(), "paid"),
        (None, T.DecimalType(12, 2), None),
    ],
)
def test_values_are_typed_exactly(value: object, data_type: T.DataType, expected: object) -> None:
    got = decode_value(value, data_type)
    if expected is None and value == "NaN":
        assert got != got  # NaN
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("value", "data_type"),
    [
        ({"zero": False}, T.DecimalType(12, 2)),  # Hudi's inferred base-file image
        ("2024-02-29 13:14:15", T.TimestampType()),
        (True, T.LongType()),
        (b"x", T.BinaryType()),
    ],
)
def test_unknown_encodings_are_refused(value: object, data_type: T.DataType) -> None:
    with pytest.raises(UndecodableImageError):
        decode_value(value, data_type)


def _instant(completed: str, action: str = "commit", **meta: str) -> CompletedInstant:
    return CompletedInstant(action, completed[:-1] + "0", completed, meta)


def test_a_range_is_planned_or_refused() -> None:
    timeline = [_instant("101"), _instant("102"), _instant("103")]
    span = plan_range("shop.t", "/lake/t", timeline, "101", retained_commits=10)
    assert span is not None
    assert (span.after, span.through, span.commits) == ("101", "103", 2)
    assert plan_range("shop.t", "/lake/t", timeline, "103", retained_commits=10) is None
    with pytest.raises(UnreadableRangeError, match="rewritten"):
        plan_range(
            "shop.t",
            "/t",
            [*timeline, _instant("104", "replacecommit")],
            "103",
            retained_commits=10,
        )
    with pytest.raises(UnreadableRangeError, match="cleaner"):
        plan_range("shop.t", "/t", timeline, "101", retained_commits=2)
    with pytest.raises(UnreadableRangeError, match="no longer on its timeline"):
        plan_range("shop.t", "/t", timeline, "099", retained_commits=10)
    with pytest.raises(UnreadableRangeError, match="not read it yet"):
        plan_range("shop.t", "/t", timeline, None, retained_commits=10)


def test_renames_after_a_checkpoint_in_order() -> None:
    timeline = [
        _instant("101", "replacecommit", **{"tidelake.renamed": '[["a", "b"]]'}),
        _instant("102"),
        _instant("103", "replacecommit", **{"tidelake.renamed": '[["b", "c"], ["x", "y"]]'}),
    ]
    assert renames_after(timeline, "101") == [("b", "c"), ("x", "y")]
    assert renames_after(timeline, "100") == [("a", "b"), ("b", "c"), ("x", "y")]
    assert renames_after(timeline, None) == []
