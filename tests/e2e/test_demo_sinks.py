"""`tidelake demo --sinks --with-ddl`: the order workload, with its schema changes mid-stream
(columns added with a default, renamed, retyped, dropped; tables created, renamed, dropped),
into the lake and, through four routes, into a real PostgreSQL, a real redis-server, a webhook
receiver and a real OpenSearch node (when laid out), each applying the DDL between the rows;
each route's process killed -9 once mid-stream, the PostgreSQL route replayed from the
stream's first sequence, the webhook route's dead letters (its receiver refused two batches)
re-processed. The lake and every destination equal the source, row by row and column by
column (pipeline/demo_sinks.py). The short form of the issue's multi-sink demo; a longer one
is `tidelake demo --sinks --with-ddl --events 50000`."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tidelake.pipeline import opensearch, redis

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # The long form (make e2e): tests/integration/route/test_routes_into_sinks.py is its short
    # form in make test (the same kills, replay and re-process, routes run by hand).
    pytest.mark.long,
    pytest.mark.skipif(
        not redis.available(),
        reason="redis-server is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1",
    ),
]


def test_the_lake_and_every_route_equal_the_source_through_ddl_kills_and_a_replay(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelake.cli",
            "demo",
            "--sinks",
            "--with-ddl",
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
    differing = {t: v for t, v in summary["per_table"].items() if v["mismatches"]}
    assert 0 == summary["sink_mismatches"], differing
    assert 0 == proc.returncode
    faults = summary["faults"]
    routes = ["replica", "cache", "hook"] + (["search"] if opensearch.available() else [])
    assert [f"kill -9 route {name}" for name in routes] == faults[: len(routes)], faults
    assert "replay route replica from sequence 1" in faults
    assert any(f.startswith("reprocess ") and not f.startswith("reprocess 0 ") for f in faults)
    tables = summary["per_table"]
    expected = {
        "postgres shop.customers",
        "postgres shop.orders",
        "postgres shop.order_items",
        "postgres shop.promotions",  # created, then renamed from coupons
        "redis shop.customers",
        "redis shop.orders",
        "webhook shop.orders",
    }
    if opensearch.available():  # laid out by scripts/setup with TIDELAKE_SETUP_TESTS=1
        expected |= {"opensearch shop.customers", "opensearch shop.orders"}
    assert expected <= set(tables), tables
    assert all(tables[t]["rows_expected"] > 5 for t in expected), tables
    # No table the source dropped or renamed away is left in the replica.
    assert 0 == tables["postgres shop tables"]["mismatches"], tables
    assert 0 == summary["dlq"]  # the re-processed dead letters left the dead-letter stream
