"""The ingest's side of table control: requests of control.json applied once, skips settled.

The ingest is a small fake implementing exactly the ``Controlled`` protocol, so these tests
prove what ``TableControl`` asks of it and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tidelake.lake.control import Controlled, TableControl
from tidelake.lake.ledger import BlockedDdl, Ledger


@dataclass
class FakeIngest:
    """``Controlled``: records what it was told; resume answers from its paused tables."""

    checkpoints: dict[str, int] = field(default_factory=dict)
    paused: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def pause(self, table_id: str, reason: str) -> None:
        self.paused[table_id] = reason
        self.calls.append(("pause", table_id))

    def resume(self, table_id: str) -> bool:
        self.calls.append(("resume", table_id))
        return self.paused.pop(table_id, None) is not None

    def checkpoint_seq(self, table_id: str) -> int | None:
        return self.checkpoints.get(table_id)


def test_the_fake_is_what_the_control_asks_for() -> None:
    """The fake implements the protocol (a type check that fails when the protocol grows)."""
    ingest: Controlled = FakeIngest()
    assert None is ingest.checkpoint_seq("shop.orders")


def test_a_pause_is_applied_once_with_the_operator_reason(tmp_path: Path) -> None:
    """A pause reaches the ingest with ``paused by operator: <reason>``; applying again
    without a new request changes nothing."""
    ledger = Ledger(tmp_path)
    ingest = FakeIngest()
    control = TableControl(ledger)
    assert [] == control.apply(ingest)
    ledger.request("shop.orders", "pause", "backfill")
    assert ["pause"] == [r.action for r in control.apply(ingest)]
    assert [] == control.apply(ingest)
    assert {"shop.orders": "paused by operator: backfill"} == ingest.paused
    assert [("pause", "shop.orders")] == ingest.calls


def test_a_resume_of_a_table_not_paused_is_not_reported_done(tmp_path: Path) -> None:
    """The ingest answers False (nothing paused): the request is not in the applied list."""
    ledger = Ledger(tmp_path)
    ingest = FakeIngest()
    ledger.request("shop.orders", "resume")
    assert [] == TableControl(ledger).apply(ingest)
    assert [("resume", "shop.orders")] == ingest.calls


def test_pause_then_resume_frees_the_table(tmp_path: Path) -> None:
    """A later resume of the same table is applied after its pause."""
    ledger = Ledger(tmp_path)
    ingest = FakeIngest()
    control = TableControl(ledger)
    ledger.request("shop.orders", "pause")
    control.apply(ingest)
    ledger.request("shop.orders", "resume")
    assert ["resume"] == [r.action for r in control.apply(ingest)]
    assert ({}, [("pause", "shop.orders"), ("resume", "shop.orders")]) == (
        ingest.paused,
        ingest.calls,
    )


def test_an_operator_pause_survives_a_restart_of_the_ingest(tmp_path: Path) -> None:
    """A new ingest process (a new TableControl) applies the standing pause again."""
    Ledger(tmp_path).request("shop.orders", "pause")
    for _ in range(2):
        ingest = FakeIngest()
        TableControl(tmp_path).apply(ingest)
        assert ["shop.orders"] == list(ingest.paused)


def test_a_skip_resumes_and_is_forgotten_once_the_checkpoint_passes_its_ddl(
    tmp_path: Path,
) -> None:
    """skip_ddl resumes the table and stays in control.json (a restart still skips) until
    the table's checkpoint reaches the DDL's sequence; then it and the table's
    ddl_blocked.json entry go."""
    ledger = Ledger(tmp_path)
    ledger.record_blocked("shop.orders", BlockedDdl(seq=7, reason="narrowing"))
    ingest = FakeIngest(checkpoints={"shop.orders": 6}, paused={"shop.orders": "DDL at 7"})
    control = TableControl(ledger)
    ledger.request("shop.orders", "skip_ddl", "skip-ddl", seq=7)
    assert ["skip_ddl"] == [r.action for r in control.apply(ingest)]
    assert ({}, 7) == (ingest.paused, ledger.skipped_ddl_seq("shop.orders"))
    ingest.checkpoints["shop.orders"] = 7  # the skipped DDL committed
    assert [] == control.apply(ingest)
    assert ({}, {}) == (ledger.requests(), ledger.blocked())


def test_a_later_blocked_ddl_and_a_newer_request_survive_the_settling(tmp_path: Path) -> None:
    """The table paused again on a later DDL keeps that DDL's entry; the settled skip's
    request goes."""
    ledger = Ledger(tmp_path)
    ledger.record_blocked("shop.orders", BlockedDdl(seq=9))
    ingest = FakeIngest(checkpoints={"shop.orders": 6})
    control = TableControl(ledger)
    ledger.request("shop.orders", "skip_ddl", seq=7)
    control.apply(ingest)
    ingest.checkpoints["shop.orders"] = 8
    control.apply(ingest)
    assert (9, {}) == (ledger.blocked()["shop.orders"].seq, ledger.requests())


def test_a_request_made_after_the_skip_is_kept_when_the_skip_settles(tmp_path: Path) -> None:
    """A pause asked after the skip (another ``at_ms``) replaces it in control.json: once
    the checkpoint passes the DDL, the pause is still there."""
    ledger = Ledger(tmp_path)
    ingest = FakeIngest(checkpoints={"shop.orders": 6}, paused={"shop.orders": "DDL at 7"})
    control = TableControl(ledger)
    skip = ledger.request("shop.orders", "skip_ddl", seq=7)
    control.apply(ingest)
    ledger.request("shop.orders", "pause", "later")
    ingest.checkpoints["shop.orders"] = 7
    control.apply(ingest)
    assert (False, ["pause"]) == (
        ledger.forget_request(skip),
        [r.action for r in ledger.requests().values()],
    )


def test_a_table_never_committed_keeps_its_skip(tmp_path: Path) -> None:
    """No checkpoint yet (None): the skip waits, in the ledger and in the control."""
    ledger = Ledger(tmp_path)
    ingest = FakeIngest(paused={"shop.new": "DDL at 3"})
    control = TableControl(ledger)
    ledger.request("shop.new", "skip_ddl", seq=3)
    control.apply(ingest)
    control.apply(ingest)
    assert 3 == ledger.skipped_ddl_seq("shop.new")
