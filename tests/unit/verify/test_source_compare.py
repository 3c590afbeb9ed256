"""verify's comparison: type-aware comparable text, counts, hashes and first differing keys."""

import datetime as dt
from decimal import Decimal

from tidelake.verify.source import comparable, compare_tables


def test_comparable_agrees_between_source_and_lake_values() -> None:
    """The same value read from the source and from the lake compares equal."""
    assert comparable(1.1, "float") == comparable(1.100000023841858, "float")
    assert comparable(b"\x05", "bit(5)") == comparable(5, "bit(5)")
    assert comparable('{"b": 1, "a": 2}', "jsonb") == comparable({"a": 2, "b": 1}, "jsonb")
    assert comparable(Decimal("12.50"), "decimal(12,2)") == "12.50"
    aware = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    assert comparable(aware, "timestamp") == comparable(dt.datetime(2024, 1, 1, 12), "datetime")
    assert comparable(memoryview(b"\x01"), "bytea") == comparable(b"\x01", "bytea")
    assert comparable(True, "boolean") == "1"


def test_equal_tables_have_equal_hashes() -> None:
    """Same rows in any order: no mismatch and the same table hash."""
    a = [{"id": "1", "v": "x"}, {"id": "2", "v": None}]
    r = compare_tables("s.t", ["id"], ["id", "v"], a, list(reversed(a)))
    assert (r.mismatches, r.rows_source, r.rows_lake) == (0, 2, 2)
    assert r.hash_source == r.hash_lake


def test_differences_are_counted_and_named() -> None:
    """Missing, unexpected and different rows are counted; the first keys are shown."""
    source = [{"id": "1", "v": "x"}, {"id": "2", "v": "y"}, {"id": "3", "v": "z"}]
    lake = [{"id": "1", "v": "x"}, {"id": "2", "v": "Y"}, {"id": "4", "v": "w"}]
    r = compare_tables("s.t", ["id"], ["id", "v"], source, lake)
    assert (r.missing, r.unexpected, r.different, r.mismatches) == (1, 1, 1, 3)
    assert r.hash_source != r.hash_lake
    assert r.samples[0].startswith("key ('2',) differs")
    assert "('3',)" in r.samples[1]
    assert "('4',)" in r.samples[2]


def test_full_row_key_compares_distinct_rows_and_counts_the_collapsed_ones() -> None:
    """Under ``keyless: full_row`` the key is every column, so identical source rows are one
    lake row (docs/capture.md): verify counts the source once per distinct row, hashes the
    distinct rows (equal hashes), reports how many collapsed, and finds no mismatch; a row
    the lake lacks is still missing."""
    cols = ["a", "b"]
    source = [{"a": "1", "b": "x"}, {"a": "8", "b": "d"}, {"a": "8", "b": "d"}]
    lake = [{"a": "8", "b": "d"}, {"a": "1", "b": "x"}]
    r = compare_tables("s.t", cols, cols, source, lake)
    assert (r.rows_source, r.rows_lake, r.collapsed, r.mismatches) == (2, 2, 1, 0)
    assert r.hash_source == r.hash_lake
    r = compare_tables("s.t", cols, cols, source, lake[:1])
    assert r.missing == 1
