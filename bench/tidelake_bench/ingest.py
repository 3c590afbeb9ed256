"""Ingest throughput side by side, and commit time against table size.

One Spark session (the ingest's own builder and settings), one base table of ``table_rows``
orders built with ``bulk_insert`` and copied for each Hudi contender, and the same staged
batches (:mod:`tidelake_bench.changes`) applied by:

* **tidelake**: :meth:`Ingestor.step` on the staged manifests, the production path (read
  the staged files, filter, collapse, type the rows, upsert with the checkpoint);
* **hudi_datasource**: a plain Hudi datasource upsert of the same typed records read from
  Parquet, with the same write options (what Hudi costs without tidelake around it);
* **hoodiestreamer**: Hudi's HoodieStreamer (``spark-submit``, ``ParquetDFSSource`` over the
  same Parquet files, same table config, record key, ordering field and merge mode), when
  its jar is in the bench jar cache;
* **parquet**: a plain Spark Parquet append of the same records (the floor);
* **hudi_datasource@0.14** and **hoodiestreamer@0.14**: Hudi 0.14's datasource writer and
  HoodieStreamer on the same base rows and records, in a PySpark 3.4 of their own
  (``bench/hudi014_worker.py``): the HoodieStreamer that can run here, against the
  writer of its own Hudi, for the bridged tidelake / HoodieStreamer estimate.

Every Hudi contender takes the index tidelake's writer picks for the table's size.

Per batch the in-session contenders run back to back (tidelake, datasource, Parquet), so a
change of machine load hits all of them alike. The first batch warms each contender up and
is not counted; records/s is the records of the other batches over their summed seconds.
HoodieStreamer runs as one continuous job taking one file per round; its seconds are the
gaps between its commits' completion times on the Hudi timeline.

With ``large_rows`` the same batches are also applied to a second tidelake lake whose base
holds ``large_rows`` rows: the commit time of the same batch at two table sizes.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelake.config import Config, load_config
from tidelake.lake.hudi import ORDERING_FIELD, hudi_table_name, split_table_id, table_path
from tidelake.lake.hudi import write_options as hudi_write_options
from tidelake.lake.ingest import Ingestor, IngestStats
from tidelake.lake.rows import build_batch
from tidelake.lake.schema import schema_for
from tidelake.lake.spark import build_spark_session, session_conf
from tidelake.lake.store import TableStore
from tidelake.runtime.storage import LocalStorage
from tidelake_bench import tools
from tidelake_bench.changes import (
    BASE_COMMIT_MS,
    BASE_TSO,
    COLUMNS,
    PK,
    TABLE_ID,
    BenchBatch,
    ChangeStream,
)
from tidelake_bench.jobs import run_job
from tidelake_bench.memory import PeakRss, children, command_name, cpu_seconds, process_tree
from tidelake_bench.stats import per_second

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Log = Callable[[str], None]
DATABASE, TABLE = split_table_id(TABLE_ID)
#: Base files per ``table_rows``: bulk_insert writes each Spark partition (a contiguous id
#: range) to its own file, so a base is laid out by key like a table grown by inserts, and
#: the ``table_rows`` the updates touch span the same files in a small and a large base.
FILES_PER_TABLE_ROWS = 2
STREAMER_CLASS = "org.apache.hudi.utilities.streamer.HoodieStreamer"
STREAMER_TIMEOUT_S = 1800


@dataclass
class IngestPlan:
    """Sizes of one ingest benchmark."""

    table_rows: int = 1_000_000
    batch_events: int = 20_000
    #: Batches applied to every contender, the first one a warm-up.
    batches: int = 4
    #: Second base size for commit time vs table size; None skips it.
    large_rows: int | None = 10_000_000
    seed: int = 11
    #: More tidelake contenders, ``tidelake[<name>]``, each on its own copy of the base
    #: table with these Hudi options added (``lake.hudi_options``), and ``TIDELAKE_*`` keys
    #: as environment overrides of its configuration: an optimisation measured against the
    #: defaults in the same run. A variant changing the table's layout (``LAYOUT_SETTINGS``)
    #: gets a base table of its own, built with its settings.
    variants: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class Contender:
    """One writer's timed batches."""

    name: str
    seconds: list[float] = field(default_factory=list)
    #: CPU seconds of each timed batch: the bench process and its descendants (the Spark JVM).
    cpu_seconds: list[float] = field(default_factory=list)
    records: int = 0
    warmup_s: float | None = None
    error: str | None = None
    peak_rss_mib: float | None = None

    @property
    def records_per_s(self) -> float | None:
        return per_second(self.records, sum(self.seconds)) if self.seconds else None

    @property
    def records_per_cpu_s(self) -> float | None:
        return per_second(self.records, sum(self.cpu_seconds)) if self.cpu_seconds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "records_per_s": self.records_per_s,
            "records_per_cpu_s": self.records_per_cpu_s,
            "records": self.records,
            "seconds": [round(s, 3) for s in self.seconds],
            "cpu_seconds": [round(s, 3) for s in self.cpu_seconds],
            "warmup_s": None if self.warmup_s is None else round(self.warmup_s, 3),
            "error": self.error,
            "peak_rss_mib": self.peak_rss_mib,
        }


