"""``tidelake ingest --once`` and ``tidelake query`` as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakekit import Lake, event

REPO = Path(__file__).resolve().parents[3]


def _tidelake(lake: Lake, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", *args],
        env={**os.environ, **lake.env, "COLUMNS": "200"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ingest_once_then_query_prints_the_rows(lake: Lake) -> None:
    """`ingest --once` applies the staged batch and exits 0; `query` prints a table of it."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "new", "amount": "9.50"}),
            event("insert", 2, 11, 2, values={"status": "gone"}),
            event("delete", 2, 12, 3, values={"status": "gone"}),
        ]
    )
    ingest = _tidelake(lake, "ingest", "--once")
    expected_rc = 0
    assert expected_rc == ingest.returncode, ingest.stderr[-3000:]
    assert "ingest: 1 commits, 3 events" in ingest.stderr
    assert "Exception" not in ingest.stderr

    query = _tidelake(lake, "query", "SELECT id, status, amount FROM shop.orders ORDER BY id")
    assert expected_rc == query.returncode, query.stderr[-3000:]
    lines = [line for line in query.stdout.splitlines() if "new" in line]
    expected = [["1", "new", "9.50"]]
    assert expected == [[c.strip() for c in line.strip("│┃ ").split("│")] for line in lines]
    assert "1 row(s)" in query.stdout
