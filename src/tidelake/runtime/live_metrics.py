"""What each long-running process counts about itself, for its own ``/metrics``.

These are *live* counters: they start at zero with the process and count what this process
did (``runtime/metrics_server.py`` serves them). They are named after the process that
counts — ``tidelake_stager_*``, ``tidelake_ingester_*``, ``tidelake_capturer_*``,
``tidelake_router_*``, ``tidelake_poller_*`` (a source) — so they
never collide with the ``tidelake_stage_*`` / ``tidelake_ingest_*`` families that
``tidelake serve`` derives from the durable record (manifests, ``commits.jsonl``), which
survive restarts and cover every process of the pipeline. docs/metrics.md lists both.

The stager already keeps its counters in :class:`~tidelake.stage.control.StagerStats`; a
collector reads them at scrape time (nothing added to its hot loop). The ingest and the
capture count through the prometheus_client objects below. Each process registers only its
own family (:func:`stager_collectors`, :func:`ingester_collectors`,
:func:`capturer_collectors`), so a stager's endpoint holds no idle ingest metrics.

Label values are snake_case (:func:`snake_label`): a dead-letter reason ``not JSON`` is
``not_json``; table names (``shop.orders``) are identifiers and stay as they are.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Buckets of the duration histograms, seconds: a local flush takes milliseconds, a Hudi
#: commit seconds to minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def snake_label(value: str) -> str:
    """A label value in snake_case: lower case, every run of other characters one ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_") or "unknown"


def reason_family(name: str, doc: str, by_reason: Mapping[str, int]) -> CounterMetricFamily:
    """A counter family labelled ``reason``, the reasons in snake_case (reasons that become
    the same label are summed), sorted."""
    family = CounterMetricFamily(name, doc, labels=["reason"])
    counts: dict[str, int] = {}
    for reason, n in by_reason.items():
        label = snake_label(reason)
        counts[label] = counts.get(label, 0) + n
    for label, n in sorted(counts.items()):
        family.add_metric([label], n)
    return family


# -- the stager ------------------------------------------------------------------------------


class StagerStats(Protocol):
    """What :class:`tidelake.stage.control.StagerStats` holds (a protocol: the runtime
    imports no stage)."""

    received: int
    staged: int
    skipped: int
    batches: int
    redelivered: int
    storage_failures: int
    bus_failures: int
    given_back: int
    last_seq: int
    rows_by_table: Tally[str]
    dead_lettered_by_reason: Tally[str]


STAGER_FLUSH_SECONDS = Histogram(
    "tidelake_stager_flush_duration_seconds",
    "Writing one batch: files, manifest and the acks of its messages",
    buckets=DURATION_BUCKETS,
    registry=None,
)


class StagerCollector(Collector):
    """The counters of the running stager (``StagerStats``), read at each scrape."""

    def __init__(self, stats: Callable[[], StagerStats | None]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        if s is None:  # not connected to the bus yet: no stager, no counts
            return

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"tidelake_stager_{name}", doc, value=value)

        yield counter("messages_received", "Messages this stager staged batches of", s.received)
        yield counter("messages_staged", "Messages staged as change events", s.staged)
        yield counter("messages_skipped", "Messages that carry no row (watermarks)", s.skipped)
        yield counter("batches", "Batches written (manifests) by this stager", s.batches)
        yield counter("messages_redelivered", "Messages that came more than once", s.redelivered)
        yield counter(
            "storage_failures", "Failed writes to staging storage (retried)", s.storage_failures
        )
        yield counter("bus_failures", "Failed requests to NATS (retried)", s.bus_failures)
        yield counter("messages_given_back", "Messages handed back to another stager", s.given_back)
        yield reason_family(
            "tidelake_stager_messages_dead_lettered",
            "Messages this stager sent to the dead-letter stream, by reason",
            s.dead_lettered_by_reason,
        )
        ev = CounterMetricFamily(
            "tidelake_stager_events_staged",
            "Change events this stager staged, per table",
            labels=["table"],
        )
        for table, n in sorted(s.rows_by_table.items()):
            ev.add_metric([table], n)
        yield ev
        yield GaugeMetricFamily(
            "tidelake_stager_last_sequence", "Highest stream sequence staged", value=s.last_seq
        )


