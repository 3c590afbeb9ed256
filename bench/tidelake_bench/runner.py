"""``tidelake bench``: the parts in one run, their numbers in one result.

Parts run one after the other, never at the same time (each would slow the others): the
stager against ``nats bench``, the ingest contenders, then the pipeline's freshness, … and
the pipeline over many tables. The machine's load average is recorded before and after each
part.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from tidelake_bench import machine, tools
from tidelake_bench.floor import QUICK_FLOOR, FloorPlan
from tidelake_bench.freshness import run_freshness_bench
from tidelake_bench.ingest import (
    HUDI014_DATASOURCE,
    HUDI014_STREAMER,
    IngestPlan,
    run_ingest_bench,
)
from tidelake_bench.report import BenchResult, derive, save_result
from tidelake_bench.stage import run_stage_bench
from tidelake_bench.views import ViewsPlan

PARTS = (
    "stage",
    "ingest",
    "freshness",
    "nats_sync",
    "floor",
    "capture",
    "snapshot",
    "views",
    "tables",
    "workers",
)
#: The parts that use what ``bench/setup`` puts in place (the NATS CLI; HoodieStreamer's and
#: Hudi 0.14's jars and PySpark): a run of other parts skips it (a first set-up builds and
#: downloads for minutes, and would load the machine the other parts measure).
SETUP_PARTS = frozenset({"stage", "ingest"})
#: Marks a directory the bench created, so that a rerun may wipe it and nothing else.
MARKER = ".tidelake-bench"


@dataclass(frozen=True)
class Sizes:
    """How big each part is."""

    stage_events: int
    ingest: IngestPlan
    freshness_rate: float
    freshness_seconds: float
    #: The second, higher rate the freshness part runs at; None skips it.
    freshness_rate_high: float | None = 10_000
    #: ... and for how long: the goal's 10 minutes (a shorter run leaves it unknown:
    #: report.py). The demo publishes rate x seconds events whatever rate it reaches: 6M
    #: events took 11.8 minutes at 8,470 events/s beside the stager and the ingest, and the
    #: run 16 minutes with the catch-up (docs/benchmarks.md, optimisation 9).
    freshness_seconds_high: float = 600
    #: Whether the high rate's nats-server fsyncs before every PubAck, as the embedded server
    #: does by default. It fsyncs each message on its own: on the bench machine that held the
    #: demo's publisher to 730-1,316 events/s of 10,000 (1,479-4,020 with nothing beside it)
    #: and cost nats-server over a core; without it the publisher reached 8,470-9,986 beside
    #: the stager and the ingest (docs/benchmarks.md, optimisation 9). The capture parts run so
    #: too (tools.CAPTURE_SYNC_ALWAYS); the 1,000 events/s run keeps the fsync.
    freshness_high_fsync: bool = False
    #: Changes written then captured per source, and the lag form's writer rate and length.
    capture_changes: int = 200_000
    capture_lag_rate: float = 4_000
    capture_lag_seconds: float = 60
    #: Rows of the table the snapshot part snapshots incrementally, per source, and of the
    #: one it snapshots the initial way (one connection) for comparison.
    snapshot_rows: int = 10_000_000
    snapshot_initial_rows: int = 1_000_000
    #: The view's base table at two sizes, and the changed keys per step (``views.py``).
    views: ViewsPlan = field(default_factory=ViewsPlan)
    #: The floor of a small Hudi commit (``floor.py``).
    floor: FloorPlan = field(default_factory=FloorPlan)
    #: Many active tables (``tables.py``): how many, events/s each, seconds of publishing,
    #: and how long the lake may take to create the tables, and to catch up after the
    #: publishing, before the wait ends (the freshness figures are then lower bounds). The
    #: quick run took 58 s to create 50 tables (load average 7): 1,000 take ~20 minutes.
    tables: int = 1_000
    tables_rate: float = 10.0
    tables_seconds: float = 600.0
    tables_catch_up_s: float = 1_800.0
    #: Scale-out (``workers.py``): the many-tables workload with 1 worker, then 2, side by
    #: side — tables, events/s each, seconds of publishing, the catch-up bound. It shows the
    #: 2 + 2 case correct and what a worker costs; 1,000 tables is the ``tables`` part's
    #: case, and twice more of it would keep a full run from fitting in an afternoon.
    workers_tables: int = 100
    workers_rate: float = 10.0
    workers_seconds: float = 300.0
    workers_catch_up_s: float = 900.0
    #: Whether the many-tables parts' (``tables``, ``workers``) nats-server fsyncs before every
    #: PubAck. Not, for the reason of ``freshness_high_fsync``: the full ``tables`` run of
    #: 2026-12-07 (1,000 tables, 10,000 events/s asked) published 1,154 events/s with it, so
    #: each table got about 1.2 events/s, not the goal's 10 (docs/benchmarks.md).
    many_tables_fsync: bool = False


#: The issue's sizes: 1M-row table, 10M for commit time vs size, 10 minutes of freshness at
#: 1,000 and at 10,000 events/s.
FULL = Sizes(
    stage_events=200_000,
    ingest=IngestPlan(table_rows=1_000_000, batch_events=20_000, batches=4, large_rows=10_000_000),
    freshness_rate=1_000,
    freshness_seconds=600,
)
#: Under 10 minutes on 2 cores: 50x smaller tables (20k and 200k rows, batches of 2,000),
#: 45 seconds of freshness. Most of the time goes to JVM and Hudi warm-ups, not to sizes.
QUICK = Sizes(
    stage_events=20_000,
    ingest=IngestPlan(table_rows=20_000, batch_events=2_000, batches=3, large_rows=200_000),
    freshness_rate=1_000,
    freshness_seconds=45,
    freshness_seconds_high=10,
    capture_changes=30_000,
    capture_lag_seconds=20,
    snapshot_rows=200_000,
    snapshot_initial_rows=50_000,
    views=ViewsPlan(table_rows=(20_000, 200_000)),
    floor=QUICK_FLOOR,
    tables=50,
    tables_seconds=60,
    tables_catch_up_s=600.0,
    workers_tables=50,
    workers_seconds=60,
    workers_catch_up_s=600.0,
)


@dataclass
class BenchOptions:
    """What ``tidelake bench`` is asked to do."""

    quick: bool = False
    home: Path = Path(".tidelake/bench")
    parts: tuple[str, ...] = PARTS
    sizes: Sizes | None = None
    setup: bool = True
    keep: bool = False
    #: Extra tidelake ingest contenders: name → Hudi options (IngestPlan.variants).
    variants: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Where the result so far is saved after each part (``save_result``), so that a run
    #: stopped before its end (a full run lasts hours) still has the parts it finished.
    progress: Path | None = None

    @property
    def effective_sizes(self) -> Sizes:
        return self.sizes or (QUICK if self.quick else FULL)


def needs_setup(parts: tuple[str, ...]) -> bool:
    """Whether any of ``parts`` uses the tools ``bench/setup`` provides."""
    return bool(SETUP_PARTS & set(parts))


def _prepare_home(home: Path) -> None:
    if home.exists():
        if not (home / MARKER).exists():
            raise SystemExit(f"{home} exists and was not made by the bench; refusing to wipe it")
        shutil.rmtree(home)
    home.mkdir(parents=True)
    (home / MARKER).write_text("made by tidelake bench; removed by the next bench run\n")


def run_bench(opts: BenchOptions, console: Console) -> BenchResult:
    """Run the asked parts; a failing part is recorded in the result, never raised."""
    started = time.monotonic()
    sizes = opts.effective_sizes
    result = BenchResult(quick=opts.quick)
    home = opts.home.resolve()
    _prepare_home(home)

    def log(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:7.1f}s[/] {escape(message)}")

    if opts.setup and needs_setup(opts.parts) and tools.run_setup():
        log("bench set-up done (bench/setup)")
    nats = tools.nats_cli()
    result.machine = machine.machine()
    result.versions = machine.versions(nats)
    result.load["start"] = machine.load_average()
    n: dict[str, Any] = {}
    part_runs: dict[str, Callable[[], None]] = {
        "stage": lambda: _stage(home, sizes, nats, n, result, log),
        "ingest": lambda: _ingest(home, sizes, opts.variants, n, result, log),
        "freshness": lambda: _freshness(home, sizes, n, result, log, console),
        "nats_sync": lambda: _nats_sync(home, sizes, n, result, log),
        "floor": lambda: _floor(home, sizes, n, result, log),
        "capture": lambda: _capture(home, sizes, n, result, log),
        "snapshot": lambda: _snapshot(home, sizes, n, result, log),
        "views": lambda: _views(home, sizes, n, result, log),
        "tables": lambda: _tables(home, sizes, n, result, log, console),
        "workers": lambda: _workers(home, sizes, n, result, log, console),
    }
    for part in PARTS:
        if part not in opts.parts:
            continue
        result.load[f"{part} start"] = machine.load_average()
        try:
            part_runs[part]()
        except Exception as exc:  # a broken part must not hide the others' numbers
            result.errors.append(f"{part}: {type(exc).__name__}: {exc}"[:2000])
        result.load[f"{part} end"] = machine.load_average()
        result.numbers = n | derive(n)
        if opts.progress is not None:
            result.elapsed_s = round(time.monotonic() - started, 1)
            save_result(opts.progress, result)
    n |= derive(n)
    result.numbers = n
    result.load["end"] = machine.load_average()
    result.elapsed_s = round(time.monotonic() - started, 1)
    if not opts.keep:
        shutil.rmtree(home, ignore_errors=True)
    return result


def _stage(
    home: Path,
    sizes: Sizes,
    nats: str | None,
    n: dict[str, Any],
    result: BenchResult,
    log: Callable[[str], None],
) -> None:
    stage = run_stage_bench(home / "stage", sizes.stage_events, log, nats)
    result.details["stage"] = stage.to_json()
    n |= {
        "stage_events": stage.events,
        "stage_events_per_s": stage.stage_events_per_s,
        "stage_events_per_cpu_s": stage.stage_events_per_cpu_s,
        "nats_bench_events_per_s": stage.nats_bench_events_per_s,
        "stager_peak_rss_mib": stage.stager_peak_rss_mib,
    }
    if stage.stage_error:
        result.errors.append(f"stage: {stage.stage_error}")
    result.errors += [f"nats bench: {r.error}" for r in stage.nats_bench if r.error][:1]
    log(
        f"stager {_num(stage.stage_events_per_s)} events/s "
        f"({_num(stage.stage_events_per_cpu_s)} per CPU second), "
        f"nats bench {_num(stage.nats_bench_events_per_s)} events/s"
    )


def _nats_sync(
    home: Path, sizes: Sizes, n: dict[str, Any], result: BenchResult, log: Callable[[str], None]
) -> None:
    """JetStream publishing with the default fsync policy and with ``sync_interval: always``
    (the embedded server's; ``nats_sync.py``)."""
    from tidelake_bench.nats_sync import headline, run_nats_sync_bench

    runs = run_nats_sync_bench(home / "nats_sync", max(1_000, sizes.stage_events // 4), log)
    result.details["nats_sync"] = runs
    n |= headline(runs)
    log(
        f"nats publish {_num(n['nats_publish_events_per_s_default'])} events/s default, "
        f"{_num(n['nats_publish_events_per_s_sync_always'])} with sync always; PubAck p99 "
        f"{n['nats_puback_p99_ms_default']} ms / {n['nats_puback_p99_ms_sync_always']} ms"
    )


def _floor(
    home: Path, sizes: Sizes, n: dict[str, Any], result: BenchResult, log: Callable[[str], None]
) -> None:
    """The smallest Hudi commits, one table and three together, per layout (``floor.py``)."""
    from tidelake_bench.floor import headline, run_floor_bench

    runs = run_floor_bench(home / "floor", sizes.floor, log)
    result.details["floor"] = runs
    n |= headline(runs)
    one = ", ".join(f"{layout} {n[f'floor_commit_s[{layout}]']} s" for layout in runs)
    three = ", ".join(f"{layout} {n[f'floor_round_of_three_s[{layout}]']} s" for layout in runs)
    log(f"floor: a 1-row commit {one}; three tables together {three}")


def _capture(
    home: Path, sizes: Sizes, n: dict[str, Any], result: BenchResult, log: Callable[[str], None]
) -> None:
    """tidelake's capture from MariaDB and PostgreSQL: changes/s and per CPU second beside
    the source's own change rate, and the lag behind a writer at a fixed rate."""
    from tidelake_bench.capture import run_capture_bench

    capture = run_capture_bench(
        home / "capture",
        sizes.capture_changes,
        log,
        lag_rate=sizes.capture_lag_rate,
        lag_seconds=sizes.capture_lag_seconds,
    )
    result.details["capture"] = capture.to_json()
    n["capture_lag_rate"] = sizes.capture_lag_rate
    for run in capture.runs:
        k = run.source
        n |= {
            f"capture_changes[{k}]": run.changes,
            f"source_changes_per_s[{k}]": run.source_changes_per_s,
            f"capture_changes_per_s[{k}]": run.capture_changes_per_s,
            f"capture_changes_per_cpu_s[{k}]": run.capture_changes_per_cpu_s,
            f"capture_peak_rss_mib[{k}]": run.capture_peak_rss_mib,
        }
        if run.error:
            result.errors.append(f"capture {k}: {run.error}")
        if run.lag is not None:
            n |= {
                f"capture_lag_writer_changes_per_s[{k}]": run.lag.writer_changes_per_s,
                f"capture_lag_p50_s[{k}]": run.lag.lag_p50_s,
                f"capture_lag_p99_s[{k}]": run.lag.lag_p99_s,
                f"capture_lag_max_s[{k}]": run.lag.lag_max_s,
            }
            if run.lag.error:
                result.errors.append(f"capture lag {k}: {run.lag.error}")


def _snapshot(
    home: Path, sizes: Sizes, n: dict[str, Any], result: BenchResult, log: Callable[[str], None]
) -> None:
    """A first start's snapshot of one large table per source: incremental (parallel chunk
    readers) and, smaller, initial (one connection): rows/s (capture/incremental.py;
    bench/tidelake_bench/snapshot.py)."""
    from tidelake_bench.snapshot import run_snapshot_bench

    snap = run_snapshot_bench(home / "snapshot", sizes.snapshot_rows, log,
                              initial_rows=sizes.snapshot_initial_rows)  # fmt: skip
    result.details["snapshot"] = snap.to_json()
    for run in snap.runs:
        k = run.source
        prefix = "snapshot" if run.mode == "incremental" else f"snapshot_{run.mode}"
        n |= {
            f"{prefix}_rows[{k}]": run.rows,
            f"{prefix}_rows_per_s[{k}]": run.rows_per_s,
            f"{prefix}_workers[{k}]": run.workers,
        }
        if run.error:
            result.errors.append(f"snapshot {k} ({run.mode}): {run.error}")


def _views(
    home: Path, sizes: Sizes, n: dict[str, Any], result: BenchResult, log: Callable[[str], None]
) -> None:
    """A view's incremental step at two base-table sizes and K changed keys, beside a full
    rebuild, for an aggregate view and a join view; each verified against its recomputation
    at each size (``views.py``)."""
    from tidelake_bench.views import headline, run_views_bench

    views = run_views_bench(home / "views", sizes.views, log)
    result.details["views"] = views.to_json()
    n |= headline(sizes.views, views.runs)
    growth = ", ".join(
        f"K={k:,} {_fmt_ratio(n.get(f'view_step_growth[k={k}]'))}" for k in sizes.views.keys
    )
    log(f"view step large / small ({_fmt_ratio(n.get('views_size_ratio'))} rows): {growth}")
    growth = ", ".join(
        f"K={k:,} {_fmt_ratio(n.get(f'view_join_step_growth[k={k}]'))}" for k in sizes.views.keys
    )
    log(f"join view step large / small: {growth}")


def _fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _ingest(
    home: Path,
    sizes: Sizes,
    variants: dict[str, dict[str, str]],
    n: dict[str, Any],
    result: BenchResult,
    log: Callable[[str], None],
) -> None:
    plan = replace(sizes.ingest, variants=variants)
    ingest = run_ingest_bench(home / "ingest", plan, log)
    result.details["ingest"] = ingest.to_json()
    c = ingest.contenders
    n |= {
        "table_rows": plan.table_rows,
        "batch_events": plan.batch_events,
        "timed_batches": plan.batches - 1,
        "ingest_records_per_s": c["tidelake"].records_per_s,
        "ingest_records_per_cpu_s": c["tidelake"].records_per_cpu_s,
        "hudi_datasource_records_per_s": c["hudi_datasource"].records_per_s,
        "hoodiestreamer_records_per_s": c["hoodiestreamer"].records_per_s,
        "parquet_records_per_s": c["parquet"].records_per_s,
        "hudi_datasource_0_14_records_per_s": c[HUDI014_DATASOURCE].records_per_s,
        "hoodiestreamer_0_14_records_per_s": c[HUDI014_STREAMER].records_per_s,
        "rows_small": plan.table_rows,
        "rows_large": plan.large_rows,
        "index_small": ingest.index.get(plan.table_rows),
        "index_large": ingest.index.get(plan.large_rows or 0),
        "commit_s_small": _round(ingest.commit_s_by_rows.get(plan.table_rows)),
        "commit_s_large": _round(ingest.commit_s_by_rows.get(plan.large_rows or 0)),
        "driver_peak_rss_mib": ingest.driver_peak_rss_mib,
    }
    if plan.large_rows:
        large = c[f"tidelake_{plan.large_rows}"]
        n["ingest_records_per_s_large"] = large.records_per_s
        n["ingest_records_per_cpu_s_large"] = large.records_per_cpu_s
    for name in variants:
        n[f"ingest_records_per_s[{name}]"] = c[f"tidelake[{name}]"].records_per_s
        n[f"ingest_records_per_cpu_s[{name}]"] = c[f"tidelake[{name}]"].records_per_cpu_s
        if plan.large_rows:
            large_variant = c[f"tidelake_{plan.large_rows}[{name}]"]
            n[f"ingest_records_per_s_large[{name}]"] = large_variant.records_per_s
            n[f"ingest_records_per_cpu_s_large[{name}]"] = large_variant.records_per_cpu_s
        by_rows = ingest.variant_commit_s_by_rows.get(name, {})
        if plan.large_rows and by_rows.get(plan.table_rows):
            n[f"commit_growth[{name}]"] = round(
                by_rows[plan.large_rows] / by_rows[plan.table_rows], 3
            )
    result.errors += [f"{name}: {x.error}" for name, x in c.items() if x.error]
    result.errors += [f"ingest: {e}" for e in ingest.row_errors()]
    log(
        f"ingest records/s: tidelake {_num(c['tidelake'].records_per_s)}, Hudi datasource "
        f"{_num(c['hudi_datasource'].records_per_s)}, HoodieStreamer "
        f"{_num(c['hoodiestreamer'].records_per_s)}, Parquet {_num(c['parquet'].records_per_s)}; "
        f"Hudi 0.14: datasource {_num(c[HUDI014_DATASOURCE].records_per_s)}, HoodieStreamer "
        f"{_num(c[HUDI014_STREAMER].records_per_s)}"
    )


def _freshness(
    home: Path,
    sizes: Sizes,
    n: dict[str, Any],
    result: BenchResult,
    log: Callable[[str], None],
    console: Console,
) -> None:
    runs = [("", sizes.freshness_rate, sizes.freshness_seconds, True)]
    if sizes.freshness_rate_high:
        runs.append(
            (
                "_high",
                sizes.freshness_rate_high,
                sizes.freshness_seconds_high,
                sizes.freshness_high_fsync,
            )
        )
    for suffix, rate, seconds, fsync in runs:
        fresh = run_freshness_bench(
            home / f"freshness{suffix}", rate, seconds, log, console, fsync=fsync
        )
        result.details[f"freshness{suffix}"] = fresh.to_json()
        n |= {
            f"freshness{suffix}_rate": rate,
            f"freshness{suffix}_seconds": seconds,
            f"freshness{suffix}_fsync": fsync,
            f"freshness{suffix}_publish_events_per_s": fresh.publish_events_per_s,
            f"freshness{suffix}_p50_s": fresh.freshness_p50_s,
            f"freshness{suffix}_p99_s": fresh.freshness_p99_s,
            f"freshness{suffix}_mismatches": fresh.mismatches,
            f"ingest{suffix}_peak_rss_mib": fresh.ingest_peak_rss_mib,
            f"pipeline{suffix}_stager_peak_rss_mib": fresh.stager_peak_rss_mib,
        }
        at = f"freshness at {rate:,.0f} events/s"
        if fresh.error:
            result.errors.append(f"{at}: {fresh.error}")
        if fresh.mismatches:
            result.errors.append(f"{at}: the lake differs from the source ({fresh.mismatches})")
        log(f"{at}: p50 {fresh.freshness_p50_s} s, p99 {fresh.freshness_p99_s} s")


def _tables(
    home: Path,
    sizes: Sizes,
    n: dict[str, Any],
    result: BenchResult,
    log: Callable[[str], None],
    console: Console,
) -> None:
    """Many active tables through the demo pipeline: freshness, rounds, memory, verified."""
    from tidelake_bench.tables import run_tables_bench

    tables = run_tables_bench(
        home / "tables",
        sizes.tables,
        sizes.tables_rate,
        sizes.tables_seconds,
        sizes.tables_catch_up_s,
        log,
        console,
        fsync=sizes.many_tables_fsync,
    )
    result.details["tables"] = tables.to_json()
    n |= {
        "tables_count": tables.tables,
        "tables_rate_per_table": tables.rate_per_table,
        "tables_seconds": tables.seconds,
        "tables_events": tables.events,
        "tables_events_per_s": tables.publish_events_per_s,
        "tables_events_per_s_per_table": tables.events_per_s_per_table,
        "tables_freshness_p50_s": tables.freshness_p50_s,
        "tables_freshness_p99_s": tables.freshness_p99_s,
        "tables_freshness_max_s": tables.freshness_max_s,
        "tables_not_visible": tables.not_visible,
        "tables_created_s": tables.tables_created_s,
        "tables_create_commit_s_p50": tables.create_commit_s_p50,
        "tables_commits": tables.commits,
        "tables_rounds": tables.rounds,
        "tables_round_s_p50": tables.round_s_p50,
        "tables_round_s_max": tables.round_s_max,
        "tables_round_commits_mean": tables.round_commits_mean,
        "tables_commit_s_p50": tables.commit_s_p50,
        "tables_verified": tables.tables_verified,
        "tables_rows_verified": tables.rows_in_lake if tables.mismatches is not None else None,
        "tables_mismatches": tables.mismatches,
        "tables_stager_peak_rss_mib": tables.stager_peak_rss_mib,
        "tables_ingest_peak_rss_mib": tables.ingest_peak_rss_mib,
    }
    if tables.error:
        result.errors.append(f"tables: {tables.error}")
    if tables.mismatches:
        result.errors.append(f"tables: the lake differs from the source ({tables.mismatches})")
    bound = " (lower bounds)" if tables.not_visible else ""
    log(
        f"{tables.tables:,} tables: freshness p50 {tables.freshness_p50_s} s, p99 "
        f"{tables.freshness_p99_s} s{bound}; {tables.rounds} ingest rounds, p50 "
        f"{tables.round_s_p50} s"
    )


def _workers(
    home: Path,
    sizes: Sizes,
    n: dict[str, Any],
    result: BenchResult,
    log: Callable[[str], None],
    console: Console,
) -> None:
    """The many-tables workload with 1 worker and with 2, each lake verified."""
    from tidelake_bench.workers import run_workers_bench

    workers = run_workers_bench(
        home / "workers",
        sizes.workers_tables,
        sizes.workers_rate,
        sizes.workers_seconds,
        sizes.workers_catch_up_s,
        log,
        console,
        fsync=sizes.many_tables_fsync,
    )
    result.details["workers"] = workers.to_json()
    n |= {
        "workers_tables": workers.tables,
        "workers_rate_per_table": workers.rate_per_table,
        "workers_seconds": workers.seconds,
    }
    for run in workers.runs:
        k = f"workers{run.workers}"
        n |= {
            f"{k}_events_per_s": run.publish_events_per_s,
            f"{k}_freshness_p50_s": run.freshness_p50_s,
            f"{k}_freshness_p99_s": run.freshness_p99_s,
            f"{k}_freshness_max_s": run.freshness_max_s,
            f"{k}_not_visible": run.not_visible,
            f"{k}_tables_created_s": run.tables_created_s,
            f"{k}_commits": run.commits,
            f"{k}_rounds": run.rounds,
            f"{k}_round_s_p50": run.round_s_p50,
            f"{k}_tables_verified": run.tables_verified,
            f"{k}_mismatches": run.mismatches,
            f"{k}_ingest_peak_rss_mib": max(
                (w["ingest_peak_rss_mib"] or 0 for w in run.per_worker), default=None
            )
            or None,
            f"{k}_ingest_cpu_s": round(sum(w.get("ingest_cpu_s") or 0 for w in run.per_worker), 1)
            or None,
            f"{k}_stager_cpu_s": round(sum(w.get("stager_cpu_s") or 0 for w in run.per_worker), 1)
            or None,
            f"{k}_stager_peak_rss_mib": max(
                (w["stager_peak_rss_mib"] or 0 for w in run.per_worker), default=None
            )
            or None,
        }
        if run.error:
            result.errors.append(f"workers ({run.workers}): {run.error}")
        if run.mismatches:
            result.errors.append(
                f"workers ({run.workers}): the lake differs from the source ({run.mismatches})"
            )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``"lean:hoodie.metadata.enable=false,hoodie.write.markers.type=DIRECT"`` →
    ``("lean", {...})``."""
    name, sep, pairs = text.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME:key=value,... got {text!r}")
    options: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in pairs.split(","))):
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        options[key.strip()] = value.strip()
    return name.strip(), options
