"""Which index a commit uses: SIMPLE without a metadata table while a table is small, the
record index once it has grown (and for good once it has a metadata table)."""

from __future__ import annotations

from pathlib import Path

from tidelake.config import load_config
from tidelake.lake.hudi import newest_base_file_bytes, write_options
from tidelake.lake.store import TableStore


def test_only_the_newest_version_of_each_base_file_counts() -> None:
    files = [
        ("f1-0_0-10-20_20260101000000000.parquet", 100),
        ("f1-0_1-30-40_20260102000000000.parquet", 150),  # f1's newest version
        ("f2-0_0-10-21_20260101000000000.parquet", 70),
        (".f1-0_20260102000000000.log.1_0-1-1", 9_999),  # a log file (MERGE_ON_READ)
        (".hoodie_partition_metadata", 96),
        ("notes.parquet", 5_000),  # not a Hudi base file name
    ]
    assert 220 == newest_base_file_bytes(files)
    assert 0 == newest_base_file_bytes([])


def test_small_tables_use_the_simple_index_without_a_metadata_table() -> None:
    lake = load_config(None, environ={}).lake
    opts = write_options(lake, "shop", "orders", ["id"], {}, record_index=False)
    assert "SIMPLE" == opts["hoodie.index.type"]
    assert "false" == opts["hoodie.metadata.enable"]
    assert "hoodie.metadata.record.index.enable" not in opts


def test_partitioned_tables_ignore_the_choice() -> None:
    lake = load_config(None, environ={}).lake
    lake = lake.model_copy(update={"partition_by": {"shop.orders": ["status"]}})
    opts = write_options(lake, "shop", "orders", ["id"], {}, record_index=False)
    assert "GLOBAL_SIMPLE" == opts["hoodie.index.type"]
    assert "hoodie.metadata.enable" not in opts


def _table(root: Path, metadata_partitions: str, base_bytes: int) -> str:
    path = root / "lake" / "shop" / "orders"
    (path / ".hoodie").mkdir(parents=True)
    props = "hoodie.table.name=shop_orders\nhoodie.table.recordkey.fields=id\n"
    props += f"hoodie.table.metadata.partitions={metadata_partitions}\n"
    (path / ".hoodie" / "hoodie.properties").write_text(props)
    (path / "f1-0_0-1-1_20260101000000000.parquet").write_bytes(b"\0" * base_bytes)
    return str(path)


def _writer(tmp_path: Path, threshold_mb: str) -> TableStore:
    config = load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(tmp_path),
            "TIDELAKE_LAKE__RECORD_INDEX_FROM_MB": threshold_mb,
        },
    )
    return TableStore(config, spark=None)  # type: ignore[arg-type]  # local paths only


def test_the_choice_follows_size_and_sticks_once_a_metadata_table_exists(
    tmp_path: Path,
) -> None:
    writer = _writer(tmp_path, "0.001")  # 1,048 bytes
    assert not writer.uses_record_index(str(tmp_path / "lake" / "shop" / "new")), "created small"
    small = _table(tmp_path / "a", "", 1_000)
    assert not writer.uses_record_index(small)
    grown = _table(tmp_path / "b", "", 2_000)
    assert writer.uses_record_index(grown)
    indexed = _table(tmp_path / "c", "files,record_index", 10)
    assert writer.uses_record_index(indexed), "never back: that would delete the metadata table"


def test_a_zero_threshold_means_the_record_index_from_the_first_commit(tmp_path: Path) -> None:
    writer = _writer(tmp_path, "0")
    assert writer.uses_record_index(str(tmp_path / "lake" / "shop" / "new"))