class _StagerHolder:
    """The stager of this process, once ``run_stager`` has built it."""

    stats: StagerStats | None = None


STAGER = _StagerHolder()


def watch_stager(stats: StagerStats) -> None:
    """``run_stager``: these are the counters ``/metrics`` shows."""
    STAGER.stats = stats


def stager_collectors() -> list[Collector]:
    return [StagerCollector(lambda: STAGER.stats), STAGER_FLUSH_SECONDS]


# -- the ingest ------------------------------------------------------------------------------

INGESTER_ROUNDS = Counter(
    "tidelake_ingester_rounds", "Rounds that applied staged manifests", registry=None
)
INGESTER_ROUND_FAILURES = Counter(
    "tidelake_ingester_round_failures", "Rounds that failed and are retried", registry=None
)
INGESTER_MANIFESTS = Counter(
    "tidelake_ingester_manifests", "Staged manifests read by applied rounds", registry=None
)
INGESTER_COMMITS = Counter(
    "tidelake_ingester_commits", "Hudi commits made by this process", ["table"], registry=None
)
INGESTER_EVENTS = Counter(
    "tidelake_ingester_events_applied",
    "Change events applied by this process",
    ["table"],
    registry=None,
)
INGESTER_TABLE_FAILURES = Counter(
    "tidelake_ingester_table_failures",
    "A table's share of a round failed (held back for a retry, or paused)",
    registry=None,
)
INGESTER_COMMIT_SECONDS = Histogram(
    "tidelake_ingester_commit_duration_seconds",
    "One table's Hudi commit, as this process timed it",
    buckets=DURATION_BUCKETS,
    registry=None,
)
INGESTER_ROUND_SECONDS = Histogram(
    "tidelake_ingester_round_duration_seconds",
    "One round: listing, every table's commit, the cursor",
    buckets=DURATION_BUCKETS,
    registry=None,
)
INGESTER_TABLES_PAUSED = Gauge(
    "tidelake_ingester_tables_paused", "Tables this ingest holds paused", registry=None
)
INGESTER_TABLES_RETRYING = Gauge(
    "tidelake_ingester_tables_retrying",
    "Tables held back for a retry after a transient failure",
    registry=None,
)


# The views, kept by the ingest process (view/keeper.py).
VIEW_STEPS = Counter(
    "tidelake_ingester_view_runs",
    "View runs after ingest rounds, by outcome (step, rebuild, current, waiting, failed ...)",
    ["view", "outcome"],
    registry=None,
)
VIEW_STEP_SECONDS = Histogram(
    "tidelake_ingester_view_run_duration_seconds",
    "One view's step or rebuild",
    buckets=DURATION_BUCKETS,
    registry=None,
)
VIEW_LAG = Gauge(
    "tidelake_ingester_view_lag_seconds",
    "How far the view is behind its base table: 0 right after a run that included its "
    "latest commit; since the first commit it misses while its runs fail",
    ["view"],
    registry=None,
)
VIEW_UPDATED = Gauge(
    "tidelake_ingester_view_updated_timestamp_seconds",
    "When the view table last committed (step or rebuild), seconds since the epoch",
    ["view"],
    registry=None,
)


def ingester_collectors() -> list[Collector]:
    return [
        INGESTER_ROUNDS,
        INGESTER_ROUND_FAILURES,
        INGESTER_MANIFESTS,
        INGESTER_COMMITS,
        INGESTER_EVENTS,
        INGESTER_TABLE_FAILURES,
        INGESTER_COMMIT_SECONDS,
        INGESTER_ROUND_SECONDS,
        INGESTER_TABLES_PAUSED,
        INGESTER_TABLES_RETRYING,
        VIEW_STEPS,
        VIEW_STEP_SECONDS,
        VIEW_LAG,
        VIEW_UPDATED,
    ]


# -- a route -------------------------------------------------------------------------------

