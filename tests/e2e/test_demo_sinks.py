"""`tidelake demo --sinks`: the order workload into the lake and, through three routes, into a
real PostgreSQL, a real redis-server and a webhook receiver; each route's process killed -9
once mid-stream, the PostgreSQL route replayed from the stream's first sequence, the webhook
route's dead letters (its receiver refused two batches) re-processed. The lake and every
destination equal the source, row by row (pipeline/demo_sinks.py). The short form of the
issue's multi-sink demo; a longer one is `tidelake demo --sinks --events 50000`."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tidelake.pipeline import redis

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not redis.available(),
        reason="redis-server is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1",
    ),
]


def test_the_lake_and_three_routes_equal_the_source_after_kills_and_a_replay(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelake.cli",
            "demo",
            "--sinks",
            "--events",
            "3000",
            "--rate",
            "1000",
            "--json",
            "--home",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=os.environ,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    assert 0 == summary["mismatches"], summary["per_table"]
    assert 0 == summary["sink_mismatches"], summary["per_table"]
    assert 0 == proc.returncode
    faults = summary["faults"]
    assert [f"kill -9 route {name}" for name in ("replica", "cache", "hook")] == faults[:3], faults
    assert "replay route replica from sequence 1" in faults
    assert any(f.startswith("reprocess ") and not f.startswith("reprocess 0 ") for f in faults)
    tables = summary["per_table"]
    expected = {
        "postgres shop.customers",
        "postgres shop.orders",
        "postgres shop.order_items",
        "redis shop.customers",
        "redis shop.orders",
        "webhook shop.orders",
    }
    assert expected <= set(tables), tables
    assert all(tables[t]["rows_expected"] > 50 for t in expected), tables
    assert 0 == summary["dlq"]  # the re-processed dead letters left the dead-letter stream
