"""``tidelake demo``: the whole pipeline on embedded defaults, verified row by row.

The local stack (``pipeline/stack.py``: an embedded nats-server, the stager and the
continuous ingest as separate processes, as in production); the order workload (or, with
``tables``, the many-tables workload: ``workload/many_tables.py``) published as TiCDC
canal-json at a steady rate once the stack is healthy; then a wait until every table's
Hudi checkpoint covers the last message published to it (the ledger's commit log), and a
row-by-row comparison of every table (read JVM-free through hudi-rs) with the workload's
expected state. Freshness is source commit time → the Hudi commit that made the row visible.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import shlex
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_consumer, ensure_streams
from tidelake.capture.publisher import Acked, Publisher
from tidelake.config import Config, default_home, merge_settings
from tidelake.lake.ledger import CommitRecord, Ledger
from tidelake.pipeline.demo_views import DemoViews
from tidelake.pipeline.demo_views import settings as view_settings
from tidelake.pipeline.demo_workers import WorkerFaults, worker_summaries
from tidelake.pipeline.object_store import DemoObjectStore, start_object_store
from tidelake.pipeline.pacing import Pacer
from tidelake.pipeline.query_engines import QueryEngines, verify_through_trino
from tidelake.pipeline.stack import LocalStack, prepare_home
from tidelake.pipeline.workers import split_tables
from tidelake.runtime import tracing
from tidelake.verify.compare import Comparison, compare_rows, compare_schema
from tidelake.workload.ddl import DdlWorkload
from tidelake.workload.many_tables import ManyTablesSpec, ManyTablesWorkload
from tidelake.workload.orders import DATABASE, OrderWorkload, WorkloadSpec
from tidelake.workload.ticdc import Message, Workload

if TYPE_CHECKING:
    from tidelake.pipeline.demo_sinks import DemoSinks


@dataclass
class DemoOptions:
    """What ``tidelake demo`` is asked to do."""

    events: int = 50_000
    rate: float = 2_000.0
    seed: int = 7
    #: ``<home>/demo`` of the default home (config.default_home); the CLI passes its own.
    home: Path = field(default_factory=lambda: default_home(os.environ) / "demo")
    catch_up_timeout_s: float = 600.0
    #: ``"minio"``: staging and lake in a private MinIO (pipeline/object_store.py).
    object_store: str | None = None
    #: Schema changes mid-stream (workload/ddl.py); the lake's schemas are verified too.
    with_ddl: bool = False
    #: A private Hive Metastore kept in sync by the ingest, and Trino over it: every table is
    #: verified through Trino too (pipeline/query_engines.py).
    trino: bool = False
    #: ``"kafka"``: Kafka is the pipeline's bus (``bus.kind: kafka``; pipeline/demo_kafka.py).
    bus: str = "nats"
    #: Routes beside the lake — PostgreSQL, Redis, a webhook, OpenSearch when laid out — each
    #: killed -9 once, a replay and a dead-letter re-process; every destination verified
    #: (pipeline/demo_sinks.py).
    sinks: bool = False
    #: Two views over the orders kept by the ingest, which is killed -9 twice; each checked
    #: against its recomputation (pipeline/demo_views.py).
    views: bool = False
    #: None: the order workload. N: the many-tables workload over N tables of one schema,
    #: changed round-robin (workload/many_tables.py), declared in ``lake.tables``.
    tables: int | None = None
    #: Stagers and ingests: 1 is one of each; N is N workers, each a stager and an ingest
    #: owning a share of the tables (pipeline/workers.py).
    workers: int = 1
    #: With several workers: kill -9 the first worker's ingest while a round commits, and
    #: start it again at once (the others must go on untouched).
    kill_worker_ingest: bool = False
    #: False: the embedded nats-server fsyncs on its default schedule instead of before every
    #: PubAck (``bus.embedded.sync_always``): it fsyncs each message on its own, which caps
    #: the rate a publisher can reach at the disk's (docs/benchmarks.md, optimisation 9).
    fsync: bool = True


@dataclass
class DemoResult:
    """The summary ``--json`` prints as its last line."""

    events: int = 0
    tables: int = 0
    rows_expected: int = 0
    rows_in_lake: int = 0
    mismatches: int = 0
    dlq: int = 0
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_max_s: float | None = None
    elapsed_s: float = 0.0
    publish_events_per_s: float = 0.0
    commits: int = 0
    lake: str = ""
    error: str | None = None
    per_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``--trino``: the differences between the source and what Trino answers (None: not run).
    trino_mismatches: int | None = None
    #: The faults the demo caused on its way (``--kafka``, ``--sinks``), in order.
    faults: list[str] = field(default_factory=list)
    #: ``--sinks``: the differences between the source and the routes' destinations.
    sink_mismatches: int | None = None
    #: ``--views``: per view, its rows, the recomputation's, and the differences.
    views: list[dict[str, Any]] | None = None
    #: Messages the lake had not made visible when the wait for it timed out (None: it
    #: caught up). Each counts with its age at that moment, so the freshness figures are
    #: then lower bounds.
    not_visible: int | None = None
    #: ``tables``: seconds from the tables' first rows, published before the measured stream,
    #: until the lake had created every table (DemoOptions.tables; not in the freshness).
    tables_created_s: float | None = None
    #: ``workers``: per worker, its tables, Hudi commits and ingest rounds of rows
    #: (``worker_summaries``); None with one stager and one ingest.
    workers: list[dict[str, Any]] | None = None

    @property
    def view_mismatches(self) -> int | None:
        return None if self.views is None else sum(v["mismatches"] for v in self.views)

    def measure_freshness(
        self, published: Published, commits: list[CommitRecord], until_ms: int | None = None
    ) -> None:
        """Freshness percentiles: each message's source commit → the commit covering it.
        ``until_ms``: the wait ended then with messages still not covered (lower bounds)."""
        self.commits = len(commits)
        fresh, self.not_visible = _freshness(published, commits, until_ms)
        self.freshness_p50_s = _percentile(fresh, 50)
        self.freshness_p99_s = _percentile(fresh, 99)
        self.freshness_max_s = round(max(fresh), 3) if fresh else None

    def record(self, comparisons: list[Comparison]) -> None:
        """The totals and the per-table entries of a row-by-row verification."""
        self.tables = len(comparisons)
        self.rows_expected = sum(c.rows_expected for c in comparisons)
        self.rows_in_lake = sum(c.rows_in_lake for c in comparisons)
        self.mismatches = sum(c.mismatches for c in comparisons)
        self.per_table = {
            c.table: {
                "rows_expected": c.rows_expected,
                "rows_in_lake": c.rows_in_lake,
                "mismatches": c.mismatches,
                "samples": c.samples + c.schema,
            }
            for c in comparisons
        }

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.mismatches == 0
            and self.tables > 0
            and not self.trino_mismatches
            and not self.sink_mismatches
            and not self.view_mismatches
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"view_mismatches": self.view_mismatches}


@dataclass
class Published:
    """Per table: stream sequence and source commit time of every message, in order."""

    seqs: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    commit_ms: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    def record(self, acked: Acked) -> None:
        table, commit_ts_ms = acked.tag
        self.seqs[table].append(acked.seq)
        self.commit_ms[table].append(commit_ts_ms)


def _freshness(
    published: Published, commits: list[CommitRecord], until_ms: int | None = None
) -> tuple[list[float], int | None]:
    """Seconds from each message's source commit to the commit that covered it. With
    ``until_ms``, a message no commit covered counts with its age at ``until_ms`` (a lower
    bound), and their number comes second; else it is left out and None comes second."""
    by_table: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for c in commits:
        by_table[c.table].append((c.seq, c.committed_at_ms))
    out: list[float] = []
    not_visible = 0
    for table, seqs in published.seqs.items():
        timeline = sorted(by_table.get(f"{DATABASE}.{table}", []))
        # A later commit never has a smaller checkpoint; keep the earliest time per seq.
        tseqs = [s for s, _ in timeline]
        for seq, commit_ms in zip(seqs, published.commit_ms[table], strict=True):
            i = bisect.bisect_left(tseqs, seq)
            if i < len(timeline):
                out.append(max(0.0, (timeline[i][1] - commit_ms) / 1000))
            elif until_ms is not None:
                out.append(max(0.0, (until_ms - commit_ms) / 1000))
                not_visible += 1
    return out, not_visible if until_ms is not None else None


class LakeBehindError(TimeoutError):
    """The lake did not cover every published message in time; ``commits``: what it made."""

    def __init__(self, timeout_s: float, commits: list[CommitRecord]) -> None:
        super().__init__(f"the lake did not catch up within {timeout_s:.0f} s")
        self.commits = commits
        self.at_ms = int(time.time() * 1000)


def _percentile(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 3)


#: Events between two progress reports of a publisher that never gets ahead of its rate.
_REPORT_EVERY = 1_000


async def publish_workload(
    cfg: Config,
    url: str,
    workload: Workload,
    rate: float,
    on_sent: Callable[[int], None] | None = None,
    *,
    transactions: Iterable[list[Message]] | None = None,
    consumer: bool = True,
) -> tuple[Published, float]:
    """Publish every transaction of ``workload`` (or ``transactions``, a part of it) at
    ``rate`` events/s, in order, and wait for the last PubAck; returns what was stored and
    the rate achieved. Survives nats-server restarts (the publisher re-opens its connection
    and republishes in order). ``consumer``: make the stager's consumer first (not with
    several workers, whose consumers the stack made)."""
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg.bus)
        if consumer:
            await ensure_consumer(js, cfg.bus)
    finally:
        await nc.close()
    published = Published()
    # The demo's publisher is a capture: a span per message with tracing on (docs/tracing.md).
    traces = tracing.setup(cfg.tracing, "capture")
    async with await Publisher.open(cfg.bus, url, on_acked=published.record) as pub:
        pacer = Pacer(rate)
        sent = reported = 0
        for txn in workload.transactions() if transactions is None else transactions:
            for msg in txn:
                await pub.publish(
                    msg.subject, msg.payload, msg.msg_id, (msg.table, msg.commit_ts_ms)
                )
            sent += len(txn)
            # Progress once a slice, or every _REPORT_EVERY events when behind the rate.
            pause = pacer.pause_s(sent)
            if on_sent is not None and (pause or sent - reported >= _REPORT_EVERY):
                on_sent(sent)
                reported = sent
            if pause:
                await asyncio.sleep(pause)
        if on_sent is not None:
            on_sent(sent)
        await pub.durable()
        elapsed = pacer.elapsed_s()
    if traces is not None:
        await asyncio.to_thread(traces.force_flush)
    return published, sent / elapsed if elapsed > 0 else 0.0


async def _publish(
    cfg: Config, url: str, workload: Workload, opts: DemoOptions, progress: Progress
) -> tuple[Published, float]:
    task = progress.add_task("publishing canal-json", total=opts.events)

    def advance(sent: int) -> None:
        progress.update(task, completed=min(sent, opts.events))

    return await publish_workload(
        cfg, url, workload, opts.rate, advance, consumer=opts.workers == 1
    )


def open_tables(
    stack: LocalStack, workload: ManyTablesWorkload, opts: DemoOptions, progress: Progress
) -> float:
    """Each table's first row, published before the measured stream, and the wait until the
    lake has created every table: seconds from the first row to the last table created."""
    started = time.monotonic()
    task = progress.add_task(f"first row of {len(workload.tables):,} tables", total=None)
    opened, _ = asyncio.run(
        publish_workload(
            stack.cfg,
            stack.bus_url,
            workload,
            opts.rate,
            transactions=workload.opening(),
            consumer=not stack.workers,
        )
    )
    progress.remove_task(task)
    try:
        wait_for_lake(opened, stack, opts.catch_up_timeout_s, progress, label="creating the tables")
    except LakeBehindError as exc:
        created = len({c.table for c in exc.commits})
        raise TimeoutError(
            f"the lake created {created:,} of {len(workload.tables):,} tables within "
            f"{opts.catch_up_timeout_s:.0f} s"
        ) from exc
    return round(time.monotonic() - started, 1)


def wait_for_lake(
    published: Published,
    stack: LocalStack,
    timeout_s: float,
    progress: Progress,
    restarting: threading.Event | None = None,
    label: str = "waiting for the lake",
) -> list[CommitRecord]:
    """Until every table's commits cover the last message published to it; the commits.
    A stage process that exits meanwhile raises with its log."""
    last = {f"{DATABASE}.{t}": seqs[-1] for t, seqs in published.seqs.items() if seqs}
    total = sum(len(s) for s in published.seqs.values())
    task = progress.add_task(label, total=total)
    deadline = time.monotonic() + timeout_s
    # One commit log per ingest (several with workers: each owns its tables' commits).
    tails = [Ledger(d).commit_tail() for d in stack.lake_state_dirs]
    per_tail: list[list[CommitRecord]] = [[] for _ in tails]
    covered: dict[str, int] = {}
    while True:
        new = []
        for i, tail in enumerate(tails):
            read = tail.read_new()
            if tail.reset:
                per_tail[i] = []
            per_tail[i].extend(read)
            new.extend(read)
        commits = [c for part in per_tail for c in part]
        if any(t.reset for t in tails):
            covered = {}
            new = commits
        for c in new:
            covered[c.table] = max(covered.get(c.table, 0), c.seq)
        done = sum(
            bisect.bisect_right(seqs, covered.get(f"{DATABASE}.{t}", 0))
            for t, seqs in published.seqs.items()
        )
        progress.update(task, completed=done)
        if all(covered.get(t, 0) >= s for t, s in last.items()):
            return commits
        # The lake's own processes; a route's is killed and started again by --sinks' faults
        # (and restarted by the routes' catch-up, as tidelake run does).
        # (and --views kills the ingest and starts it again: ``restarting`` while it does).
        stack.check_children(
            skip=lambda name: (
                name.startswith(("route-", "source-"))
                or (name.startswith("ingest") and restarting is not None and restarting.is_set())
            )
        )
        if time.monotonic() > deadline:
            raise LakeBehindError(timeout_s, commits)
        time.sleep(0.25)


async def stored_messages(
    cfg: Config,
    url: str,
    want: int,
    timeout_s: float,
    subject: str,
    commit_ms: Callable[[dict[str, Any]], int],
    producer: str = "the producer",
) -> Published:
    """Wait until the CDC stream holds ``want`` messages, then read the sequences and source
    commit times (``commit_ms`` of a row message's body: the freshness baseline) of the row
    messages on ``subject``, per table."""
    from tidelake.bus.scan import scan_stream

    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + timeout_s
        while True:
            info = await js.stream_info(cfg.bus.stream.name)
            if int(info.state.messages) >= want:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{producer} stored {info.state.messages} of {want} messages "
                    f"within {timeout_s:.0f} s"
                )
            await asyncio.sleep(0.25)
        published = Published()
        for msg in await scan_stream(js, subject, int(info.state.messages)):
            body = orjson.loads(msg.data)
            if body.get("isDdl"):
                continue
            table = str(body["table"])
            published.seqs[table].append(int(msg.metadata.sequence.stream))
            published.commit_ms[table].append(commit_ms(body))
        return published
    finally:
        await nc.close()


def wait_for_ingest(stack: LocalStack, console: Console) -> None:
    """Publish only once the stager runs and the ingest's Spark session is up: freshness then
    measures the pipeline, not the JVM's start (which happens once per process, not per
    event)."""
    with console.status("starting Spark and the Hudi writer"):
        stack.wait_healthy(300)


def verify_workload(cfg: Config, workload: Workload) -> list[Comparison]:
    """Every table row by row and column by column; tables the DDL dropped must be gone."""
    from tidelake.verify.lake import read_table  # hudi-rs: JVM-free

    results = []
    for table, rows in workload.expected_rows().items():
        name = table.split(".", 1)[1]
        data = read_table(cfg.lake_root, table, cfg.storage.s3)
        schema = workload.schemas[name]
        comparison = compare_rows(
            table, workload.primary_keys[name], rows, data.to_pylist(), list(schema)
        )
        comparison.schema = compare_schema(schema, data.schema)
        results.append(comparison)
    for table in getattr(workload, "dropped_tables", []):
        data = read_table(cfg.lake_root, table, cfg.storage.s3)
        gone = Comparison(table, rows_in_lake=data.num_rows, unexpected=data.num_rows)
        if data.column_names:
            gone.schema = [f"dropped at the source, still in the lake: {data.column_names}"]
        results.append(gone)
    return results


def demo_workload(opts: DemoOptions) -> Workload:
    """The workload ``opts`` asks for: many tables, the orders with DDL, or the orders."""
    if opts.workers > 1 and (
        opts.with_ddl
        or opts.sinks
        or opts.views
        or opts.trino
        or opts.bus != "nats"
        or opts.object_store
    ):
        # Each worker's share is a set of subjects on JetStream; the rest is one-writer only.
        raise ValueError("several workers run the orders or many-tables workload, on NATS")
    if opts.kill_worker_ingest and opts.workers < 2:
        raise ValueError("killing a worker's ingest needs several workers")
    if opts.tables is not None:
        if opts.with_ddl or opts.sinks or opts.views or opts.bus != "nats":
            # Each of these is written around the order system's three tables.
            raise ValueError("the many-tables workload runs without DDL, sinks or views, on NATS")
        return ManyTablesWorkload(
            ManyTablesSpec(opts.tables, opts.events, opts.seed, create_tables=False)
        )
    spec = WorkloadSpec(events=opts.events, seed=opts.seed)
    return DdlWorkload(spec) if opts.with_ddl else OrderWorkload(spec)


def run_demo(opts: DemoOptions, console: Console) -> DemoResult:
    """Run the demo; every failure is reported in the result, never raised."""
    started = time.monotonic()
    result = DemoResult(events=0)
    home = opts.home.resolve()
    prepare_home(home)
    stack: LocalStack | None = None
    store: DemoObjectStore | None = None
    engines: QueryEngines | None = None
    sinks: DemoSinks | None = None
    views = DemoViews() if opts.views else None
    try:
        workload = demo_workload(opts)
        store = start_object_store(opts.object_store, home)
        settings = store.file_settings() if store else {}
        env = store.env() if store else {}
        if isinstance(workload, ManyTablesWorkload):
            # A changefeed started on existing tables sees no CREATE TABLE: the tables are
            # declared, as a source catalog would declare them (workload/many_tables.py).
            settings = merge_settings(settings, {"lake": {"tables": workload.table_definitions()}})
        if not opts.fsync:
            settings = merge_settings(settings, {"bus": {"embedded": {"sync_always": False}}})
        if views is not None:
            settings = merge_settings(settings, view_settings(opts.with_ddl))
        if opts.trino:
            with console.status("starting the Hive Metastore"):
                engines = QueryEngines(home).start_metastore()
            settings = merge_settings(settings, engines.settings())
        if opts.sinks:
            from tidelake.pipeline import opensearch
            from tidelake.pipeline.demo_sinks import DemoSinks  # the sinks extra (route/)

            search = opensearch.available()
            if not search:
                console.print(
                    "[yellow]OpenSearch is not laid out[/] (scripts/setup with "
                    "TIDELAKE_SETUP_TESTS=1): the demo runs without its route into it"
                )
            with console.status("starting PostgreSQL, Redis, OpenSearch and a webhook receiver"):
                sinks = DemoSinks(home / "sinks", with_ddl=opts.with_ddl, opensearch=search)
                sinks.start()
            settings = merge_settings(settings, sinks.settings())
            env = {**env, **sinks.env()}
        shares = (
            split_tables([f"{DATABASE}.{t}" for t in workload.schemas], opts.workers)
            if opts.workers > 1
            else []
        )
        stack = LocalStack(home, settings=settings, env=env, workers=shares)
        stack.start()
        cfg = stack.cfg
        result.lake = cfg.lake_root
        wait_for_ingest(stack, console)
        faults = WorkerFaults(stack) if opts.kill_worker_ingest else None
        if faults is not None:
            faults.kill_first_ingest_once()
        if sinks is not None:
            sinks.kill_each_route_once(stack, opts.events)
        if views is not None:
            views.kill_ingest_twice(stack)
        columns = [
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=console, transient=False) as progress:
            if isinstance(workload, ManyTablesWorkload):
                result.tables_created_s = open_tables(stack, workload, opts, progress)
            published, rate = asyncio.run(_publish(cfg, stack.bus_url, workload, opts, progress))
            result.events = workload.emitted
            result.publish_events_per_s = round(rate, 1)
            try:
                commits = wait_for_lake(
                    published,
                    stack,
                    opts.catch_up_timeout_s,
                    progress,
                    views.restarting
                    if views is not None
                    else faults.restarting
                    if faults is not None
                    else None,
                )
            except LakeBehindError as behind:
                # How far behind: what is visible, and how long the rest has waited so far.
                result.measure_freshness(published, behind.commits, behind.at_ms)
                raise
        result.measure_freshness(published, commits)
        if faults is not None:
            faults.wait()
            result.faults += faults.faults
        if shares:
            result.workers = worker_summaries(shares, commits, stack)
        if views is not None:
            with console.status("views: the faults, then the update after the last round"):
                views.wait_faults()
                caught_up = max((c.committed_at_ms or 0 for c in commits), default=0)
                views.wait_views(stack.cfg, caught_up, opts.catch_up_timeout_s)
            result.faults += views.faults
        if sinks is not None:
            with console.status("routes: catching up, a replay, a dead-letter re-process"):
                last_seq = max(max(seqs) for seqs in published.seqs.values())
                sinks.wait_faults()
                sinks.catch_up(stack, last_seq, opts.catch_up_timeout_s)
                sinks.replay_replica(stack, last_seq, opts.catch_up_timeout_s)
                sinks.reprocess_hook(cfg)
        stack.stop_stages()
        result.dlq = asyncio.run(stack.dlq_depth())
        comparisons = verify_workload(cfg, workload)
        result.record(comparisons)
        if views is not None:
            with console.status("views: checking each against its recomputation"):
                result.views = views.verify(cfg, stack.bus_url)
        if sinks is not None:
            result.faults += sinks.faults
            assert isinstance(workload, OrderWorkload)  # demo_workload: no sinks with --tables
            through_sinks = sinks.verify(workload)
            result.sink_mismatches = sum(c.mismatches for c in through_sinks)
            for c in through_sinks:
                result.per_table[c.table] = {
                    "rows_expected": c.rows_expected,
                    "rows_in_lake": c.rows_in_lake,
                    "mismatches": c.mismatches,
                    "samples": c.samples + c.schema,
                }
        if engines is not None:
            with console.status("starting Trino and reading every table through it"):
                trino = engines.start_trino(store.server.s3_config() if store else None)
                through_trino = verify_through_trino(trino, workload)
            result.trino_mismatches = sum(c.mismatches for c in through_trino)
            for c in through_trino:
                entry = result.per_table.setdefault(
                    c.table,
                    {
                        "rows_expected": c.rows_expected,
                        "rows_in_lake": 0,
                        "mismatches": 0,
                        "samples": [],
                    },
                )
                entry["trino_mismatches"] = c.mismatches
                entry["samples"] += [f"Trino: {s}" for s in c.samples + c.schema]
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if stack is not None:
            stack.stop(timeout_s=30)
        if engines is not None:
            engines.stop()
        if sinks is not None:
            sinks.stop()
        if store is not None:
            store.stop()
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result


#: Tables the summary lists one by one; beyond, the differing ones and a total line.
SUMMARY_TABLES = 20


def _summary_rows(per_table: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The summary's rows: every table, or with more than :data:`SUMMARY_TABLES` (``--tables
    N``) the differing ones (up to that many) and one line totalling the others."""
    rows = list(per_table.items())
    if len(rows) <= SUMMARY_TABLES:
        return rows
    differing = [(n, t) for n, t in rows if t["mismatches"]][:SUMMARY_TABLES]
    listed = {n for n, _ in differing}
    rest = [t for n, t in rows if n not in listed]
    counts = ("rows_expected", "rows_in_lake", "mismatches")
    total = {k: sum(t[k] for t in rest) for k in counts}
    return [*differing, (f"{len(rest):,} {'other ' if differing else ''}tables", total)]


