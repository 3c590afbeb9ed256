"""Stager throughput against the transport ceiling, on the same server and the same stream.

The order workload (:mod:`tidelake.workload.orders`) is published once into the CDC stream
of a private ``nats-server``. Then, each through a durable pull consumer of its own on that
stream, every message is read and acknowledged by:

* ``nats bench js fetch`` (the Go NATS CLI): fetch in batches, explicit acks, nothing else
  (the transport ceiling), once before and once after the stager; their mean is reported;
* the stager (:mod:`tidelake_bench.stage_worker`, the production loop in its own process):
  fetch, decode, batch, write files and manifests, ack.

Besides the wall-clock rates the stager's CPU seconds are recorded: events per CPU second is
what one core sustains, and varies less with the machine's load than wall-clock time.
"""

from __future__ import annotations

import asyncio
import csv
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from tidelake.bus.connection import connect
from tidelake.bus.provision import consumer_config, ensure_consumer, ensure_streams
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.publisher import Publisher
from tidelake.config import Config, load_config
from tidelake.workload.orders import OrderWorkload, WorkloadSpec
from tidelake_bench import tools
from tidelake_bench.jobs import run_job
from tidelake_bench.memory import mib
from tidelake_bench.stats import per_second

Log = Callable[[str], None]
NATS_BENCH_BATCH = 2_000
NATS_BENCH_TIMEOUT_S = 600
STAGER_TIMEOUT_S = 1800


@dataclass
class NatsBenchRun:
    """One ``nats bench js fetch`` run."""

    events_per_s: float | None = None
    seconds: float | None = None
    cpu_s: float | None = None
    error: str | None = None


@dataclass
class StageResult:
    """What the stage benchmark measured."""

    events: int = 0
    payload_bytes_avg: float = 0.0
    publish_events_per_s: float | None = None
    stage_events_per_s: float | None = None
    stage_seconds: float | None = None
    stage_cpu_s: float | None = None
    stage_events_per_cpu_s: float | None = None
    stage_batches: int = 0
    stager_peak_rss_mib: float | None = None
    stage_error: str | None = None
    nats_bench: list[NatsBenchRun] = field(default_factory=list)

    @property
    def nats_bench_events_per_s(self) -> float | None:
        rates = [r.events_per_s for r in self.nats_bench if r.events_per_s]
        return round(sum(rates) / len(rates), 1) if rates else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["nats_bench_events_per_s"] = self.nats_bench_events_per_s
        return out


def parse_nats_bench(stdout: str, csv_text: str | None) -> float | None:
    """Messages per second from ``nats bench`` (its CSV, else its summary line)."""
    if csv_text:
        rows = list(csv.DictReader(line for line in csv_text.splitlines() if line.strip()))
        rates = [float(r["MsgsPerSec"]) for r in rows if r.get("MsgsPerSec")]
        if rates:
            return round(sum(rates), 1)
    match = re.search(r"stats:\s*([\d,]+)\s*msgs/sec", stdout)
    return float(match.group(1).replace(",", "")) if match else None


