"""A small table is written with Hudi's SIMPLE index and no metadata table; once its base
files reach ``lake.record_index_from_mb`` it switches, for good, to the metadata table's
record index — and no row written before the switch is duplicated or resurrected after it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lakekit import Lake, event

from tidelake.lake.hudi import METADATA_PARTITIONS_KEY


def metadata_partitions(lake: Lake) -> str:
    props = (Path(lake.path()) / ".hoodie" / "hoodie.properties").read_text()
    for line in props.splitlines():
        if line.startswith(METADATA_PARTITIONS_KEY + "="):
            return line.split("=", 1)[1]
    return ""


def test_a_table_switches_to_the_record_index_when_it_grows(
    lake_factory: Callable[..., Lake],
) -> None:
    # 2 KiB: the first commit's base file (~ 430 KiB with Hudi's meta columns) crosses it.
    lake = lake_factory(TIDELAKE_LAKE__RECORD_INDEX_FROM_MB="0.002")
    seq = iter(range(1, 10_000))
    lake.stage(event("insert", i, i, next(seq), values={"status": "new"}) for i in range(1, 41))
    lake.ingest()
    assert "" == metadata_partitions(lake), "created small: no metadata table"
    assert not (Path(lake.path()) / ".hoodie" / "metadata").exists()

    # The switch: updates and deletes of rows written before it, and new rows.
    changes = [
        event("update", i, 100 + i, next(seq), values={"status": "paid"}) for i in range(1, 11)
    ]
    changes += [
        event("delete", i, 200 + i, next(seq), values={"status": "new"}) for i in range(11, 16)
    ]
    changes += [
        event("insert", i, 300 + i, next(seq), values={"status": "new"}) for i in range(41, 51)
    ]
    lake.stage(changes)
    lake.ingest()
    assert "record_index" in metadata_partitions(lake).split(",")

    # After it: the record index must know every key written before it.
    touched = [i for i in range(1, 51, 3) if not 11 <= i <= 15]
    later = [event("update", i, 400 + i, next(seq), values={"status": "sent"}) for i in touched]
    later += [
        event("delete", i, 500 + i, next(seq), values={"status": "new"}) for i in (20, 30, 45)
    ]
    later += [event("insert", i, 600 + i, next(seq), values={"status": "new"}) for i in (12, 13)]
    lake.stage(later)
    lake.ingest()

    expected = {str(i): ("paid",) if i <= 10 else ("new",) for i in range(1, 51)}
    for i in range(11, 16):
        del expected[str(i)]
    expected |= {str(i): ("sent",) for i in touched}
    for i in (20, 30, 45):
        del expected[str(i)]
    expected |= {"12": ("new",), "13": ("new",)}  # inserted again after their delete
    rows = lake.spark_rows()
    assert len(expected) == len(rows), "one row per key: none duplicated by the switch"
    assert expected == {str(r["id"]): (r["status"],) for r in rows}
    assert expected == lake.state()


def test_a_table_below_the_threshold_keeps_the_simple_index(lake: Lake) -> None:
    """The default threshold (64 MB) is far above a few rows: no metadata table is built."""
    lake.stage(event("insert", i, i, i, values={"status": "new"}) for i in range(1, 6))
    lake.ingest()
    lake.stage([event("update", 1, 10, 10, values={"status": "paid"})])
    lake.ingest()
    assert "" == metadata_partitions(lake)
    assert {"1": ("paid",), "2": ("new",), "3": ("new",), "4": ("new",), "5": ("new",)} == (
        lake.state()
    )
