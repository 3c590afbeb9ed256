"""The real Debezium Server writing to a real Kafka broker, as a Kafka Connect user's topics look:
MariaDB → Debezium Server 3.6.0.Final's ``kafka`` sink → Kafka 4.1.1 → ``tidelake capture
kafka`` (``order: partition``) → a Kafka bus (``bus.kind: kafka``) → stager → ingest → lake.

The layout is the producer's own (debezium-server ``debezium-server-kafka``
``KafkaChangeConsumer.handle``: ``new ProducerRecord<>(topic, null, null, record.key(),
record.value(), headers)``, so Kafka's default partitioner spreads a table's keys over the
topic's partitions by the key's hash): one topic per table, ``<topic.prefix>.<db>.<table>``,
three partitions each; the JSON converter with schemas, key and value; a tombstone after every
delete (``tombstones.on.delete=true``). No ``lake.tables`` primary key is configured: every
key, the composite one included, comes from the Kafka record key. Debezium Server is stopped
and started again with changes made while it was down. Then every table equals its source,
value by value (``verify/source.py``), nothing is dead-lettered, the tombstones were counted
as skipped, and the keys of one table really were spread over several partitions.

Debezium logs "Starting streaming" as soon as the snapshot is read, while its records may still
be on their way to the sink; stopped then, its offsets say the snapshot is unfinished and it
snapshots again on restart (a snapshot brings no deletes: rows deleted meanwhile stay). So each
phase ends with a row in ``shop.marker``, and the test waits until Debezium delivered it, the
capture group committed every source partition's end and the stagers committed the CDC topic's
end, before it stops anything.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from pprint import pformat
from typing import Any

import dbzkit
import pytest
import yaml
from pyspark.sql import SparkSession

from tidelake.bus import kafka as kbus
from tidelake.capture.servers import MariaDBServer
from tidelake.config import Config, load_config
from tidelake.lake.ingest import Ingestor
from tidelake.pipeline import kafka
from tidelake.pipeline.debezium_server import DebeziumServer
from tidelake.pipeline.kafka import KafkaBroker
from tidelake.pipeline.processes import StageProcess, tidelake_argv
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import list_manifests, read_manifest, read_retired
from tidelake.verify.source import verify_table

aiokafka = pytest.importorskip("aiokafka")

pytestmark = [
    pytest.mark.timeout(480),
    pytest.mark.skipif(
        not kafka.available(),
        reason="Kafka is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

PARTITIONS = 3
PREFIX = "dbz"
TABLES = ("shop.customers", "shop.all_types", "shop.composite")
MARKER_TOPIC = f"{PREFIX}.shop.marker"

PHASE1 = [
    *dbzkit.MARIADB_STREAMING_SQL,
    "UPDATE shop.customers SET balance = balance + 0.01 WHERE id % 7 = 0",
    "UPDATE shop.customers SET id = id + 100000 WHERE id % 13 = 0",
    "DELETE FROM shop.customers WHERE id % 17 = 0",
    "INSERT INTO shop.marker VALUES (1)",
]
PHASE2 = [
    "DELETE FROM shop.customers WHERE id % 11 = 0",
    "UPDATE shop.customers SET name = CONCAT(name, ' (2)') WHERE id % 5 = 0",
    "UPDATE shop.all_types SET c_text = 'after restart', c_set = 'b' WHERE id = 1",
    "DELETE FROM shop.composite WHERE a = 1 AND b = 'y'",
    "INSERT INTO shop.marker VALUES (2)",
]


def _config(home: Path, broker: KafkaBroker) -> Path:
    doc: dict[str, Any] = {
        "home": str(home),
        "bus": {"kind": "kafka", "kafka": {"bootstrap_servers": broker.bootstrap_servers}},
        "capture": {
            "kafka": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topic_pattern": rf"{PREFIX}\.shop\..*",
                "order": "partition",
            }
        },
        "stage": {"max_events": 500, "max_age_s": 0.5},
        "ingest": {"max_batch_events": 2_000, "parallel_tables": 2},
        # Debezium's Connect schema of a MySQL TIME carries no fsp (MicroTime): the declared
        # type gives the lake its fraction digits. No primary keys: the Kafka key has them.
        "lake": {
            "tables": {"shop.all_types": {"columns": {"c_time": "time(6)"}}},
            "spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2},
        },
    }
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _properties(mariadb: MariaDBServer, broker: KafkaBroker) -> dict[str, object]:
    props = dbzkit.mariadb_properties(
        port=mariadb.port,
        nats_url="unused",
        prefix=PREFIX,
        server_id=5601,
        schemas=True,
        http_port=dbzkit.http_port(),
    )
    for name in [p for p in props if str(p).startswith("debezium.sink.")]:
        del props[name]
    props |= {
        "debezium.sink.type": "kafka",
        "debezium.sink.kafka.producer.bootstrap.servers": broker.bootstrap_servers,
        "debezium.sink.kafka.producer.key.serializer": (
            "org.apache.kafka.common.serialization.StringSerializer"
        ),
        "debezium.sink.kafka.producer.value.serializer": (
            "org.apache.kafka.common.serialization.StringSerializer"
        ),
        "debezium.source.tombstones.on.delete": True,
        "debezium.source.bigint.unsigned.handling.mode": "precise",
        "debezium.source.include.schema.changes": False,
    }
    return props


def _execute(conn: Any, statements: list[str]) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


async def _source_topics(cfg: Config) -> dict[str, dict[int, int]]:
    """Records per partition of each Debezium topic."""
    from aiokafka.admin import AIOKafkaAdminClient

    servers = cfg.capture.kafka.bootstrap_servers
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=servers)
    await admin.start()
    await consumer.start()
    try:
        topics = sorted(t for t in await admin.list_topics() if t.startswith(f"{PREFIX}.shop."))
        out: dict[str, dict[int, int]] = {}
        for entry in await admin.describe_topics(topics):
            topic = entry["topic"]
            tps = [aiokafka.TopicPartition(topic, p["partition"]) for p in entry["partitions"]]
            first = await consumer.beginning_offsets(tps)
            end = await consumer.end_offsets(tps)
            out[topic] = {tp.partition: end[tp] - first[tp] for tp in tps}
        return out
    finally:
        await consumer.stop()
        await admin.close()


async def _through(cfg: Config, markers: int) -> str | None:
    """What still stands between the ``markers``-th marker row and the lake's stage, or None
    when Debezium delivered it, the capture group committed every source partition's end and
    the stagers committed the CDC topic's end (checked in that order: each commits only what
    it passed on)."""
    from aiokafka.admin import AIOKafkaAdminClient

    servers = cfg.capture.kafka.bootstrap_servers
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=servers)
    await admin.start()
    await consumer.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(f"{PREFIX}.shop.")]
        tps = [
            aiokafka.TopicPartition(entry["topic"], p["partition"])
            for entry in await admin.describe_topics(topics)
            for p in entry["partitions"]
        ]
        ends = await consumer.end_offsets(tps)
        delivered = sum(n for tp, n in ends.items() if tp.topic == MARKER_TOPIC)
        if delivered < markers:
            return f"Debezium delivered {delivered} of {markers} marker rows"
        committed = await admin.list_consumer_group_offsets(cfg.capture.kafka.group_id)
        behind = {
            f"{tp.topic}[{tp.partition}]": (committed[tp].offset if tp in committed else None, end)
            for tp, end in ends.items()
            if end and (tp not in committed or committed[tp].offset != end)
        }
        if behind:
            return f"capture kafka has not committed (committed, end): {behind}"
    finally:
        await consumer.stop()
        await admin.close()
    state = await kbus.topic_state(cfg.bus)
    if state.committed != state.end_offset:
        return f"the stagers have not committed the CDC topic's end: {state}"
    return None


def _wait_staged(
    cfg: Config, procs: list[StageProcess], markers: int, timeout_s: float = 240
) -> None:
    """Until everything Debezium wrote up to the ``markers``-th marker row is staged."""
    deadline = time.monotonic() + timeout_s
    while True:
        for proc in procs:
            assert proc.alive(), f"{proc.name} died:\n{proc.log_tail()}"
        waiting = asyncio.run(_through(cfg, markers))
        if waiting is None:
            return
        assert time.monotonic() < deadline, f"not staged in {timeout_s}s: {waiting}"
        time.sleep(0.5)


def _start(server: DebeziumServer) -> None:
    server.start()
    server.wait_for_log(dbzkit.STREAMING_STARTED, timeout_s=180)


def test_debezium_servers_kafka_topics_land_value_for_value_through_a_kafka_bus(
    mariadb: MariaDBServer, spark: SparkSession, tmp_path: Path
) -> None:
    maria = mariadb.connect()
    _execute(maria, ["DROP DATABASE IF EXISTS shop"])
    _execute(
        maria,
        [
            *dbzkit.MARIADB_SCHEMA,
            "CREATE TABLE shop.marker (id INT PRIMARY KEY)",
            *dbzkit.MARIADB_SNAPSHOT_SQL,
        ],
    )
    _execute(
        maria,
        [
            "INSERT INTO shop.customers SELECT seq, CONCAT('c', seq), seq * 0.25"
            " FROM shop.seq_1000_to_3000"  # ids the streaming SQL uses stay free
        ],
    )
    with KafkaBroker(tmp_path / "kafka", partitions=PARTITIONS) as broker:
        home = tmp_path / "home"
        config_path = _config(home, broker)
        cfg = load_config(config_path, environ={})
        env = {"TIDELAKE_CONFIG": str(config_path)}
        capture = StageProcess(
            "capture-kafka", tidelake_argv("capture", "kafka"), env, home / "capture.log"
        )
        stager = StageProcess("stager", tidelake_argv("stage"), env, home / "stager.log")
        server = DebeziumServer(tmp_path / "dbz", _properties(mariadb, broker))
        ingestor = Ingestor(cfg, spark, LocalStorage(cfg.stage_root))
        try:
            _start(server)
            stager.start()
            capture.start()
            _execute(maria, PHASE1)
            _wait_staged(cfg, [capture, stager], markers=1)
            first = ingestor.run_once()

            # Stopped: its offsets are saved, the changes below wait in the binlog.
            server.stop()
            _execute(maria, PHASE2)
            _start(server)
            _wait_staged(cfg, [capture, stager], markers=2)
            second = ingestor.run_once()
        finally:
            server.stop()
            capture.stop()
            stager.stop()
        layout = asyncio.run(_source_topics(cfg))
        dead = asyncio.run(kbus.topic_state(cfg.bus, cfg.bus.kafka.dlq_topic))
    # Restarted, Debezium goes on from its offsets: a second data snapshot would bring no
    # deletes (debezium RelationalSnapshotChangeEventSource logs this step once per snapshot).
    snapshots = server.log_path.read_text(errors="replace").count("Snapshot step 7")
    assert 1 == snapshots, f"Debezium read {snapshots} data snapshots:\n{server.log_tail()}"

    dsn = f"mysql://{mariadb.user}:{mariadb.password}@127.0.0.1:{mariadb.port}/"
    results = {t: verify_table(dsn, str(cfg.lake_root), t) for t in TABLES}
    problems = {
        t: {
            "error": v.error,
            "rows (source, lake)": (v.rows_source, v.rows_lake),
            "missing/unexpected/different": (v.missing, v.unexpected, v.different),
            "first": v.samples[:3],
        }
        for t, v in results.items()
        if not v.ok
    }
    assert {} == problems, f"ingest runs: {first}, {second}\n{pformat(problems, width=100)}"
    assert 0 == dead.end_offset - dead.first_offset, "nothing is dead-lettered"
    assert results["shop.customers"].rows_source > 1_500  # 2,006 made, a quarter deleted
    # The producer's layout: a table's keys over several partitions; tombstones skipped.
    customers = layout[f"{PREFIX}.shop.customers"]
    assert PARTITIONS == len(customers), layout
    assert sum(1 for n in customers.values() if n) >= 2, layout
    storage = LocalStorage(cfg.stage_root)
    # Manifests the ingest passed may be retired already: their counts are in the totals.
    skipped = read_retired(storage)[1].skipped + sum(
        read_manifest(storage, p).skipped for p in list_manifests(storage)
    )
    assert skipped >= 2, "the tombstones after the deletes are counted as skipped"
