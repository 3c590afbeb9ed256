"""The capture under benchmark, in a process of its own: ``python -m
tidelake_bench.capture_worker CONFIG RESULT_JSON UNTIL``.

It runs the production capture loop (:func:`tidelake.capture.runner.capture_loop` with the
source ``capture.source`` names, resuming from the position file the bench wrote) until
JetStream has acknowledged as many messages as ``UNTIL`` says: a number, or the path of a file
that will hold one (the lag form writes it once its writer is done), or until nothing more
was acknowledged for 30 s once the target is known. Every 0.1 s it samples
``(wall time, messages acknowledged)``. Then it writes one JSON object: the wall and CPU
seconds from the start of the loop to the last PubAck counted, the samples, and the process's
peak resident memory.

Its own process, so that its CPU time is the capture's alone (reader thread, encoding,
publishing): the database and nats-server are other processes.
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from tidelake.capture.runner import capture_loop
from tidelake.capture.sources import open_source
from tidelake.config import load_config
from tidelake.runtime import live_metrics as live
from tidelake_bench.memory import status_kib

SAMPLE_S = 0.1
#: Once the target is known, stop when nothing more was acknowledged for this long.
STALLED_S = 30.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _target(until: str) -> int | None:
    if until.isdigit():
        return int(until)
    path = Path(until)
    return int(path.read_text()) if path.is_file() else None


def _published() -> int:
    counts = live.CAPTURE.counts
    return int(counts()["published"]) if counts is not None else 0


async def capture_until(config_path: str, until: str) -> dict[str, Any]:
    cfg = load_config(config_path)
    source = open_source(cfg)
    source.check()
    stop = threading.Event()
    samples: list[tuple[float, int]] = []
    done: dict[str, float] = {}
    cpu0 = _cpu_s()
    started = time.perf_counter()
    wall0 = time.time()

    async def watch() -> None:
        moved = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(SAMPLE_S)
            published = _published()
            if not samples or published != samples[-1][1]:
                moved = time.monotonic()
            samples.append((round(time.time(), 3), published))
            target = _target(until)
            if target is not None and published >= target:
                done["seconds"] = time.perf_counter() - started
                done["cpu_s"] = _cpu_s() - cpu0
                stop.set()
            elif target is not None and time.monotonic() - moved > STALLED_S:
                stop.set()  # fewer changes than expected: the bench reports the difference

    watcher = asyncio.create_task(watch())
    stats = await capture_loop(cfg, source, stop=stop)
    stop.set()
    await watcher
    return {
        "published": stats.published,
        "duplicates": stats.duplicates,
        "seconds": round(done.get("seconds", time.perf_counter() - started), 4),
        "cpu_s": round(done.get("cpu_s", _cpu_s() - cpu0), 3),
        "started_at": wall0,
        "samples": samples,
        "peak_rss_kib": status_kib(os.getpid(), "VmHWM"),
    }


def main() -> None:
    if len(sys.argv) != 4:
        raise SystemExit("usage: python -m tidelake_bench.capture_worker CONFIG RESULT_JSON UNTIL")
    result = asyncio.run(capture_until(sys.argv[1], sys.argv[3]))
    Path(sys.argv[2]).write_bytes(orjson.dumps(result))


if __name__ == "__main__":
    main()
