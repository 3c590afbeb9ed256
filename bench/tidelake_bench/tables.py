"""Many active tables (issue 21): the demo pipeline with the many-tables workload.

``tables`` tables of one schema (``workload/many_tables.py``: ``shop.store_0001`` …, the
transactions round-robin over them, the tables declared in ``lake.tables`` as for a
changefeed started on existing tables) published at ``tables x rate`` events/s for
``seconds``, through the demo's embedded ``nats-server``, stager and continuous ingest with
the default configuration. Measured the way the freshness part measures: freshness of each
message from its source commit to the Hudi commit covering it, the lake compared row by row
with the workload's expected state (every table), peak memory of the stager and of the ingest
with its Spark JVM sampled from ``/proc`` — and its peak minute by minute, to show whether it
levels off.

The demo first gives every table its first row and waits until the lake has created them
all (``tables_created_s``: creating a Hudi table is a one-off cost several commits long), then
publishes the measured stream: the freshness figures are the measured stream's.

The ingest's rounds come from ``_tidelake/commits.jsonl``: the commits of rows of one round
all carry the stream sequence the round read through (``lake/rules.py`` ``rows_seq_last``),
so commits grouped by it are the rounds. A round's span runs from the start of its first
table's commit to the end of its last one (reading the staged files before it is not in it).
Rounds that created tables (a commit with no checkpoint before it) are counted apart.

When the lake has not caught up ``catch_up_s`` after the publishing ended, the part stops
waiting: the messages not visible yet count with their age at that moment, so the freshness
figures are lower bounds (``not_visible``), and nothing is verified.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tidelake.config import load_config
from tidelake.lake.ledger import CommitRecord, Ledger
from tidelake.pipeline.demo import DemoOptions
from tidelake_bench.freshness import DemoRun, sampled_demo
from tidelake_bench.stats import percentile

Log = Callable[[str], None]

#: Memory is sampled into windows of this many seconds (``ingest_rss_mib_per_minute``).
MEMORY_WINDOW_S = 60.0


@dataclass(frozen=True)
class IngestRound:
    """One round of the ingest as its commits show it."""

    seq: int
    commits: int
    span_s: float
    #: Of the commits, those that created their table (no checkpoint before them).
    created: int = 0


def ingest_rounds(commits: Iterable[CommitRecord]) -> list[IngestRound]:
    """The rounds of rows in ``commits``, in stream order: commits grouped by the sequence the
    round read through; DDL commits and commits without a duration are left out."""
    by_seq: dict[int, list[CommitRecord]] = defaultdict(list)
    for c in commits:
        if not c.ddl and c.duration_ms is not None:
            by_seq[c.seq].append(c)
    rounds = []
    for seq in sorted(by_seq):
        group = by_seq[seq]
        start = min(c.committed_at_ms - (c.duration_ms or 0) for c in group)
        end = max(c.committed_at_ms for c in group)
        created = sum(1 for c in group if c.seq_from == 0)
        rounds.append(IngestRound(seq, len(group), round((end - start) / 1000, 3), created))
    return rounds


@dataclass(kw_only=True)
class TablesResult(DemoRun):
    """What the many-tables part measured."""

    tables: int
    rate_per_table: float
    seconds: float
    #: Rounds that created tables, and a table creation's commit (median seconds).
    create_rounds: int = 0
    create_commit_s_p50: float | None = None
    #: The rounds of tables at work (creating none), their spans and commits.
    rounds: int = 0
    round_s_p50: float | None = None
    round_s_p99: float | None = None
    round_s_max: float | None = None
    #: Mean commits per round (tables a round wrote).
    round_commits_mean: float | None = None
    #: A table's commit in a round: median seconds (its share of a round's work).
    commit_s_p50: float | None = None
    stager_peak_rss_mib: float | None = None
    ingest_peak_rss_mib: float | None = None
    stager_rss_mib_per_minute: list[float | None] = field(default_factory=list)
    ingest_rss_mib_per_minute: list[float | None] = field(default_factory=list)

    @property
    def events_per_s_per_table(self) -> float | None:
        """The publishing rate each table saw (the transactions go round-robin)."""
        return round(self.publish_events_per_s / self.tables, 3) if self.tables else None

    def record_rounds(self, commits: list[CommitRecord]) -> None:
        """The ingest's rounds, those that created tables apart (``ingest_rounds``)."""
        every = ingest_rounds(commits)
        rounds = [r for r in every if not r.created]
        self.create_rounds = len(every) - len(rounds)
        spans = [r.span_s for r in rounds]
        self.rounds = len(rounds)
        self.round_s_p50 = _round(percentile(spans, 50))
        self.round_s_p99 = _round(percentile(spans, 99))
        self.round_s_max = max(spans) if spans else None
        self.round_commits_mean = (
            round(sum(r.commits for r in rounds) / len(rounds), 1) if rounds else None
        )
        rows = [c for c in commits if not c.ddl and c.duration_ms is not None]
        durations = [(c.duration_ms or 0) / 1000 for c in rows if c.seq_from]
        creations = [(c.duration_ms or 0) / 1000 for c in rows if not c.seq_from]
        self.commit_s_p50 = _round(percentile(durations, 50))
        self.create_commit_s_p50 = _round(percentile(creations, 50))

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"events_per_s_per_table": self.events_per_s_per_table}


def run_tables_bench(
    home: Path,
    tables: int,
    rate_per_table: float,
    seconds: float,
    catch_up_s: float,
    log: Log,
    console: Console,
    *,
    fsync: bool = True,
) -> TablesResult:
    """The demo over ``tables`` tables at ``rate_per_table`` events/s each for ``seconds``,
    with memory sampling; the ingest's rounds read from its commit log afterwards. ``fsync``
    False: its nats-server fsyncs on its default schedule (``tidelake demo --no-fsync``)."""
    result = TablesResult(
        tables=tables, rate_per_table=rate_per_table, seconds=seconds, fsync=fsync
    )
    rate = tables * rate_per_table
    policy = "defaults" if fsync else "defaults but no fsync per message in nats-server"
    log(
        f"{tables:,} tables at {rate_per_table:,.1f} events/s each ({rate:,.0f} events/s) "
        f"for {seconds:,.0f} s (demo processes, {policy})"
    )
    opts = DemoOptions(
        events=int(rate * seconds),
        rate=rate,
        tables=tables,
        home=home / "demo",
        catch_up_timeout_s=catch_up_s,
        fsync=fsync,
    )
    demo, stager, ingest = sampled_demo(opts, console)
    result.stager_peak_rss_mib = stager.peak_mib
    result.ingest_peak_rss_mib = ingest.peak_mib
    result.stager_rss_mib_per_minute = stager.peaks_per_window(MEMORY_WINDOW_S)
    result.ingest_rss_mib_per_minute = ingest.peaks_per_window(MEMORY_WINDOW_S)
    result.record_demo(demo, tables)
    config = opts.home / "config.yaml"
    if config.exists():  # the demo's own config, as its processes read it
        result.record_rounds(Ledger(load_config(config, environ={}).lake_state_dir).commits())
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
