"""One bad table never stalls the others (issue 23, deliver 4: isolation).

The ingest's failure policy (``lake/ingest.py`` module docstring): whatever one table's share
of a round raises is that table's alone. A terminal cause pauses it, a transient one (disk
full, the object store down) holds it back and retries it after a back-off until the cause
is gone, an unknown one is retried ``MAX_TABLE_FAILURES`` times and then paused; the other
tables commit, and a held-back table's cause is in the heartbeat while it waits.

No Spark: the round source and the table applier are replaced by small fakes; what is under
test is the loop's decisions (``Ingestor.step``, ``run_once``), the ledger and the heartbeat.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from support.rounds import insert_event
from tidelake.config import Config, load_config
from tidelake.errors import IngestError, TableRefused
from tidelake.events import ChangeEvent
from tidelake.lake.apply import TableResult, implausible_time
from tidelake.lake.failures import heartbeat_in_place, table_failure
from tidelake.lake.ingest import MAX_TABLE_FAILURES, Ingestor
from tidelake.lake.ledger import INGEST_STAGE, Ledger
from tidelake.lake.source import Round
from tidelake.runtime.heartbeat import heartbeat_name
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, write_manifest


class _Source:
    """One round holding seqs 1..2 of two tables, offered while the cursor is behind it."""

    def __init__(self) -> None:
        manifest = cast(Manifest, SimpleNamespace(seq_first=1, seq_last=2))  # all Round reads
        self.round = Round(
            [manifest],
            {
                "shop.bad": [insert_event(1, "shop.bad")],
                "shop.good": [insert_event(2, "shop.good")],
            },
        )

    def next_round(self, cursor: int) -> Round | None:
        return self.round if cursor < 2 else None


class _Tables:
    """Applies ``shop.good`` and fails ``shop.bad`` with ``error`` while it is set."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.applied: list[str] = []

    def apply(self, table_id: str, events: Sequence[ChangeEvent], seq_last: int) -> TableResult:
        if table_id == "shop.bad" and self.error is not None:
            raise self.error
        self.applied.append(table_id)
        return TableResult(table_id, commits=[])


def _ingestor(tmp_path: Path, error: Exception | None) -> tuple[Ingestor, _Tables, Config]:
    config = load_config(
        None, environ={"TIDELAKE_HOME": str(tmp_path), "TIDELAKE_INGEST__INTERVAL_S": "0.01"}
    )
    ingestor = Ingestor(config, cast(Any, None), LocalStorage(config.stage_root))
    tables = _Tables(error)
    ingestor.source = cast(Any, _Source())
    ingestor.tables = cast(Any, tables)
    return ingestor, tables, config


def _due_now(ingestor: Ingestor) -> None:
    for retry in ingestor.retrying.values():
        retry.retry_at = 0.0


def test_a_table_raising_an_unknown_error_lets_the_others_commit_and_shows_its_cause(
    tmp_path: Path,
) -> None:
    """Probe: a ``ValueError`` (``es`` of 10^15 → "year out of range") in one table's share
    stalled every table forever. Now the other table commits in the same round, the failing
    one waits for a retry with its cause in the heartbeat (``retrying``, ``last_error``),
    the saved cursor stays behind its events, and after ``MAX_TABLE_FAILURES`` failures it
    is paused with the cause in ``paused.json``."""
    ingestor, tables, config = _ingestor(tmp_path, ValueError("year 33658 is out of range"))
    ledger = Ledger(config.lake_state_dir)

    result = ingestor.step()
    ingestor.heartbeat("idle")

    assert ["shop.good"] == tables.applied
    assert {"shop.bad": "year 33658 is out of range"} == result.failed
    heartbeat = ledger.heartbeat() or {}
    expected_hb = ("retrying", {"shop.bad": "year 33658 is out of range"})
    assert expected_hb == (heartbeat["state"], heartbeat["retrying"])
    assert "year 33658 is out of range" == heartbeat["last_error"]
    assert 0 == ledger.cursor()  # the saved hint stays behind shop.bad's events
    for _ in range(MAX_TABLE_FAILURES - 1):
        _due_now(ingestor)
        ingestor.step()
    expected = {
        "shop.bad": f"year 33658 is out of range (failed {MAX_TABLE_FAILURES} times in a row)"
    }
    assert (expected, {}) == (ledger.paused(), ingestor.retrying)


def test_a_transient_failure_retries_until_the_cause_is_gone_with_no_manual_step(
    tmp_path: Path,
) -> None:
    """Probe: after the lake's disk filled and was freed, tables stayed paused with
    ``errors: []``. A disk-full error (ENOSPC) is transient: the table is never paused,
    however many rounds fail; once space is back its next retry commits, nothing is held
    back and the cursor is saved."""
    error = OSError(errno.ENOSPC, "No space left on device")
    ingestor, tables, config = _ingestor(tmp_path, error)
    for _ in range(MAX_TABLE_FAILURES * 3):
        ingestor.step()
        _due_now(ingestor)
    assert ({}, ["shop.bad"]) == (ingestor.paused, sorted(ingestor.retrying))
    # shop.good is applied again on each re-read (this fake has no checkpoint to skip by).
    assert {"shop.good"} == set(tables.applied)

    tables.error = None  # space freed
    ingestor.step()
    expected = ({}, {}, 1, 2)
    actual = (
        ingestor.paused,
        ingestor.retrying,
        tables.applied.count("shop.bad"),
        Ledger(config.lake_state_dir).cursor(),
    )
    assert expected == actual


