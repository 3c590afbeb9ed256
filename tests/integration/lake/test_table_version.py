"""``lake.table_version``: new tables are written at the version set (6 for readers still on
Hudi 0.x, 9 by default), keep it for their whole life, and keep event-time order, deletes and
archival at either version; every table's archived-timeline folder exists from its creation
(version 8 and later; store.mark_archived_timeline: Trino 476 fails on a table without it,
docs/query-engines.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lakekit import Lake, event

from tidelake.config import load_config
from tidelake.lake.store import ARCHIVE_MARKER

#: Archive early: at most 4 completed commits stay on the active timeline.
ARCHIVE_SOON = (
    '{"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4", '
    '"hoodie.clean.commits.retained": "2"}'
)
ROUNDS = 12


def _properties(lake: Lake) -> dict[str, str]:
    text = (Path(lake.path()) / ".hoodie" / "hoodie.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")


@pytest.mark.parametrize("version", ["6", "9"])
def test_a_table_is_written_at_the_version_set_and_archives_beside_the_marker(
    lake_factory: Callable[..., Lake], version: str
) -> None:
    """Twelve commits archive most of the timeline; an event older than the row's (a
    redelivery) never wins; a delete stays deleted; hudi-rs reads the table at either
    version; the marker is there from the first commit and beside the archived files."""
    lake = lake_factory(
        TIDELAKE_LAKE__TABLE_VERSION=version, TIDELAKE_LAKE__HUDI_OPTIONS=ARCHIVE_SOON
    )
    meta = Path(lake.path()) / ".hoodie"
    seq = 0
    for n in range(ROUNDS):
        seq += 1
        lake.stage(
            [
                event(
                    "insert" if n < 3 else "update",
                    n % 3,
                    100 + n,
                    seq,
                    values={"status": f"s{n}", "amount": "1.00"},
                )
            ]
        )
        lake.ingest()
        if n == 0:
            assert (Path(lake.path()) / ARCHIVE_MARKER).is_file() is (version != "6")
    # Redelivered old versions of rows 0..2: positions below each row's latest.
    lake.stage(
        [
            event("update", k, 100 + k, seq + 1 + k, values={"status": "old", "amount": "9.00"})
            for k in range(3)
        ]
    )
    lake.ingest()
    lake.stage([event("delete", 1, 500, seq + 10)])
    lake.ingest()

    props = _properties(lake)
    assert version == props["hoodie.table.version"]
    # hoodie.archivelog.folder: under .hoodie at version 6 (commits_.archive.* log files), under
    # .hoodie/timeline from 8 on (an LSM tree of Parquet files).
    archive = meta / ("" if version == "6" else "timeline") / props["hoodie.archivelog.folder"]
    archived = sorted(p.name for p in archive.iterdir() if not p.name.endswith(".crc"))
    assert any(n.endswith(".parquet") or ".archive." in n for n in archived), archived
    assert (Path(lake.path()) / ARCHIVE_MARKER).is_file() is (version != "6")
    # Rows 0 and 2: their last update (rounds 9 and 11); row 1 deleted.
    assert {"0": ("s9",), "2": ("s11",)} == lake.state("shop.orders", "status")


def test_a_table_keeps_its_version_when_the_setting_changes(
    lake_factory: Callable[..., Lake],
) -> None:
    """Made at 6, written again under ``table_version: 9``: still 6 (Hudi would otherwise
    upgrade it in place, and readers on Hudi 0.x would lose it)."""
    first = lake_factory(TIDELAKE_LAKE__TABLE_VERSION="6")
    first.stage([event("insert", 1, 100, 1, values={"status": "new", "amount": "1.00"})])
    first.ingest()
    env = dict(first.env) | {"TIDELAKE_LAKE__TABLE_VERSION": "9"}
    second = Lake(load_config(None, environ=env), first.spark, env)
    second.stage([event("update", 1, 101, 2, values={"status": "paid", "amount": "1.00"})])
    second.ingest()
    assert "6" == _properties(second)["hoodie.table.version"]
    assert {"1": ("paid",)} == second.state("shop.orders", "status")


def test_a_table_made_before_the_marker_gets_it_when_a_session_starts(
    lake_factory: Callable[..., Lake],
) -> None:
    """A version-9 table without the marker (written before tidelake made it) has it once a
    session registers the lake's tables, not only at its next DDL."""
    from tidelake.lake.spark import register_lake_tables

    lake = lake_factory(TIDELAKE_LAKE__TABLE_VERSION="9")
    lake.stage([event("insert", 1, 100, 1, values={"status": "new", "amount": "1.00"})])
    lake.ingest()
    marker = Path(lake.path()) / ARCHIVE_MARKER
    marker.unlink()
    assert "shop.orders" in register_lake_tables(lake.spark, str(lake.config.lake_root))
    assert marker.is_file()
