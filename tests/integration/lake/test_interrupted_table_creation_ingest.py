"""The ingest after a kill -9 that interrupted the creation of a Hudi table (`make chaos`
found every later write to such a table failing, until the table was paused)."""

from __future__ import annotations

from pathlib import Path

from lakekit import Lake, event

from tidelake.lake.hudi import is_hudi_table


def test_rows_land_in_a_table_whose_creation_was_interrupted(lake: Lake) -> None:
    """With the remnant of an interrupted creation at the table's path, the next ingest
    creates the table and lands the rows; nothing is paused."""
    meta = Path(lake.path()) / ".hoodie"
    for sub in (".schema", "timeline", ".temp"):
        (meta / sub).mkdir(parents=True)
    lake.stage(
        [
            event("insert", 1, 10, seq=1, values={"status": "new", "amount": "1.50"}),
            event("insert", 2, 11, seq=2, values={"status": "paid", "amount": "2.50"}),
        ]
    )
    stats = lake.ingest()
    assert {} == stats.refused
    assert is_hudi_table(lake.path())
    assert {1: "new", 2: "paid"} == {r["id"]: r["status"] for r in lake.rows()}
