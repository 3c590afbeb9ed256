"""Capture throughput and lag, for MariaDB (binlog) and PostgreSQL (pgoutput), side by side
with the rate at which the source itself produced the changes.

For each source: a private database server (``capture/servers.py``) and a private
``nats-server``; the order workload's tables (``workload/sql.py``: multi-row transactions of
inserts, updates, deletes over three tables). Two forms:

* **throughput**: the position where the log ends is saved as the capture's position, then
  ``changes`` changes are written as fast as one connection can (the source's own change
  rate), then the capture (:mod:`tidelake_bench.capture_worker`, the production loop in its own
  process) reads from that position to the end, publishing to JetStream with the real
  publisher. Reported: changes/s from the loop's start to the last PubAck, the capture
  process's CPU seconds, and changes per CPU second (what one core sustains).
* **lag under load**: the capture runs from the start while a writer commits at a fixed rate
  (``lag_rate`` statements/s, one transaction after another, each sent in one round trip:
  :class:`OneTripWriter`) for ``lag_seconds``. Every 0.1 s
  the capture notes how many changes JetStream has acknowledged; its lag at that instant is
  how long ago the writer committed the last of those changes (``now - commit time of the
  last published change``). Reported: p50/p99/max of the lag.

The captured stream is checked as well: the message count must equal the rows the workload
changed (``SqlRunResult.rows_changed``) with no duplicates.
"""

from __future__ import annotations

import asyncio
import bisect
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.position import PositionStore
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.config import load_config
from tidelake.workload.orders import WorkloadSpec
from tidelake.workload.sql import run_sql_workload, schema_statements
from tidelake_bench import tools
from tidelake_bench.jobs import run_job
from tidelake_bench.memory import mib
from tidelake_bench.stats import per_second, percentile

Log = Callable[[str], None]
SOURCES = ("mysql", "postgres")
WORKER_TIMEOUT_S = 1800
#: As fast as the writer's connection goes.
UNLIMITED = 1e9


@dataclass
class LagRun:
    """The lag-under-load form."""

    rate: float = 0.0
    seconds: float = 0.0
    changes: int = 0
    writer_changes_per_s: float | None = None
    lag_p50_s: float | None = None
    lag_p99_s: float | None = None
    lag_max_s: float | None = None
    #: Seconds after the writer's last commit until everything was acknowledged.
    drain_s: float | None = None
    capture_cpu_s: float | None = None
    error: str | None = None


@dataclass
class SourceRun:
    """One source's numbers."""

    source: str = ""
    changes: int = 0
    transactions: int = 0
    source_changes_per_s: float | None = None
    capture_seconds: float | None = None
    capture_changes_per_s: float | None = None
    capture_cpu_s: float | None = None
    capture_changes_per_cpu_s: float | None = None
    capture_peak_rss_mib: float | None = None
    published: int = 0
    duplicates: int = 0
    error: str | None = None
    lag: LagRun | None = None


@dataclass
class CaptureResult:
    runs: list[SourceRun] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def by_source(self) -> dict[str, SourceRun]:
        return {r.source: r for r in self.runs}


class _Database:
    """A private server of one kind, its DSN, a writer connection, and its log's end."""

    def __init__(self, kind: str, home: Path) -> None:
        self.kind = kind
        self.server: MariaDBServer | PostgresServer = (
            MariaDBServer(home / "mariadb") if kind == "mysql" else PostgresServer(home / "pg")
        )

    def __enter__(self) -> _Database:
        self.server.start()
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for statement in schema_statements(self.kind):  # type: ignore[arg-type]
                    cur.execute(statement)
        finally:
            conn.close()
        return self

    def __exit__(self, *exc: object) -> None:
        if isinstance(self.server, PostgresServer):
            self.server.remove()
        else:
            self.server.stop()

    @property
    def dsn(self) -> str:
        return self.server.dsn

    def one_trip_connection(self) -> Any:
        """An autocommit connection that takes several statements in one request."""
        if isinstance(self.server, MariaDBServer):
            from pymysql.constants import CLIENT

            return self.server.connect(client_flag=CLIENT.MULTI_STATEMENTS)
        return self.server.connect()

    def writer(self) -> Any:
        """A connection with autocommit off, as ``run_sql_workload`` wants it."""
        if isinstance(self.server, MariaDBServer):
            return self.server.connect(autocommit=False)
        conn = self.server.connect()
        conn.autocommit = False
        return conn