ROUTER_MESSAGES = Counter(
    "tidelake_router_messages",
    "Stream messages this route acknowledged (applied, not taken, or dead-lettered)",
    ["route"],
    registry=None,
)
ROUTER_CHANGES = Counter(
    "tidelake_router_changes_applied",
    "Row changes the route's sink made durable",
    ["route", "table"],
    registry=None,
)
ROUTER_DEAD_LETTERS = Counter(
    "tidelake_router_dead_letters",
    "Messages the route dead-lettered, by reason",
    ["route", "reason"],
    registry=None,
)
ROUTER_SINK_RETRIES = Counter(
    "tidelake_router_sink_retries",
    "Sink writes that failed and were retried (an unreachable sink)",
    ["route"],
    registry=None,
)
ROUTER_ACKED_SEQ = Gauge(
    "tidelake_router_acked_sequence",
    "The stream sequence of the last message this route acknowledged",
    ["route"],
    registry=None,
)
ROUTER_APPLY_SECONDS = Histogram(
    "tidelake_router_apply_seconds",
    "One batch's write into the sink",
    ["route"],
    buckets=DURATION_BUCKETS,
    registry=None,
)


def router_collectors() -> list[Collector]:
    return [
        ROUTER_MESSAGES,
        ROUTER_CHANGES,
        ROUTER_DEAD_LETTERS,
        ROUTER_SINK_RETRIES,
        ROUTER_ACKED_SEQ,
        ROUTER_APPLY_SECONDS,
    ]


# -- a source (a REST API polled into the bus) -------------------------------------------------


class PollerStats(Protocol):
    """What :class:`tidelake.capture.rest.RestSourceStats` holds (a protocol: the runtime
    imports no capture)."""

    polls: int
    records: int
    published: int
    duplicates: int
    errors: dict[str, int]
    last_success_ms: int
    position: int | None
    cursor_type: str
    paused: bool


