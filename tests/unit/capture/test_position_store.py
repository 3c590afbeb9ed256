"""The capture position file: atomic replace, round trip, refusal of a foreign file."""

from pathlib import Path

import pytest

from tidelake.capture.position import PositionStore
from tidelake.errors import ConfigError


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    """What was saved is what a restart loads; no temporary file is left behind."""
    store = PositionStore(tmp_path / "capture" / "position.json")
    assert None is store.load()
    state = {"source": "mysql", "phase": "streaming", "binlog": {"file": "b.000002", "pos": 4}}
    store.save(state)
    store.save({**state, "binlog": {"file": "b.000002", "pos": 99}})
    assert PositionStore(store.path).load()["binlog"]["pos"] == 99  # type: ignore[index]
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["position.json"]


def test_foreign_file_is_refused(tmp_path: Path) -> None:
    """A file that is not a position file is an error, never silently a fresh start."""
    path = tmp_path / "position.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError):
        PositionStore(path).load()
