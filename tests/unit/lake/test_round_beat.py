"""The ingest's heartbeat keeps beating through a long Hudi commit (issue 22).

Probe: "During a commit longer than 15 s, ``status`` reports 'the ingest is down' while it
runs." ``status`` calls a process down once its heartbeat is older than ``DOWN_AFTER_S``
(runtime/heartbeat.py); the ingest wrote its heartbeat only between rounds. Now a thread
rewrites it while a round runs (``lake/round_beat.py``), with the round's phase, start and the
tables being committed, so ``status`` says what the ingest does instead of "down".

No Spark: the table applier is a fake whose commit sleeps; the down threshold is shortened so
the test need not wait 15 s (the rule is the same: heartbeat age against the threshold).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from support.rounds import insert_event
from tidelake.api.monitor import _process, activity
from tidelake.config import load_config
from tidelake.events import ChangeEvent
from tidelake.lake.apply import TableResult
from tidelake.lake.ingest import Ingestor
from tidelake.lake.ledger import Ledger
from tidelake.lake.round_beat import RoundBeat
from tidelake.lake.source import Round
from tidelake.runtime import heartbeat
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest

COMMIT_S = 1.5


class _Source:
    """One round of shop.orders, offered while the cursor is behind it."""

    def __init__(self) -> None:
        manifest = cast(Manifest, SimpleNamespace(seq_first=1, seq_last=1))
        self.round = Round([manifest], {"shop.orders": [insert_event(1)]})

    def next_round(self, cursor: int) -> Round | None:
        return self.round if cursor < 1 else None


class _SlowTables:
    """A commit that takes ``COMMIT_S`` seconds; ``started`` is set when it begins."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def apply(self, table_id: str, events: Sequence[ChangeEvent], seq_last: int) -> TableResult:
        self.started.set()
        time.sleep(COMMIT_S)
        return TableResult(table_id, commits=[])


def test_a_long_commit_keeps_the_ingest_up_and_says_what_it_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a commit three times longer than the down threshold runs, every heartbeat read
    is younger than the threshold (the process is up), says ``applying`` with the table in
    ``round.committing``, and status's activity reads "committing shop.orders for N s"; once
    the round is over the round info is gone and the loop's own heartbeat follows."""
    monkeypatch.setattr(heartbeat, "DOWN_AFTER_S", 0.5)
    config = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    ingestor = Ingestor(config, cast(Any, None), LocalStorage(config.stage_root))
    ingestor.source = cast(Any, _Source())
    tables = _SlowTables()
    ingestor.tables = cast(Any, tables)
    ingestor.round_beat.interval_s = 0.1
    ledger = Ledger(config.lake_state_dir)

    round_thread = threading.Thread(target=ingestor.step)
    round_thread.start()
    assert tables.started.wait(5)
    seen: list[dict[str, Any]] = []
    while round_thread.is_alive():
        record = ledger.heartbeat()
        assert record is not None
        now_ms = int(time.time() * 1000)
        process = _process(record, now_ms)
        if round_thread.is_alive():  # the round may end between the read and this check
            assert process["up"], f"down during the commit: {record}"
            seen.append({**record, "activity": process["activity"]})
        time.sleep(0.05)
    round_thread.join()

    assert seen[-1]["updated_at_ms"] > seen[0]["updated_at_ms"]  # it was rewritten meanwhile
    committing = [r for r in seen if r["round"].get("committing")]
    assert committing, seen
    assert {"shop.orders"} == set(committing[-1]["round"]["committing"])
    assert committing[-1]["round"]["phase"] == "committing"
    assert committing[-1]["activity"].startswith("committing shop.orders for ")
    assert ingestor.round_beat.info() == {}


def test_activity_names_the_longest_running_commit_and_counts_the_others() -> None:
    """The status text of a round: the table committing longest, how long, and how many
    more; a round between commits is "applying a round"; an idle ingest says nothing."""
    now = 100_000
    record = {
        "state": "applying",
        "round": {
            "started_ms": 50_000,
            "phase": "committing",
            "committing": {"shop.items": 90_000, "shop.orders": 58_000},
        },
    }
    assert "committing shop.orders for 42 s (+1 more)" == activity(record, now)
    record["round"] = {"started_ms": 50_000, "phase": "applying", "committing": {}}
    assert "applying a round for 50 s" == activity(record, now)
    assert activity({"state": "idle"}, now) is None


def test_the_warm_up_beats_in_its_own_state_and_only_its_first_write_turns_the_loop() -> None:
    """``running("warming up")``: the loop's own write first (it turns /healthz), then the
    thread's writes (which do not), all in state ``warming up`` with the phase named so;
    status reads "warming up for N s"."""
    writes: list[tuple[str, dict[str, Any], bool]] = []
    beat = RoundBeat(lambda state, info, turn: writes.append((state, info, turn)), interval_s=0.05)
    with beat.running("warming up"):
        time.sleep(0.3)
    assert len(writes) >= 3
    assert {"warming up"} == {state for state, _, _ in writes}
    assert [True] + [False] * (len(writes) - 1) == [turn for _, _, turn in writes]
    assert "warming up" == writes[-1][1]["phase"]
    record = {"state": "warming up", "round": writes[-1][1]}
    assert "warming up for 12 s" == activity(record, writes[-1][1]["started_ms"] + 12_400)
    assert {} == beat.info()
