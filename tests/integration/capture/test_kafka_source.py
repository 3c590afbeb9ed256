"""``tidelake capture kafka`` on a real Kafka broker (4.1.1, KRaft) into a real nats-server, then
the real stager and ingest into Hudi.

The workload with DDL (workload/ddl.py) laid out as TiCDC's Kafka sink writes canal-json with
``enable-tidb-extension=true`` and the ``index-value`` dispatcher (a table's rows over all
three partitions, its DDLs on partition 0, watermarks to every partition:
tests/support/ticdc_kafka.py cites tiflow for each). Along the way: a second bridge joins the
consumer group (a rebalance), the first is killed -9, the broker is killed -9 and started
again, and TiCDC's at-least-once replay is imitated (a stretch of rows and a watermark sent
again at later offsets). Then:

* JetStream holds every row and DDL; per key the commitTs never goes back, and each DDL comes
  after every earlier row of its table and before every later one (first copies; a copy read
  again after a kill has the same ``Nats-Msg-Id`` and is dropped by JetStream);
* the lake built from the stream equals the workload's expected state, row by row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from stagekit import REPO, StageEnv, run, wait_for

from tidelake.events import Op
from tidelake.formats import decode
from tidelake.pipeline import kafka
from tidelake.pipeline.kafka import KafkaBroker
from tidelake.runtime.processes import ChildProcess, tidelake_argv
from tidelake.workload.ddl import DdlWorkload
from tidelake.workload.orders import WorkloadSpec
from tidelake.workload.ticdc_kafka import Placed, lay_out, watermark

aiokafka = pytest.importorskip("aiokafka")

pytestmark = [
    pytest.mark.integration,
    # `make e2e`: in `make test`, tests/e2e/test_demo_kafka.py runs `capture kafka` through a
    # member kill, a rebalance and a broker restart to a lake compared row by row (Kafka as
    # the bus), and tests/unit/capture/test_kafka_merge.py holds the merge's order rules.
    pytest.mark.long,
    pytest.mark.skipif(
        not kafka.available(),
        reason="Kafka is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

TOPIC = "tidb_shop"
PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("kafka"), partitions=PARTITIONS) as server:
        yield server


async def _produce(bootstrap: str, records: list[Placed]) -> None:
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True
    )
    await producer.start()
    try:
        for r in records:
            await producer.send_and_wait(TOPIC, r.value, partition=r.partition)
    finally:
        await producer.stop()


def _produce_with_retry(bootstrap: str, records: list[Placed]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            run(_produce(bootstrap, records))
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _bridge(env: StageEnv, name: str) -> ChildProcess:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    child_env["TIDELAKE_CONFIG"] = str(env.config_path)
    # Into this test's own stream (make_stage_env numbers each env's subjects).
    prefix = env.cfg.bus.stream.subjects[0].removesuffix(".>")
    child_env["TIDELAKE_CAPTURE__KAFKA__SUBJECT_PREFIX"] = f"{prefix}.kafka"
    proc = ChildProcess(
        name,
        tidelake_argv("capture", "kafka"),
        log_path=env.log_dir / f"{name}.log",
        base_env=child_env,
        cwd=REPO,
    )
    return proc.start()


async def _stream(env: StageEnv) -> list[tuple[str, bytes]]:
    """``(Nats-Msg-Id, payload)`` of every message of the CDC stream, in stream order."""
    nc = await env.client()
    try:
        js = nc.jetstream()
        info = await js.stream_info(env.cfg.bus.stream.name)
        out = []
        for seq in range(1, info.state.last_seq + 1):
            msg = await js.get_msg(env.cfg.bus.stream.name, seq)
            out.append(((msg.headers or {}).get("Nats-Msg-Id", ""), msg.data or b""))
        return out
    finally:
        await nc.close()


def _identity(payload: bytes) -> tuple[Any, ...] | None:
    body = orjson.loads(payload)
    if body is None or body.get("type") == "TIDB_WATERMARK":
        return None
    return (body["_tidb"]["commitTs"], payload)


def test_ticdc_topics_reach_the_lake_in_order_through_kills_and_a_rebalance(
    broker: KafkaBroker,
    stage_env_factory: Callable[..., StageEnv],
    tmp_path: Path,
) -> None:
    env = stage_env_factory(
        capture={
            "kafka": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": [TOPIC],
                "group_id": f"g-{tmp_path.name}",
                "commit_interval_s": 0.2,
            }
        },
        lake={"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
    )
    workload = DdlWorkload(WorkloadSpec(events=1_500, seed=11, customers=40))
    txns = [[m.payload for m in txn] for txn in workload.transactions()]
    records = lay_out(txns, PARTITIONS, "index-value")
    assert len({r.partition for r in records if b'"isDdl":false' in r.value}) == PARTITIONS
    cut = len(records) // 4

    _produce_with_retry(broker.bootstrap_servers, records[:cut])
    first = _bridge(env, "bridge-a")
    _produce_with_retry(broker.bootstrap_servers, records[cut : 2 * cut])
    second = _bridge(env, "bridge-b")  # joins the group: the topic may move to it
    time.sleep(3)
    first.kill()  # kill -9: what it held is read again by the other member
    _produce_with_retry(broker.bootstrap_servers, records[2 * cut : 3 * cut])
    broker.kill()
    broker.start()
    # TiCDC restarted from an older checkpoint: rows, DDLs and a watermark sent again.
    window = records[cut : cut + 200]
    old_ts = max(
        orjson.loads(r.value)["_tidb"]["commitTs"] for r in window if b"commitTs" in r.value
    )
    replay = window + [Placed(p, watermark(old_ts)) for p in range(PARTITIONS)]
    _produce_with_retry(broker.bootstrap_servers, replay + records[3 * cut :])

    expected = {i for txn in txns for v in txn if (i := _identity(v)) is not None}

    missing: set[tuple[Any, ...]] = set()

    def arrived() -> bool:
        got = {i for _, p in run(_stream(env)) if (i := _identity(p)) is not None}
        missing.clear()
        missing.update(expected - got)
        return not missing

    try:
        wait_for(arrived, 120, "every row and DDL in JetStream")
    except AssertionError:
        sample = sorted(missing)[:5]
        raise AssertionError(
            f"{len(missing)} of {len(expected)} missing, e.g. {[(t, p[:160]) for t, p in sample]}"
            f"\n{env.log_text('bridge-b')[-2000:]}"
        ) from None
    second.stop(30)

    stream = run(_stream(env))
    # Nothing lost.
    firsts: list[tuple[Any, ...]] = []
    seen: set[tuple[Any, ...]] = set()
    for _, payload in stream:
        ident = _identity(payload)
        if ident is not None and ident not in seen:
            seen.add(ident)
            firsts.append(ident)
    assert expected == seen
    # Order: per key, commitTs never goes back; a DDL splits its table's rows by commitTs.
    last_ts: dict[tuple[str, str], int] = {}
    ddl_at: dict[str, int] = {}
    newest_row: dict[str, int] = {}
    for n, (ts, payload) in enumerate(firsts):
        for e in decode(payload, seq=n + 1).events:
            table = f"{e.database}.{e.table}"
            if e.op is Op.DDL:
                assert newest_row.get(table, 0) < ts, f"a row of {table} came before an older DDL"
                ddl_at[table] = ts
                continue
            key = (table, orjson.dumps(e.key, option=orjson.OPT_SORT_KEYS).decode())
            assert ts >= last_ts.get(key, 0), f"{key} went back in time"
            last_ts[key] = ts
            assert ts > ddl_at.get(table, 0), f"a row of {table} came after a later DDL"
            newest_row[table] = max(newest_row.get(table, 0), ts)

    # The lake built from that stream equals the source.
    stager = env.spawn_stager(once=True)
    assert 0 == stager.wait(300)
    from tidelake.verify.compare import compare_rows
    from tidelake.verify.lake import read_table

    ingest = ChildProcess(
        "ingest",
        tidelake_argv("ingest", "--once"),
        log_path=env.log_dir / "ingest.log",
        base_env={k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
        | {"TIDELAKE_CONFIG": str(env.config_path)},
        cwd=REPO,
    ).start()
    assert 0 == ingest.wait(600), env.log_text("ingest")[-3000:]
    for table, rows in workload.expected_rows().items():
        name = table.split(".", 1)[1]
        data = read_table(env.cfg.lake_root, table)
        comparison = compare_rows(
            table, workload.primary_keys[name], rows, data.to_pylist(), list(workload.schemas[name])
        )
        assert 0 == comparison.mismatches, (table, comparison.samples)
