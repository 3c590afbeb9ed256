"""Unpartitioned tables look keys up in the metadata table's record index; partitioned ones
keep the global simple index that moves a row whose partition value changes."""

from tidelake.config import load_config
from tidelake.lake.hudi import write_options


def test_unpartitioned_tables_use_the_record_index() -> None:
    """Bounded lookups: commit time stops growing with the table (docs/benchmarks.md)."""
    lake = load_config(None, environ={}).lake
    opts = write_options(lake, "shop", "orders", ["id"], {})
    assert "RECORD_INDEX" == opts["hoodie.index.type"]
    assert "true" == opts["hoodie.metadata.record.index.enable"]
    assert "false" != opts.get("hoodie.metadata.enable")


def test_partitioned_tables_keep_the_global_simple_index() -> None:
    """A row whose partition value changes must move, not be duplicated."""
    lake = load_config(None, environ={}).lake
    lake = lake.model_copy(update={"partition_by": {"shop.orders": ["status"]}})
    opts = write_options(lake, "shop", "orders", ["id"], {})
    assert "GLOBAL_SIMPLE" == opts["hoodie.index.type"]
    assert "hoodie.metadata.record.index.enable" not in opts


def test_the_record_index_file_group_count_comes_from_the_config() -> None:
    """Hudi's minimum of 10 file groups made every small-table commit pay 10 lookups and
    10 log appends; tidelake starts new tables at 2, and an operator can choose more."""
    lake = load_config(None, environ={}).lake
    default = write_options(lake, "shop", "orders", ["id"], {})
    assert "2" == default["hoodie.metadata.record.index.min.filegroup.count"]
    lake = load_config(None, environ={"TIDELAKE_LAKE__RECORD_INDEX_FILE_GROUPS": "16"}).lake
    chosen = write_options(lake, "shop", "orders", ["id"], {})
    assert "16" == chosen["hoodie.metadata.record.index.min.filegroup.count"]
