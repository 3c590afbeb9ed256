"""`tidelake demo --kafka --with-ddl`: the workload through TiCDC's Kafka layout on a real Kafka
broker and two `capture kafka` members, the one holding the topic killed -9 (the group moves
it to the other) and started again, and the broker killed -9 and started again; the lake equals the
source, schemas and dropped tables included (docs/kafka.md)."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tidelake.pipeline import kafka

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not kafka.available(),
        reason="Kafka is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]


def test_the_demo_through_kafka_ends_with_the_sources_rows_and_schemas(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "demo", "--kafka", "--with-ddl",
         "--events", "3000", "--rate", "1000", "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    assert 0 == summary["mismatches"], summary["per_table"]
    assert {"shop.customers", "shop.orders", "shop.order_items"} <= set(summary["per_table"])
    assert summary["rows_expected"] > 500
    # Both faults happened, and the topic moved: each member held it at some point.
    assert 2 == len(summary["faults"]), summary["faults"]
    assert "the topic moved to member" in summary["faults"][0], summary["faults"]
    for n in (1, 2):
        log = (home / "logs" / f"capture-kafka-{n}.log").read_text()
        assert "topics=['tidb_shop']" in log, n
