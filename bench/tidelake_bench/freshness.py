"""Freshness at a steady rate: the demo pipeline (:mod:`tidelake.pipeline.demo`) fed at
``rate`` events/s for ``seconds``, measured the way the demo measures it.

An embedded ``nats-server``, the stager and the continuous ingest as separate processes
with the default configuration; publishing starts once the ingest has warmed up. Freshness
of a message is the time from its source commit to the Hudi commit whose checkpoint covers
it (``_tidelake/commits.jsonl``). The lake is then compared row by row with the workload's
expected state, so a number from a lake that lost or resurrected rows cannot pass unnoticed.

While it runs, the resident memory of the stager process and of the ingest process with
its Spark JVM is sampled from ``/proc``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tidelake.pipeline.demo import DemoOptions, DemoResult, run_demo
from tidelake_bench.memory import PeakRss, process_tree

Log = Callable[[str], None]


@dataclass(kw_only=True)
class DemoRun:
    """The demo's own figures of one bench run of it (the freshness part's, the ``tables``
    part's, each run of the ``workers`` part): rate, freshness, commits, the verification."""

    events: int = 0
    publish_events_per_s: float = 0.0
    freshness_p50_s: float | None = None
    freshness_p99_s: float | None = None
    freshness_max_s: float | None = None
    #: Messages not visible when the wait ended (None: the lake caught up).
    not_visible: int | None = None
    #: Seconds from the tables' first rows until the lake had created every table.
    tables_created_s: float | None = None
    commits: int = 0
    tables_verified: int = 0
    rows_expected: int = 0
    rows_in_lake: int = 0
    mismatches: int | None = None
    error: str | None = None
    #: The embedded nats-server fsynced before every PubAck (``sync_interval: always``).
    fsync: bool = True

    def record_demo(self, demo: DemoResult, tables: int) -> None:
        """The demo's figures; a verification that reached fewer than ``tables`` tables is
        an error, not a result."""
        self.events = demo.events
        self.publish_events_per_s = demo.publish_events_per_s
        self.freshness_p50_s = demo.freshness_p50_s
        self.freshness_p99_s = demo.freshness_p99_s
        self.freshness_max_s = demo.freshness_max_s
        self.not_visible = demo.not_visible
        self.tables_created_s = demo.tables_created_s
        self.commits = demo.commits
        self.tables_verified = demo.tables
        self.rows_expected = demo.rows_expected
        self.rows_in_lake = demo.rows_in_lake
        self.mismatches = demo.mismatches if demo.tables else None
        self.error = demo.error
        if demo.tables and demo.tables < tables and self.error is None:
            self.error = f"{tables - demo.tables} of {tables} tables were not verified"


@dataclass(kw_only=True)
class FreshnessResult(DemoRun):
    """What the freshness benchmark measured."""

    rate: float
    seconds: float
    stager_peak_rss_mib: float | None = None
    ingest_peak_rss_mib: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def stage_pids(root: int, verb: str) -> list[int]:
    """The ``python -m tidelake.cli <verb>`` processes under ``root``, with their children
    (the ingest's Spark JVM)."""
    for pid in process_tree(root):
        argv = cmdline(pid)
        if "tidelake.cli" in argv and verb in argv[argv.index("tidelake.cli") + 1 :][:1]:
            return process_tree(pid)
    return []


def sampled_demo(opts: DemoOptions, console: Console) -> tuple[DemoResult, PeakRss, PeakRss]:
    """``run_demo(opts)`` with the resident memory of its stager and of its ingest (with the
    Spark JVM) sampled from ``/proc`` while it runs: the result and the two samplers."""
    me = os.getpid()
    stager = PeakRss(lambda: stage_pids(me, "stage")).start()
    ingest = PeakRss(lambda: stage_pids(me, "ingest")).start()
    try:
        return run_demo(opts, console), stager, ingest
    finally:
        stager.stop()
        ingest.stop()


def run_freshness_bench(
    home: Path, rate: float, seconds: float, log: Log, console: Console, *, fsync: bool = True
) -> FreshnessResult:
    """The demo at ``rate`` events/s for ``seconds`` seconds, with memory sampling; ``fsync``
    False: its nats-server fsyncs on its default schedule (``tidelake demo --no-fsync``)."""
    result = FreshnessResult(rate=rate, seconds=seconds, fsync=fsync)
    policy = "" if fsync else ", nats-server without an fsync per message"
    log(f"pipeline at {rate:,.0f} events/s for {seconds:,.0f} s (demo processes, defaults{policy})")
    opts = DemoOptions(events=int(rate * seconds), rate=rate, home=home / "demo", fsync=fsync)
    demo, stager, ingest = sampled_demo(opts, console)
    result.stager_peak_rss_mib = stager.peak_mib
    result.ingest_peak_rss_mib = ingest.peak_mib
    result.record_demo(demo, demo.tables)  # the order workload's tables, all verified
    return result
