"""Hudi's own merge, with no watermark in front: the options of lake/hudi.py on real Hudi."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from lakekit import Lake, event

from tidelake.events import ChangeEvent
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.hudi import CHECKPOINT_KEY, write_options
from tidelake.lake.rows import build_batch


def _write(lake: Lake, events: Sequence[ChangeEvent], seq: int) -> None:
    """One upsert straight through the Hudi datasource with the ingest's options."""
    batch = build_batch("shop.orders", events, ("id",))
    options = write_options(
        lake.config.lake,
        "shop",
        "orders",
        ("id",),
        {CHECKPOINT_KEY: TableCheckpoint(seq, None).to_json()},
    )
    df = lake.spark.createDataFrame(batch.rows, batch.schema)
    df.write.format("hudi").options(**options).mode("append").save(lake.path())


def test_an_older_position_in_a_later_commit_does_not_overwrite_a_newer_one(lake: Lake) -> None:
    """EVENT_TIME_ORDERING on ``_tl_position``: a later commit carrying an older update (or
    an older delete) of a key loses to the newer row already stored."""
    _write(lake, [event("update", 1, 20, 1, values={"status": "newer"})], 1)
    _write(lake, [event("update", 1, 10, 2, values={"status": "older"})], 2)
    _write(lake, [event("delete", 1, 15, 3, values={"status": "older"})], 3)
    expected = {"1": ("newer",)}
    assert expected == lake.state()
    props = (Path(lake.path()) / ".hoodie" / "hoodie.properties").read_text().splitlines()
    expected_props = {
        "hoodie.record.merge.mode=EVENT_TIME_ORDERING",
        "hoodie.table.ordering.fields=_tl_position",
        "hoodie.table.version=9",
    }
    assert expected_props == expected_props & set(props)
    expected_checkpoint = TableCheckpoint(3, None)
    assert expected_checkpoint == lake.checkpoint()


def test_a_partitioned_table_moves_a_row_whose_partition_value_changes(
    lake_factory: Callable[..., Lake],
) -> None:
    """partition_by: a row updated into another partition is not left behind in the old one."""
    lake = lake_factory(TIDELAKE_LAKE__PARTITION_BY='{"shop.orders": ["status"]}')
    lake.stage([event("insert", i, 10 + i, i, values={"status": "new"}) for i in (1, 2)])
    lake.ingest()
    lake.stage([event("update", 1, 20, 3, values={"status": "paid"})])
    lake.ingest()
    expected = {"1": ("paid",), "2": ("new",)}
    assert expected == lake.state()
    expected_dirs = {"status=new", "status=paid"}
    assert expected_dirs == {p.name for p in Path(lake.path()).glob("status=*")}
