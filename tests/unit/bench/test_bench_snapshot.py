"""The snapshot bench part's numbers and its target in the report."""

from __future__ import annotations

from tidelake_bench.report import BenchResult
from tidelake_bench.runner import FULL, PARTS, QUICK
from tidelake_bench.snapshot import SnapshotResult, SnapshotRun


def test_the_snapshot_target_needs_20000_rows_per_s_from_both_sources() -> None:
    """Met only when MariaDB and PostgreSQL each snapshot at >= 20,000 rows/s; not measured
    (None) without numbers."""
    result = BenchResult(quick=False)
    assert result.targets()["snapshot"]["met"] is None
    result.numbers = {"snapshot_rows_per_s[mysql]": 25_000, "snapshot_rows_per_s[postgres]": 19_000}
    assert result.targets()["snapshot"]["met"] is False
    result.numbers["snapshot_rows_per_s[postgres]"] = 21_000
    assert result.targets()["snapshot"]["met"] is True


def test_the_part_is_declared_with_the_issues_size_and_a_quick_one() -> None:
    """``--part snapshot`` exists; the full form snapshots 10M rows incrementally (1M the
    initial way), the quick one 200k (50k); a run's numbers serialise for the result file."""
    assert "snapshot" in PARTS
    assert (FULL.snapshot_rows, QUICK.snapshot_rows) == (10_000_000, 200_000)
    assert (FULL.snapshot_initial_rows, QUICK.snapshot_initial_rows) == (1_000_000, 50_000)
    out = SnapshotResult([SnapshotRun(source="mysql", rows=10, rows_per_s=5.0)]).to_json()
    assert out["runs"][0]["rows_per_s"] == 5.0
