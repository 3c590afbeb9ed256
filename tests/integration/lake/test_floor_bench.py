"""The short form of ``tidelake bench --part floor`` (bench/tidelake_bench/floor.py) on the
lake tests' real Spark session with the Hudi bundle: both layouts are written as they claim
(a copy-on-write table, and a merge-on-read one whose upserts stay log blocks, no compaction),
every form is measured, and every table keeps exactly its rows."""

from __future__ import annotations

from pathlib import Path

from lakekit import lake_config
from pyspark.sql import SparkSession

from tidelake_bench.floor import LAYOUTS, TOGETHER, FloorPlan, measure_floor


def test_the_floor_measures_both_layouts_as_they_are_laid_out(
    spark: SparkSession, tmp_path: Path
) -> None:
    plan = FloorPlan(table_rows=50, one_rows=(1, 10), together_rows=5, rounds=3, warmup=1)
    lines: list[str] = []
    got = measure_floor(
        spark, lake_config(tmp_path / "home"), tmp_path / "lake", plan, lines.append
    )

    assert set(got) == set(LAYOUTS)
    for layout, forms in got.items():
        assert set(forms) == {"one_1", "one_10", "three"}, layout
        for form, numbers in forms.items():
            assert numbers["writes"] == plan.rounds - plan.warmup, (layout, form)
            assert 0 < numbers["min_s"] <= numbers["median_s"] <= numbers["max_s"], (layout, form)
            assert numbers["cpu_s"] > 0, (layout, form)
    assert f"floor: round {plan.rounds} of {plan.rounds}" in lines

    def table_type(name: str) -> str:
        props = (tmp_path / "lake" / name / ".hoodie" / "hoodie.properties").read_text()
        return next(
            line.split("=", 1)[1]
            for line in props.splitlines()
            if line.startswith("hoodie.table.type=")
        )

    for i in range(TOGETHER):
        assert "COPY_ON_WRITE" == table_type(f"cow_{i}")
        assert "MERGE_ON_READ" == table_type(f"mor_bucket_{i}")
    # Every upsert into the merge-on-read tables stayed a log append: nothing compacted them.
    timeline = tmp_path / "lake" / "mor_bucket_0" / ".hoodie" / "timeline"
    assert len(list(timeline.glob("*.deltacommit"))) >= 1 + plan.rounds * len(plan.one_rows)
    assert [] == sorted(p.name for p in timeline.glob("*.commit"))
    assert list((tmp_path / "lake" / "mor_bucket_0").glob(".*.log.*"))
