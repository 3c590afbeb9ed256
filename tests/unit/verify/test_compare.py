"""Row comparison used by the demo and verify: canonical text on both sides."""

import datetime as dt
from decimal import Decimal

from tidelake.verify.compare import canonical, compare_rows


def test_canonical_forms_match_canal_text() -> None:
    """Typed lake values print exactly as canal-json carries them."""
    values = [
        Decimal("12.50"),
        dt.datetime(2026, 1, 2, 3, 4, 5),
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        dt.date(2026, 1, 2),
        18446744073709551615,
        None,
    ]
    expected = [
        "12.50",
        "2026-01-02 03:04:05",
        "2026-01-02 03:04:05",
        "2026-01-02",
        "18446744073709551615",
        None,
    ]
    assert expected == [canonical(v) for v in values]


def test_equal_tables_have_no_mismatch() -> None:
    """Same rows in any order: zero mismatches, counts on both sides."""
    want = [{"id": "1", "v": "1.00"}, {"id": "2", "v": None}]
    got = [{"id": 2, "v": None}, {"id": 1, "v": Decimal("1.00")}]
    result = compare_rows("db.t", ["id"], want, got)
    assert (0, 2, 2) == (result.mismatches, result.rows_expected, result.rows_in_lake)


def test_every_kind_of_difference_is_counted() -> None:
    """Missing, unexpected, different and duplicated keys each count once."""
    want = [{"id": "1", "v": "a"}, {"id": "2", "v": "b"}, {"id": "3", "v": "c"}]
    got = [{"id": 1, "v": "a"}, {"id": 1, "v": "a"}, {"id": 2, "v": "B"}, {"id": 4, "v": "d"}]
    result = compare_rows("db.t", ["id"], want, got)
    expected = {"missing": 1, "unexpected": 1, "different": 1, "duplicate_keys": 1}
    actual = {
        "missing": result.missing,
        "unexpected": result.unexpected,
        "different": result.different,
        "duplicate_keys": result.duplicate_keys,
    }
    assert expected == actual
    assert 4 == result.mismatches
