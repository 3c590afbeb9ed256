"""The stager under benchmark, in a process of its own: ``python -m
tidelake_bench.stage_worker CONFIG RESULT_JSON`` stages everything pending
(``Stager.run(once=True)``, the production loop) and writes one JSON object: messages, wall
and CPU seconds from the start of the loop to the last batch's acks, and the process's peak
resident memory (``VmHWM``).

Its own process, so that its CPU time and memory are the stager's alone.
"""

from __future__ import annotations

import asyncio
import resource
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from nats.aio.msg import Msg

from tidelake.config import load_config
from tidelake.runtime.storage import open_storage
from tidelake.stage.batch import Batch
from tidelake.stage.consumer import Stager
from tidelake.stage.control import StagerStats
from tidelake.stage.manifest import Manifest
from tidelake_bench.memory import status_kib


class TimedStats(StagerStats):
    """The stager's counters, noting when the last batch was counted: the stager counts a
    batch once its manifest is durable and its messages are acknowledged."""

    last_acked_at: float = 0.0

    def add_batch(self, batch: Batch[Msg], manifest: Manifest) -> None:
        super().add_batch(batch, manifest)
        self.last_acked_at = time.perf_counter()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def stage_all(config_path: str) -> dict[str, Any]:
    from tidelake.bus.connection import connect
    from tidelake.bus.provision import ensure_consumer, ensure_streams

    cfg = load_config(config_path)
    if not cfg.bus.url:
        raise SystemExit("the bench config has no bus.url")
    nc = await connect(cfg.bus, cfg.bus.url)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg.bus)
        await ensure_consumer(js, cfg.bus)
        stager = Stager(nc, cfg.bus, cfg.stage, open_storage(cfg.stage_root))
        timed = stager.stats = TimedStats()
        cpu0 = _cpu_s()
        started = time.perf_counter()
        stats = await stager.run(once=True)
        cpu = _cpu_s() - cpu0
        info = await js.consumer_info(cfg.bus.stream.name, cfg.bus.consumer.durable)
    finally:
        await nc.close()
    return {
        "received": stats.received,
        "staged": stats.staged,
        "dead_lettered": stats.dead_lettered,
        "batches": stats.batches,
        "seconds": round(timed.last_acked_at - started, 4),
        "cpu_s": round(cpu, 3),
        "peak_rss_kib": status_kib_self(),
        "num_pending": info.num_pending,
        "num_ack_pending": info.num_ack_pending,
    }


def status_kib_self() -> int | None:
    import os

    return status_kib(os.getpid(), "VmHWM")


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m tidelake_bench.stage_worker CONFIG RESULT_JSON")
    result = asyncio.run(stage_all(sys.argv[1]))
    # A file of its own: the worker's output (the stager's log lines) goes to its log.
    Path(sys.argv[2]).write_bytes(orjson.dumps(result))


if __name__ == "__main__":
    main()
