"""The cost of ``sync_interval: always`` (issue 23): JetStream publishing with the default
policy (fsync every two minutes) against an fsync before every PubAck.

For each policy a fresh embedded nats-server (``bus/server.py``; ``sync_always`` false only
here) gets one file-backed stream and:

* **throughput**: ``events`` messages of ~570 bytes (the order workload's size) through the
  capture's ordered publisher (``capture/publisher.py``: pipelined, up to 2,000 in flight),
  timed from the first publish to the last PubAck;
* **latency**: ``latency_events`` messages published one at a time, each waiting for its
  PubAck (what a capture that saves its position after every transaction pays), p50 and p99.

Both policies run on the same disk one after the other; the machine's other load moves both.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_streams
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.publisher import Publisher
from tidelake.config import BusConfig

#: Bytes per message, about one canal-json order row.
MESSAGE_BYTES = 570
POLICIES = {"default": False, "always": True}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(url: str, events: int, latency_events: int) -> dict[str, Any]:
    cfg = BusConfig(url=url)
    nc = await connect(cfg)
    try:
        await ensure_streams(nc.jetstream(), cfg)
    finally:
        await nc.close()
    payload = b"x" * MESSAGE_BYTES
    subject = "cdc.bench.sync"
    started = time.perf_counter()
    async with await Publisher.open(cfg, url) as pub:
        for i in range(events):
            await pub.publish(subject, payload, f"t-{i}")
        await pub.durable()
    elapsed = time.perf_counter() - started
    latencies: list[float] = []
    nc = await connect(cfg)
    try:
        js = nc.jetstream()
        for i in range(latency_events):
            t0 = time.perf_counter()
            await js.publish(subject, payload, headers={"Nats-Msg-Id": f"l-{i}"})
            latencies.append(time.perf_counter() - t0)
    finally:
        await nc.close()
    return {
        "events": events,
        "publish_events_per_s": round(events / elapsed, 1),
        "latency_events": latency_events,
        "latency_p50_ms": round(1000 * statistics.median(latencies), 3),
        "latency_p99_ms": round(1000 * _quantile(latencies, 0.99), 3),
    }


def run_nats_sync_bench(
    home: Path, events: int, log: Callable[[str], None], latency_events: int = 2_000
) -> dict[str, dict[str, Any]]:
    """``{"default": {...}, "always": {...}}``: throughput and PubAck latency per policy."""
    out: dict[str, dict[str, Any]] = {}
    for name, always in POLICIES.items():
        store = home / f"nats-{name}"
        shutil.rmtree(store, ignore_errors=True)
        with EmbeddedNats(store, sync_always=always) as server:
            log(f"nats sync {name}: {events:,} pipelined, {latency_events:,} one at a time")
            out[name] = asyncio.run(_measure(server.url, events, latency_events))
        shutil.rmtree(store, ignore_errors=True)
    return out


def headline(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The top-level numbers of a run: each policy's rate and p99, and always / default."""
    d, a = results["default"], results["always"]
    return {
        "nats_publish_events_per_s_default": d["publish_events_per_s"],
        "nats_publish_events_per_s_sync_always": a["publish_events_per_s"],
        "nats_sync_always_vs_default": round(
            a["publish_events_per_s"] / d["publish_events_per_s"], 3
        ),
        "nats_puback_p50_ms_default": d["latency_p50_ms"],
        "nats_puback_p50_ms_sync_always": a["latency_p50_ms"],
        "nats_puback_p99_ms_default": d["latency_p99_ms"],
        "nats_puback_p99_ms_sync_always": a["latency_p99_ms"],
    }
