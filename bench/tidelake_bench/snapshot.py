"""Snapshot throughput: rows/s of a first start's snapshot of one large table, per source
and per ``capture.snapshot`` mode.

For MariaDB and PostgreSQL: a private server and ``nats-server``; a table
``snapbench.t (id bigint primary key, v varchar(32), n int, amount decimal(12,2), at
timestamp)`` of ``rows`` rows; a capture (``tidelake capture``, the production process)
started with no saved position:

- ``incremental``: streaming starts at the log's end and the table is snapshotted beside it
  (capture/incremental.py) by ``capture.snapshot_workers`` chunk readers of
  ``capture.chunk_rows`` rows. Rows/s from the first chunk dispatched to the last emitted (the
  state's ``started_ms``/``updated_ms``); the rows snapshotted must equal the table's.
- ``initial``: one consistent snapshot read by one connection before streaming. Rows/s over
  the wall time from the process's start to the first saved state of phase ``streaming``
  (it includes the process's start-up, about a second).

Also reported: the wall time of the process and the stream's message count.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.position import PositionStore
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.config import load_config
from tidelake_bench import machine, tools

Log = Callable[[str], None]
SOURCES = ("mysql", "postgres")
TABLE = "snapbench.t"
#: Rows inserted per statement while the table is filled.
FILL_BATCH = 500_000


@dataclass
class SnapshotRun:
    """One source's numbers for one mode."""

    source: str = ""
    mode: str = "incremental"
    rows: int = 0
    workers: int = 0
    chunk_rows: int = 0
    rows_per_s: float | None = None
    seconds: float | None = None
    wall_s: float | None = None
    messages: int | None = None
    load: dict[str, list[float]] = field(default_factory=dict)
    error: str | None = None


@dataclass
class SnapshotResult:
    runs: list[SnapshotRun] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"runs": [asdict(r) for r in self.runs]}


def _fill(kind: str, server: Any, rows: int) -> None:
    conn = server.connect()
    try:
        if kind == "postgres":
            conn.autocommit = True
        with conn.cursor() as cur:
            if kind == "mysql":
                cur.execute("CREATE DATABASE snapbench")
                cur.execute("USE snapbench")
                cur.execute(
                    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, v varchar(32), n int, "
                    "amount decimal(12,2), at timestamp(3) NULL)"
                )
                for lo in range(0, rows, FILL_BATCH):
                    hi = min(rows, lo + FILL_BATCH)
                    # MariaDB's Sequence engine: seq_<a>_to_<b> is a table of those integers.
                    cur.execute(
                        f"INSERT INTO {TABLE} SELECT seq, concat('v', seq), seq % 97, "
                        f"seq / 8, '2024-05-05 12:00:00.125' FROM seq_{lo + 1}_to_{hi}"
                    )
                    conn.commit()
            else:
                cur.execute("CREATE SCHEMA snapbench")
                cur.execute(
                    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, v varchar(32), n int, "
                    "amount numeric(12,2), at timestamptz)"
                )
                cur.execute(
                    f"INSERT INTO {TABLE} SELECT g, 'v' || g, g % 97, g / 8.0, "
                    f"'2024-05-05 12:00:00.125+00' FROM generate_series(1, {rows}) g"
                )
                cur.execute(f"ANALYZE {TABLE}")
    finally:
        conn.close()