@dataclass
class IngestResult:
    """What the ingest benchmark measured."""

    plan: IngestPlan
    contenders: dict[str, Contender] = field(default_factory=dict)
    #: The batch composition (same for every batch).
    updates: int = 0
    inserts: int = 0
    deletes: int = 0
    #: Seconds to build each base table (bulk_insert), by rows.
    base_build_s: dict[int, float] = field(default_factory=dict)
    #: Mean seconds of one timed tidelake commit, by base table rows.
    commit_s_by_rows: dict[int, float] = field(default_factory=dict)
    #: The same for each variant.
    variant_commit_s_by_rows: dict[str, dict[int, float]] = field(default_factory=dict)
    driver_peak_rss_mib: float | None = None
    #: Per lake: (rows expected after all batches, rows found) — the correctness check.
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: The index tidelake's writer chose for each base table, by rows.
    index: dict[int, str] = field(default_factory=dict)
    #: The Hudi 0.14 worker's other numbers (its Spark, base build, commit durations).
    hudi014: dict[str, Any] = field(default_factory=dict)

    def row_errors(self) -> list[str]:
        return [
            f"{lake} holds {found:,} rows, expected {expected:,}"
            for lake, (expected, found) in self.rows.items()
            if expected != found
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "table_rows": self.plan.table_rows,
            "large_rows": self.plan.large_rows,
            "batch_events": self.plan.batch_events,
            "timed_batches": self.plan.batches - 1,
            "batch_mix": {
                "updates": self.updates,
                "inserts": self.inserts,
                "deletes": self.deletes,
            },
            "contenders": {name: c.to_json() for name, c in self.contenders.items()},
            "base_build_s": {str(k): round(v, 1) for k, v in self.base_build_s.items()},
            "commit_s_by_rows": {str(k): round(v, 3) for k, v in self.commit_s_by_rows.items()},
            "variant_commit_s_by_rows": {
                name: {str(k): round(v, 3) for k, v in by_rows.items()}
                for name, by_rows in self.variant_commit_s_by_rows.items()
            },
            "driver_peak_rss_mib": self.driver_peak_rss_mib,
            "rows_expected_found": {k: list(v) for k, v in self.rows.items()},
            "index_by_rows": {str(k): v for k, v in self.index.items()},
            "hudi_0_14": self.hudi014,
        }


#: Settings a table keeps from its first write: a variant setting one gets a base table of
#: its own, written with the variant's settings, instead of a copy of the defaults' base.
LAYOUT_SETTINGS = frozenset(
    {
        "TIDELAKE_LAKE__TABLE_TYPE",
        "hoodie.datasource.write.table.type",
        "hoodie.index.type",
        "hoodie.bucket.index.num.buckets",
    }
)


