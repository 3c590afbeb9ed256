"""`tidelake demo --kafka --with-ddl`: the workload through TiCDC's Kafka layout on a real Kafka
broker and two `capture kafka` members, the one holding the topic killed -9 (the group moves
it to the other) and started again, and the broker killed -9 and started again; the lake equals the
source, schemas and dropped tables included (docs/kafka.md).

``--bus kafka`` (in ``make test``): Kafka is the pipeline's bus as well — no nats-server, the
members write to the CDC topic, two stagers share it in one consumer group and the one holding
its partition is killed -9 (the group moves it to the other). ``--bus nats`` (JetStream behind
the members; ``make e2e``) is the same run with JetStream as the bus."""

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


# Both forms are long (make e2e): in make test, tests/integration/capture/test_kafka_source.py
# (a capture member and the broker killed, a rebalance) and tests/integration/stage/
# test_kafka_stager.py (stagers killed, a rebalance) are the short forms.
@pytest.mark.long
@pytest.mark.parametrize("bus", ["kafka", "nats"])
def test_the_demo_through_kafka_ends_with_the_sources_rows_and_schemas(
    tmp_path: Path, bus: str
) -> None:
    home = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "demo", "--kafka", "--bus", bus, "--with-ddl",
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
    # Every fault happened, and what was killed moved: each member held the topic at some
    # point (and, on a Kafka bus, the CDC partition moved between the stagers).
    faults = summary["faults"]
    assert (3 if bus == "kafka" else 2) == len(faults), faults
    assert "the topic moved to member" in faults[0], faults
    for n in (1, 2):
        log = (home / "logs" / f"capture-kafka-{n}.log").read_text()
        assert "topics=['tidb_shop']" in log, n
    if bus == "kafka":
        assert "the CDC partition moved to" in faults[1], faults
        assert not (home / "nats").exists(), "a Kafka bus runs no nats-server"
        for log_name in ("stage.log", "stager-2.log"):
            assert "kafka partition assigned" in (home / "logs" / log_name).read_text()
