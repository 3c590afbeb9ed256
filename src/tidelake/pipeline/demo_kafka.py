"""``tidelake demo --kafka``: the demo with TiCDC's Kafka sink in front, through faults.

A private Kafka broker (pipeline/kafka.py) takes the order workload laid out as TiCDC's Kafka
sink writes canal-json with ``enable-tidb-extension=true`` and the ``index-value`` dispatcher
(workload/ticdc_kafka.py: a table's rows over three partitions, its DDLs on partition 0,
watermarks to every partition). Two ``tidelake capture kafka`` members of one consumer group
carry it into the local stack's JetStream. While the workload is produced, the member holding
the topic is killed -9 and started again once the group has given the topic to the other (a
rebalance that moves it), and the broker is killed -9 and started again (``faults`` in the
summary). Then, as in the plain demo, the lake must catch up and equal the workload's expected
state row by row. The transactions are made before they are produced, so their commit times
say nothing of freshness: the summary leaves it out.

``demo --bus kafka``: the same, with Kafka as the pipeline's own bus too (``bus.kind: kafka``,
bus/kafka.py): the members write the merged changes to the CDC topic (one partition) instead
of JetStream, no nats-server runs, and two stagers share the CDC topic in one consumer group.
On top of the faults above, the stager holding the topic's partition is killed -9 and started
again once the group has given the partition to the other stager.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tidelake.bus import kafka as kafka_bus
from tidelake.config import Config
from tidelake.pipeline.demo import (
    DemoOptions,
    DemoResult,
    Published,
    stored_messages,
    verify_workload,
    wait_for_ingest,
    wait_for_lake,
)
from tidelake.pipeline.kafka import KafkaBroker
from tidelake.pipeline.stack import LocalStack, prepare_home
from tidelake.runtime.processes import ChildProcess, tidelake_argv
from tidelake.workload.ddl import DdlWorkload
from tidelake.workload.orders import OrderWorkload, WorkloadSpec
from tidelake.workload.ticdc_kafka import Placed, lay_out

TOPIC = "tidb_shop"
PARTITIONS = 3
SUBJECT_PREFIX = "cdc.kafka"
#: Records produced before their acknowledgements are awaited.
IN_FLIGHT = 100


async def _produce(
    bootstrap: str, records: list[Placed], rate: float, on_sent: Callable[[int], None]
) -> None:
    """Produce ``records`` in order at about ``rate`` a second (acks=all, idempotent, up to
    :data:`IN_FLIGHT` unacknowledged); while the broker is down (the demo kills it), from the
    first unacknowledged record again: at least once, as TiCDC does."""
    from aiokafka import AIOKafkaProducer

    acked = 0
    started = time.monotonic()
    while acked < len(records):
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True
        )
        try:
            await producer.start()
            while acked < len(records):
                lot = records[acked : acked + IN_FLIGHT]
                futures = [await producer.send(TOPIC, r.value, partition=r.partition) for r in lot]
                # Bounded: sends caught by a broker kill are made again by a new producer.
                await asyncio.wait_for(asyncio.gather(*futures), 60)
                acked += len(lot)
                on_sent(acked)
                ahead = acked / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        except Exception:
            await asyncio.sleep(1.0)
        finally:
            await producer.stop()


def _member(home: Path, n: int) -> ChildProcess:
    return ChildProcess(
        f"capture-kafka-{n}",
        tidelake_argv("capture", "kafka", "--config", str(home / "config.yaml")),
        log_path=home / "logs" / f"capture-kafka-{n}.log",
        # Each line in the log as it is written: _holder reads the assignments from there.
        env={"PYTHONUNBUFFERED": "1"},
    ).start()


def _log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _last_line_with(path: Path, *marks: str) -> str:
    """The last line of the log at ``path`` holding one of ``marks`` ("" when none does)."""
    lines = [line for line in _log_text(path).splitlines() if any(m in line for m in marks)]
    return lines[-1] if lines else ""


def _holds(home: Path, n: int) -> bool:
    """Whether member ``n``'s latest assignment in its log holds the topic (a member killed -9
    keeps its last line: ask only about a live one)."""
    path = home / "logs" / f"capture-kafka-{n}.log"
    return TOPIC in _last_line_with(path, "kafka topics assigned")


def _move_topic(home: Path, members: list[ChildProcess], timeout_s: float = 90.0) -> str:
    """Kill -9 the member holding the topic, wait until the group gives it to the other, then
    start the killed one again; what happened, for the summary."""
    deadline = time.monotonic() + timeout_s
    while not any(_holds(home, n) for n in (1, 2)) and time.monotonic() < deadline:
        time.sleep(0.2)
    n = 1 if _holds(home, 1) else 2
    other = 3 - n
    members[n - 1].kill()
    while not _holds(home, other) and time.monotonic() < deadline:
        time.sleep(0.2)
    outcome = "moved" if _holds(home, other) else "did not move"
    members[n - 1] = _member(home, n)
    return f"capture kafka member {n} killed -9; the topic {outcome} to member {other}"


def _stager_holds(stack: LocalStack, name: str) -> bool:
    """Whether stager ``name``'s log says it holds the CDC topic's partition now."""
    last = _last_line_with(
        stack.child(name).log_path, "kafka partition assigned", "kafka partition revoked"
    )
    return "assigned" in last


def _move_partition(stack: LocalStack, timeout_s: float = 90.0) -> str:
    """Kill -9 the stager holding the CDC partition, wait until the group gives it to the
    other one, then start the killed one again; what happened, for the summary."""
    names = ("stager", "stager-2")
    deadline = time.monotonic() + timeout_s
    while not any(_stager_holds(stack, n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.2)
    holder = names[0] if _stager_holds(stack, names[0]) else names[1]
    other = names[1] if holder == names[0] else names[0]
    child = stack.child(holder)
    child.kill()
    while not _stager_holds(stack, other) and time.monotonic() < deadline:
        time.sleep(0.2)
    outcome = "moved" if _stager_holds(stack, other) else "did not move"
    started = _log_text(child.log_path).count("kafka stager started")
    child.start()
    # Back in the group before the next fault (a broker kill while it joins is another test).
    while _log_text(child.log_path).count("kafka stager started") <= started:
        if time.monotonic() > deadline + 60:
            break
        time.sleep(0.2)
    return f"{holder} killed -9; the CDC partition {outcome} to {other}"


async def _stored_in_kafka(cfg: Config, want: int, timeout_s: float) -> Published:
    """Wait until the CDC topic holds ``want`` distinct messages (a member killed -9 writes
    some again: Kafka keeps both copies, the stager skips the second), then the sequences of
    the first copies, per table."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = await kafka_bus.scan_topic(cfg.bus)
        ids = {r.headers.get(kafka_bus.MSG_ID_HEADER) for r in records}
        if len(ids) >= want:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"capture kafka stored {len(ids)} of {want} messages in Kafka")
        await asyncio.sleep(0.5)
    published = Published()
    first_copies: set[str | None] = set()
    for record in records:
        # A copy is skipped by the stager (its duplicate window): no table waits for it.
        msg_id = record.headers.get(kafka_bus.MSG_ID_HEADER)
        if msg_id in first_copies:
            continue
        first_copies.add(msg_id)
        body = orjson.loads(record.value or b"null")
        if not isinstance(body, dict) or body.get("isDdl"):
            continue
        table = str(body["table"])
        published.seqs[table].append(record.seq)
        published.commit_ms[table].append(int(body["es"]))
    return published


