"""``tidelake ingest --once`` and ``tidelake query`` (piped, --json, --csv) as a user runs them."""

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
    """`ingest --once` applies the staged batch and exits 0; `query` prints it plainly when
    piped, as JSON lines or CSV on request, and names an unknown table."""
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

    sql = "SELECT id, status, amount FROM shop.orders ORDER BY id"
    query = _tidelake(lake, "query", sql)
    assert expected_rc == query.returncode, query.stderr[-3000:]
    # Piped: plain aligned columns, a header line, then the rows, then the count.
    expected_lines = [["id", "status", "amount"], ["1", "new", "9.50"], ["1", "row(s)"]]
    assert expected_lines == [line.split() for line in query.stdout.splitlines()]

    as_json = _tidelake(lake, "query", "--json", sql)
    assert '{"id":1,"status":"new","amount":"9.50"}\n' == as_json.stdout
    as_csv = _tidelake(lake, "query", "--csv", sql)
    assert "id,status,amount\n1,new,9.50\n" == as_csv.stdout
    unknown = _tidelake(lake, "query", "SELECT * FROM shop.nosuch")
    expected = (1, "query failed unknown table shop.nosuch; known: shop.orders")
    assert expected == (unknown.returncode, unknown.stderr.strip())