def render_summary(result: DemoResult, console: Console) -> None:
    """The rich summary a person reads at the end of the demo."""
    table = Table(title="tidelake demo: source vs lake, row by row", title_justify="left")
    for col in ("table", "rows expected", "rows in lake", "mismatches"):
        table.add_column(col, justify="right" if col != "table" else "left")
    shown = _summary_rows(result.per_table)
    for name, t in shown:
        style = "green" if t["mismatches"] == 0 else "bold red"
        table.add_row(
            name, str(t["rows_expected"]), str(t["rows_in_lake"]), f"[{style}]{t['mismatches']}[/]"
        )
    console.print(table)
    for name, t in result.per_table.items():
        for sample in t["samples"]:
            console.print(f"  [red]{name}[/] {sample}")
    freshness = f"freshness p50 {result.freshness_p50_s} s, p99 {result.freshness_p99_s} s"
    if result.not_visible:
        freshness += f" (at least: {result.not_visible:,} messages not visible yet)"
    created = result.tables_created_s
    console.print(
        " · ".join(
            [
                f"events {result.events:,} published at {result.publish_events_per_s:,.0f}/s",
                *([f"the tables created in {created} s first"] if created is not None else []),
                f"{result.commits} Hudi commits",
                f"dead-lettered {result.dlq}",
                freshness,
                f"{result.elapsed_s} s in all",
            ]
        )
    )
    for worker in result.workers or []:
        console.print(
            f"worker {worker['worker']}: {worker['tables']} tables, {worker['commits']} Hudi "
            f"commits in {worker['rounds']} rounds of rows; peak memory: stager "
            f"{worker.get('stager_peak_rss_mib')} MiB, ingest with its JVM "
            f"{worker.get('ingest_peak_rss_mib')} MiB"
        )
    if result.faults and result.workers is not None:
        console.print(f"faults: {', '.join(result.faults)}")
    if result.error:
        console.print(f"[bold red]demo failed:[/] {result.error}")
    elif result.mismatches == 0:
        console.print(f"[bold green]the lake equals the source.[/] Lake: {result.lake}")
    if result.sink_mismatches is not None:
        style = "bold green" if result.sink_mismatches == 0 else "bold red"
        # The destinations the routes verified: "postgres shop.orders" → postgres, …
        sinks = sorted({t.split(" ", 1)[0] for t in result.per_table if " " in t})
        console.print(
            f"[{style}]routes: {result.sink_mismatches} mismatches[/] ({', '.join(sinks)}) "
            f"after {', '.join(result.faults)}"
        )
    for view in result.views or []:
        style = "bold green" if view["mismatches"] == 0 else "bold red"
        console.print(
            f"[{style}]view {view['view']}: {view['mismatches']} mismatches[/] "
            f"({view['rows']} rows; {view['check']})"
        )
        for sample in view.get("samples", []):
            console.print(f"  [red]{view['view']}[/] {sample}")
    if result.trino_mismatches is not None:
        style = "bold green" if result.trino_mismatches == 0 else "bold red"
        console.print(f"[{style}]Trino: {result.trino_mismatches} mismatches[/] (every table)")
    if result.ok and "://" not in result.lake:  # a private object store is gone by now
        # On lines of their own, never wrapped by rich: a terminal-width break inside the SQL
        # made the hint uncopyable.
        config = shlex.quote(str(Path(result.lake).parent / "config.yaml"))
        program = sys.argv[0] if Path(sys.argv[0]).name == "tidelake" else "tidelake"
        console.print("Query it (DuckDB over the lake, no JVM):")
        tables = list(result.per_table)
        sql = (
            "SELECT status, count(*) FROM shop.orders GROUP BY status"
            if not tables or "shop.orders" in tables
            else f"SELECT count(*), sum(amount) FROM {tables[0]}"  # --tables N
        )
        for line in (f"  {shlex.quote(program)} query --config {config} \\", f"    '{sql}'"):
            console.print(line, soft_wrap=True, markup=False, highlight=False)
