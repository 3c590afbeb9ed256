"""A table directory left by a kill -9 while Hudi created the table (found by `make chaos`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.lake.hudi import discard_interrupted_creation


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
    (table / kept).write_text("x")
    assert not discard_interrupted_creation(str(table))
    assert (table / kept).exists()


def test_no_directory_and_remote_paths_are_left_alone(tmp_path: Path) -> None:
    """A path without .hoodie, or on object storage, is never touched."""
    (tmp_path / "plain").mkdir()
    assert not discard_interrupted_creation(str(tmp_path / "plain"))
    assert (tmp_path / "plain").is_dir()
    assert not discard_interrupted_creation("s3a://bucket/lake/shop/orders")