def _capture_config(home: Path, nats_url: str, db: _Database) -> Path:
    """The worker's config, and its position file set to the end of the source's log now
    (for PostgreSQL: a new slot, and the publication the capture would create)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "home": str(home),
                "bus": {"url": nats_url},
                "capture": {"source": db.dsn, "tables": ["shop.*"], "snapshot": "never"},
            }
        )
    )
    cfg = load_config(path, environ={})
    if isinstance(db.server, MariaDBServer):
        conn = db.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW MASTER STATUS")
                file, pos = cur.fetchone()[:2]
        finally:
            conn.close()
        state: dict[str, Any] = {
            "source": "mysql",
            "phase": "streaming",
            "binlog": {"file": str(file), "pos": int(pos)},
        }
    else:
        from tidelake.capture.dsn import parse_dsn
        from tidelake.capture.pgoutput import parse_lsn
        from tidelake.capture.postgres import PostgresSource

        source = PostgresSource(cfg.capture, parse_dsn(db.dsn, None))
        try:
            source.ensure_publication()
        finally:
            source.close()
        conn = db.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                    (cfg.capture.slot,),
                )
                lsn = parse_lsn(cur.fetchone()[0])
        finally:
            conn.close()
        state = {"source": "postgres", "phase": "streaming", "lsn": lsn,
                 "slot": cfg.capture.slot, "relations": {}}  # fmt: skip
    PositionStore(cfg.capture_position_file).save(state)
    return path


def _worker(config: Path, home: Path, until: str, timeout_s: float) -> dict[str, Any]:
    out = home / "worker-result.json"
    run = run_job(
        "capture worker",
        [sys.executable, "-m", "tidelake_bench.capture_worker", str(config), str(out), until],
        home / "capture.log",
        timeout_s,
        env=tools.subprocess_env(),
        tail_lines=10,
    )
    if run.code != 0 or not out.is_file():
        raise RuntimeError(f"capture worker exited {run.code}: " + " | ".join(run.tail))
    report: dict[str, Any] = orjson.loads(out.read_bytes())
    return report


def run_throughput(
    kind: str,
    home: Path,
    changes: int,
    log: Log,
    seed: int = 11,
    inspect: Callable[[str, Any], None] | None = None,
) -> SourceRun:
    """The throughput form for one source (``mysql`` or ``postgres``). ``inspect(nats url,
    database server)`` is called once the capture is done, before both servers stop (a test
    compares the stream with the tables there)."""
    run = SourceRun(source=kind)
    with (
        EmbeddedNats(home / "nats", sync_always=tools.CAPTURE_SYNC_ALWAYS) as nats,
        _Database(kind, home) as db,
    ):
        config = _capture_config(home / "capture", nats.url, db)
        log(f"{kind}: writing {changes:,} changes")
        conn = db.writer()
        try:
            written = run_sql_workload(conn, WorkloadSpec(events=changes, seed=seed),
                                       rate=UNLIMITED)  # fmt: skip
        finally:
            conn.close()
        run.changes, run.transactions = written.rows_changed, written.transactions
        run.source_changes_per_s = per_second(written.rows_changed, written.elapsed_s)
        log(f"{kind}: capturing {run.changes:,} changes from the saved position")
        report = _worker(config, home / "capture", str(run.changes), WORKER_TIMEOUT_S)
        run.published, run.duplicates = report["published"], report["duplicates"]
        run.capture_seconds, run.capture_cpu_s = report["seconds"], report["cpu_s"]
        run.capture_changes_per_s = per_second(run.changes, report["seconds"])
        run.capture_changes_per_cpu_s = per_second(run.changes, report["cpu_s"])
        run.capture_peak_rss_mib = mib(report["peak_rss_kib"])
        stored = asyncio.run(tools.stream_messages(nats.url))
        if stored != run.changes or run.duplicates:
            run.error = (
                f"the stream holds {stored} messages ({run.duplicates} duplicates), "
                f"the workload changed {run.changes} rows"
            )
        if inspect is not None:
            inspect(nats.url, db.server)
    return run


def lag_samples(samples: list[tuple[float, int]], commits: list[tuple[float, int]]) -> list[float]:
    """Seconds behind at each sample ``(time, changes acknowledged)``: ``time`` minus when the
    writer committed the transaction that holds the last acknowledged change (``commits``:
    ``(time, changes committed so far)``, in order). Samples before the first commit or after
    everything was acknowledged say nothing about lag and are left out."""
    totals = [c[1] for c in commits]
    out = []
    for at, acked in samples:
        if not commits or at < commits[0][0] or acked >= totals[-1]:
            continue
        if acked == 0:
            out.append(max(0.0, at - commits[0][0]))
            continue
        # The first commit whose running total reaches ``acked`` holds its last change; a
        # change acknowledged before that commit was written is impossible (lag >= 0).
        i = bisect.bisect_left(totals, acked)
        out.append(max(0.0, at - commits[i][0]))
    return out


class OneTripWriter:
    """A DB-API connection for ``run_sql_workload`` that sends each transaction in one round
    trip at its commit (the statements rendered by the driver's own ``mogrify``), so that one
    writer connection keeps up a few thousand changes/s beside the capture; it notes when
    each transaction committed and how many rows it had changed by then.

    MariaDB reports each statement's changed rows (multi-statement results); PostgreSQL logs
    every row an UPDATE matches, even unchanged, so each statement of the workload (all by
    primary key, replayed in order by one writer) is one change there.
    """

    rowcount = 1

    def __init__(self, conn: Any, kind: str) -> None:
        self._conn = conn
        self._kind = kind
        self._cursor = conn.cursor()
        self._pending: list[str] = []
        self.rows = 0
        #: (wall time, rows changed so far) at each commit.
        self.commits: list[tuple[float, int]] = []

    def cursor(self) -> OneTripWriter:
        return self

    def execute(self, sql: str, params: Any) -> None:
        text = self._cursor.mogrify(sql, params)
        self._pending.append(text.decode() if isinstance(text, bytes) else text)

    def commit(self) -> None:
        if not self._pending:
            return
        body = "; ".join(self._pending)
        statements = len(self._pending)
        self._pending.clear()
        cur = self._cursor
        if self._kind == "mysql":
            cur.execute(f"START TRANSACTION; {body}; COMMIT")
            changed = max(cur.rowcount, 0)
            while cur.nextset():
                changed += max(cur.rowcount, 0)
        else:
            changed = statements
            cur.execute(f"BEGIN; {body}; COMMIT")
        self.rows += changed
        self.commits.append((time.time(), self.rows))

    def close(self) -> None:
        """The workload's cursor is done (the connection is closed by its owner)."""


def run_lag(kind: str, home: Path, rate: float, seconds: float, log: Log, seed: int = 13) -> LagRun:
    """The lag-under-load form for one source."""
    lag = LagRun(rate=rate, seconds=seconds)
    with (
        EmbeddedNats(home / "nats", sync_always=tools.CAPTURE_SYNC_ALWAYS) as nats,
        _Database(kind, home) as db,
    ):
        config = _capture_config(home / "capture", nats.url, db)
        until = home / "capture" / "until"
        report: dict[str, Any] = {}
        failure: list[BaseException] = []

        def capture() -> None:
            try:
                report.update(_worker(config, home / "capture", str(until), WORKER_TIMEOUT_S))
            except BaseException as exc:  # reported below
                failure.append(exc)

        thread = threading.Thread(target=capture, name="capture-worker")
        thread.start()
        conn = db.one_trip_connection()
        writer = OneTripWriter(conn, kind)
        started = time.monotonic()
        try:
            time.sleep(2.0)  # the worker's start-up (imports, connections) is not lag
            log(f"{kind}: writing {rate:,.0f} statements/s for {seconds:.0f} s under capture")
            started = time.monotonic()
            stop_at = started + seconds
            run_sql_workload(
                writer,
                WorkloadSpec(events=int(rate * seconds * 2), seed=seed),
                rate=rate,
                should_stop=lambda: time.monotonic() >= stop_at,
            )
        finally:
            elapsed = time.monotonic() - started
            conn.close()
            until.write_text(str(writer.rows))
        thread.join()
        if failure:
            lag.error = repr(failure[0])
            return lag
        lag.changes = writer.rows
        lag.writer_changes_per_s = per_second(writer.rows, elapsed)
        if report["published"] != writer.rows:
            lag.error = f"published {report['published']} changes, the writer made {writer.rows}"
        behind = lag_samples([(t, n) for t, n in report["samples"]], writer.commits)
        lag.lag_p50_s = _round(percentile(behind, 50))
        lag.lag_p99_s = _round(percentile(behind, 99))
        lag.lag_max_s = _round(max(behind) if behind else None)
        done = [t for t, n in report["samples"] if n >= writer.rows]
        if done and writer.commits:
            lag.drain_s = _round(max(0.0, done[0] - writer.commits[-1][0]))
        lag.capture_cpu_s = report["cpu_s"]
    return lag


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_capture_bench(
    home: Path,
    changes: int,
    log: Log,
    *,
    lag_rate: float = 4_000,
    lag_seconds: float = 60,
    sources: tuple[str, ...] = SOURCES,
) -> CaptureResult:
    """Both forms for each source, one after the other; a failing one is recorded."""
    result = CaptureResult()
    for kind in sources:
        try:
            run = run_throughput(kind, home / kind / "throughput", changes, log)
        except Exception as exc:  # the other source's numbers still count
            run = SourceRun(source=kind, error=f"{type(exc).__name__}: {exc}"[:2000])
        log(
            f"{kind}: source wrote {_num(run.source_changes_per_s)} changes/s; capture "
            f"{_num(run.capture_changes_per_s)} changes/s, "
            f"{_num(run.capture_changes_per_cpu_s)} per CPU second"
        )
        if lag_seconds > 0:
            try:
                run.lag = run_lag(kind, home / kind / "lag", lag_rate, lag_seconds, log)
            except Exception as exc:
                run.lag = LagRun(lag_rate, lag_seconds, error=f"{type(exc).__name__}: {exc}")
            log(
                f"{kind}: under {_num(run.lag.writer_changes_per_s)} changes/s the capture "
                f"was behind p50 {run.lag.lag_p50_s} s, p99 {run.lag.lag_p99_s} s, "
                f"max {run.lag.lag_max_s} s"
            )
        result.runs.append(run)
    return result


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"
