"""The floor part's own logic: its layouts' Hudi options, summaries and headline numbers."""

from __future__ import annotations

import pytest

from tidelake.config import Config
from tidelake_bench.floor import LAYOUTS, QUICK_FLOOR, FloorPlan, headline, options, summary
from tidelake_bench.runner import FULL, PARTS, QUICK


def test_the_layouts_are_todays_small_tables_and_merge_on_read_without_compaction() -> None:
    lake = Config().lake
    cow = options(lake, LAYOUTS["cow"], "t")
    mor = options(lake, LAYOUTS["mor_bucket"], "t")
    assert (cow["hoodie.datasource.write.table.type"], cow["hoodie.index.type"]) == (
        "COPY_ON_WRITE",
        "SIMPLE",
    )
    assert "false" == cow["hoodie.metadata.enable"]
    assert (mor["hoodie.datasource.write.table.type"], mor["hoodie.index.type"]) == (
        "MERGE_ON_READ",
        "BUCKET",
    )
    # No commit of the measured ones compacts: compaction is left to a separate job.
    assert "false" == mor["hoodie.compact.inline"]
    assert "false" == mor["hoodie.metadata.enable"]


def test_a_summary_drops_the_warm_up_rounds() -> None:
    got = summary([9.0, 1.0, 3.0, 2.0], [20.0, 1.5, 2.5, 2.0], warmup=1)
    assert got == {"writes": 3, "median_s": 2.0, "min_s": 1.0, "max_s": 3.0, "cpu_s": 2.0}
    with pytest.raises(ValueError, match="leave none"):
        summary([1.0], [1.0], warmup=1)


def test_the_headline_takes_the_smallest_commit_and_the_round_of_three() -> None:
    forms = {
        "one_2000": {"median_s": 2.0, "cpu_s": 3.3},
        "one_1": {"median_s": 1.1, "cpu_s": 1.9},
        "three": {"median_s": 2.8, "cpu_s": 5.4},
    }
    assert headline({"mor_bucket": forms}) == {
        "floor_commit_s[mor_bucket]": 1.1,
        "floor_commit_cpu_s[mor_bucket]": 1.9,
        "floor_round_of_three_s[mor_bucket]": 2.8,
        "floor_round_of_three_cpu_s[mor_bucket]": 5.4,
    }


def test_the_floor_is_a_part_with_smaller_quick_sizes() -> None:
    assert "floor" in PARTS
    assert FULL.floor == FloorPlan()
    assert QUICK.floor == QUICK_FLOOR
    assert QUICK.floor.table_rows < FULL.floor.table_rows
    # The warm-up rounds leave rounds to measure, at both sizes.
    assert all(plan.rounds > plan.warmup for plan in (FULL.floor, QUICK.floor))
