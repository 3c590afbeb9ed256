"""Issue 23, deliver 1: a Hudi commit on a local lake is fsync-ed before the ingest moves on.

The JVM (Hadoop's LocalFileSystem) never fsyncs; :meth:`TableStore.sync_commit` does it for
the commit's files before :meth:`TableStore.commit` returns, so the ingest retires a staged
batch only once the rows that replace it survive an OS crash. os.fsync is recorded here; the
lossy-filesystem test (tests/crash/) proves the same end to end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from lakekit import Lake, ddl_event, event, lake_env
from pyspark.sql import SparkSession

from support.lossyfs import LossyMount, fuse_available
from tidelake.config import load_config
from tidelake.lake.store import TableStore


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    synced: set[str] = set()
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def _time_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    timings: list[tuple[float, int]] = []
    real = TableStore.sync_commit

    def timed(self: TableStore, *args: Any) -> int:
        began = time.perf_counter()
        n = real(self, *args)
        timings.append((time.perf_counter() - began, n))
        return n

    monkeypatch.setattr(TableStore, "sync_commit", timed)
    return timings


def test_every_file_and_directory_of_a_new_table_is_fsynced_by_its_commits(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the commit that creates the table and the one that updates it, every file and
    directory of the table (data files, the ``.hoodie`` timeline incl. ``.hoodie/timeline``,
    ``hoodie.properties``, the metadata table) was fsync-ed, and the table's directory was
    fsync-ed in its parent; the cost per commit is printed."""
    synced = _record_fsyncs(monkeypatch)
    timings = _time_syncs(monkeypatch)
    lake.stage([event("insert", i, 10 + i, i) for i in range(1, 6)])
    lake.ingest()
    lake.stage([event("update", 1, 20, 6, values={"status": "paid"})])
    lake.ingest()
    table = Path(lake.path())
    # Hudi's own scratch (markers, locks) under .hoodie/.temp is not table state.
    everything = {
        str(p)
        for p in [table, *table.rglob("*")]
        if ".temp" not in p.relative_to(table).parts and not p.name.endswith(".lock")
    }
    unsynced = sorted(p for p in everything if p not in synced)
    print(f"sync_commit per commit: {[(round(s * 1000, 1), n) for s, n in timings]} (ms, fsyncs)")
    assert ([], True) == (unsynced, str(table.parent) in synced)
    assert 2 == len(timings)


def test_a_dropped_tables_removal_is_fsynced_in_its_parent(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DROP TABLE removes the table's directory and fsyncs its parent, so an OS crash right
    after cannot bring the dropped table's files back beside its durable tombstone."""
    lake.stage([event("insert", 1, 10, 1)])
    lake.ingest()
    table = Path(lake.path())
    synced = _record_fsyncs(monkeypatch)
    lake.stage([ddl_event("shop.orders", "DROP TABLE `shop`.`orders`", "ERASE", 20, 2)])
    lake.ingest()
    assert (False, True) == (table.exists(), str(table.parent) in synced)


@pytest.mark.parametrize("synced", [True, False], ids=["sync_commit", "without-sync_commit"])
def test_a_committed_batch_survives_an_os_crash_only_with_sync_commit(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synced: bool
) -> None:
    """The staging root, the lake and the ingest's state on the lossy filesystem: two
    batches ingested, then an OS crash (everything not fsync-ed dropped). With sync_commit
    the table reads back whole with its checkpoint; without it (the control, as before issue
    23) the ingest's ledger says the commits happened but the table's rows are gone."""
    why = fuse_available()
    if why is not None:
        pytest.skip(f"no FUSE here: {why}")
    if not synced:
        monkeypatch.setattr(TableStore, "sync_commit", lambda *_args: 0)
    with LossyMount(tmp_path / "fs") as lossy:
        environ = lake_env(lossy.mountpoint / "home")
        lake = Lake(load_config(None, environ=environ), spark, environ)
        lake.stage([event("insert", i, 10 + i, i) for i in range(1, 6)])
        lake.ingest()
        lake.stage([event("update", 1, 20, 6, values={"status": "paid"})])
        lake.ingest()
        expected = lake.state()
        dropped = lossy.crash()
        committed = [c["seq"] for c in lake.commits()]
        try:
            after: dict[str, tuple[Any, ...]] | str = lake.state()
        except Exception as exc:  # the table's files are gone: hudi-rs cannot read it
            after = f"unreadable: {type(exc).__name__}"
        print(f"synced={synced}: after the crash {after!r}; dropped {dropped}")
    assert [5, 6] == committed  # the ledger is durable either way
    assert 5 == len(expected)
    if synced:
        assert expected == after
    else:
        assert expected != after