def run_kafka_demo(opts: DemoOptions, console: Console) -> DemoResult:
    """Run the demo through Kafka; every failure is reported in the result, never raised."""
    started = time.monotonic()
    result = DemoResult(events=0)
    home = opts.home.resolve()
    prepare_home(home)
    broker = KafkaBroker(home / "kafka", partitions=PARTITIONS)
    stack: LocalStack | None = None
    members: list[ChildProcess] = []
    try:
        with console.status("starting Kafka"):
            broker.start()
        settings: dict[str, Any] = {
            "capture": {
                "kafka": {
                    "bootstrap_servers": broker.bootstrap_servers,
                    "topics": [TOPIC],
                    "subject_prefix": SUBJECT_PREFIX,
                }
            }
        }
        on_kafka = opts.bus == "kafka"
        if on_kafka:
            settings["bus"] = {
                "kind": "kafka",
                "kafka": {"bootstrap_servers": broker.bootstrap_servers},
            }
        stack = LocalStack(home, settings=settings)
        stack.start()
        cfg = stack.cfg
        result.lake = cfg.lake_root
        wait_for_ingest(stack, console)
        if on_kafka:
            stack.add_stager("stager-2")  # the CDC topic's consumer group: two members
        members = [_member(home, 1), _member(home, 2)]
        spec = WorkloadSpec(events=opts.events, seed=opts.seed)
        workload = DdlWorkload(spec) if opts.with_ddl else OrderWorkload(spec)
        txns = [[m.payload for m in txn] for txn in workload.transactions()]
        records = lay_out(txns, PARTITIONS, "index-value")
        result.events = workload.emitted
        columns = [
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("producing to Kafka", total=len(records))
            third = len(records) // 3
            faults = {third: "member", 2 * third: "broker"}
            if on_kafka:
                faults[len(records) // 2] = "stager"

            def on_sent(sent: int) -> None:
                progress.update(task, completed=sent)
                due = [at for at in faults if at <= sent]
                fault = faults.pop(due[0]) if due else None
                if fault == "member":  # a rebalance that moves the topic to the other member
                    result.faults.append(f"at record {sent}: {_move_topic(home, members)}")
                elif fault == "stager":  # a rebalance of the stagers' group
                    result.faults.append(f"at record {sent}: {_move_partition(stack)}")
                elif fault == "broker":
                    broker.kill()
                    broker.start()
                    result.faults.append(f"Kafka broker killed -9 at record {sent}, restarted")

            t0 = time.monotonic()
            asyncio.run(_produce(broker.bootstrap_servers, records, opts.rate, on_sent))
            result.publish_events_per_s = round(len(records) / (time.monotonic() - t0), 1)
            want = sum(1 for txn in txns for _ in txn)
            published = asyncio.run(
                _stored_in_kafka(cfg, want, opts.catch_up_timeout_s)
                if on_kafka
                else stored_messages(
                    cfg,
                    stack.bus_url,
                    want,
                    opts.catch_up_timeout_s,
                    f"{SUBJECT_PREFIX}.>",
                    lambda body: int(body["es"]),  # the commitTs's physical ms
                    "capture kafka",
                )
            )
            commits = wait_for_lake(published, stack, opts.catch_up_timeout_s, progress)
        # Freshness is not measured: the workload's commit times are made before producing.
        result.commits = len(commits)
        stack.stop_stages()
        result.dlq = asyncio.run(stack.dlq_depth())
        comparisons = verify_workload(cfg, workload)
        result.record(comparisons)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for member in members:
            member.stop(30)
        if stack is not None:
            stack.stop(timeout_s=30)
        broker.stop()
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result
