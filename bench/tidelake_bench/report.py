"""The result of one ``tidelake bench`` run: its JSON shape, its targets, its Markdown.

The JSON object (``--json`` prints it as the last stdout line) has the headline numbers at
the top level — :data:`HEADLINE` — and each part's details under ``details``. A contender
that could not run has ``null`` and its reason under ``errors``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tidelake_bench.stats import ratio

#: Top-level keys every result carries (null when not measured).
HEADLINE = (
    "stage_events_per_s",
    "nats_bench_events_per_s",
    "ingest_records_per_s",
    "hoodiestreamer_records_per_s",
    "parquet_records_per_s",
    "freshness_p50_s",
    "freshness_p99_s",
)


@dataclass(frozen=True)
class Target:
    """One goal (issue 21's, and the capture goals of earlier issues) and its wording."""

    name: str
    text: str


TARGETS = (
    Target(
        "freshness_p99",
        "freshness p99 <= 2 s at 1,000 events/s, sustained 10 minutes, lake equal to the source",
    ),
    Target(
        "freshness_p99_high",
        "freshness p99 <= 5 s at 10,000 events/s, sustained 10 minutes, lake equal to the source",
    ),
    Target("stager", "stager >= 100,000 events per CPU second and >= 0.75x nats bench"),
    Target(
        "ingest",
        "ingest >= 20,000 changes/s and >= 10,000 changes per CPU second into a 10M-row "
        "table, and >= 1.5x Hudi's datasource writer on the same records",
    ),
    Target("ingest_vs_hoodiestreamer", "ingest >= 1.5x HoodieStreamer records/s"),
    Target("commit_growth", "commit time at 10M rows <= 1.2x at 1M rows"),
    Target("capture", "capture >= 20,000 changes/s per process, MariaDB and PostgreSQL"),
    Target("capture_lag", "capture behind a 4,000 changes/s writer: max < 5 s"),
    Target("snapshot", "incremental snapshot >= 20,000 rows/s (10M rows), MariaDB and PostgreSQL"),
    Target("tables", "1,000 active tables at 10 events/s each: freshness p99 <= 30 s"),
)

#: A freshness goal holds only for a run this long (the issue: sustained 10 minutes).
FRESHNESS_SUSTAINED_S = 600
#: Issue 21's goal (the ``tables`` part): tables, events/s each, sustained seconds, p99 s.
TABLES_GOAL = (1_000, 10.0, 600.0, 30.0)
#: The publisher counts as having reached the rate at 95% of it: its rate includes the wait
#: for the last PubAck (the capture-lag target allows its writer the same).
RATE_REACHED = 0.95

#: The sources of the capture part (``capture.py``), as its numbers name them.
CAPTURE_SOURCES = ("mysql", "postgres")


@dataclass
class BenchResult:
    """Everything one run measured, with where and when."""

    quick: bool
    started_at: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    elapsed_s: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    #: Load averages (1, 5, 15 min) at the start and end of the run and of each part.
    load: dict[str, list[float]] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def targets(self) -> dict[str, dict[str, Any]]:
        """Each target with the measured value and whether it is met (None: not measured)."""
        n = self.numbers
        stager = {
            "events_per_cpu_s": n.get("stage_events_per_cpu_s"),
            "vs_nats_bench": n.get("stage_vs_nats_bench"),
        }
        vs_hs, vs_hs_bridged = (
            n.get("ingest_vs_hoodiestreamer"),
            n.get("ingest_vs_hoodiestreamer_bridged"),
        )
        # The same-version comparison decides; the bridged estimate only in its absence.
        hs_decides = vs_hs if vs_hs is not None else vs_hs_bridged
        ingest = {
            "changes_per_s_10m": n.get("ingest_records_per_s_large"),
            "changes_per_cpu_s_10m": n.get("ingest_records_per_cpu_s_large"),
            "vs_hudi_datasource": n.get("ingest_vs_hudi_datasource"),
        }
        growth = n.get("commit_growth")
        rates = {k: n.get(f"capture_changes_per_s[{k}]") for k in CAPTURE_SOURCES}
        # A lag counts only when the writer reached the rate (one connection may not).
        rate = n.get("capture_lag_rate") or 0
        lags = {
            k: n.get(f"capture_lag_max_s[{k}]")
            if (n.get(f"capture_lag_writer_changes_per_s[{k}]") or 0) >= 0.95 * rate
            else None
            for k in CAPTURE_SOURCES
        }
        snaps = {k: n.get(f"snapshot_rows_per_s[{k}]") for k in CAPTURE_SOURCES}
        values: dict[str, tuple[Any, bool | None]] = {
            "freshness_p99": freshness(n, "", 2.0),
            "freshness_p99_high": freshness(n, "_high", 5.0),
            "stager": (stager, at_least(stager, (100_000, 0.75))),
            "ingest": (ingest, at_least(ingest, (20_000, 10_000, 1.5))),
            "ingest_vs_hoodiestreamer": (
                {"same_hudi": vs_hs, "bridged_via_hudi_0_14": vs_hs_bridged},
                None if hs_decides is None else hs_decides >= 1.5,
            ),
            "commit_growth": (growth, None if growth is None else growth <= 1.2),
            "capture": (rates, _all(rates, lambda r: r >= 20_000)),
            "capture_lag": (lags, _all(lags, lambda s: s < 5)),
            "snapshot": (snaps, _all(snaps, lambda r: r >= 20_000)),
            "tables": tables_target(n),
        }
        return {
            t.name: {"target": t.text, "value": values[t.name][0], "met": values[t.name][1]}
            for t in TARGETS
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {key: self.numbers.get(key) for key in HEADLINE}
        out |= {k: v for k, v in self.numbers.items() if k not in out}
        out |= {
            "quick": self.quick,
            "started_at": self.started_at,
            "elapsed_s": self.elapsed_s,
            "load_average": self.load,
            "machine": self.machine,
            "versions": self.versions,
            "targets": self.targets(),
            "errors": self.errors,
            "details": self.details,
        }
        return out


def at_least(values: dict[str, Any], floors: tuple[float, ...]) -> bool | None:
    """Every value at its floor (in order): False as soon as one measured value is below
    its floor, None when the others were not all measured."""
    pairs = list(zip(values.values(), floors, strict=True))
    if any(v is not None and v < floor for v, floor in pairs):
        return False
    return None if any(v is None for v, _ in pairs) else True


def freshness(n: dict[str, Any], suffix: str, limit_s: float) -> tuple[Any, bool | None]:
    """A freshness goal: the p99 of the run at ``freshness{suffix}_rate``, met when it is
    within ``limit_s``, the run lasted :data:`FRESHNESS_SUSTAINED_S` at the asked rate and the
    lake equalled the source; None when no run of that length was made (a quick run)."""
    p99 = n.get(f"freshness{suffix}_p99_s")
    rate, seconds = n.get(f"freshness{suffix}_rate"), n.get(f"freshness{suffix}_seconds")
    published = n.get(f"freshness{suffix}_publish_events_per_s") or 0
    value = {"p99_s": p99, "rate": rate, "published_per_s": published, "seconds": seconds}
    if p99 is None or rate is None or seconds is None:
        return value, None
    if p99 > limit_s or n.get(f"freshness{suffix}_mismatches"):
        return value, False
    if seconds < FRESHNESS_SUSTAINED_S or published < RATE_REACHED * rate:
        return value, None
    return value, True


def tables_target(n: dict[str, Any]) -> tuple[dict[str, Any], bool | None]:
    """Issue 21's goal against the ``tables`` part's numbers: met only by a run of at least
    1,000 tables, each at 10 events/s (95% reached), for 10 minutes, whose lake caught up
    (no lower bounds) with freshness p99 <= 30 s and every table verified equal to the source.
    None when the part measured no freshness."""
    tables, rate, seconds, p99_s = TABLES_GOAL
    p99 = n.get("tables_freshness_p99_s")
    value = {
        "tables": n.get("tables_count"),
        "events_per_s_each": n.get("tables_events_per_s_per_table"),
        "seconds": n.get("tables_seconds"),
        "p99_s": p99,
        "not_visible": n.get("tables_not_visible"),
        "mismatches": n.get("tables_mismatches"),
    }
    if p99 is None:
        return value, None
    met = (
        (n.get("tables_count") or 0) >= tables
        and (n.get("tables_events_per_s_per_table") or 0) >= RATE_REACHED * rate
        and (n.get("tables_seconds") or 0) >= seconds
        and not n.get("tables_not_visible")
        and p99 <= p99_s
        and n.get("tables_mismatches") == 0
        and (n.get("tables_verified") or 0) >= (n.get("tables_count") or 0)
    )
    return value, met


def _all(values: dict[str, Any], ok: Callable[[Any], bool]) -> bool | None:
    """Whether every measured value is ``ok``; None when none was measured."""
    measured = [v for v in values.values() if v is not None]
    return all(ok(v) for v in measured) if measured else None


def derive(numbers: dict[str, Any]) -> dict[str, Any]:
    """The ratios the targets are about, from the measured numbers."""
    n = numbers
    return {
        "stage_vs_nats_bench": ratio(n.get("stage_events_per_s"), n.get("nats_bench_events_per_s")),
        "ingest_vs_hoodiestreamer": ratio(
            n.get("ingest_records_per_s"), n.get("hoodiestreamer_records_per_s")
        ),
        "ingest_vs_hudi_datasource": ratio(
            n.get("ingest_records_per_s"), n.get("hudi_datasource_records_per_s")
        ),
        # HoodieStreamer of the Hudi that is served (0.14) against that Hudi's datasource
        # writer on the same records, and tidelake against its Hudi's (1.1.1) datasource
        # writer: their quotient bridges tidelake to HoodieStreamer through the datasource
        # writer, when HoodieStreamer of tidelake's own Hudi could not run.
        "hoodiestreamer_vs_hudi_datasource_0_14": ratio(
            n.get("hoodiestreamer_0_14_records_per_s"), n.get("hudi_datasource_0_14_records_per_s")
        ),
        "ingest_vs_parquet": ratio(n.get("ingest_records_per_s"), n.get("parquet_records_per_s")),
        "commit_growth": ratio(n.get("commit_s_large"), n.get("commit_s_small")),
    } | {"ingest_vs_hoodiestreamer_bridged": bridged(n)}


def bridged(n: dict[str, Any]) -> float | None:
    """tidelake / HoodieStreamer through the datasource writers: (tidelake / datasource,
    Hudi 1.1.1) x (datasource / HoodieStreamer, Hudi 0.14). An estimate that assumes
    HoodieStreamer's cost over its datasource writer carried over from 0.14 to 1.1.1."""
    own = ratio(n.get("ingest_records_per_s"), n.get("hudi_datasource_records_per_s"))
    old = ratio(
        n.get("hudi_datasource_0_14_records_per_s"), n.get("hoodiestreamer_0_14_records_per_s")
    )
    return None if own is None or old is None else round(own * old, 3)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


#: (label, key) rows of the Markdown results table, in order.
_ROWS = (
    ("stager events/s (wall)", "stage_events_per_s"),
    ("stager events per CPU second (one core)", "stage_events_per_cpu_s"),
    ("nats bench js fetch events/s (ceiling, mean of 2)", "nats_bench_events_per_s"),
    ("stager / nats bench", "stage_vs_nats_bench"),
    ("ingest records/s: tidelake", "ingest_records_per_s"),
    ("ingest records per CPU second: tidelake", "ingest_records_per_cpu_s"),
    ("ingest records/s: tidelake, 10M-row table", "ingest_records_per_s_large"),
    ("ingest records per CPU second: tidelake, 10M-row table", "ingest_records_per_cpu_s_large"),
    ("ingest records/s: Hudi datasource, same records", "hudi_datasource_records_per_s"),
    ("ingest records/s: HoodieStreamer", "hoodiestreamer_records_per_s"),
    ("ingest records/s: Parquet append (floor)", "parquet_records_per_s"),
    ("tidelake / HoodieStreamer", "ingest_vs_hoodiestreamer"),
    ("Hudi 0.14 records/s: datasource, same records", "hudi_datasource_0_14_records_per_s"),
    ("Hudi 0.14 records/s: HoodieStreamer, same records", "hoodiestreamer_0_14_records_per_s"),
    ("Hudi 0.14: HoodieStreamer / datasource", "hoodiestreamer_vs_hudi_datasource_0_14"),
    ("tidelake / HoodieStreamer, bridged (estimate)", "ingest_vs_hoodiestreamer_bridged"),
    ("tidelake / Hudi datasource", "ingest_vs_hudi_datasource"),
    ("freshness: rate asked, events/s", "freshness_rate"),
    ("freshness: rate published, events/s", "freshness_publish_events_per_s"),
    ("freshness p50 s", "freshness_p50_s"),
    ("freshness p99 s", "freshness_p99_s"),
    ("freshness at the high rate: rate asked, events/s", "freshness_high_rate"),
    ("freshness at the high rate: rate published, events/s", "freshness_high_publish_events_per_s"),
    ("freshness at the high rate: p50 s", "freshness_high_p50_s"),
    ("freshness at the high rate: p99 s", "freshness_high_p99_s"),
    ("index of tidelake's writer, small table", "index_small"),
    ("index of tidelake's writer, large table", "index_large"),
    ("commit s, small table", "commit_s_small"),
    ("commit s, large table", "commit_s_large"),
    ("commit growth large / small", "commit_growth"),
    ("JetStream publish events/s, default fsync (2 min)", "nats_publish_events_per_s_default"),
    ("JetStream publish events/s, sync_interval always", "nats_publish_events_per_s_sync_always"),
    ("sync always / default, publish rate", "nats_sync_always_vs_default"),
    ("PubAck p50 ms one at a time, default", "nats_puback_p50_ms_default"),
    ("PubAck p50 ms one at a time, sync always", "nats_puback_p50_ms_sync_always"),
    ("PubAck p99 ms one at a time, default", "nats_puback_p99_ms_default"),
    ("PubAck p99 ms one at a time, sync always", "nats_puback_p99_ms_sync_always"),
    ("floor: a 1-row commit s, COW (today's small tables)", "floor_commit_s[cow]"),
    ("floor: its CPU s, COW", "floor_commit_cpu_s[cow]"),
    ("floor: three tables together s, COW", "floor_round_of_three_s[cow]"),
    ("floor: their CPU s, COW", "floor_round_of_three_cpu_s[cow]"),
    ("floor: a 1-row commit s, MOR + bucket", "floor_commit_s[mor_bucket]"),
    ("floor: its CPU s, MOR + bucket", "floor_commit_cpu_s[mor_bucket]"),
    ("floor: three tables together s, MOR + bucket", "floor_round_of_three_s[mor_bucket]"),
    ("floor: their CPU s, MOR + bucket", "floor_round_of_three_cpu_s[mor_bucket]"),
    ("capture MariaDB: source's own change rate, changes/s", "source_changes_per_s[mysql]"),
    ("capture MariaDB: changes/s (wall)", "capture_changes_per_s[mysql]"),
    ("capture MariaDB: changes per CPU second", "capture_changes_per_cpu_s[mysql]"),
    ("capture MariaDB: lag p99 s", "capture_lag_p99_s[mysql]"),
    ("capture MariaDB: lag max s", "capture_lag_max_s[mysql]"),
    ("capture MariaDB: fixed-rate writer changes/s", "capture_lag_writer_changes_per_s[mysql]"),
    ("capture PostgreSQL: source's own change rate, changes/s", "source_changes_per_s[postgres]"),
    ("capture PostgreSQL: changes/s (wall)", "capture_changes_per_s[postgres]"),
    ("capture PostgreSQL: changes per CPU second", "capture_changes_per_cpu_s[postgres]"),
    ("capture PostgreSQL: lag p99 s", "capture_lag_p99_s[postgres]"),
    ("capture PostgreSQL: lag max s", "capture_lag_max_s[postgres]"),
    (
        "capture PostgreSQL: fixed-rate writer changes/s",
        "capture_lag_writer_changes_per_s[postgres]",
    ),
    ("snapshot MariaDB: rows", "snapshot_rows[mysql]"),
    ("snapshot MariaDB: rows/s (incremental, parallel chunks)", "snapshot_rows_per_s[mysql]"),
    ("snapshot MariaDB: chunk readers", "snapshot_workers[mysql]"),
    ("snapshot PostgreSQL: rows", "snapshot_rows[postgres]"),
    ("snapshot PostgreSQL: rows/s (incremental, parallel chunks)", "snapshot_rows_per_s[postgres]"),
    ("snapshot PostgreSQL: chunk readers", "snapshot_workers[postgres]"),
    ("initial snapshot MariaDB: rows", "snapshot_initial_rows[mysql]"),
    ("initial snapshot MariaDB: rows/s (one connection)", "snapshot_initial_rows_per_s[mysql]"),
    ("initial snapshot PostgreSQL: rows", "snapshot_initial_rows[postgres]"),
    (
        "initial snapshot PostgreSQL: rows/s (one connection)",
        "snapshot_initial_rows_per_s[postgres]",
    ),
    ("tables: active tables", "tables_count"),
    ("tables: events/s published (all tables)", "tables_events_per_s"),
    ("tables: events/s each table", "tables_events_per_s_per_table"),
    ("tables: freshness p50 s", "tables_freshness_p50_s"),
    ("tables: freshness p99 s", "tables_freshness_p99_s"),
    ("tables: freshness max s", "tables_freshness_max_s"),
    (
        "tables: messages not visible when the wait ended (figures are lower bounds)",
        "tables_not_visible",
    ),
    (
        "tables: s until every table existed (first rows, before the measured stream)",
        "tables_created_s",
    ),
    ("tables: a table's creating commit s p50", "tables_create_commit_s_p50"),
    ("tables: Hudi commits", "tables_commits"),
    ("tables: ingest rounds (creating no table)", "tables_rounds"),
    (
        "tables: ingest round s p50 (first commit's start to last commit's end)",
        "tables_round_s_p50",
    ),
    ("tables: ingest round s max", "tables_round_s_max"),
    ("tables: commits per round (mean)", "tables_round_commits_mean"),
    ("tables: one table's commit s p50", "tables_commit_s_p50"),
    ("tables: tables verified", "tables_verified"),
    ("tables: rows verified", "tables_rows_verified"),
    ("tables: mismatches", "tables_mismatches"),
    ("tables: stager peak RSS MiB", "tables_stager_peak_rss_mib"),
    ("tables: ingest process + JVM peak RSS MiB", "tables_ingest_peak_rss_mib"),
    ("workers: active tables", "workers_tables"),
    ("workers: events/s each table (target)", "workers_rate_per_table"),
    *(
        row
        for w in (1, 2)
        for row in (
            (f"workers {w}: events/s published", f"workers{w}_events_per_s"),
            (f"workers {w}: freshness p50 s", f"workers{w}_freshness_p50_s"),
            (f"workers {w}: freshness p99 s", f"workers{w}_freshness_p99_s"),
            (f"workers {w}: freshness max s", f"workers{w}_freshness_max_s"),
            (f"workers {w}: messages not visible when the wait ended", f"workers{w}_not_visible"),
            (f"workers {w}: s until every table existed", f"workers{w}_tables_created_s"),
            (f"workers {w}: Hudi commits", f"workers{w}_commits"),
            (f"workers {w}: ingest rounds, all workers (creating no table)", f"workers{w}_rounds"),
            (f"workers {w}: ingest round s p50", f"workers{w}_round_s_p50"),
            (f"workers {w}: tables verified", f"workers{w}_tables_verified"),
            (f"workers {w}: mismatches", f"workers{w}_mismatches"),
            (f"workers {w}: ingest CPU s, all workers (whole run)", f"workers{w}_ingest_cpu_s"),
            (f"workers {w}: stager CPU s, all workers (whole run)", f"workers{w}_stager_cpu_s"),
            (f"workers {w}: a stager's peak RSS MiB (largest)", f"workers{w}_stager_peak_rss_mib"),
            (
                f"workers {w}: an ingest + JVM's peak RSS MiB (largest)",
                f"workers{w}_ingest_peak_rss_mib",
            ),
        )
    ),
    ("stager peak RSS MiB", "stager_peak_rss_mib"),
    ("Spark driver (JVM) peak RSS MiB, ingest bench", "driver_peak_rss_mib"),
    ("ingest process + JVM peak RSS MiB, pipeline", "ingest_peak_rss_mib"),
    ("ingest process + JVM peak RSS MiB, pipeline at the high rate", "ingest_high_peak_rss_mib"),
)


def render_markdown(result: BenchResult, title: str | None = None) -> str:
    """One run as a Markdown section for ``docs/benchmarks.md``."""
    n = result.numbers
    m = result.machine
    v = result.versions
    mode = "quick" if result.quick else "full"
    lines = [
        f"### {title or 'Run'} — {result.started_at} ({mode}, {result.elapsed_s:,.0f} s)",
        "",
        f"Machine: {m.get('nproc')} CPUs ({m.get('cpu_model')}), {m.get('memory_gib')} GiB, "
        f"Linux {m.get('kernel')}, Python {m.get('python')}. "
        "Load average (1/5/15 min) "
        + "; ".join(f"{k} {' / '.join(str(x) for x in val)}" for k, val in result.load.items())
        + ".",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".",
        "",
        *_sizes(n),
    ]
    # A run of some parts (--part) shows what it measured, not a row per part it skipped.
    measured = [f"| {label} | {_fmt(n[key])} |" for label, key in _ROWS if n.get(key) is not None]
    if measured:
        lines += ["| measurement | value |", "|---|---|", *measured]
    checked = [
        f"| {t['target']} | {_fmt(t['value'])} | {_fmt(t['met'])} |"
        for t in result.targets().values()
        if t["met"] is not None
    ]
    if checked:
        lines += ["", "| target | value | met |", "|---|---|---|", *checked]
    if "views" in result.details:
        lines += [""] * bool(lines[-1]) + views_markdown(result.details["views"])
    while lines and not lines[-1]:
        lines.pop()
    if result.errors:
        lines += ["", "Not measured:", ""] + [f"- {e}" for e in result.errors]
    return "\n".join(lines) + "\n"


#: Step phases shown in the views table, in order (``views.py`` step_phases); the others
#: are summed into "other".
VIEW_PHASES = ("change_log", "recompute", "merge", "view_write", "timeline")
#: The same for the join view: ``join_changes`` is ``_join_changes`` (the picks and joins).
JOIN_VIEW_PHASES = ("change_log", "join_changes", "recompute", "merge", "view_write", "timeline")


def views_markdown(details: dict[str, Any]) -> list[str]:
    """The views part's tables: per base-table size and K, the step (medians) beside the
    rebuild, the growth large / small; then the step's seconds by phase. The same for the
    join view when it ran."""
    sizes = details.get("sizes") or []
    if not sizes:
        return []
    plan = details.get("plan", {})
    lines = [
        f"Views: `{details.get('sql')}`; {plan.get('customers', 0):,} "
        f"customers; median of {plan.get('rounds')} steps per K.",
        "",
        *_view_tables(sizes, "by_keys", "rebuild_s", VIEW_PHASES),
    ]
    if not any(size.get("join_by_keys") for size in sizes):
        return lines
    moved = ", ".join(
        f"{int(v):,} at K={int(k):,}" for k, v in sizes[0].get("customer_changes", {}).items()
    )
    lines += [
        "",
        f"Join view: `{details.get('join_sql')}`; besides the K order changes, customers moved "
        f"to another region per round: {moved}; its step timed right after the aggregate "
        "view's, in the same rounds.",
        "",
        *_view_tables(sizes, "join_by_keys", "join_rebuild_s", JOIN_VIEW_PHASES),
    ]
    return lines


def _view_tables(
    sizes: list[dict[str, Any]], by_keys: str, rebuild: str, phase_names: tuple[str, ...]
) -> list[str]:
    first = sizes[0]
    lines = [
        "| base rows | K changed keys | step s (median) | records read | groups written "
        "| groups recomputed | rebuild s | step / same K at "
        f"{first['rows']:,} rows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    small = {k: v["step_s"] for k, v in first.get(by_keys, {}).items()}
    for size in sizes:
        for keys, m in size.get(by_keys, {}).items():
            growth = ratio(m["step_s"], small.get(keys))
            lines.append(
                f"| {size['rows']:,} | {int(keys):,} | {_fmt(m['step_s'])} | {m['records']:,} "
                f"| {m['groups']:,} | {m['recomputed']:,} | {_fmt(size.get(rebuild))} "
                f"| {_fmt(growth)} |"
            )
    if not any(m.get("phases_s") for size in sizes for m in size.get(by_keys, {}).values()):
        return lines
    lines += [
        "",
        "| base rows | K | " + " | ".join(phase_names) + " | other | (s, medians) |",
        "|---|---|" + "---|" * (len(phase_names) + 2),
    ]
    for size in sizes:
        for keys, m in size.get(by_keys, {}).items():
            phases = m.get("phases_s", {})
            other = sum(v for p, v in phases.items() if p not in phase_names)
            cells = [_fmt(phases.get(p)) for p in phase_names] + [_fmt(round(other, 3)), ""]
            lines.append(f"| {size['rows']:,} | {int(keys):,} | " + " | ".join(cells) + " |")
    return lines


def _sizes(n: dict[str, Any]) -> list[str]:
    """The sizes line of the parts that ran (with the blank line after it), else nothing."""
    parts = []
    if n.get("stage_events"):
        parts.append(f"{n['stage_events']:,} messages staged")
    if n.get("batch_events"):
        parts.append(
            f"ingest batches of {n['batch_events']:,} changes (70% updates, 20% inserts, "
            f"10% deletes) into {n.get('table_rows', 0):,} rows, "
            f"{n.get('timed_batches', 0)} timed after one warm-up"
        )
    if n.get("rows_small"):
        parts.append(f"commit time at {n['rows_small']:,} vs {n.get('rows_large') or 0:,} rows")
    if n.get("views_rows_small"):
        parts.append(
            f"view step at {n['views_rows_small']:,} vs {n.get('views_rows_large') or 0:,} "
            "base rows"
        )
    if n.get("freshness_rate"):
        parts.append(
            f"freshness at {n['freshness_rate']:,.0f} events/s for "
            f"{n.get('freshness_seconds', 0):,.0f} s"
        )
    if n.get("tables_count"):
        parts.append(
            f"{n['tables_count']:,} tables at {_fmt(n.get('tables_rate_per_table'))} "
            f"events/s each for {n.get('tables_seconds') or 0:,.0f} s"
        )
    return [f"Sizes: {'; '.join(parts)}.", ""] if parts else []


RUNS_HEADING = "## Runs"


def save_result(path: Path, result: BenchResult) -> None:
    """Write ``result`` whole to ``path`` (replaced atomically), for ``load_result``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(asdict(result), option=orjson.OPT_INDENT_2))
    tmp.replace(path)


def load_result(path: Path) -> BenchResult:
    """The result ``save_result`` wrote."""
    return BenchResult(**orjson.loads(path.read_bytes()))


def append_run(path: Path, result: BenchResult, title: str | None = None) -> None:
    """Append the run under the ``## Runs`` heading of ``path`` (created when missing)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if RUNS_HEADING not in text:
        text = text.rstrip("\n") + f"\n\n{RUNS_HEADING}\n"
    path.write_text(text.rstrip("\n") + "\n\n" + render_markdown(result, title))
