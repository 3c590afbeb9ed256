"""The demo's closing figures: freshness when the lake falls behind, many tables summed up."""

from __future__ import annotations

import io

from rich.console import Console

from tidelake.lake.ledger import CommitRecord
from tidelake.pipeline.demo import DemoResult, Published, render_summary


def _published() -> Published:
    published = Published()
    published.seqs["orders"] += [1, 2, 3]
    published.commit_ms["orders"] += [1_000, 2_000, 3_000]
    return published


def test_freshness_leaves_out_what_no_commit_covered_when_the_lake_caught_up() -> None:
    """Each message's freshness: its source commit to the first commit whose checkpoint
    covers it. Without a deadline (the lake caught up) nothing is left uncovered to count:
    ``not_visible`` stays None."""
    result = DemoResult()
    commits = [CommitRecord(table="shop.orders", seq=2, committed_at_ms=5_000)]
    result.measure_freshness(_published(), commits)
    assert (3.5, 4.0, None) == (
        result.freshness_p50_s,
        result.freshness_max_s,
        result.not_visible,
    )
    assert 1 == result.commits


def test_a_lake_behind_counts_each_message_not_visible_with_its_age() -> None:
    """When the wait times out, a message no commit covered counts with its age at that
    moment, so the percentiles are lower bounds, and how many there were is said."""
    result = DemoResult()
    commits = [CommitRecord(table="shop.orders", seq=2, committed_at_ms=5_000)]
    result.measure_freshness(_published(), commits, until_ms=9_000)
    assert 1 == result.not_visible
    assert 6.0 == result.freshness_max_s
    assert 4.0 == result.freshness_p50_s


def test_many_tables_are_summed_up_but_a_differing_table_is_named() -> None:
    """Past 20 tables the summary lists the differing ones and totals the others on one
    line, instead of a thousand rows."""
    per_table = {
        f"shop.store_{i:04d}": {
            "rows_expected": 10,
            "rows_in_lake": 10,
            "mismatches": 0,
            "samples": [],
        }
        for i in range(1, 26)
    }
    per_table["shop.store_0007"] |= {"rows_in_lake": 9, "mismatches": 1}
    buf = io.StringIO()
    out = Console(file=buf, width=100, force_terminal=False, color_system=None)
    render_summary(DemoResult(tables=25, mismatches=1, per_table=per_table), out)
    rows = [line for line in buf.getvalue().splitlines() if line.startswith("│")]
    assert 2 == len(rows), rows
    assert ["shop.store_0007", "10", "9", "1"] == [c.strip() for c in rows[0].split("│")[1:5]]
    assert ["24 other tables", "240", "240", "0"] == [c.strip() for c in rows[1].split("│")[1:5]]
