"""The floor of a small Hudi commit (``--part floor``): what the smallest upserts cost on this
machine, whatever tidelake does around them — the bound under issue 21's freshness goals.

One Spark session (``lake/spark.build_spark_session``, the default configuration) writes small
tables of :attr:`FloorPlan.table_rows` rows in each of :data:`LAYOUTS` with
``lake/hudi.write_options``, then, round after round with the layouts' order reversed every
round:

* **one table**: an upsert of each of :attr:`FloorPlan.one_rows` rows (1 and 2,000);
* **three together**: :attr:`FloorPlan.together_rows` rows (333: what 1,000 events/s over the
  demo's three tables brings in a second) into each of three tables, submitted from three
  threads as an ingest round commits its tables.

Wall seconds and CPU seconds (this process and its children — the Spark JVM —, user + system,
``memory.cpu_seconds``) per write, the first :attr:`FloorPlan.warmup` rounds dropped. Every
table must end with exactly its rows (an upsert of existing keys adds none), or the part fails.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelake.config import Config, LakeConfig, load_config
from tidelake.lake.hudi import ORDERING_FIELD, write_options
from tidelake_bench.memory import cpu_seconds, process_tree

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: How many tables the ``three`` form commits together.
TOGETHER = 3


@dataclass(frozen=True)
class FloorPlan:
    """How big the floor part is."""

    table_rows: int = 20_000
    one_rows: tuple[int, ...] = (1, 2_000)
    together_rows: int = 333
    rounds: int = 10
    warmup: int = 2


QUICK_FLOOR = FloorPlan(table_rows=2_000, one_rows=(1, 200), together_rows=100, rounds=4, warmup=1)


@dataclass(frozen=True)
class Layout:
    """A way to lay a small table out: the lake's settings and Hudi options over them."""

    table_type: str
    compaction: str
    hudi_options: tuple[tuple[str, str], ...] = ()


#: Today's small-table path (COW, SIMPLE index, no metadata table), and the cheapest commit
#: measured (docs/benchmarks.md, optimisations 8 and 10): merge-on-read with the bucket index
#: and no compaction in the writer, so every upsert appends log blocks.
LAYOUTS = {
    "cow": Layout("COPY_ON_WRITE", "inline"),
    "mor_bucket": Layout(
        "MERGE_ON_READ",
        "external",
        (
            ("hoodie.index.type", "BUCKET"),
            ("hoodie.bucket.index.num.buckets", "2"),
            ("hoodie.index.bucket.engine", "SIMPLE"),
        ),
    ),
}


def options(lake: LakeConfig, layout: Layout, table: str) -> dict[str, str]:
    """The Hudi options of an upsert into ``bench.<table>`` laid out as ``layout``."""
    services = lake.table_services.model_copy(update={"compaction": layout.compaction})
    laid = lake.model_copy(update={"table_type": layout.table_type, "table_services": services})
    return write_options(laid, "bench", table, ["id"], {}, record_index=False) | dict(
        layout.hudi_options
    )


def summary(walls: list[float], cpus: list[float], warmup: int) -> dict[str, Any]:
    """Median, min and max wall seconds and median CPU seconds, the first ``warmup`` dropped."""
    kept, kept_cpu = walls[warmup:], cpus[warmup:]
    if not kept:
        raise ValueError(f"{len(walls)} writes leave none after {warmup} warm-up rounds")
    return {
        "writes": len(kept),
        "median_s": round(statistics.median(kept), 3),
        "min_s": round(min(kept), 3),
        "max_s": round(max(kept), 3),
        "cpu_s": round(statistics.median(kept_cpu), 3),
    }