class PollerCollector(Collector):
    """The counters of the sources this process polls (``source run NAME``, ``capture
    rest``), read at each scrape; labelled ``source``."""

    def __init__(self, sources: Callable[[], Mapping[str, PollerStats]]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        running = sorted(self.sources().items())

        def counter(name: str, doc: str, value: Callable[[PollerStats], int]) -> Metric:
            family = CounterMetricFamily(f"tidelake_poller_{name}", doc, labels=["source"])
            for source, s in running:
                family.add_metric([source], value(s))
            return family

        yield counter("polls", "Polls of the API that answered (a 304 included)", lambda s: s.polls)
        yield counter("records_read", "Records the polls returned", lambda s: s.records)
        yield counter(
            "records_published",
            "Record versions published to the bus and acknowledged (duplicates included)",
            lambda s: s.published,
        )
        yield counter(
            "duplicates",
            "Published record versions the bus dropped as duplicates (republished after a crash)",
            lambda s: s.duplicates,
        )
        errors = CounterMetricFamily(
            "tidelake_poller_errors",
            "Polls that failed, by kind: unavailable (connection, timeout, 5xx, 429 past "
            "give_up_s) or refused (another 4xx, a body of the wrong shape)",
            labels=["source", "kind"],
        )
        for source, s in running:
            for kind in sorted({"unavailable", "refused", *s.errors}):
                errors.add_metric([source, snake_label(kind)], s.errors.get(kind, 0))
        yield errors
        cursor_time = GaugeMetricFamily(
            "tidelake_poller_cursor_timestamp_seconds",
            "The saved cursor as a time (a timestamp cursor; Unix time)",
            labels=["source"],
        )
        cursor_value = GaugeMetricFamily(
            "tidelake_poller_cursor_value",
            "The saved cursor as a number (an integer cursor)",
            labels=["source"],
        )
        success = GaugeMetricFamily(
            "tidelake_poller_last_success_timestamp_seconds",
            "When the last poll that succeeded ended (Unix time)",
            labels=["source"],
        )
        paused = GaugeMetricFamily(
            "tidelake_poller_paused", "1 while the source is paused, else 0", labels=["source"]
        )
        for source, s in running:
            if s.position is not None:
                if s.cursor_type == "timestamp":
                    cursor_time.add_metric([source], s.position / 1e9)
                else:
                    cursor_value.add_metric([source], s.position)
            if s.last_success_ms:
                success.add_metric([source], s.last_success_ms / 1000)
            paused.add_metric([source], int(s.paused))
        yield from (cursor_time, cursor_value, success, paused)


class _PollerHolder:
    """The sources of this process, once their pollers are built."""

    def __init__(self) -> None:
        self.sources: dict[str, PollerStats] = {}


POLLERS = _PollerHolder()


def watch_poller(source: str, stats: PollerStats) -> None:
    """A poller of this process: its counters are what ``/metrics`` shows for ``source``."""
    POLLERS.sources[source] = stats


def poller_collectors() -> list[Collector]:
    return [PollerCollector(lambda: POLLERS.sources)]


# -- the capture -----------------------------------------------------------------------------

#: ``() -> {"published": n, "duplicates": n, "position_saves": n}`` of the running capture.
CaptureCounts = Callable[[], dict[str, int]]


class CapturerCollector(Collector):
    """The counters of the running capture (its publisher and position store), per scrape."""

    def __init__(self, counts: Callable[[], CaptureCounts | None]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        fn = self.counts()
        if fn is None:
            return
        c = fn()
        for name, key, doc in (
            (
                "changes_published",
                "published",
                "Messages published to JetStream and acknowledged (duplicates included)",
            ),
            (
                "duplicates",
                "duplicates",
                "Published messages JetStream dropped as duplicates (republished after a restart)",
            ),
            ("position_saves", "position_saves", "Durable saves of the capture position"),
        ):
            yield CounterMetricFamily(f"tidelake_capturer_{name}", doc, value=c.get(key, 0))


class _CaptureHolder:
    counts: CaptureCounts | None = None


CAPTURE = _CaptureHolder()

CAPTURER_LAST_COMMIT = Gauge(
    "tidelake_capturer_last_commit_timestamp_seconds",
    "Source commit time of the newest message published (Unix time)",
    registry=None,
)
CAPTURER_PUBLISH_LAG = Gauge(
    "tidelake_capturer_publish_lag_seconds",
    "Source commit to publish, of the newest message published (stays while the source is idle)",
    registry=None,
)


def watch_capture(counts: CaptureCounts) -> None:
    """``capture_loop``: these are the counts ``/metrics`` shows."""
    CAPTURE.counts = counts


# -- the capture's health: lag, snapshot progress, skipped tables ----------------------------

#: ``() -> the capture heartbeat's info`` (``capture/runner.py``: ``"lag"``, ``"snapshot"``,
#: ``"skipped"`` keys, docs/metrics.md).
CaptureInfo = Callable[[], Mapping[str, Any]]
#: The states of a table's snapshot (``"snapshot"`` key of the capture heartbeat).
SNAPSHOT_STATES = ("queued", "running", "done", "failed")
#: ``wal_status`` values of pg_replication_slots (PostgreSQL 13+,
#: https://www.postgresql.org/docs/15/view-pg-replication-slots.html).
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def capture_health_families(prefix: str, info: Mapping[str, Any] | None) -> Iterator[Metric]:
    """The capture's lag, snapshot progress and skipped tables as metric families named
    ``<prefix>_<name>``, from a capture heartbeat's info: the capture's own endpoint
    (``tidelake_capturer``) and ``serve`` (``tidelake_capture``, from the heartbeat file)
    show the same numbers. Every family is yielded, empty when the value is unknown (a
    MySQL capture has no slot; no snapshot ran), so the set of names never changes."""
    info = info or {}
    lag = _mapping(info.get("lag"))
    postgres = info.get("source") == "postgres"

    def gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(f"{prefix}_{name}", doc)
        if value is not None:
            family.add_metric([], value)
        return family

    source_bytes = _number(lag.get("bytes"))
    yield gauge(
        "slot_lag_bytes",
        "PostgreSQL: WAL from the slot's confirmed_flush_lsn to pg_current_wal_lsn()",
        source_bytes if postgres else None,
    )
    yield gauge(
        "retained_wal_bytes",
        "PostgreSQL: WAL the slot keeps on the server (restart_lsn to pg_current_wal_lsn())",
        _number(lag.get("retained_wal_bytes")),
    )
    yield gauge(
        "safe_wal_size_bytes",
        "PostgreSQL: WAL that may still be written before the slot is lost "
        "(max_slot_wal_keep_size set)",
        _number(lag.get("safe_wal_size")),
    )
    status = GaugeMetricFamily(
        f"{prefix}_slot_wal_status",
        "PostgreSQL: 1 for the slot's wal_status (reserved, extended, unreserved, lost)",
        labels=["status"],
    )
    if isinstance(lag.get("wal_status"), str):
        for s in WAL_STATUSES:
            status.add_metric([s], int(lag["wal_status"] == s))
    yield status
    yield gauge(
        "binlog_lag_bytes",
        "MySQL/MariaDB: binlog bytes from the acknowledged position to the server's end",
        source_bytes if not postgres and info.get("source") is not None else None,
    )
    yield gauge(
        "gtid_transactions_behind",
        "MySQL/MariaDB: transactions the server logged beyond the acknowledged GTID position",
        _number(lag.get("gtid_behind")),
    )
    yield gauge(
        "behind_seconds",
        "0 when caught up, else now minus the source commit time of the newest change published",
        _number(lag.get("seconds")),
    )
    yield gauge(
        "lag_probe_ok",
        "1 when the last lag probe of the source answered, 0 when it failed",
        None if not lag or "at_ms" not in lag else float(not lag.get("error")),
    )
    tables = _mapping(_mapping(info.get("snapshot")).get("tables"))
    done = GaugeMetricFamily(
        f"{prefix}_snapshot_rows_done", "Rows of the table's snapshot read", labels=["table"]
    )
    total = GaugeMetricFamily(
        f"{prefix}_snapshot_rows_total",
        "Rows the table's snapshot reads (the server's estimate)",
        labels=["table"],
    )
    chunks = GaugeMetricFamily(
        f"{prefix}_snapshot_chunks_done", "Chunks of the table's snapshot read", labels=["table"]
    )
    updated = GaugeMetricFamily(
        f"{prefix}_snapshot_progress_timestamp_seconds",
        "When the table's snapshot last made progress (Unix time)",
        labels=["table"],
    )
    running = GaugeMetricFamily(
        f"{prefix}_snapshot_running",
        "1 while the table's snapshot is running (not queued, not done), else 0",
        labels=["table"],
    )
    by_state = dict.fromkeys(SNAPSHOT_STATES, 0)
    for table, t in sorted(tables.items()):
        t = _mapping(t)
        state = str(t.get("state", ""))
        if state in by_state:
            by_state[state] += 1
        for family, key in ((done, "rows_done"), (total, "rows_total"), (chunks, "chunks_done")):
            value = _number(t.get(key))
            if value is not None:
                family.add_metric([table], value)
        at = _number(t.get("updated_ms")) or _number(t.get("started_ms"))
        if at is not None:
            updated.add_metric([table], at / 1000)
        running.add_metric([table], int(state == "running"))
    yield from (done, total, chunks, updated, running)
    states = GaugeMetricFamily(
        f"{prefix}_snapshot_tables", "Tables per snapshot state", labels=["state"]
    )
    for state, n in by_state.items() if info else ():
        states.add_metric([state], n)
    yield states
    skipped = _mapping(info.get("skipped"))
    yield gauge(
        "skipped_tables",
        "Source tables matching capture.tables that the capture skips (reason in status)",
        float(len(skipped)) if info else None,
    )


class CapturerHealthCollector(Collector):
    """The running capture's lag, snapshot progress and skipped tables, per scrape."""

    def __init__(self, info: Callable[[], CaptureInfo | None]) -> None:
        self.info = info

    def collect(self) -> Iterator[Metric]:
        fn = self.info()
        yield from capture_health_families("tidelake_capturer", fn() if fn is not None else None)


class _CaptureHealthHolder:
    info: CaptureInfo | None = None


CAPTURE_HEALTH = _CaptureHealthHolder()


def watch_capture_health(info: CaptureInfo) -> None:
    """``capture_loop``: the heartbeat info whose lag/snapshot/skipped ``/metrics`` shows."""
    CAPTURE_HEALTH.info = info


def capturer_collectors() -> list[Collector]:
    return [
        CapturerCollector(lambda: CAPTURE.counts),
        CAPTURER_LAST_COMMIT,
        CAPTURER_PUBLISH_LAG,
        CapturerHealthCollector(lambda: CAPTURE_HEALTH.info),
    ]
