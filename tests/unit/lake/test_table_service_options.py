"""Table services (compaction, cleaning, file sizing) become the Hudi options of every write."""

from pathlib import Path

import pytest

from tidelake.config import load_config
from tidelake.errors import ConfigError
from tidelake.lake.hudi import write_options


def _options(tmp_path: Path, **env: str) -> dict[str, str]:
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path), **env})
    return write_options(cfg.lake, "shop", "orders", ["id"], {})


def test_cleaning_and_file_sizing_apply_to_every_table(tmp_path: Path) -> None:
    """COW tables are cleaned after each commit and sized by the configured limits."""
    opts = _options(
        tmp_path,
        TIDELAKE_LAKE__TABLE_SERVICES__CLEAN_RETAIN_COMMITS="3",
        TIDELAKE_LAKE__TABLE_SERVICES__MAX_FILE_MB="64",
        TIDELAKE_LAKE__TABLE_SERVICES__SMALL_FILE_MB="16",
    )
    expected = {
        "hoodie.clean.automatic": "true",
        "hoodie.clean.policy": "KEEP_LATEST_COMMITS",
        "hoodie.clean.commits.retained": "3",
        "hoodie.parquet.max.file.size": str(64 * 1024 * 1024),
        "hoodie.parquet.small.file.limit": str(16 * 1024 * 1024),
    }
    assert expected == {k: opts[k] for k in expected}
    assert "hoodie.compact.inline" not in opts


def test_archival_always_keeps_more_commits_than_cleaning_retains(tmp_path: Path) -> None:
    """Hudi refuses hoodie.keep.min.commits <= hoodie.clean.commits.retained."""
    opts = _options(tmp_path, TIDELAKE_LAKE__TABLE_SERVICES__CLEAN_RETAIN_COMMITS="40")
    assert int(opts["hoodie.keep.min.commits"]) > 40
    assert int(opts["hoodie.keep.max.commits"]) > int(opts["hoodie.keep.min.commits"])


def test_merge_on_read_compacts_inline_every_n_delta_commits(tmp_path: Path) -> None:
    """MOR tables carry inline compaction at the configured delta-commit count."""
    opts = _options(
        tmp_path,
        TIDELAKE_LAKE__TABLE_TYPE="MERGE_ON_READ",
        TIDELAKE_LAKE__TABLE_SERVICES__COMPACTION_DELTA_COMMITS="3",
    )
    expected = {"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "3"}
    assert expected == {k: opts[k] for k in expected}


def test_external_compaction_leaves_it_to_an_external_compactor(tmp_path: Path) -> None:
    """compaction: external writes MOR tables without inline compaction."""
    opts = _options(
        tmp_path,
        TIDELAKE_LAKE__TABLE_TYPE="MERGE_ON_READ",
        TIDELAKE_LAKE__TABLE_SERVICES__COMPACTION="external",
    )
    expected = {"hoodie.compact.inline": "false"}
    assert expected == {k: opts[k] for k in expected}


def test_small_file_limit_must_be_below_the_target_size(tmp_path: Path) -> None:
    """A small-file limit at or above the target size is a config error naming the field."""
    with pytest.raises(ConfigError, match=r"lake\.table_services: .*small_file_mb"):
        load_config(
            None,
            environ={
                "TIDELAKE_HOME": str(tmp_path),
                "TIDELAKE_LAKE__TABLE_SERVICES__SMALL_FILE_MB": "200",
            },
        )