def _config(
    home: Path, nats_url: str, kind: str, server: Any, workers: int, chunk: int, mode: str
) -> Path:
    """A capture config for a first start (no saved position) with ``capture.snapshot``
    ``mode``."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    capture = {
        "source": server.dsn,
        "tables": [TABLE],
        "snapshot": mode,
        "chunk_rows": chunk,
        "snapshot_workers": workers,
    }
    if kind == "postgres":
        capture |= {"slot": "snapbench", "publication": "snapbench"}
    path.write_text(yaml.safe_dump({"home": str(home), "bus": {"url": nats_url},
                                    "capture": capture}))  # fmt: skip
    return path


def run_snapshot(
    kind: str, home: Path, rows: int, workers: int, chunk: int, log: Log, timeout_s: float,
    mode: str = "incremental",
) -> SnapshotRun:  # fmt: skip
    """One source and mode: fill, capture until the table is snapshotted, read the
    numbers."""
    if mode == "initial":
        workers = 1  # one connection reads the consistent snapshot
    run = SnapshotRun(source=kind, mode=mode, rows=rows, workers=workers, chunk_rows=chunk)
    server: Any = (
        MariaDBServer(home / "mariadb") if kind == "mysql" else PostgresServer(home / "pg")
    )
    server.start()
    try:
        t0 = time.monotonic()
        _fill(kind, server, rows)
        log(f"snapshot {kind}: {rows:,} rows written in {time.monotonic() - t0:.0f}s")
        with EmbeddedNats(home / "nats", sync_always=tools.CAPTURE_SYNC_ALWAYS) as nats:
            config = _config(home / "capture", nats.url, kind, server, workers, chunk, mode)
            cfg = load_config(config, environ={})
            env = {**tools.subprocess_env(), "TIDELAKE_CONFIG": str(config)}
            run.load["start"] = list(machine.load_average())
            started = time.monotonic()
            with (home / "capture.log").open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "tidelake.cli", "capture"], env=env, stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
                try:
                    table = _wait_done(proc, cfg.capture_position_file, timeout_s, mode)
                    run.wall_s = round(time.monotonic() - started, 1)
                finally:
                    os.kill(proc.pid, signal.SIGTERM)
                    proc.wait(60)
            run.load["end"] = list(machine.load_average())
            # incremental: several rows to a message (capture/incremental.py, MESSAGE_ROWS);
            # initial: one a row.
            run.messages = asyncio.run(tools.stream_messages(nats.url))
            if table is None:  # initial: timed by the wall clock
                run.seconds = run.wall_s
                run.rows_per_s = round(rows / max(run.wall_s or 0, 1e-3))
                if run.messages != rows:
                    run.error = f"{run.messages} messages for {rows} rows"
            else:
                seconds = (int(table["updated_ms"]) - int(table["started_ms"])) / 1000
                run.seconds = round(seconds, 2)
                run.rows_per_s = round(int(table["rows_done"]) / max(seconds, 1e-3))
                if int(table["rows_done"]) != rows:
                    run.error = f"{table['rows_done']} rows snapshotted of {rows}"
        log(f"snapshot {kind} ({mode}): {run.rows_per_s:,} rows/s ({workers} readers)")
    finally:
        if isinstance(server, PostgresServer):
            server.remove()
        else:
            server.stop()
    return run


def _wait_done(
    proc: subprocess.Popen[bytes], position: Path, timeout_s: float, mode: str
) -> dict[str, Any] | None:
    """Until the snapshot is done: the table's incremental progress, or None for an initial
    snapshot (done once a saved state is in phase ``streaming``)."""
    deadline = time.monotonic() + timeout_s
    store = PositionStore(position)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"capture exited {proc.returncode} (see capture.log)")
        state = store.load() or {}
        if mode == "initial":
            if state.get("phase") == "streaming":
                return None
            time.sleep(0.1)
            continue
        table = ((state.get("incremental") or {}).get("tables") or {}).get(TABLE) or {}
        if table.get("state") == "done":
            return dict(table)
        if table.get("state") == "failed":
            raise RuntimeError(f"snapshot failed: {table.get('error')}")
        time.sleep(0.5)
    raise TimeoutError(f"no snapshot done in {timeout_s}s")


def run_snapshot_bench(
    home: Path, rows: int, log: Log, *, workers: int = 4, chunk_rows: int = 10_000,
    timeout_s: float = 3600, sources: tuple[str, ...] = SOURCES, initial_rows: int = 0,
) -> SnapshotResult:  # fmt: skip
    """Every source in turn (never at once: each would slow the other): ``incremental`` of
    ``rows`` rows, then, with ``initial_rows``, ``initial`` of that many for comparison."""
    result = SnapshotResult()
    plan = [("incremental", rows)] + ([("initial", initial_rows)] if initial_rows else [])
    for kind in sources:
        for mode, size in plan:
            where = home / f"{kind}-{mode}"
            try:
                run = run_snapshot(kind, where, size, workers, chunk_rows, log, timeout_s, mode)
            except Exception as exc:  # a broken source must not hide the other's numbers
                run = SnapshotRun(source=kind, mode=mode, rows=size, error=repr(exc)[:2000])
            result.runs.append(run)
    return result


if __name__ == "__main__":  # pragma: no cover - by hand: python -m tidelake_bench.snapshot
    import json

    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    which = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else SOURCES
    got = run_snapshot_bench(
        Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/snapbench"),
        size,
        print,
        sources=which,
        initial_rows=int(sys.argv[4]) if len(sys.argv) > 4 else 0,
    )
    print(json.dumps(got.to_json(), indent=2))
