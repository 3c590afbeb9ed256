"""The short form of the bench's snapshot part (``bench/tidelake_bench/snapshot.py``): the
same code as ``tidelake bench --part snapshot`` on a few thousand rows, both first-start
modes (``incremental`` by parallel chunks, ``initial`` by one connection) on both servers,
checked for what it read (speed is measured by the bench, docs/benchmarks.md, never asserted
here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake_bench.snapshot import run_snapshot_bench

pytestmark = pytest.mark.integration


def test_both_first_start_modes_snapshot_every_row_on_both_servers(tmp_path: Path) -> None:
    """4,000 rows in chunks of 250 by 3 readers (incremental), 1,500 rows the initial way:
    each run saw every row snapshotted (the bench's own check: ``rows_done`` for
    incremental, one message a row for initial), incremental in fewer messages than rows."""
    result = run_snapshot_bench(tmp_path, 4_000, lambda _line: None, workers=3,
                                chunk_rows=250, timeout_s=240, initial_rows=1_500)  # fmt: skip
    runs = {(r.source, r.mode): r for r in result.runs}
    assert set(runs) == {(s, m) for s in ("mysql", "postgres") for m in ("incremental", "initial")}
    for (source, mode), run in runs.items():
        assert run.error is None, (source, mode, run.error)
        assert run.rows_per_s is not None
        assert run.rows_per_s > 0
        if mode == "incremental":
            assert (run.rows, run.workers) == (4_000, 3)
            # Several rows to a message, a message never spanning two chunks.
            assert 4_000 / 250 <= (run.messages or 0) < 4_000
        else:
            assert (run.rows, run.workers, run.messages) == (1_500, 1, 1_500)
