"""``tidelake capture snapshot``: request records in the staging store, progress from the
capture heartbeat, and the bare ``tidelake capture`` still a verb with its options."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from tidelake.cli import app


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIDELAKE_HOME", str(tmp_path))
    monkeypatch.delenv("TIDELAKE_CONFIG", raising=False)
    return tmp_path


def test_a_request_record_per_table_and_a_bad_name_exits_2(home: Path) -> None:
    """Each table named gets ``_tidelake/capture/snapshot-requests/<db.table>.json`` in the
    staging store; a name without a schema exits 2 and writes nothing."""
    result = CliRunner().invoke(app, ["capture", "snapshot", "shop.orders", "shop.items"])
    assert result.exit_code == 0, result.output
    found = sorted(p.name for p in home.rglob("snapshot-requests/*.json"))
    assert found == ["shop.items.json", "shop.orders.json"]
    record = orjson.loads(next(home.rglob("shop.orders.json")).read_bytes())
    assert record["table"] == "shop.orders"
    bad = CliRunner().invoke(app, ["capture", "snapshot", "orders"])
    assert bad.exit_code == 2
    assert len(list(home.rglob("snapshot-requests/*.json"))) == 2


def test_status_reads_the_capture_heartbeat(home: Path) -> None:
    """``--status`` prints each table's state and rows from the heartbeat's ``snapshot``
    part, and says so when no capture heartbeat exists."""
    none = CliRunner().invoke(app, ["capture", "snapshot", "--status"])
    assert "no capture heartbeat" in none.output
    beat = home / "staging" / "_tidelake" / "capture.heartbeat.json"
    beat.parent.mkdir(parents=True, exist_ok=True)
    table = {"state": "running", "rows_done": 120, "rows_total": 1000, "chunks_done": 3}
    beat.write_bytes(orjson.dumps({"snapshot": {"tables": {"shop.orders": table}}}))
    shown = CliRunner().invoke(app, ["capture", "snapshot", "--status"])
    assert "shop.orders: running, 120 rows of ~1000, 3 chunks" in shown.output


def test_bare_capture_keeps_its_options() -> None:
    """``tidelake capture --source ... --table ...`` is still the capture itself."""
    result = CliRunner().invoke(app, ["capture", "--help"])
    assert result.exit_code == 0
    assert "--source" in result.output
    assert "--table" in result.output
    assert "snapshot" in result.output
