"""The operator's side of table control (``api/control.py``: requests through the ledger),
and the transitional ``TableControl`` over an ingest that predates the ``Controlled``
protocol (the tests of the control itself are in tests/unit/lake/test_control.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from tidelake.api.control import TableControl, read_requests, request


@dataclass
class _Checkpoint:
    seq: int


@dataclass
class _Writer:
    seqs: dict[str, int]

    def checkpoint(self, table_id: str) -> _Checkpoint | None:
        return _Checkpoint(self.seqs[table_id]) if table_id in self.seqs else None


@dataclass
class _Ingest:
    """The attributes of ``lake.ingest.Ingestor`` that the control touches."""

    writer: Any
    cursor: int = 100
    paused: dict[str, str] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    written: list[dict[str, str]] = field(default_factory=list)

    def _write_paused(self) -> None:
        self.written.append(dict(self.paused))


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


def test_pause_then_resume_applied_once_and_the_cursor_goes_back(tmp_path: Path) -> None:
    """A pause joins the paused tables (written to paused.json); applying again changes
    nothing; a resume frees the table, resets its failures and moves the cursor back to its
    checkpoint so the events skipped while paused are read again."""
    ingest = _Ingest(writer=_Writer({"shop.orders": 40}))
    control = TableControl(tmp_path)
    assert control.apply(ingest) == []
    request(tmp_path, "shop.orders", "pause", "backfill")
    assert [r.action for r in control.apply(ingest)] == ["pause"]
    assert ingest.paused == {"shop.orders": "paused by operator: backfill"}
    assert control.apply(ingest) == []
    ingest.failures["shop.orders"] = 2
    request(tmp_path, "shop.orders", "resume")
    assert [r.action for r in control.apply(ingest)] == ["resume"]
    assert (ingest.paused, ingest.failures, ingest.cursor) == ({}, {}, 40)
    assert ingest.written == [{"shop.orders": "paused by operator: backfill"}, {}]


def test_resume_frees_a_table_the_ingest_paused_itself(tmp_path: Path) -> None:
    """A table paused after failures resumes too; one never committed restarts from 0."""
    ingest = _Ingest(writer=_Writer({}), paused={"shop.bad": "no primary key"})
    request(tmp_path, "shop.bad", "resume")
    TableControl(tmp_path).apply(ingest)
    assert (ingest.paused, ingest.cursor) == ({}, 0)


def test_an_operator_pause_survives_a_restart_of_the_ingest(tmp_path: Path) -> None:
    """A new ingest process (a new TableControl) applies the standing pause again."""
    request(tmp_path, "shop.orders", "pause")
    for _ in range(2):
        ingest = _Ingest(writer=_Writer({}))
        TableControl(tmp_path).apply(ingest)
        assert list(ingest.paused) == ["shop.orders"]


def test_a_skip_is_forgotten_once_the_checkpoint_passes_its_ddl(tmp_path: Path) -> None:
    """skip_ddl stays in control.json (a restart still skips) until the table's checkpoint
    reaches the DDL's sequence; then it and the table's ddl_blocked.json entry go."""
    (tmp_path / "ddl_blocked.json").write_bytes(orjson.dumps({"shop.orders": {"seq": 7}}))
    writer = _Writer({"shop.orders": 6})
    ingest = _Ingest(writer=writer, paused={"shop.orders": "DDL at stream sequence 7 …"})
    control = TableControl(tmp_path)
    request(tmp_path, "shop.orders", "skip_ddl", "skip-ddl", seq=7)
    assert ["skip_ddl"] == [r.action for r in control.apply(ingest)]
    assert ({}, ["shop.orders"]) == (ingest.paused, list(read_requests(tmp_path)))
    writer.seqs["shop.orders"] = 7  # the skipped DDL committed
    assert [] == control.apply(ingest)
    assert {} == read_requests(tmp_path)
    assert {} == orjson.loads((tmp_path / "ddl_blocked.json").read_bytes())


def test_a_later_blocked_ddl_and_a_newer_request_survive_the_settling(tmp_path: Path) -> None:
    """The table paused again on a later DDL keeps its pause and that DDL's entry; a request
    made after the skip is not removed with it."""
    (tmp_path / "ddl_blocked.json").write_bytes(orjson.dumps({"shop.orders": {"seq": 9}}))
    writer = _Writer({"shop.orders": 6})
    ingest = _Ingest(writer=writer)
    control = TableControl(tmp_path)
    request(tmp_path, "shop.orders", "skip_ddl", seq=7)
    control.apply(ingest)
    ingest.paused["shop.orders"] = "DDL at stream sequence 9 …"
    writer.seqs["shop.orders"] = 8
    control.apply(ingest)
    assert {"shop.orders": "DDL at stream sequence 9 …"} == ingest.paused
    assert 9 == orjson.loads((tmp_path / "ddl_blocked.json").read_bytes())["shop.orders"]["seq"]
    assert {} == read_requests(tmp_path)


def test_resume_reaches_a_table_an_earlier_ingest_process_paused(tmp_path: Path) -> None:
    """paused.json from an earlier process (this one's paused tables are empty): a resume
    still counts, so paused.json, which status reads, is rewritten without the table."""
    (tmp_path / "paused.json").write_bytes(orjson.dumps({"shop.orders": "DDL …"}))
    ingest = _Ingest(writer=_Writer({"shop.orders": 3}))
    request(tmp_path, "shop.orders", "resume")
    assert ["resume"] == [r.action for r in TableControl(tmp_path).apply(ingest)]
    assert ([{}], 3) == (ingest.written, ingest.cursor)
