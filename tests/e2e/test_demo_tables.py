"""`tidelake demo --tables 8`: the many-tables workload (issue 21) through the real pipeline —
nats-server, the stager and the continuous ingest as processes, Spark + Hudi — with every
table created from its first row before the measured stream, then verified row by row. The
short form; the measured run is `tidelake bench --part tables` (docs/benchmarks.md)."""

from pathlib import Path

import pytest
from demokit import run_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = 8


def test_every_table_of_many_lands_equal_to_the_source(tmp_path: Path) -> None:
    """Eight tables at 50 events/s each: each is in the lake, equal to the source, nothing
    dead-lettered, and freshness is measured over the stream after the tables existed."""
    summary = run_demo(
        tmp_path / "demo", *("--tables", str(TABLES), "--events", "800", "--rate", "400")
    )
    names = {f"shop.store_{i:04d}" for i in range(1, TABLES + 1)}
    assert names == set(summary["per_table"])
    assert {"tables": TABLES, "mismatches": 0, "dlq": 0} == {
        k: summary[k] for k in ("tables", "mismatches", "dlq")
    }
    assert all(
        t["rows_in_lake"] == t["rows_expected"] > 0 for t in summary["per_table"].values()
    ), summary["per_table"]
    assert summary["events"] >= 800 + TABLES  # the first rows come on top of the stream
    assert summary["tables_created_s"] > 0
    assert summary["freshness_p99_s"] is not None
    assert summary["not_visible"] is None
