"""A table directory left by a kill -9 while Hudi created the table (found by `make chaos`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.lake.hudi import discard_interrupted_creation

#: The keys of a hoodie.properties Hudi 1.1.1 wrote for a tidelake table (in its order).
WHOLE_PROPERTIES = (
    "#Properties saved on 2026-11-24T17:55:17.852314850Z\n"
    "hoodie.table.type=COPY_ON_WRITE\n"
    "hoodie.table.checksum=2178917385\n"
    "hoodie.table.version=9\n"
    "hoodie.table.name=shop_orders\n"
    "hoodie.table.recordkey.fields=id\n"
)


def _remnant(table: Path) -> None:
    """What a kill during table creation left in the chaos run: .hoodie without properties."""
    (table / ".hoodie" / ".schema").mkdir(parents=True)
    (table / ".hoodie" / "timeline").mkdir()
    (table / ".hoodie" / ".temp").mkdir()


def test_a_half_created_table_is_removed(tmp_path: Path) -> None:
    """No hoodie.properties, no backup, no completed commit: nothing committed, removed."""
    table = tmp_path / "shop" / "orders"
    _remnant(table)
    assert discard_interrupted_creation(str(table))
    assert not table.exists()


@pytest.mark.parametrize(
    "kept",
    [
        ".hoodie/hoodie.properties",
        ".hoodie/hoodie.properties.backup",
        ".hoodie/timeline/20261122033012345_20261122033013456.commit",
        ".hoodie/timeline/20261122033012345_20261122033013456.deltacommit",
    ],
)
def test_a_table_with_properties_a_backup_or_a_commit_is_kept(tmp_path: Path, kept: str) -> None:
    """Anything that shows the table was created (or holds data) keeps the directory."""
    table = tmp_path / "shop" / "orders"
    _remnant(table)
    (table / kept).write_text(WHOLE_PROPERTIES if kept.endswith(".properties") else "x")
    assert not discard_interrupted_creation(str(table))
    assert (table / kept).exists()


@pytest.mark.parametrize("content", ["", WHOLE_PROPERTIES[:60]])
def test_an_empty_or_torn_properties_file_counts_as_none(tmp_path: Path, content: str) -> None:
    """A kill inside Hudi's write of hoodie.properties left it empty (a short `make chaos` run):
    without a completed commit the table is removed, or every later round fails."""
    table = tmp_path / "shop" / "orders"
    _remnant(table)
    (table / ".hoodie" / "hoodie.properties").write_text(content)
    assert discard_interrupted_creation(str(table))
    assert not table.exists()


def test_no_directory_and_remote_paths_are_left_alone(tmp_path: Path) -> None:
    """A path without .hoodie, or on object storage, is never touched."""
    (tmp_path / "plain").mkdir()
    assert not discard_interrupted_creation(str(tmp_path / "plain"))
    assert (tmp_path / "plain").is_dir()
    assert not discard_interrupted_creation("s3a://bucket/lake/shop/orders")