def run_nats_bench(
    nats: str, url: str, stream: str, consumer: str, events: int, work: Path
) -> NatsBenchRun:
    """``nats bench js fetch`` over ``events`` messages of ``stream`` (a new durable)."""
    out = work / f"{consumer}.csv"
    argv = [
        nats, "bench", "js", "fetch", "--server", url, "--stream", stream,
        "--consumer", consumer, "--msgs", str(events), "--batch", str(NATS_BENCH_BATCH),
        "--acks", "explicit", "--no-progress", "--csv", str(out),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=NATS_BENCH_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return NatsBenchRun(error=repr(exc))
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        return NatsBenchRun(error=(proc.stderr or proc.stdout).strip()[-500:])
    csv_text = out.read_text() if out.is_file() else None
    rate = parse_nats_bench(proc.stdout + proc.stderr, csv_text)
    return NatsBenchRun(rate, round(seconds, 3), round(cpu, 3), None if rate else "no rate")


async def _add_consumers(cfg: Config, url: str, names: list[str]) -> None:
    """Durable consumers for ``nats bench`` with the stager's consumer settings (it does
    not create a durable it is given by name)."""
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        for name in names:
            config = consumer_config(cfg.bus)
            config.name = config.durable_name = name
            await js.add_consumer(cfg.bus.stream.name, config=config)
    finally:
        await nc.close()


async def _publish(cfg: Config, url: str, events: int, seed: int) -> tuple[int, int, float]:
    """Publish the workload; (messages, payload bytes, seconds)."""
    workload = OrderWorkload(WorkloadSpec(events=events, seed=seed))
    messages = [m for txn in workload.transactions() for m in txn]
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg.bus)
        await ensure_consumer(js, cfg.bus)
        pub = Publisher(js, max_in_flight=10_000)
        started = time.perf_counter()
        for m in messages:
            await pub.publish(m.subject, m.payload, m.msg_id)
        await pub.durable()
        seconds = time.perf_counter() - started
    finally:
        await nc.close()
    return len(messages), sum(len(m.payload) for m in messages), seconds


def run_stage_bench(
    home: Path, events: int, log: Log, nats: str | None, seed: int = 7
) -> StageResult:
    """Publish ``events`` messages, then the ceiling, the stager, the ceiling again."""
    result = StageResult()
    server = EmbeddedNats(home / "nats")
    server.start()
    try:
        cfg = load_config(None, environ={}).model_copy(update={"home": home / "stage"})
        config_path = home / "stage-config.yaml"
        config_path.write_text(
            yaml.safe_dump({"home": str(home / "stage"), "bus": {"url": server.url}})
        )
        log(f"publishing {events:,} canal-json messages (order workload)")
        n, size, seconds = asyncio.run(_publish(cfg, server.url, events, seed))
        result.events = n
        result.payload_bytes_avg = round(size / n, 1) if n else 0.0
        result.publish_events_per_s = per_second(n, seconds)
        stream = cfg.bus.stream.name
        asyncio.run(_add_consumers(cfg, server.url, ["nb-1", "nb-2"]))
        if nats is None:
            result.nats_bench.append(NatsBenchRun(error="the nats CLI is not installed"))
        else:
            log("nats bench js fetch (ceiling, before the stager)")
            result.nats_bench.append(run_nats_bench(nats, server.url, stream, "nb-1", n, home))
        log("stager (its own process, Stager.run(once=True))")
        _run_stager(config_path, home, result)
        if nats is not None:
            log("nats bench js fetch (ceiling, after the stager)")
            result.nats_bench.append(run_nats_bench(nats, server.url, stream, "nb-2", n, home))
    finally:
        server.stop()
    return result


def _run_stager(config_path: Path, home: Path, result: StageResult) -> None:
    report_path = home / "stager-result.json"
    run = run_job(
        "stage worker",
        [sys.executable, "-m", "tidelake_bench.stage_worker", str(config_path), str(report_path)],
        home / "stager.log",
        STAGER_TIMEOUT_S,
        env=tools.subprocess_env(),
        tail_lines=10,
    )
    if run.code != 0 or not report_path.is_file():
        result.stage_error = f"stage worker exited {run.code}: " + " | ".join(run.tail)
        return
    report: dict[str, Any] = orjson.loads(report_path.read_bytes())
    if report["received"] != result.events or report["num_pending"] or report["num_ack_pending"]:
        result.stage_error = f"not everything was staged and acknowledged: {report}"
    result.stage_seconds = report["seconds"]
    result.stage_cpu_s = report["cpu_s"]
    result.stage_batches = report["batches"]
    result.stage_events_per_s = per_second(report["received"], report["seconds"])
    result.stage_events_per_cpu_s = per_second(report["received"], report["cpu_s"])
    result.stager_peak_rss_mib = mib(report["peak_rss_kib"])
