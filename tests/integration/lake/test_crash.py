"""Process deaths: ``kill -9`` in the middle of a Hudi commit, and SIGTERM in continuous mode."""

from __future__ import annotations

import signal
from pathlib import Path

from lakekit import Lake, event

from tidelake.runtime.processes import ChildProcess, tidelake_argv

REPO = Path(__file__).resolve().parents[3]


def _tidelake(lake: Lake, log: Path, *args: str) -> ChildProcess:
    """``tidelake <args>`` started in its own session (the Spark JVM is in it too)."""
    return ChildProcess(
        "ingest", tidelake_argv(*args), log_path=log, env=lake.env, cwd=REPO, stop_timeout_s=120
    ).start()


def _inflight(lake: Lake) -> set[str]:
    timeline = Path(lake.path()) / ".hoodie" / "timeline"
    return {p.name.split(".")[0] for p in timeline.glob("*.inflight")}


def _completed(lake: Lake) -> set[str]:
    timeline = Path(lake.path()) / ".hoodie" / "timeline"
    return {p.name.split("_")[0] for p in timeline.glob("*_*.commit")}


def test_kill_9_during_a_commit_then_restart_ends_in_the_expected_state(
    lake: Lake, tmp_path: Path
) -> None:
    """The ingest process group is SIGKILLed while a Hudi commit is inflight; a restart
    rolls the half-commit back, re-applies the batch once, and no key is duplicated."""
    lake.stage([event("insert", i, 100 + i, i, values={"status": "v1"}) for i in range(1, 51)])
    lake.ingest()
    batch = [event("update", i, 200 + i, 50 + i, values={"status": "v2"}) for i in range(1, 26)]
    batch += [event("delete", i, 300 + i, 100 + i, values={"status": "v1"}) for i in range(26, 36)]
    batch += [event("insert", i, 400 + i, 100 + i, values={"status": "new"}) for i in range(51, 61)]
    lake.stage(batch)
    known = _inflight(lake)

    log = tmp_path / "ingest.log"
    proc = _tidelake(lake, log, "ingest", "--once")
    proc.wait_until(lambda _p: bool(_inflight(lake) - known), 180, "a commit inflight")
    proc.kill()
    interrupted = _inflight(lake) - known
    assert not interrupted & _completed(lake), "the commit finished before the kill"

    lake.ingest()  # the restart
    expected = {str(i): ("v2",) for i in range(1, 26)}
    expected |= {str(i): ("v1",) for i in range(36, 51)}
    expected |= {str(i): ("new",) for i in range(51, 61)}
    rows = lake.rows()
    assert len(rows) == len({r["id"] for r in rows}), "duplicate keys"
    assert expected == lake.state()
    checkpoint = lake.checkpoint()
    assert checkpoint is not None
    expected_seq = 160
    assert expected_seq == checkpoint.seq
    assert lake.rows() == lake.spark_rows()


def test_sigterm_in_continuous_mode_finishes_the_commit_and_exits_0(
    lake: Lake, tmp_path: Path
) -> None:
    """SIGTERM while a commit is inflight: the commit completes, then the process exits 0."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "a"})])
    log = tmp_path / "ingest.log"
    proc = _tidelake(lake, log, "ingest", "--continuous", "--interval", "0.2")
    try:
        proc.wait_until(lambda _p: len(lake.commits()) == 1, 180, "the first commit")
        known = _inflight(lake)
        lake.stage([event("update", 1, 11, 2, values={"status": "b"})])
        proc.wait_until(lambda _p: bool(_inflight(lake) - known), 180, "a commit inflight")
        proc.send_signal(signal.SIGTERM)
        expected_rc = 0
        assert expected_rc == proc.wait(120), proc.log_tail(60)
    finally:
        proc.kill()
    expected_state = {"1": ("b",)}
    assert expected_state == lake.state()
    expected_seqs = [1, 2]
    assert expected_seqs == [c["seq"] for c in lake.commits()]
