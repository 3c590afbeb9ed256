"""``tidelake demo --sinks``: the order workload into the lake and three routes at once.

Beside the lake, three routes (docs/routes.md) read the same stream, each its own process
started by the local stack:

* ``replica`` — every table into a private PostgreSQL (capture/servers.py ``PostgresServer``);
* ``cache`` — orders and customers into a private redis-server (pipeline/redis.py);
* ``hook`` — orders to a webhook receiver in this process (pipeline/webhook_receiver.py),
  which refuses its first two requests: their batches are dead-lettered, and re-processed
  through the route once the workload is in.

While the workload streams, each route process is killed -9 once (its batch in flight is
redelivered; the sinks' position guard makes the second application a no-op) and started
again. Once every route has caught up, ``replica`` reads the whole stream again from sequence
1 (a replay: nothing may move back), and ``hook``'s dead letters are re-processed. Then every
destination is compared with the workload's expected final state, row by row, and the columns
each holds with the source's.

With ``--with-ddl`` the workload changes its schema mid-stream (workload/ddl.py): ``replica``
then takes every table of the database (tables created, renamed and dropped included), and each
sink applies the DDL between the rows; the dead letters ``hook`` re-processes at the end predate
the rename of ``orders.order_total``, so the receiver brings them forward.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from tidelake.bus.connection import on_jetstream
from tidelake.capture.servers import PostgresServer
from tidelake.config import Config
from tidelake.pipeline.opensearch import OpenSearchServer
from tidelake.pipeline.redis import RedisServer
from tidelake.pipeline.stack import LocalStack
from tidelake.pipeline.webhook_receiver import WebhookReceiver
from tidelake.route.runner import (
    Reprocessed,
    RouteRunner,
    RouteStatus,
    reprocess,
    rewind,
    route_status,
)
from tidelake.route.sinks.postgres import POSITION_COLUMN
from tidelake.verify.compare import Comparison, compare_rows
from tidelake.workload.orders import DATABASE, OrderWorkload

log = structlog.get_logger(__name__)

ROUTES = ("replica", "cache", "hook")
#: The fourth route, into OpenSearch, when its node is laid out (scripts/setup, tests).
SEARCH = "search"
#: The tables each route takes.
ROUTE_TABLES = {
    "replica": ("customers", "orders", "order_items"),
    "cache": ("customers", "orders"),
    "hook": ("orders",),
    SEARCH: ("customers", "orders"),
}
#: The OpenSearch sink's index prefix in the demo.
SEARCH_PREFIX = "demo-"
SIGNING_KEY_ENV = "TIDELAKE_ROUTES__HOOK__SINK__SIGNING_KEY"
#: The Redis sink's key prefix in the demo.
REDIS_PREFIX = "demo"
#: A Redis sink's own key after ``prefix:table:`` (a ``%`` escape of a key text is ``%XX``).
SINK_KEY = re.compile(r"%(?![0-9A-F]{2})")
#: The PostgreSQL database the replica writes to.
REPLICA_DATABASE = "replica"


class DemoSinks:
    """The three destinations of ``demo --sinks``, their routes' settings and checks."""

    def __init__(self, home: Path, *, with_ddl: bool = False, opensearch: bool = False) -> None:
        self.home = home
        self.with_ddl = with_ddl
        self.signing_key = secrets.token_hex(16)
        self.postgres = PostgresServer(home / "postgres")
        self.redis = RedisServer(home / "redis")
        self.opensearch = OpenSearchServer(home / "opensearch") if opensearch else None
        #: The demo's routes, each its own process.
        self.routes = ROUTES + ((SEARCH,) if opensearch else ())
        self.receiver = WebhookReceiver(self.signing_key, refuse=2)
        self.faults: list[str] = []
        self._killer: threading.Thread | None = None

    # -- bring-up

    def start(self) -> DemoSinks:
        node: threading.Thread | None = None
        failed: list[BaseException] = []
        if self.opensearch is not None:  # the slowest to start: while the others do

            def start_node() -> None:
                try:
                    assert self.opensearch is not None
                    self.opensearch.start()
                except BaseException as exc:  # raised below, in the caller's thread
                    failed.append(exc)

            node = threading.Thread(target=start_node, daemon=True, name="opensearch")
            node.start()
        self.postgres.start()
        conn = self.postgres.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {REPLICA_DATABASE}")
        conn.close()
        self.redis.start()
        self.receiver.start()
        if node is not None:
            node.join()
            if failed:
                raise failed[0]
        return self

    def stop(self) -> None:
        stops = [self.receiver.stop, self.redis.stop, self.postgres.remove]
        if self.opensearch is not None:
            stops.append(self.opensearch.stop)
        for stop in stops:
            try:
                stop()
            except Exception as exc:  # one failing stop must not leave the others running
                log.warning("demo sink did not stop cleanly", error=str(exc))

    def settings(self) -> dict[str, Any]:
        """The ``routes`` section of the demo's config."""
        dsn = self.postgres.dsn.rsplit("/", 1)[0] + f"/{REPLICA_DATABASE}"
        search = {}
        if self.opensearch is not None:
            search[SEARCH] = {
                "tables": [f"{DATABASE}.{t}" for t in ROUTE_TABLES[SEARCH]],
                "batch_size": 500,
                "sink": {
                    "kind": "opensearch",
                    "url": self.opensearch.url,
                    "index_prefix": SEARCH_PREFIX,
                },
            }
        return {
            "routes": search
            | {
                "replica": {
                    "tables": [f"{DATABASE}.*"]
                    if self.with_ddl
                    else [f"{DATABASE}.{t}" for t in ROUTE_TABLES["replica"]],
                    "batch_size": 500,
                    "sink": {"kind": "postgres", "dsn": dsn},
                },
                "cache": {
                    "tables": [f"{DATABASE}.{t}" for t in ROUTE_TABLES["cache"]],
                    "batch_size": 500,
                    "sink": {"kind": "redis", "url": self.redis.url, "key_prefix": REDIS_PREFIX},
                },
                "hook": {
                    "tables": [f"{DATABASE}.{t}" for t in ROUTE_TABLES["hook"]],
                    "batch_size": 200,
                    "sink": {
                        "kind": "webhook",
                        "url": self.receiver.url,
                        "backoff_s": 0.05,
                        "max_backoff_s": 0.5,
                    },
                },
            }
        }

    def env(self) -> dict[str, str]:
        """Secrets for the route processes (never in the config file)."""
        return {SIGNING_KEY_ENV: self.signing_key}

    # -- faults while the workload streams

    def kill_each_route_once(self, stack: LocalStack, events: int) -> None:
        """In a thread: kill -9 each route's process once it has acknowledged some of the
        stream (with three routes a quarter, a half, three quarters of ``events``, one route
        each), and start it again at once."""

        def run() -> None:
            for n, name in enumerate(self.routes, start=1):
                child = stack.child(f"route-{name}")
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    now = statuses(stack.cfg, self.routes)[name].acked_seq
                    if now >= events * n // (len(self.routes) + 1):
                        break
                    time.sleep(0.1)
                else:
                    self.faults.append(f"route {name}: not killed (no progress in 300 s)")
                    continue
                child.kill()
                self.faults.append(f"kill -9 route {name}")
                child.start()

        self._killer = threading.Thread(target=run, daemon=True, name="route-faults")
        self._killer.start()

    def wait_faults(self, timeout_s: float = 300) -> None:
        if self._killer is not None:
            self._killer.join(timeout_s)

    # -- after the workload

    def catch_up(self, stack: LocalStack, last_seq: int, timeout_s: float) -> None:
        """Until every route acknowledged the stream up to ``last_seq`` (a dead route is
        restarted, as ``tidelake run`` does)."""
        deadline = time.monotonic() + timeout_s
        while True:
            now = statuses(stack.cfg, self.routes)
            if all(s.acked_seq >= last_seq and s.in_flight == 0 for s in now.values()):
                return
            for name in self.routes:
                child = stack.child(f"route-{name}")
                if not child.alive():
                    log.warning("route exited; restarting", route=name, log=child.log_tail(5))
                    child.start()
            if time.monotonic() > deadline:
                raise TimeoutError(f"routes not caught up to {last_seq} in {timeout_s} s: {now}")
            time.sleep(0.3)

    def replay_replica(self, stack: LocalStack, last_seq: int, timeout_s: float) -> None:
        """Stop ``replica``, make it read the whole stream again, wait until it is through."""
        child = stack.child("route-replica")
        child.stop(30)
        asyncio.run(on_jetstream(stack.cfg.bus, lambda js: rewind(js, stack.cfg, "replica", 1)))
        self.faults.append("replay route replica from sequence 1")
        child.start()
        self.catch_up(stack, last_seq, timeout_s)

    def reprocess_hook(self, cfg: Config) -> int:
        """Re-process ``hook``'s dead letters (the receiver works now); how many landed."""
        runner = RouteRunner(cfg, "hook")
        try:
            done: Reprocessed = asyncio.run(on_jetstream(cfg.bus, lambda js: reprocess(js, runner)))
        finally:
            runner.sink.close()
        if done.still_failing:
            raise RuntimeError(f"route hook: {done.still_failing} dead letters still fail")
        self.faults.append(f"reprocess {done.applied} dead letters of route hook")
        return done.applied

    def verify(self, workload: OrderWorkload) -> list[Comparison]:
        """Every destination against the workload's expected final state: the rows, and the
        columns (none missing, none the source no longer has)."""
        out = []
        replica = sorted(workload.schemas) if self.with_ddl else ROUTE_TABLES["replica"]
        for table in replica:
            out.append(self._compare("postgres", workload, table, self._pg_rows(table)))
        if self.with_ddl:
            out.append(self._pg_gone(workload))
        for table in ROUTE_TABLES["cache"]:
            out.append(self._compare("redis", workload, table, self._redis_rows(table)))
        for table in ROUTE_TABLES["hook"]:
            rows = self.receiver.rows(f"{DATABASE}.{table}")
            out.append(self._compare("webhook", workload, table, rows))
        if self.opensearch is not None:
            for table in ROUTE_TABLES[SEARCH]:
                out.append(self._compare("opensearch", workload, table, self._documents(table)))
        return out

    def _compare(
        self, sink: str, workload: OrderWorkload, table: str, rows: list[dict[str, Any]]
    ) -> Comparison:
        expected = workload.expected_rows()[f"{DATABASE}.{table}"]
        columns = list(workload.schemas[table])
        result = compare_rows(
            f"{sink} {DATABASE}.{table}", workload.primary_keys[table], expected, rows, columns
        )
        # A row may leave a NULL out (Redis, a webhook row, a document): no column beyond the
        # source's. The sinks' own fields start with _tl_.
        held = {c for row in rows for c in row if not c.startswith("_tl_")}
        if sink == "postgres":
            held = self._pg_columns(table)
            result.schema += [f"column {c} missing" for c in columns if c not in held]
        result.schema += [f"column {c} not in the source" for c in sorted(held - set(columns))]
        return result

    def _pg_rows(self, table: str) -> list[dict[str, Any]]:
        conn = self.postgres.connect(REPLICA_DATABASE)
        try:
            with conn.cursor() as cur:
                cur.execute(f'SELECT * FROM "{DATABASE}"."{table}"')
                names = [d.name for d in cur.description]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        finally:
            conn.close()

    def _pg_columns(self, table: str) -> set[str]:
        """The replica table's columns, the sink's own left out."""
        conn = self.postgres.connect(REPLICA_DATABASE)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s",
                    (DATABASE, table),
                )
                return {str(r[0]) for r in cur.fetchall()} - {POSITION_COLUMN}
        finally:
            conn.close()

    def _pg_gone(self, workload: OrderWorkload) -> Comparison:
        """The replica's tables the source no longer has (dropped or renamed away)."""
        conn = self.postgres.connect(REPLICA_DATABASE)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                    "AND table_name NOT LIKE '\\_tidelake\\_%%'",
                    (DATABASE,),
                )
                held = {str(r[0]) for r in cur.fetchall()}
        finally:
            conn.close()
        result = Comparison(f"postgres {DATABASE} tables")
        result.schema = [
            f"table {t} not in the source" for t in sorted(held - set(workload.schemas))
        ]
        return result

    def _redis_rows(self, table: str) -> list[dict[str, Any]]:
        import redis

        from tidelake.route.sinks.redis import row_key

        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        try:
            rows: list[dict[str, Any]] = []
            table_id = f"{DATABASE}.{table}"
            prefix = row_key(REDIS_PREFIX, table_id, "")
            for name in client.scan_iter(match=prefix + "*"):
                if SINK_KEY.match(name, len(prefix)):  # the sink's own (%tombstones …)
                    continue
                # NULL is an absent field (route/sinks/redis.py); the position is the sink's.
                rows.append({str(k): v for k, v in client.hgetall(name).items()})
            return rows
        finally:
            client.close()

    def _documents(self, table: str) -> list[dict[str, Any]]:
        """The live documents of ``table`` (the sink's filtered alias), read after a refresh."""
        import httpx

        from tidelake.route.sinks.opensearch import alias_name

        assert self.opensearch is not None
        alias = alias_name(SEARCH_PREFIX, f"{DATABASE}.{table}")
        rows: list[dict[str, Any]] = []
        with httpx.Client(base_url=self.opensearch.url, timeout=60) as client:
            client.post(f"/{alias}/_refresh").raise_for_status()
            answer = client.post(
                f"/{alias}/_search",
                params={"scroll": "1m"},
                json={"size": 1000, "query": {"match_all": {}}},
            )
            while True:
                answer.raise_for_status()
                body = answer.json()
                hits = body["hits"]["hits"]
                if not hits:
                    break
                rows += [hit["_source"] for hit in hits]
                answer = client.post(
                    "/_search/scroll", json={"scroll": "1m", "scroll_id": body["_scroll_id"]}
                )
        return rows


def statuses(cfg: Config, routes: Sequence[str] = ROUTES) -> dict[str, RouteStatus]:
    """Each demo route's consumer position and dead letters."""

    async def read(js: Any) -> dict[str, RouteStatus]:
        return {name: await route_status(js, cfg, name) for name in routes}

    result: dict[str, RouteStatus] = asyncio.run(on_jetstream(cfg.bus, read))
    return result
