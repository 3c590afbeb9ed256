"""The operator's side of table control: requests land in control.json through the ledger
(the ingest's side: tests/unit/lake/test_control.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tidelake.lake.ledger import Action, Ledger, TableRequest


def request(
    state: Path, table: str, action: Action, reason: str = "", seq: int | None = None
) -> TableRequest:
    return Ledger(state).request(table, action, reason, seq)


def read_requests(state: Path) -> dict[str, TableRequest]:
    return Ledger(state).requests()


def test_requests_keep_the_last_action_per_table(tmp_path: Path) -> None:
    """A later request replaces the table's entry; each gets a growing timestamp."""
    first = request(tmp_path, "shop.orders", "pause", "backfill")
    second = request(tmp_path, "shop.orders", "resume")
    request(tmp_path, "shop.items", "pause")
    reqs = read_requests(tmp_path)
    assert {t: r.action for t, r in reqs.items()} == {
        "shop.orders": "resume",
        "shop.items": "pause",
    }
    assert second.at_ms > first.at_ms
    assert orjson.loads((tmp_path / "control.json").read_bytes())["tables"]["shop.items"]


def test_a_table_name_needs_its_database(tmp_path: Path) -> None:
    """``orders`` alone is refused: tables are named <database>.<table>."""
    with pytest.raises(ValueError, match="database"):
        request(tmp_path, "orders", "pause")


def test_only_a_skip_names_a_ddl_sequence(tmp_path: Path) -> None:
    """skip_ddl without the DDL's sequence, or a pause with one, is refused unwritten."""
    for action, seq in (("skip_ddl", None), ("pause", 7)):
        with pytest.raises(ValueError, match="skip_ddl"):
            request(tmp_path, "shop.orders", action, seq=seq)  # type: ignore[arg-type]
    assert {} == read_requests(tmp_path)
