"""``tidelake demo --source mariadb|postgres``: the demo against a real database server.

tidelake starts a private server (its own data directory under the demo home, 127.0.0.1, a
free port), creates ``shop.customers``, ``shop.orders`` and ``shop.order_items``, and runs the
capture, the stager and the continuous ingest as separate processes, as in production. The
order workload is executed as SQL (``workload/sql.py``); the capture turns the binlog or the
pgoutput stream into canal-json. When the lake has caught up, every table is compared row by
row with the live source table (``tidelake verify``). The JSON summary has the plain demo's
fields; freshness is the source commit time carried by each message (MySQL: whole seconds)
to the Hudi commit that made it visible.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.pipeline.demo import (
    DemoOptions,
    DemoResult,
    stored_messages,
    wait_for_ingest,
    wait_for_lake,
)
from tidelake.pipeline.stack import LocalStack, prepare_home
from tidelake.verify.source import verify_table
from tidelake.workload.orders import DATABASE, SCHEMAS, WorkloadSpec
from tidelake.workload.sql import run_sql_workload, schema_statements

SourceKind = Literal["mariadb", "postgres"]


def _start_database(kind: SourceKind, home: Path) -> MariaDBServer | PostgresServer:
    server: MariaDBServer | PostgresServer
    server = (
        MariaDBServer(home / "mariadb") if kind == "mariadb" else PostgresServer(home / "postgres")
    )
    server.start()
    return server


def _create_schema(server: MariaDBServer | PostgresServer, kind: SourceKind) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for statement in schema_statements("mysql" if kind == "mariadb" else "postgres"):
                cur.execute(statement)
    finally:
        conn.close()


def _commit_ms(body: dict[str, Any]) -> int:
    """The source commit time tidelake's capture carries (``_tidelake.commit_ts_ms``)."""
    return int(body["_tidelake"]["commit_ts_ms"])


def run_source_demo(opts: DemoOptions, kind: SourceKind, console: Console) -> DemoResult:
    """Run the demo against a private ``kind`` server; failures land in the result."""
    started = time.monotonic()
    result = DemoResult(events=0)
    home = opts.home.resolve()
    prepare_home(home)
    database: MariaDBServer | PostgresServer | None = None
    stack: LocalStack | None = None
    try:
        with console.status(f"starting a private {kind} server"):
            database = _start_database(kind, home)
            _create_schema(database, kind)
        env: dict[str, str] = {}
        if isinstance(database, MariaDBServer):
            dsn = f"mysql://{database.user}@{database.host}:{database.port}/"
            env["TIDELAKE_CAPTURE__PASSWORD"] = database.password
        else:
            dsn = database.dsn
        capture_cfg: dict[str, Any] = {"source": dsn, "tables": [f"{DATABASE}.*"]}
        stack = LocalStack(home, settings={"capture": capture_cfg}, env=env).start()
        cfg = stack.cfg
        result.lake = cfg.lake_root
        children = stack.children
        wait_for_ingest(stack, console)
        columns = [
            TextColumn("{task.description:<24}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("order workload as SQL", total=opts.events)
            conn = database.connect(autocommit=False) if kind == "mariadb" else database.connect()
            if kind == "postgres":
                conn.autocommit = False
            try:
                run = run_sql_workload(
                    conn,
                    WorkloadSpec(events=opts.events, seed=opts.seed),
                    rate=opts.rate,
                    on_progress=lambda n: progress.update(task, completed=min(n, opts.events)),
                    should_stop=lambda: not all(c.alive() for c in children),
                )
            finally:
                conn.close()
            stack.check_children()
            result.events = run.rows_changed
            result.publish_events_per_s = round(run.rows_changed / max(run.elapsed_s, 1e-9), 1)
            published = asyncio.run(
                stored_messages(
                    cfg,
                    stack.bus_url,
                    run.rows_changed,
                    opts.catch_up_timeout_s,
                    "cdc.>",
                    _commit_ms,
                    "the capture",
                )
            )
            commits = wait_for_lake(published, stack, opts.catch_up_timeout_s, progress)
        result.measure_freshness(published, commits)
        stack.stop_stages()
        result.dlq = asyncio.run(stack.dlq_depth())
        password = env.get("TIDELAKE_CAPTURE__PASSWORD")
        checks = [
            verify_table(dsn, cfg.lake_root, f"{DATABASE}.{table}", password) for table in SCHEMAS
        ]
        errors = [f"{c.table}: {c.error}" for c in checks if c.error]
        if errors:
            result.error = "; ".join(errors)
        result.tables = len(checks)
        result.rows_expected = sum(c.rows_source for c in checks)
        result.rows_in_lake = sum(c.rows_lake for c in checks)
        result.mismatches = sum(c.mismatches for c in checks)
        result.per_table = {
            c.table: {
                "rows_expected": c.rows_source,
                "rows_in_lake": c.rows_lake,
                "mismatches": c.mismatches,
                "samples": c.samples,
                "hash_source": c.hash_source,
                "hash_lake": c.hash_lake,
            }
            for c in checks
        }
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if stack is not None:
            stack.stop(timeout_s=30)
        if isinstance(database, PostgresServer):
            database.remove()
        elif database is not None:
            database.stop()
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result