def test_a_jvm_disk_full_error_is_transient_by_its_text() -> None:
    """A Hudi write failing for lack of space reaches Python as py4j's error wrapped in an
    IngestError; only its text says "No space left on device": transient, like ENOSPC."""
    wrapped = IngestError(
        "shop.orders: the Hudi write failed: IOException: No space left on device"
    )
    expected = ["transient", "transient", "terminal", "unknown"]
    actual = [
        table_failure(wrapped),
        table_failure(OSError(errno.ENOSPC, "No space left on device")),
        table_failure(TableRefused("no primary key")),
        table_failure(ValueError("year 33658 is out of range")),
    ]
    assert expected == actual


def test_a_terminal_failure_pauses_at_once_and_the_other_table_commits(tmp_path: Path) -> None:
    """A refused table is paused with its reason in the first round; the other commits."""
    ingestor, tables, config = _ingestor(tmp_path, TableRefused("shop.bad has no primary key"))
    ingestor.step()
    expected = ({"shop.bad": "shop.bad has no primary key"}, ["shop.good"], {})
    actual = (Ledger(config.lake_state_dir).paused(), tables.applied, ingestor.retrying)
    assert expected == actual


def test_ingest_once_raises_a_failing_tables_error_after_the_others_committed(
    tmp_path: Path,
) -> None:
    """``ingest --once`` still exits 1 with the cause of a table that keeps failing, but
    only after every other table of the run has committed."""
    ingestor, tables, _ = _ingestor(tmp_path, ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        ingestor.run_once()
    assert ["shop.good"] == tables.applied


def test_an_event_whose_commit_time_no_timestamp_holds_is_refused_by_the_ingest() -> None:
    """Probe: an ``es`` of 10^15 staged before the stager checked positions made the ingest's
    commit raise ("year is out of range") every round; the ingest now dead-letters that
    event alone (``implausible_time``) and commits the rest of its table."""
    bad = replace(insert_event(1, "shop.orders"), commit_ts_ms=10**15)
    good = replace(insert_event(2, "shop.orders"), commit_ts_ms=1_704_067_200_000)
    reason = implausible_time(bad)
    assert reason is not None
    assert reason.startswith("implausible_position: shop.orders commit time 1000000000000000 ms")
    assert None is implausible_time(good)


def test_the_heartbeat_says_why_tables_wait_even_when_it_cannot_be_replaced(
    tmp_path: Path,
) -> None:
    """Probe: with the lake's disk full, tables waited with ``errors: []``: the heartbeat,
    replaced through a new file, could not be written. When the ledger's write did not go
    through (the file on disk is older), the record is written over the old file's bytes."""
    ledger = Ledger(tmp_path)
    ledger.write_heartbeat("applying", cursor=1, paused=[])
    path = ledger.path(heartbeat_name(INGEST_STAGE))
    stale = orjson.loads(path.read_bytes()) | {"updated_at_ms": 1}
    path.write_bytes(orjson.dumps(stale))  # as if the last replace failed
    heartbeat_in_place(ledger, "retrying", {"retrying": {"shop.orders": "No space left on device"}})
    written = ledger.heartbeat() or {}
    expected = ("retrying", {"shop.orders": "No space left on device"})
    assert expected == (written["state"], written["retrying"])


def test_an_operators_resume_retries_a_waiting_table_at_once(tmp_path: Path) -> None:
    """A table waiting for its retry time resumes at once when an operator asks."""
    ingestor, _, _ = _ingestor(tmp_path, OSError(errno.ENOSPC, "No space left on device"))
    ingestor.step()
    assert ["shop.bad"] == sorted(ingestor.retrying)
    assert ingestor.resume("shop.bad")
    assert ({}, {}) == (ingestor.retrying, ingestor.paused)


def test_the_saved_cursor_never_falls_behind_what_retention_removed(tmp_path: Path) -> None:
    """Found by the fault suite: a round applied while a table was held back moved the cursor
    in memory only, retention then removed the manifests up to it, and a restarted ingest
    listed from the old saved cursor forever (nothing below the retired bound is left). The
    cursor is saved before retiring, and a new process starts at the retired bound."""
    ingestor, _tables, config = _ingestor(tmp_path, None)
    ingestor.ledger.save_cursor(0)
    ingestor.cursor = 2
    ingestor._retire(now=True)
    assert 2 == ingestor.ledger.cursor()
    ingestor.ledger.save_cursor(0)  # as an older run left it
    storage = LocalStorage(config.stage_root)
    write_manifest(storage, Manifest("b2", 1, 2, 0, (), received=2, staged=2, dead_lettered=0))
    ingestor.retention.retire(2)
    restarted = Ingestor(config, cast(Any, None), LocalStorage(config.stage_root))
    assert 2 == restarted.cursor


def test_only_unknown_failures_in_a_row_pause_a_table(tmp_path: Path) -> None:
    """Found by the fault suite: two disk-full failures, then the error the full disk left
    behind (an empty Hudi clean plan), paused the table at once, counted as 3 failures. Only
    unknown failures in a row count: a transient one starts the count again."""
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    torn = IngestError("shop.bad: unable to read commit metadata for instant [==>1__clean]")
    ingestor, tables, _config = _ingestor(tmp_path, disk_full)
    for error in (disk_full, disk_full, torn, torn, disk_full, torn, torn):
        tables.error = error
        _due_now(ingestor)
        ingestor.step()
    assert ({}, ["shop.bad"]) == (ingestor.ledger.paused(), sorted(ingestor.retrying))
    _due_now(ingestor)
    ingestor.step()  # the third unknown failure in a row
    assert ["shop.bad"] == sorted(ingestor.ledger.paused())
