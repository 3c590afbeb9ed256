"""What table control (``lake/control.py``) may ask of the ingest: ``pause``, ``resume`` and
``checkpoint_seq``, with their effect on the ledger and on the cursor.

No Spark: the tables are never written here, so a table's checkpoint comes from the only
other source the store knows, its tombstone in the ledger (``dropped.json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tidelake.config import Config, load_config
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.ingest import Ingestor
from tidelake.lake.ledger import Ledger
from tidelake.runtime.storage import LocalStorage


def _config(tmp_path: Path) -> Config:
    return load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})


def _ingestor(config: Config) -> Ingestor:
    storage = LocalStorage(config.stage_root)
    return Ingestor(config, cast(Any, None), storage)  # no table is read or written


def test_a_pause_is_in_the_ledger_at_once(tmp_path: Path) -> None:
    """``pause`` holds the table back and ``paused.json`` says so before the next round."""
    config = _config(tmp_path)
    ingestor = _ingestor(config)
    ingestor.pause("shop.orders", "paused by operator: maintenance")
    expected = {"shop.orders": "paused by operator: maintenance"}
    assert expected == Ledger(config.lake_state_dir).paused()
    assert expected == ingestor.paused


def test_resume_takes_a_pause_of_an_earlier_process_and_moves_the_cursor_back(
    tmp_path: Path,
) -> None:
    """A table only ``paused.json`` holds (an earlier ``ingest --once`` paused it) resumes:
    the file forgets it, and the cursor goes back to the table's checkpoint so its events
    held back meanwhile are read again."""
    config = _config(tmp_path)
    ledger = Ledger(config.lake_state_dir)
    ledger.save_cursor(20)
    ingestor = _ingestor(config)
    ledger.save_paused({"shop.orders": "failed 3 times in a row"})
    ledger.put_tombstone("shop.orders", TableCheckpoint(seq=7, position=None).to_json())
    assert 20 == ingestor.cursor
    assert ingestor.resume("shop.orders")
    expected = (7, {}, {})
    assert expected == (ingestor.cursor, ledger.paused(), ingestor.paused)


def test_resume_of_a_table_not_paused_changes_nothing(tmp_path: Path) -> None:
    """``resume`` answers False for a table nobody paused, and the cursor stays."""
    config = _config(tmp_path)
    Ledger(config.lake_state_dir).save_cursor(12)
    ingestor = _ingestor(config)
    assert not ingestor.resume("shop.orders")
    assert 12 == ingestor.cursor


def test_a_resumed_table_restarts_with_no_failures_and_a_cursor_at_zero_without_checkpoint(
    tmp_path: Path,
) -> None:
    """A table never committed has no checkpoint (None): resuming it re-reads from the start,
    and its failure count starts again."""
    config = _config(tmp_path)
    Ledger(config.lake_state_dir).save_cursor(5)
    ingestor = _ingestor(config)
    ingestor.failures["shop.items"] = 2
    ingestor.pause("shop.items", "failed")
    assert None is ingestor.checkpoint_seq("shop.items")
    assert ingestor.resume("shop.items")
    expected = (0, {})
    assert expected == (ingestor.cursor, ingestor.failures)
