"""``GET /metrics``: the Prometheus exposition of a :class:`~tidelake.api.monitor.Snapshot`.

Every metric is documented in docs/metrics.md (a test reads the names from there and finds
each one in ``/metrics`` of a running pipeline). Counters come from the durable record, so
they never go back after a crash of any stage; a restart of ``tidelake serve`` re-reads them.
Beside them: ``tidelake_build_info`` and the ``serve`` process's own process, platform and
garbage-collector metrics (the stages export theirs on their own endpoints:
runtime/metrics_server.py). Label values are snake_case (``not JSON`` → ``not_json``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tidelake.api.monitor import Snapshot, pipeline_state, table_states
from tidelake.runtime.heartbeat import heartbeat_age_s, is_up
from tidelake.runtime.live_metrics import capture_health_families, reason_family
from tidelake.runtime.metrics_server import BuildInfoCollector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PIPELINE_STATES = ("healthy", "degraded", "stale", "down")


class SnapshotCollector(Collector):
    """Yields the metric families of one snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        yield from self._stage()
        yield from self._bus()
        yield from self._tables()
        yield from self._processes()
        # The capture's lag, snapshot progress and skipped tables from its heartbeat: the last
        # values it reported, also once it stopped (a stopped capture's slot still holds WAL;
        # tidelake_process_heartbeat_age_seconds says how old they are).
        yield from capture_health_families("tidelake_capture", self.snap.capture)

    def _stage(self) -> Iterator[Metric]:
        t = self.snap.stage.totals

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(f"tidelake_stage_{name}", doc, value=value)

        yield counter("messages_received", "Messages the stager took from the stream", t.received)
        yield counter("messages_staged", "Messages staged as change events", t.staged)
        yield counter("messages_skipped", "Messages that carry no row (watermarks)", t.skipped)
        yield counter("batches", "Batches staged (manifests written)", t.batches)
        reasons = {r: n for r, n in t.by_reason.items() if not r.startswith("skipped:")}
        if t.dead_lettered and not reasons:  # manifests without per-reason counts
            reasons = {"unknown": t.dead_lettered}
        yield reason_family(
            "tidelake_stage_messages_dead_lettered",
            "Messages sent to the dead-letter stream, by reason",
            reasons,
        )
        ev = CounterMetricFamily(
            "tidelake_stage_events_staged", "Change events staged, per table", labels=["table"]
        )
        for table, n in sorted(t.events_by_table.items()):
            ev.add_metric([table], n)
        yield ev
        h = HistogramMetricFamily(
            "tidelake_stage_batch_latency_seconds",
            "From the first message of a batch entering JetStream to its manifest",
        )
        h.add_metric([], t.batch_latency.cumulative(), t.batch_latency.sum)
        yield h
        yield GaugeMetricFamily(
            "tidelake_stage_last_sequence", "Highest stream sequence staged", value=t.last_seq
        )
        if t.last_manifest_ms is not None:
            yield GaugeMetricFamily(
                "tidelake_stage_last_batch_timestamp_seconds",
                "When the newest manifest was written (Unix time)",
                value=t.last_manifest_ms / 1000,
            )

    def _bus(self) -> Iterator[Metric]:
        bus = self.snap.bus
        yield GaugeMetricFamily(
            "tidelake_bus_up", "1 when JetStream answered", value=int(bool(bus))
        )
        if not bus:
            return
        s = bus["stream"]
        yield GaugeMetricFamily(
            "tidelake_stream_messages", "Messages in the CDC stream", value=s["messages"]
        )
        yield GaugeMetricFamily(
            "tidelake_stream_bytes", "Bytes in the CDC stream", value=s["bytes"]
        )
        yield GaugeMetricFamily(
            "tidelake_stream_last_sequence", "Last sequence of the CDC stream", value=s["last_seq"]
        )
        c = bus.get("consumer")
        if c:
            for name, key, doc in (
                ("pending_messages", "pending", "Messages not yet delivered to the stager"),
                ("ack_pending_messages", "ack_pending", "Delivered, not yet acknowledged"),
                ("redelivered_messages", "redelivered", "Delivered more than once, not acked"),
                ("ack_floor_sequence", "ack_floor_seq", "Stream sequence acked up to"),
            ):
                yield GaugeMetricFamily(f"tidelake_consumer_{name}", doc, value=c[key])
        d = bus.get("dlq") or {}
        yield GaugeMetricFamily(
            "tidelake_dlq_messages",
            "Messages in the dead-letter stream",
            value=d.get("messages", 0),
        )
        # Only when coverage is known: no stager's consumer marked (an older deployment) is
        # not "0 unstaged" (bus/coverage.py).
        unstaged = bus.get("unstaged")
        if unstaged is not None:
            yield GaugeMetricFamily(
                "tidelake_bus_unstaged_subjects",
                "Subjects holding messages that no stager's filters take",
                value=unstaged["subject_count"],
            )
            yield GaugeMetricFamily(
                "tidelake_bus_unstaged_messages",
                "Messages on subjects no stager takes (never staged; expire with the stream)",
                value=unstaged["messages"],
            )

    def _tables(self) -> Iterator[Metric]:
        snap = self.snap
        rows = table_states(snap)
        lake = snap.lake

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=["table"])

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["table"])

        commits = counter("tidelake_ingest_commits", "Hudi commits")
        events = counter("tidelake_ingest_events_applied", "Change events applied")
        ups = counter("tidelake_ingest_records_upserted", "Records upserted into Hudi")
        dels = counter("tidelake_ingest_records_deleted", "Records deleted from Hudi")
        skipped = CounterMetricFamily(
            "tidelake_ingest_events_skipped",
            "Events skipped: already applied (duplicate) or older than the watermark (stale)",
            labels=["table", "reason"],
        )
        duration = HistogramMetricFamily(
            "tidelake_ingest_commit_duration_seconds",
            "Duration of one table's Hudi commit",
            labels=["table"],
        )
        last_commit = gauge("tidelake_ingest_last_commit_timestamp_seconds", "Last commit (Unix)")
        checkpoint = gauge(
            "tidelake_ingest_checkpoint_sequence",
            "Stream sequence applied up to",
        )
        fresh = gauge(
            "tidelake_table_freshness_seconds",
            "Now minus the newest source commit time applied",
        )
        lag = gauge(
            "tidelake_table_lag_seconds",
            "Source commit to Hudi commit, of the newest change of the last commit",
        )
        capture = gauge(
            "tidelake_capture_lag_seconds",
            "Source commit to JetStream, of the newest message of the table",
        )
        paused = gauge("tidelake_table_paused", "1 while the ingest holds it")
        stale = gauge("tidelake_table_stale", "1 when stale (see docs)")
        for row in rows:
            name = row["table"]
            t = lake.table(name)
            label = [name]
            commits.add_metric(label, t.commits)
            events.add_metric(label, t.events)
            ups.add_metric(label, t.upserts)
            dels.add_metric(label, t.deletes)
            skipped.add_metric([name, "duplicate"], t.skipped_duplicates)
            skipped.add_metric([name, "stale"], t.skipped_stale)
            duration.add_metric(label, t.commit_duration.cumulative(), t.commit_duration.sum)
            if t.last_commit_ms is not None:
                last_commit.add_metric(label, t.last_commit_ms / 1000)
            checkpoint.add_metric(label, t.checkpoint_seq)
            if row["freshness_s"] is not None:
                fresh.add_metric(label, row["freshness_s"])
            if row["lag_s"] is not None:
                lag.add_metric(label, row["lag_s"])
            if row["capture_lag_s"] is not None:
                capture.add_metric(label, row["capture_lag_s"])
            paused.add_metric(label, int(row["paused"] is not None))
            stale.add_metric(label, int(row["state"] == "stale"))
        yield from (commits, events, ups, dels, skipped, duration, last_commit, checkpoint)
        yield from (fresh, lag, capture, paused, stale)
        state, _ = pipeline_state(snap, rows)
        ps = GaugeMetricFamily(
            "tidelake_pipeline_state", "1 for the pipeline's current state", labels=["state"]
        )
        for s in PIPELINE_STATES:
            ps.add_metric([s], int(s == state))
        yield ps

    def _processes(self) -> Iterator[Metric]:
        snap = self.snap
        last_commit = max((t.last_commit_ms or 0 for t in snap.lake.tables.values()), default=0)
        up = GaugeMetricFamily(
            "tidelake_process_up", "1 while the stage is alive", labels=["stage"]
        )
        age = GaugeMetricFamily(
            "tidelake_process_heartbeat_age_seconds",
            "Seconds since the stage's last heartbeat",
            labels=["stage"],
        )
        for stage, record, activity in (
            ("stager", snap.stager, 0),
            ("ingest", snap.ingest, last_commit),
            *((("capture", snap.capture, 0),) if snap.capture else ()),
        ):
            up.add_metric([stage], int(is_up(record, snap.now_ms, last_activity_ms=activity)))
            a = heartbeat_age_s(record, snap.now_ms)
            if a is not None:
                age.add_metric([stage], a)
        yield up
        yield age


def render(snap: Snapshot) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snap))
    for collector in (BuildInfoCollector(), PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return generate_latest(registry)
