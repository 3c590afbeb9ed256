"""Scale-out (issue 21): the many-tables workload with 1 worker, then with 2, side by side.

A worker is a stager and an ingest owning a share of the tables (``pipeline/workers.py``,
``tidelake demo --workers N``): its own durable consumer over its tables' subjects, its own
staging root and ingest state, one lake. Each run is the demo of the ``tables`` part (every
table created from its first row first, then ``tables x rate`` events/s for ``seconds``), the
same workload and seed for both, and each lake is compared row by row with the source.

Per run: freshness (source commit → the Hudi commit covering it), commits, and per worker
its rounds of rows (``tables.ingest_rounds`` over that worker's commit log) and the peak
resident memory of its stager and of its ingest with the Spark JVM, sampled from ``/proc``
(a worker's processes are told apart by the config they were started with).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tidelake.config import load_config
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.demo import DemoOptions, run_demo
from tidelake_bench.freshness import DemoRun, cmdline
from tidelake_bench.memory import PeakRss, cpu_seconds, process_tree
from tidelake_bench.stats import percentile
from tidelake_bench.tables import ingest_rounds

Log = Callable[[str], None]

#: The runs side by side: one worker (the ``tables`` part's pipeline), then two.
WORKER_COUNTS = (1, 2)


def _config_of(pid: int) -> str | None:
    """The ``TIDELAKE_CONFIG`` a process was started with (our own children only)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in raw.split(b"\0"):
        if entry.startswith(b"TIDELAKE_CONFIG="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def worker_pids(root: int, verb: str, worker: str | None) -> list[int]:
    """The ``python -m tidelake.cli <verb>`` process under ``root`` of ``worker`` (its config
    under ``workers/<worker>/``; None: the only one), with its children (the Spark JVM)."""
    for pid in process_tree(root):
        argv = cmdline(pid)
        if "tidelake.cli" not in argv or verb not in argv[argv.index("tidelake.cli") + 1 :][:1]:
            continue
        config = _config_of(pid) or ""
        if worker is None or f"/workers/{worker}/" in config:
            return process_tree(pid)
    return []


class CpuTotal:
    """The CPU seconds a process tree used, the largest of its samples: its processes' own
    time while they live (and their waited-for children's), read every second."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-total", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.seconds = max(self.seconds, cpu_seconds(self._pids()))

    def start(self) -> CpuTotal:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Sampled:
    """A worker's stager and ingest (with the JVM): peak memory and CPU seconds."""

    stager: PeakRss
    ingest: PeakRss
    stager_cpu: CpuTotal
    ingest_cpu: CpuTotal

    def stop(self) -> None:
        for sampler in (self.stager, self.ingest, self.stager_cpu, self.ingest_cpu):
            sampler.stop()


def _sample(root: int, worker: str | None) -> Sampled:
    """Samplers of ``worker``'s stager and of its ingest with the JVM, started."""

    def stager() -> list[int]:
        return worker_pids(root, "stage", worker)

    def ingest() -> list[int]:
        return worker_pids(root, "ingest", worker)

    return Sampled(
        PeakRss(stager).start(),
        PeakRss(ingest).start(),
        CpuTotal(stager).start(),
        CpuTotal(ingest).start(),
    )


@dataclass(kw_only=True)
class WorkerRun(DemoRun):
    """One run: ``workers`` workers over the same workload."""

    workers: int
    #: Rounds of rows of every worker (creating no table), and their spans' median.
    rounds: int = 0
    round_s_p50: float | None = None
    #: Per worker: tables, commits, rounds, round s p50, stager and ingest peak RSS MiB.
    per_worker: list[dict[str, Any]] = field(default_factory=list)

    def record_worker(
        self, name: str, config: Path, sampled: Sampled, tables: int | None
    ) -> list[float]:
        """One worker's rounds (from its own commit log), memory and CPU; its rounds'
        spans."""
        commits = Ledger(load_config(config, environ={}).lake_state_dir).commits()
        rounds = [r for r in ingest_rounds(commits) if not r.created]
        spans = [r.span_s for r in rounds]
        p50 = percentile(spans, 50)
        self.per_worker.append(
            {
                "worker": name,
                "tables": tables if tables is not None else len({c.table for c in commits}),
                "commits": len(commits),
                "rounds": len(rounds),
                "round_s_p50": None if p50 is None else round(p50, 3),
                "stager_peak_rss_mib": sampled.stager.peak_mib,
                "ingest_peak_rss_mib": sampled.ingest.peak_mib,
                # Whole life: JVM start, warm-up and the tables' creation included.
                "stager_cpu_s": round(sampled.stager_cpu.seconds, 1),
                "ingest_cpu_s": round(sampled.ingest_cpu.seconds, 1),
                "ingest_cpu_s_per_commit": (
                    round(sampled.ingest_cpu.seconds / len(commits), 2) if commits else None
                ),
            }
        )
        self.rounds += len(rounds)
        return spans

    def finish(self, spans: list[float]) -> None:
        p50 = percentile(spans, 50)
        self.round_s_p50 = None if p50 is None else round(p50, 3)


@dataclass
class WorkersResult:
    """The part: the same workload with each count of workers."""

    tables: int
    rate_per_table: float
    seconds: float
    runs: list[WorkerRun] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": self.tables,
            "rate_per_table": self.rate_per_table,
            "seconds": self.seconds,
            "runs": [dict(r.__dict__) for r in self.runs],
        }

    def run_of(self, workers: int) -> WorkerRun | None:
        return next((r for r in self.runs if r.workers == workers), None)


def run_workers_bench(
    home: Path,
    tables: int,
    rate_per_table: float,
    seconds: float,
    catch_up_s: float,
    log: Log,
    console: Console,
    *,
    fsync: bool = True,
) -> WorkersResult:
    """The demo over ``tables`` tables at ``rate_per_table`` events/s each for ``seconds``,
    once per count in :data:`WORKER_COUNTS`, memory sampled per worker."""
    result = WorkersResult(tables=tables, rate_per_table=rate_per_table, seconds=seconds)
    rate = tables * rate_per_table
    me = os.getpid()
    for count in WORKER_COUNTS:
        log(
            f"{count} worker(s): {tables:,} tables at {rate_per_table:,.1f} events/s each "
            f"({rate:,.0f} events/s) for {seconds:,.0f} s"
        )
        opts = DemoOptions(
            events=int(rate * seconds),
            rate=rate,
            tables=tables,
            home=home / f"workers-{count}",
            catch_up_timeout_s=catch_up_s,
            workers=count,
            fsync=fsync,
        )
        names: list[str | None] = [None] if count == 1 else [f"w{i}" for i in range(1, count + 1)]
        samplers = {name: _sample(me, name) for name in names}
        try:
            demo = run_demo(opts, console)
        finally:
            for sampled in samplers.values():
                sampled.stop()
        run = WorkerRun(workers=count, fsync=fsync)
        run.record_demo(demo, tables)
        spans: list[float] = []
        for name, sampled in samplers.items():
            config = (
                opts.home / "config.yaml"
                if name is None
                else opts.home / "workers" / name / "config.yaml"
            )
            if not config.exists():
                continue
            share = next((w for w in demo.workers or [] if w["worker"] == name), None)
            spans += run.record_worker(
                name or "w1", config, sampled, share["tables"] if share else None
            )
        run.finish(spans)
        result.runs.append(run)
        log(
            f"{count} worker(s): freshness p50 {run.freshness_p50_s} s, p99 "
            f"{run.freshness_p99_s} s; {run.rounds} rounds, p50 {run.round_s_p50} s; "
            f"mismatches {run.mismatches}"
        )
    return result