def headline(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The top-level numbers: per layout, a 1-row commit and a round of three tables."""
    out: dict[str, Any] = {}
    for layout, forms in results.items():
        one = min(int(form.removeprefix("one_")) for form in forms if form.startswith("one_"))
        out[f"floor_commit_s[{layout}]"] = forms[f"one_{one}"]["median_s"]
        out[f"floor_commit_cpu_s[{layout}]"] = forms[f"one_{one}"]["cpu_s"]
        out[f"floor_round_of_three_s[{layout}]"] = forms["three"]["median_s"]
        out[f"floor_round_of_three_cpu_s[{layout}]"] = forms["three"]["cpu_s"]
    return out


def _forms(plan: FloorPlan) -> Iterable[str]:
    yield from (f"one_{n}" for n in plan.one_rows)
    yield "three"


def _cpu_s() -> float:
    return cpu_seconds(process_tree(os.getpid()))


class _Tables:
    """The part's tables in one Spark session: ``<layout>_<n>`` under ``home``."""

    def __init__(self, spark: SparkSession, config: Config, home: Path) -> None:
        self.spark, self.lake, self.home = spark, config.lake, home

    def frame(self, first: int, rows: int, seq: int) -> DataFrame:
        from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

        schema = StructType(
            [
                StructField("id", LongType(), False),
                StructField("name", StringType()),
                StructField("v", DoubleType()),
                StructField(ORDERING_FIELD, StringType()),
            ]
        )
        data = [(i, f"n{i}-{seq}", i * 0.5, f"{seq:020d}") for i in range(first, first + rows)]
        return self.spark.createDataFrame(data, schema)

    def write(self, layout: str, index: int, frame: DataFrame) -> None:
        name = f"{layout}_{index}"
        opts = options(self.lake, LAYOUTS[layout], name)
        frame.write.format("hudi").options(**opts).mode("append").save(str(self.home / name))

    def count(self, layout: str, index: int) -> int:
        path = str(self.home / f"{layout}_{index}")
        return int(self.spark.read.format("hudi").load(path).count())


def run_floor_bench(
    home: Path, plan: FloorPlan, log: Callable[[str], None]
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{layout: {"one_<rows>": summary, "three": summary}}`` (:func:`summary`)."""
    from tidelake.lake.spark import build_spark_session

    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    config_file = home / "tidelake.yaml"
    config_file.write_text(f"home: {home}\n")
    config = load_config(config_file, environ={})
    spark = build_spark_session(config, app_name="tidelake-bench-floor")
    try:
        return measure_floor(spark, config, home / "lake", plan, log)
    finally:
        spark.stop()


def measure_floor(
    spark: SparkSession, config: Config, lake: Path, plan: FloorPlan, log: Callable[[str], None]
) -> dict[str, dict[str, dict[str, Any]]]:
    """The measurements of :func:`run_floor_bench` in a session of the caller's, with tables
    ``<layout>_<n>`` under ``lake``."""
    tables = _Tables(spark, config, lake)
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    for layout in LAYOUTS:
        started = time.monotonic()
        for index in range(TOGETHER):
            tables.write(layout, index, tables.frame(0, plan.table_rows, 0))
        log(f"floor: {TOGETHER} {layout} tables of {plan.table_rows:,} rows in "
            f"{time.monotonic() - started:.1f} s")  # fmt: skip
    seq = 0

    def timed(key: tuple[str, str], write: Callable[[], None]) -> None:
        cpu = _cpu_s()  # read before the clock starts and after it stops: /proc is no write
        wall = time.monotonic()
        write()
        walls.setdefault(key, []).append(time.monotonic() - wall)
        cpus.setdefault(key, []).append(_cpu_s() - cpu)

    with ThreadPoolExecutor(TOGETHER, thread_name_prefix="floor") as pool:
        for round_no in range(plan.rounds):
            order = list(LAYOUTS) if round_no % 2 == 0 else list(LAYOUTS)[::-1]
            for layout in order:
                for rows in plan.one_rows:
                    seq += 1
                    first = (round_no * 97) % max(1, plan.table_rows - rows)
                    frame = tables.frame(first, rows, seq)

                    def one(lt: str = layout, fr: DataFrame = frame) -> None:
                        tables.write(lt, 0, fr)

                    timed((layout, f"one_{rows}"), one)
                seq += 1
                first = (round_no * 89) % max(1, plan.table_rows - plan.together_rows)
                frames = [tables.frame(first, plan.together_rows, seq) for _ in range(TOGETHER)]

                def together(lt: str = layout, fs: list[DataFrame] = frames) -> None:
                    list(pool.map(lambda i: tables.write(lt, i, fs[i]), range(TOGETHER)))

                timed((layout, "three"), together)
            log(f"floor: round {round_no + 1} of {plan.rounds}")
    wrong = {
        f"{layout}_{i}": got
        for layout in LAYOUTS
        for i in range(TOGETHER)
        if (got := tables.count(layout, i)) != plan.table_rows
    }
    if wrong:
        raise RuntimeError(f"floor tables not of {plan.table_rows:,} rows: {wrong}")
    return {
        layout: {
            form: summary(walls[(layout, form)], cpus[(layout, form)], plan.warmup)
            for form in _forms(plan)
        }
        for layout in LAYOUTS
    }
