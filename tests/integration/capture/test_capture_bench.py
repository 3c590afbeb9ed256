"""The short form of the bench's capture part (``bench/tidelake_bench/capture.py``): the same
code as ``tidelake bench --part capture`` on a few thousand changes, checked for what it
captured (speed is measured by the bench, docs/benchmarks.md, never asserted here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from capturekit import decoded, fold, mysql_rows, postgres_rows, row_differences, stream_messages

from tidelake.workload.orders import DATABASE, PRIMARY_KEYS
from tidelake_bench.capture import run_lag, run_throughput

pytestmark = pytest.mark.integration

CHANGES = 3_000


def _same_as_source(kind: str) -> Any:
    """An ``inspect`` callback: every workload table folds from the stream to the live table,
    and no message id appears twice."""

    def inspect(nats_url: str, server: Any) -> None:
        messages = stream_messages(nats_url)
        ids = [msg_id for _, msg_id, _ in messages]
        assert len(ids) == len(set(ids))
        events = decoded(messages)
        conn = server.connect()
        try:
            for table, pk in PRIMARY_KEYS.items():
                table_id = f"{DATABASE}.{table}"
                source = (
                    mysql_rows(conn, table_id)
                    if kind == "mysql"
                    else postgres_rows(conn, table_id, list(pk))
                )
                assert source, f"the workload left {table_id} empty"
                assert "" == row_differences(source, fold(events, table_id))
        finally:
            conn.close()

    return inspect


@pytest.mark.parametrize("kind", ["mysql", "postgres"])
def test_capture_bench_captures_every_change_exactly_once(kind: str, tmp_path: Path) -> None:
    """The throughput form on a real MariaDB / PostgreSQL and nats-server: the capture worker
    publishes exactly the rows the workload changed, once each, and the stream folds to the
    source's tables; the numbers it reports are filled in."""
    run = run_throughput(kind, tmp_path, CHANGES, lambda _m: None, inspect=_same_as_source(kind))
    assert run.error is None
    assert run.changes > CHANGES * 0.9
    assert (run.published, run.duplicates) == (run.changes, 0)
    assert run.capture_changes_per_s
    assert run.capture_changes_per_cpu_s
    assert run.source_changes_per_s


@pytest.mark.parametrize("kind", ["mysql", "postgres"])
def test_capture_bench_lag_form_measures_and_drains(kind: str, tmp_path: Path) -> None:
    """The lag form: a writer at a fixed rate for a few seconds while the capture runs; the
    capture acknowledges exactly the changes the writer counted (MariaDB's per-statement
    counts, one change a statement on PostgreSQL), and the lag samples are non-negative."""
    lag = run_lag(kind, tmp_path, rate=300, seconds=3, log=lambda _m: None)
    assert lag.error is None
    assert lag.changes > 0
    assert lag.lag_max_s is not None
    assert lag.lag_p50_s is not None
    assert 0 <= lag.lag_p50_s <= lag.lag_max_s
    assert lag.drain_s is not None