def fixes_layout(options: dict[str, str]) -> bool:
    """Whether a variant's settings change how its table is laid out on its first write."""
    return bool(LAYOUT_SETTINGS & options.keys())


def bench_config(home: Path, plan: IngestPlan, **env: str) -> Config:
    """The ingest's default configuration under ``home``, one manifest per round, staged
    batches kept."""
    environ = {
        "TIDELAKE_HOME": str(home),
        "TIDELAKE_INGEST__MAX_BATCH_EVENTS": str(plan.batch_events),
        # Every contender's ingest reads the same staged batches: none may retire them (the
        # first to pass a batch deleted it under the others once its 10 s interval was up).
        "TIDELAKE_STAGE__RETENTION__INTERVAL_S": str(10**9),
        **env,
    }
    return load_config(None, environ=environ)


def _base_frame(spark: SparkSession, rows: int, rows_per_file: int) -> DataFrame:
    """``rows`` orders with ids ``1..rows``, typed exactly like the lake table."""
    schema = schema_for(COLUMNS)
    statuses = "array('new','paid','packed','shipped','delivered','returned')"
    parts = max(1, -(-rows // rows_per_file))
    frame = spark.range(1, rows + 1, 1, parts).selectExpr(
        "id",
        "id % 50000 + 1 AS customer_id",
        "CAST((id % 100000) / 100 AS DECIMAL(12,2)) AS order_total",
        f"element_at({statuses}, CAST(id % 6 + 1 AS INT)) AS status",
        "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS order_date",
        "timestamp_seconds(1704067200 + id % 31536000) AS updated_at",
        "'insert' AS _tl_op",
        f"concat_ws('.', lpad('{BASE_TSO}', 20, '0'), lpad(CAST(id AS STRING), 20, '0'), "
        f"repeat('0', 20)) AS {ORDERING_FIELD}",
        f"timestamp_millis({BASE_COMMIT_MS}) AS _tl_commit_ts",
        "current_timestamp() AS _tl_ingest_ts",
        "CAST(0 AS BIGINT) AS _tl_seq",
        "false AS _hoodie_is_deleted",
    )
    return frame.to(schema)


def build_base_table(spark: SparkSession, cfg: Config, rows: int, rows_per_file: int) -> float:
    """Write the base table of ``cfg``'s lake with ``bulk_insert``; seconds it took.

    Without a metadata table: the first upsert then takes the index the ingest's writer
    picks for a table of this size (``TableStore.uses_record_index``), and a large base
    gets its record index built from its base files, as a table crossing
    ``lake.record_index_from_mb`` does. (Putting millions of keys into a fresh record index
    of ``lake.record_index_file_groups`` file groups in one commit ran the 3g driver out of
    memory at 10M rows; the ingest's own commits are bounded by its batch size.)"""
    path = table_path(cfg.lake_root, DATABASE, TABLE)
    options = hudi_write_options(cfg.lake, DATABASE, TABLE, PK, {}, record_index=False) | {
        "hoodie.datasource.write.operation": "bulk_insert",
        # Keep each Spark partition (a contiguous id range) in its own files.
        "hoodie.bulkinsert.sort.mode": "NONE",
    }
    started = time.perf_counter()
    frame = _base_frame(spark, rows, rows_per_file)
    frame.write.format("hudi").options(**options).mode("overwrite").save(path)
    return time.perf_counter() - started


def _write_input(spark: SparkSession, batch: BenchBatch, directory: Path) -> int:
    """The typed records of ``batch`` (what tidelake upserts) as one Parquet file."""
    typed = build_batch(TABLE_ID, batch.events, PK)
    frame = spark.createDataFrame(typed.rows, typed.schema)
    frame.coalesce(1).write.mode("overwrite").parquet(str(directory))
    return len(typed.rows)


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _java_children() -> list[int]:
    """This process's ``java`` children: right after the session is built, the Spark JVM
    that PySpark's gateway started (``spark-submit`` execs into it)."""
    return [pid for pid in children(os.getpid()) if command_name(pid) == "java"]


def _count(spark: SparkSession, path: str) -> int:
    return int(spark.read.format("hudi").load(path).count())


def run_ingest_bench(home: Path, plan: IngestPlan, log: Log) -> IngestResult:
    """Build the bases, stage the batches, run every contender; see the module docstring."""
    result = IngestResult(plan)
    small = bench_config(home / "small", plan)
    storage = LocalStorage(small.stage_root)
    spark = build_spark_session(small, app_name="tidelake-bench")
    jvm = _java_children()
    sampler = PeakRss(lambda: jvm).start()
    try:
        _run(spark, home, plan, small, storage, result, log)
    finally:
        sampler.stop()
        result.driver_peak_rss_mib = sampler.peak_mib
        spark.stop()
    return result


def _run(
    spark: SparkSession,
    home: Path,
    plan: IngestPlan,
    small: Config,
    storage: LocalStorage,
    result: IngestResult,
    log: Log,
) -> None:
    log(f"base table: {plan.table_rows:,} rows (bulk_insert)")
    per_file = max(1, plan.table_rows // FILES_PER_TABLE_ROWS)
    result.base_build_s[plan.table_rows] = build_base_table(spark, small, plan.table_rows, per_file)
    small_path = table_path(small.lake_root, DATABASE, TABLE)
    # Every Hudi contender gets the index tidelake's writer uses for this table.
    record_index = TableStore(small, spark).uses_record_index(small_path)
    result.index[plan.table_rows] = "RECORD_INDEX" if record_index else "SIMPLE"
    copies = home / "copies"
    datasource_path = str(copies / "datasource" / DATABASE / TABLE)
    streamer_path = str(copies / "streamer" / DATABASE / TABLE)
    shutil.copytree(small_path, datasource_path)
    jar = tools.utilities_jar()
    if jar is not None:
        shutil.copytree(small_path, streamer_path)
    large: Config | None = None
    if plan.large_rows:
        large = bench_config(home / "large", plan)
        log(f"base table: {plan.large_rows:,} rows (bulk_insert)")
        result.base_build_s[plan.large_rows] = build_base_table(
            spark, large, plan.large_rows, per_file
        )
        large_index = TableStore(large, spark).uses_record_index(
            table_path(large.lake_root, DATABASE, TABLE)
        )
        result.index[plan.large_rows] = "RECORD_INDEX" if large_index else "SIMPLE"

    log("index of tidelake's writer, by base rows: " + str(result.index))
    log(f"staging {plan.batches} batches of {plan.batch_events:,} changes")
    stream = ChangeStream(plan.table_rows, seed=plan.seed)
    batches = [stream.stage(storage, plan.batch_events) for _ in range(plan.batches)]
    first = batches[0]
    result.updates, result.inserts, result.deletes = first.updates, first.inserts, first.deletes
    inputs = home / "input"
    records = [_write_input(spark, b, inputs / f"batch-{i:04d}") for i, b in enumerate(batches)]

    contenders = {n: Contender(n) for n in ("tidelake", "hudi_datasource", "parquet")}
    if large is not None:
        contenders[f"tidelake_{plan.large_rows}"] = Contender(f"tidelake_{plan.large_rows}")
    variant_ingestors: dict[str, Ingestor] = {}
    #: Per variant contender: its table and its base rows, for the row count at the end.
    variant_lakes: dict[str, tuple[str, int]] = {}
    for name, options in plan.variants.items():
        env = {k: v for k, v in options.items() if k.startswith("TIDELAKE_")}
        hudi_options = {k: v for k, v in options.items() if k not in env}
        bases = [("tidelake", small)] + ([(f"tidelake_{plan.large_rows}", large)] if large else [])
        for prefix, base in bases:
            variant = bench_config(home / f"variant-{name}-{prefix}", plan, **env)
            variant = variant.model_copy(
                update={
                    "lake": variant.lake.model_copy(
                        update={"hudi_options": variant.lake.hudi_options | hudi_options}
                    )
                }
            )
            if fixes_layout(options):
                base_rows = plan.table_rows if base is small else (plan.large_rows or 0)
                log(f"variant {name}: its own base table of {base_rows:,} rows (bulk_insert)")
                build_base_table(spark, variant, base_rows, per_file)
            else:
                shutil.copytree(
                    table_path(base.lake_root, DATABASE, TABLE),
                    table_path(variant.lake_root, DATABASE, TABLE),
                )
            variant_ingestors[f"{prefix}[{name}]"] = Ingestor(variant, spark, storage)
            variant_lakes[f"{prefix}[{name}]"] = (
                table_path(variant.lake_root, DATABASE, TABLE),
                plan.table_rows if base is small else (plan.large_rows or 0),
            )
            contenders[f"{prefix}[{name}]"] = Contender(f"{prefix}[{name}]")
    result.contenders = contenders
    ingest_small = Ingestor(small, spark, storage)
    ingest_large = Ingestor(large, spark, storage) if large is not None else None
    options = hudi_write_options(small.lake, DATABASE, TABLE, PK, {}, record_index=record_index)
    floor = str(home / "parquet-floor")

    def tidelake_step(ingestor: Ingestor, expected: int) -> None:
        # The ingest's own totals of the round: the bench reads no commit record itself.
        totals = IngestStats()
        totals.add(ingestor.step())
        applied = totals.events
        if applied != expected:
            raise RuntimeError(f"tidelake applied {applied} events of {expected}")

    def hudi_upsert(source: str) -> None:
        frame = spark.read.parquet(source)
        frame.write.format("hudi").options(**options).mode("append").save(datasource_path)

    def parquet_append(source: str) -> None:
        spark.read.parquet(source).write.mode("append").parquet(floor)

    for i, batch in enumerate(batches):
        source = str(inputs / f"batch-{i:04d}")
        runs: list[tuple[str, Callable[[], object]]] = [
            ("tidelake", partial(tidelake_step, ingest_small, len(batch.events))),
            ("hudi_datasource", partial(hudi_upsert, source)),
            ("parquet", partial(parquet_append, source)),
        ]
        if ingest_large is not None:
            name = f"tidelake_{plan.large_rows}"
            runs.append((name, partial(tidelake_step, ingest_large, len(batch.events))))
        for name, ingestor in variant_ingestors.items():
            runs.append((name, partial(tidelake_step, ingestor, len(batch.events))))
        for name, fn in runs:
            # This process, its Spark JVM and the JVM's Python workers, if any ran.
            cpu = cpu_seconds(process_tree(os.getpid()))
            seconds = _timed(fn)
            cpu = cpu_seconds(process_tree(os.getpid())) - cpu
            contender = contenders[name]
            if i == 0:
                contender.warmup_s = seconds
            else:
                contender.seconds.append(seconds)
                contender.cpu_seconds.append(cpu)
                contender.records += records[i]
        log(
            f"batch {i + 1}/{len(batches)}"
            + ("" if i else " (warm-up)")
            + ": "
            + ", ".join(
                f"{n} {contenders[n].warmup_s if i == 0 else contenders[n].seconds[-1]:.1f} s"
                for n, _ in runs
            )
        )

    for suffix in ["", *(f"[{name}]" for name in plan.variants)]:
        by_rows = result.commit_s_by_rows if not suffix else {}
        by_rows[plan.table_rows] = _mean(contenders[f"tidelake{suffix}"].seconds)
        if large is not None and plan.large_rows:
            by_rows[plan.large_rows] = _mean(
                contenders[f"tidelake_{plan.large_rows}{suffix}"].seconds
            )
        if suffix:
            result.variant_commit_s_by_rows[suffix.strip("[]")] = by_rows

    inserted = sum(b.inserts for b in batches)
    deleted = sum(b.deletes for b in batches)
    expected = plan.table_rows + inserted - deleted
    result.rows["tidelake"] = (expected, _count(spark, small_path))
    result.rows["hudi_datasource"] = (expected, _count(spark, datasource_path))
    if large is not None and plan.large_rows:
        result.rows[f"tidelake_{plan.large_rows}"] = (
            plan.large_rows + inserted - deleted,
            _count(spark, table_path(large.lake_root, DATABASE, TABLE)),
        )

    for name, (path, base_rows) in variant_lakes.items():
        result.rows[name] = (base_rows + inserted - deleted, _count(spark, path))

    streamer = Contender("hoodiestreamer")
    contenders["hoodiestreamer"] = streamer
    if jar is None:
        streamer.error = (
            f"{tools.UTILITIES_JAR} is not in the bench jar cache "
            "(bench/setup could not fetch it from Maven Central)"
        )
    else:
        log("HoodieStreamer: spark-submit, continuous, one Parquet file per round")
        run_hoodiestreamer(
            small, jar, inputs, streamer_path, records, streamer, home / "logs", record_index
        )
        if streamer.error is None:
            result.rows["hoodiestreamer"] = (expected, _count(spark, streamer_path))

    if not isinstance(tools.hudi014(), str):
        # The same base rows as Parquet, for the Hudi 0.14 pair's own bulk_insert.
        _base_frame(spark, plan.table_rows, per_file).write.parquet(str(inputs / "base"))
    pair, rows, result.hudi014 = run_hudi014(
        small, home, inputs, records, expected, log, record_index
    )
    contenders |= pair
    result.rows |= rows


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# --- HoodieStreamer ------------------------------------------------------------------------


def spark_submit() -> Path:
    """``spark-submit`` of the installed PySpark."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def completed_instants(path: str) -> list[tuple[str, str]]:
    """``(requested, completed)`` times of the table's completed write commits, in order of
    completion, from the Hudi 1.x timeline file names ``<requested>_<completed>.<action>``."""
    timeline = Path(path) / ".hoodie" / "timeline"
    out = []
    for f in timeline.glob("*_*.*"):
        stem, _, action = f.name.partition(".")
        if action not in ("commit", "deltacommit"):
            continue
        requested, _, completed = stem.partition("_")
        out.append((requested, completed))
    return sorted(out, key=lambda rc: rc[1])


def instant_seconds(instant: str) -> float:
    """A Hudi instant (``yyyyMMddHHmmssSSS``, UTC) as seconds since the epoch."""
    import datetime as dt

    parsed = dt.datetime.strptime(instant[:17], "%Y%m%d%H%M%S%f").replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def streamer_argv(cfg: Config, jar: Path, target: str, props: Path, source_limit: int) -> list[str]:
    """The ``spark-submit`` command line of HoodieStreamer: the ingest's Spark settings, the
    same table type, record key, ordering field and merge mode as tidelake's writes."""
    conf = session_conf(cfg, app_name="hoodiestreamer-bench")
    argv = [str(spark_submit()), "--master", conf.pop("spark.master")]
    conf.pop("spark.app.name", None)
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [
        "--class", STREAMER_CLASS, str(jar),
        "--table-type", cfg.lake.table_type,
        "--op", "UPSERT",
        "--source-class", "org.apache.hudi.utilities.sources.ParquetDFSSource",
        "--source-ordering-fields", ORDERING_FIELD,
        "--merge-mode", "EVENT_TIME_ORDERING",
        "--target-base-path", target,
        "--target-table", hudi_table_name(DATABASE, TABLE),
        "--props", props.as_uri(),
        "--source-limit", str(source_limit),
        "--continuous",
        "--min-sync-interval-seconds", "0",
        "--post-write-termination-strategy-class",
        "org.apache.hudi.utilities.streamer.NoNewDataTerminationStrategy",
    ]  # fmt: skip
    return argv


def streamer_props(cfg: Config, source_root: Path, record_index: bool = True) -> dict[str, str]:
    """HoodieStreamer's properties: tidelake's write options of the table, the DFS source
    root, and stop after one round without new data."""
    options = hudi_write_options(cfg.lake, DATABASE, TABLE, PK, {}, record_index=record_index)
    options.pop("hoodie.datasource.write.commitmeta.key.prefix", None)
    return options | {
        "hoodie.streamer.source.dfs.root": source_root.as_uri(),
        "max.rounds.without.new.data.to.shutdown": "1",
    }


def streamer_source(inputs: Path, batches: int, name: str) -> tuple[Path, int]:
    """The batches' Parquet files in one directory beside ``inputs``, modification times ten
    seconds apart in batch order, and a source limit just above the largest file: a
    ``ParquetDFSSource`` then takes exactly one batch per round, in order."""
    source_root = inputs.parent / name
    source_root.mkdir(parents=True, exist_ok=True)
    sizes = []
    base_mtime = time.time() - 3600
    for i in range(batches):
        part = next((inputs / f"batch-{i:04d}").glob("part-*.parquet"))
        dest = source_root / f"batch-{i:04d}.parquet"
        shutil.copyfile(part, dest)
        os.utime(dest, (base_mtime + 10 * i, base_mtime + 10 * i))
        sizes.append(dest.stat().st_size)
    return source_root, max(sizes) + 1


def _properties(props: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def run_hoodiestreamer(
    cfg: Config,
    jar: Path,
    inputs: Path,
    target: str,
    records: list[int],
    contender: Contender,
    logs: Path,
    record_index: bool = True,
) -> None:
    """Feed the batches' Parquet files to one continuous HoodieStreamer, one file per round
    (``--source-limit`` just above the largest file; modification times one apart)."""
    source_root, source_limit = streamer_source(inputs, len(records), "streamer-input")
    props = inputs.parent / "hoodiestreamer.properties"
    props.write_text(_properties(streamer_props(cfg, source_root, record_index)))
    argv = streamer_argv(cfg, jar, target, props, source_limit)
    before = len(completed_instants(target))
    run = run_job("hoodiestreamer", argv, logs / "hoodiestreamer.log", STREAMER_TIMEOUT_S)
    code, contender.peak_rss_mib, tail = run.code, run.peak_rss_mib, run.tail
    commits = completed_instants(target)[before:]
    if code != 0 or len(commits) < len(records):
        contender.error = (
            f"HoodieStreamer exited {code} after {len(commits)} of {len(records)} commits: "
            + " | ".join(tail)
        )[:2000]
        return
    done = [instant_seconds(completed) for _, completed in commits[: len(records)]]
    first_requested = instant_seconds(commits[0][0])
    contender.warmup_s = done[0] - first_requested
    contender.seconds = [b - a for a, b in itertools.pairwise(done)]
    contender.records = sum(records[1:])


# --- Hudi 0.14: HoodieStreamer beside the datasource writer of the same Hudi ---------------

#: Contender names of the Hudi 0.14 pair (``bench/hudi014_worker.py``).
HUDI014_DATASOURCE = "hudi_datasource@0.14"
HUDI014_STREAMER = "hoodiestreamer@0.14"
#: Settings Hudi 0.14 does not have; event-time ordering is its DefaultHoodieRecordPayload.
_HUDI1_ONLY = frozenset(
    {
        "hoodie.record.merge.mode",
        "hoodie.table.ordering.fields",
        "hoodie.write.table.version",
        "hoodie.datasource.write.commitmeta.key.prefix",
    }
)


def hudi014_options(options: dict[str, str]) -> dict[str, str]:
    """tidelake's write options of the table in Hudi 0.14's terms: the 1.x-only settings
    dropped, the latest ``ORDERING_FIELD`` wins through Hudi 0.x's event-time payload."""
    return {k: v for k, v in options.items() if k not in _HUDI1_ONLY} | {
        "hoodie.datasource.write.payload.class": (
            "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
        ),
        "hoodie.payload.ordering.field": ORDERING_FIELD,
    }


def hudi014_job(
    cfg: Config,
    work: Path,
    inputs: Path,
    batches: int,
    jars: list[Path],
    record_index: bool = True,
) -> dict[str, Any]:
    """The worker's job: the tidelake table's options and Spark settings (its own jars), the
    base rows, the batches, and a HoodieStreamer source taking one batch per round."""
    options = hudi014_options(
        hudi_write_options(cfg.lake, DATABASE, TABLE, PK, {}, record_index=record_index)
    )
    source_root, source_limit = streamer_source(inputs, batches, "streamer-0.14-input")
    props = work / "hoodiestreamer-0.14.properties"
    props.write_text(
        _properties(options | {"hoodie.streamer.source.dfs.root": source_root.as_uri()})
    )
    conf = session_conf(cfg, app_name="hudi-0.14-bench")
    conf.pop("spark.jars")
    return {
        "jars": [str(j) for j in jars],
        "spark_conf": conf,
        "options": options,
        "base": str(inputs / "base"),
        "batches": [str(inputs / f"batch-{i:04d}") for i in range(batches)],
        "datasource_path": str(work / "datasource" / DATABASE / TABLE),
        "streamer_path": str(work / "streamer" / DATABASE / TABLE),
        "streamer_props": str(props),
        "source_limit": source_limit,
        "result": str(work / "result.json"),
    }


def run_hudi014(
    cfg: Config,
    home: Path,
    inputs: Path,
    records: list[int],
    expected: int,
    log: Log,
    record_index: bool = True,
) -> tuple[dict[str, Contender], dict[str, tuple[int, int]], dict[str, Any]]:
    """Run ``bench/hudi014_worker.py`` in the PySpark 3.4 virtualenv: the Hudi 0.14
    pair as contenders, their (expected, found) rows, and the worker's other numbers."""
    contenders = {n: Contender(n) for n in (HUDI014_DATASOURCE, HUDI014_STREAMER)}
    found = tools.hudi014()
    if isinstance(found, str):
        for c in contenders.values():
            c.error = found
        return contenders, {}, {}
    python, jars = found
    work = home / "hudi-0.14"
    work.mkdir(parents=True, exist_ok=True)
    job = hudi014_job(cfg, work, inputs, len(records), jars, record_index)
    (work / "job.json").write_text(json.dumps(job, indent=1))
    log("Hudi 0.14: datasource and HoodieStreamer in PySpark 3.4, same records")
    # Its own PySpark: nothing of this interpreter's Spark may leak into the worker.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    worker = tools.BENCH_DIR / "hudi014_worker.py"
    run = run_job(
        "hudi-0.14",
        [str(python), str(worker), str(work / "job.json")],
        home / "logs" / "hudi-0.14.log",
        STREAMER_TIMEOUT_S,
        env=env,
    )
    code, peak_mib, tail = run.code, run.peak_rss_mib, run.tail
    result_file = Path(job["result"])
    if code != 0 or not result_file.exists():
        for c in contenders.values():
            c.error = (f"the Hudi 0.14 worker exited {code}: " + " | ".join(tail))[:2000]
        return contenders, {}, {}
    out_json: dict[str, Any] = json.loads(result_file.read_text())
    pairs = ((HUDI014_DATASOURCE, "hudi_datasource"), (HUDI014_STREAMER, "hoodiestreamer"))
    for name, key in pairs:
        seconds = out_json["seconds"][key]
        contender = contenders[name]
        contender.warmup_s, contender.seconds = seconds[0], seconds[1:]
        contender.records = sum(records[1:])
    rows = {name: (expected, int(out_json["rows"][key])) for name, key in pairs}
    extra = {
        "spark": out_json["spark"],
        "base_build_s": round(out_json["base_build_s"], 1),
        # Requested-to-completed seconds of the timed commits (the warm-up's dropped).
        "commit_s": {k: [round(s, 3) for s in v[1:]] for k, v in out_json["commit_s"].items()},
        # One process holds both contenders: its peak, not theirs.
        "peak_rss_mib_of_the_worker": peak_mib,
    }
    return contenders, rows, extra
