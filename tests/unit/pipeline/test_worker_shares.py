"""How ``demo --workers N`` (and the ``workers`` bench part) shares tables among workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tidelake.config import load_config, merge_settings
from tidelake.pipeline.demo_workers import peak_rss_mib
from tidelake.pipeline.workers import owner_of, split_tables

TABLES = [f"shop.store_{i:04d}" for i in range(1, 8)]


def test_tables_are_dealt_round_robin_and_disjoint() -> None:
    """Seven tables over two workers: 4 and 3, every table owned exactly once."""
    shares = split_tables(reversed(TABLES), 2)
    assert [("w1", 4), ("w2", 3)] == [(s.name, len(s.tables)) for s in shares]
    assert sorted(TABLES) == sorted(t for s in shares for t in s.tables)
    assert "w2" == owner_of(shares, "shop.store_0002").name  # type: ignore[union-attr]
    assert owner_of(shares, "shop.other") is None


def test_more_workers_than_tables_is_refused() -> None:
    """A worker without a table would stage and ingest nothing: refused."""
    with pytest.raises(ValueError, match="at least 3 tables"):
        split_tables(["shop.a", "shop.b"], 3)


def test_a_workers_config_owns_its_subjects_staging_state_and_tables(tmp_path: Path) -> None:
    """Merged over the shared settings, a worker's settings load as a config whose consumer,
    staging root, state directory and tables are its own and whose lake is the shared one."""
    shared = {"home": str(tmp_path), "lake": {"root": str(tmp_path / "lake")}}
    configs = []
    for share in split_tables(["shop.orders", "shop.customers", "shop.order_items"], 2):
        path = tmp_path / f"{share.name}.yaml"
        path.write_text(yaml.safe_dump(merge_settings(shared, share.settings(tmp_path))))
        configs.append(load_config(path, environ={}))
    one, two = configs
    assert ["cdc.shop.customers", "cdc.shop.orders"] == one.bus.consumer.filter_subjects
    assert ["cdc.shop.order_items"] == two.bus.consumer.filter_subjects
    assert one.bus.consumer.durable != two.bus.consumer.durable
    assert one.stage_root != two.stage_root
    assert one.lake_state_dir != two.lake_state_dir
    assert one.lake_root == two.lake_root
    assert (True, False) == (one.ingest.owns("shop.orders"), two.ingest.owns("shop.orders"))


def _process(proc: Path, pid: int, hwm_kib: int, children: list[int]) -> None:
    (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "status").write_text(f"Name:\tx\nVmHWM:\t  {hwm_kib} kB\nVmRSS:\t 1 kB\n")
    (proc / str(pid) / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))


def test_a_workers_peak_memory_sums_its_process_tree(tmp_path: Path) -> None:
    """The ingest (pid 10) and its JVM (11, a child): their VmHWM summed; gone: None."""
    _process(tmp_path, 10, 200 * 1024, [11])
    _process(tmp_path, 11, 3 * 1024 * 1024, [])
    assert 3272.0 == peak_rss_mib(10, tmp_path)
    assert peak_rss_mib(99, tmp_path) is None
