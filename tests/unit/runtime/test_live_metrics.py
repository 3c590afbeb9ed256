"""The live counters each process exports about itself: read from the running stager's
stats, snake_case label values, one family per process."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from tidelake.runtime.live_metrics import (
    StagerCollector,
    capturer_collectors,
    ingester_collectors,
    poller_collectors,
    router_collectors,
    snake_label,
    stager_collectors,
)
from tidelake.stage.control import StagerStats


def _names(collectors: list[Collector]) -> set[str]:
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)
    text = generate_latest(registry).decode()
    return {f.name for f in text_string_to_metric_families(text)}


def test_label_values_are_snake_case() -> None:
    """Dead-letter reasons and states become lower snake_case label values."""
    assert ["not_json", "unknown_format", "canal_json", "max_deliver", "unknown"] == [
        snake_label(r) for r in ("not JSON", "unknown format", "canal-json", "max_deliver", "")
    ]


def test_stager_collector_reads_the_running_stats() -> None:
    """What StagerStats counts is what /metrics shows, reasons merged by their snake_case."""
    stats = StagerStats(received=7, staged=5, skipped=1, batches=2, last_seq=7)
    stats.dead_lettered_by_reason = Counter({"not JSON": 1})
    stats.rows_by_table = Counter({"shop.orders": 5})
    registry = CollectorRegistry()
    registry.register(StagerCollector(lambda: stats))
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    assert 7 == got[("tidelake_stager_messages_received_total", ())]
    assert 5 == got[("tidelake_stager_messages_staged_total", ())]
    assert 1 == got[("tidelake_stager_messages_dead_lettered_total", (("reason", "not_json"),))]
    assert 5 == got[("tidelake_stager_events_staged_total", (("table", "shop.orders"),))]
    assert 7 == got[("tidelake_stager_last_sequence", ())]


def test_each_process_exports_only_its_own_family() -> None:
    """A stager's endpoint holds tidelake_stager_* only, an ingest's tidelake_ingester_*, a
    capture's tidelake_capturer_*, a route's tidelake_router_*, a source's tidelake_poller_*: no
    idle metrics of another process."""
    prefixes = [
        {n.split("_")[1] for n in _names(collectors())}
        for collectors in (
            stager_collectors,
            ingester_collectors,
            capturer_collectors,
            router_collectors,
            poller_collectors,
        )
    ]
    assert [{"stager"}, {"ingester"}, {"capturer"}, {"router"}, {"poller"}] == prefixes
