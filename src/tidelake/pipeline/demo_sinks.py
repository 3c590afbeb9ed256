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
destination is compared with the workload's expected final state, row by row.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from tidelake.bus.connection import on_jetstream
from tidelake.capture.servers import PostgresServer
from tidelake.config import Config
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
from tidelake.verify.compare import Comparison, compare_rows
from tidelake.workload.orders import DATABASE, OrderWorkload

log = structlog.get_logger(__name__)

ROUTES = ("replica", "cache", "hook")
#: The tables each route takes.
ROUTE_TABLES = {
    "replica": ("customers", "orders", "order_items"),
    "cache": ("customers", "orders"),
    "hook": ("orders",),
}
SIGNING_KEY_ENV = "TIDELAKE_ROUTES__HOOK__SINK__SIGNING_KEY"
#: The Redis sink's key prefix in the demo.
REDIS_PREFIX = "demo"
#: The PostgreSQL database the replica writes to.
REPLICA_DATABASE = "replica"


class DemoSinks:
    """The three destinations of ``demo --sinks``, their routes' settings and checks."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.signing_key = secrets.token_hex(16)
        self.postgres = PostgresServer(home / "postgres")
        self.redis = RedisServer(home / "redis")
        self.receiver = WebhookReceiver(self.signing_key, refuse=2)
        self.faults: list[str] = []
        self._killer: threading.Thread | None = None

    # -- bring-up

    def start(self) -> DemoSinks:
        self.postgres.start()
        conn = self.postgres.connect()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {REPLICA_DATABASE}")
        conn.close()
        self.redis.start()
        self.receiver.start()
        return self

    def stop(self) -> None:
        for stop in (self.receiver.stop, self.redis.stop, self.postgres.remove):
            try:
                stop()
            except Exception as exc:  # one failing stop must not leave the others running
                log.warning("demo sink did not stop cleanly", error=str(exc))

    def settings(self) -> dict[str, Any]:
        """The ``routes`` section of the demo's config."""
        dsn = self.postgres.dsn.rsplit("/", 1)[0] + f"/{REPLICA_DATABASE}"
        return {
            "routes": {
                "replica": {
                    "tables": [f"{DATABASE}.{t}" for t in ROUTE_TABLES["replica"]],
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
        stream (a quarter, a half, three quarters of ``events``, one route each), and start
        it again at once."""

        def run() -> None:
            for n, name in enumerate(ROUTES, start=1):
                child = stack.child(f"route-{name}")
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    if statuses(stack.cfg)[name].acked_seq >= events * n // 4:
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
            now = statuses(stack.cfg)
            if all(s.acked_seq >= last_seq and s.in_flight == 0 for s in now.values()):
                return
            for name in ROUTES:
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
        """Every destination against the workload's expected final state."""
        out = []
        for table in ROUTE_TABLES["replica"]:
            out.append(self._compare("postgres", workload, table, self._pg_rows(table)))
        for table in ROUTE_TABLES["cache"]:
            out.append(self._compare("redis", workload, table, self._redis_rows(workload, table)))
        for table in ROUTE_TABLES["hook"]:
            rows = self.receiver.rows(f"{DATABASE}.{table}")
            out.append(self._compare("webhook", workload, table, rows))
        return out

    def _compare(
        self, sink: str, workload: OrderWorkload, table: str, rows: list[dict[str, Any]]
    ) -> Comparison:
        expected = workload.expected_rows()[f"{DATABASE}.{table}"]
        columns = list(workload.schemas[table])
        return compare_rows(
            f"{sink} {DATABASE}.{table}", workload.primary_keys[table], expected, rows, columns
        )

    def _pg_rows(self, table: str) -> list[dict[str, Any]]:
        conn = self.postgres.connect(REPLICA_DATABASE)
        try:
            with conn.cursor() as cur:
                cur.execute(f'SELECT * FROM "{DATABASE}"."{table}"')
                names = [d.name for d in cur.description]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        finally:
            conn.close()

    def _redis_rows(self, workload: OrderWorkload, table: str) -> list[dict[str, Any]]:
        import redis

        from tidelake.route.sinks.redis import row_key, tombstone_key

        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        columns = list(workload.schemas[table])
        try:
            rows = []
            table_id = f"{DATABASE}.{table}"
            for name in client.scan_iter(match=row_key(REDIS_PREFIX, table_id, "") + "*"):
                if name == tombstone_key(REDIS_PREFIX, table_id):
                    continue
                stored = client.hgetall(name)
                # NULL is an absent field (route/sinks/redis.py).
                rows.append({c: stored.get(c) for c in columns})
            return rows
        finally:
            client.close()


def statuses(cfg: Config) -> dict[str, RouteStatus]:
    """Each demo route's consumer position and dead letters."""

    async def read(js: Any) -> dict[str, RouteStatus]:
        return {name: await route_status(js, cfg, name) for name in ROUTES}

    result: dict[str, RouteStatus] = asyncio.run(on_jetstream(cfg.bus, read))
    return result
