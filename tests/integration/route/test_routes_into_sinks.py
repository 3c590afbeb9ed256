"""One stream, three destinations: the order workload through three routes at once — a real
PostgreSQL, a real redis-server and a webhook receiver this test runs — each route its own
``tidelake route run`` process, each killed -9 once mid-stream and started again; then a
replay from the stream's first sequence, and a dead-letter re-process. Every destination
equals the workload's expected final state, row by row and value by value.

The webhook receiver keeps, per key, the change with the greatest position (deletes
included), as the sink's documentation asks of a receiver (route/sinks/webhook.py), and
verifies each request's signature.
"""

from __future__ import annotations

import asyncio
import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as redis_client
from stagekit import REPO, StageEnv, make_stage_env

from tidelake.api.server import create_app
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.servers import PostgresServer
from tidelake.config import load_config
from tidelake.pipeline import redis as redis_server
from tidelake.pipeline.redis import RedisServer
from tidelake.route.runner import route_status
from tidelake.route.sinks.redis import row_key, tombstone_key
from tidelake.route.sinks.webhook import verify_signature
from tidelake.runtime.processes import ChildProcess, tidelake_argv
from tidelake.workload.orders import DATABASE, PRIMARY_KEYS, OrderWorkload, WorkloadSpec

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(
        not redis_server.available(),
        reason="redis-server is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1",
    ),
]

EVENTS = 3_000
SIGNING_KEY = "route-test-key"
ROUTES = ("replica", "cache", "hook")


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook receiver: applies each change by position, refuses the first ``refuse``
    requests with 400 (a receiver bug, fixed later), counts bad signatures."""

    def __init__(self, refuse: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.refuse = refuse
        self.requests = 0
        self.bad_signatures = 0
        #: (table, key text) → (position, row or None for a delete)
        self.state: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/cdc"

    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {k: row for (t, k), (_, row) in self.state.items() if t == table and row}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        receiver = self.server
        with receiver.lock:
            receiver.requests += 1
            if not verify_signature(SIGNING_KEY, dict(self.headers), body, tolerance_s=600):
                receiver.bad_signatures += 1
                status = 401
            elif receiver.refuse > 0:
                receiver.refuse -= 1
                status = 400
            else:
                for c in orjson.loads(body)["changes"]:
                    slot = (c["table"], _key_text(c["key"]))
                    held = receiver.state.get(slot)
                    if held is None or held[0] < c["position"]:
                        receiver.state[slot] = (c["position"], c["row"])
                status = 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _key_text(key: dict[str, Any]) -> str:
    return "\x1f".join(str(key[c]) for c in sorted(key))


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(refuse=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _env(
    nats: EmbeddedNats, home: Path, pg: PostgresServer, redis: RedisServer, hook: Receiver
) -> StageEnv:
    return make_stage_env(
        nats,
        home,
        {
            "routes": {
                "replica": {
                    "tables": [f"{DATABASE}.*"],
                    "batch_size": 200,
                    "sink": {"kind": "postgres", "dsn": pg.dsn.rsplit("/", 1)[0] + "/routes"},
                },
                "cache": {
                    "tables": [f"{DATABASE}.orders", f"{DATABASE}.customers"],
                    "batch_size": 100,
                    "sink": {"kind": "redis", "url": redis.url, "key_prefix": "t"},
                },
                "hook": {
                    "tables": [f"{DATABASE}.orders"],
                    "batch_size": 50,
                    "sink": {
                        "kind": "webhook",
                        "url": hook.url,
                        "backoff_s": 0.05,
                        "max_backoff_s": 0.2,
                    },
                },
            }
        },
    )


def _spawn(env: StageEnv, *args: str, name: str) -> ChildProcess:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    child_env["TIDELAKE_CONFIG"] = str(env.config_path)
    child_env["TIDELAKE_ROUTES__HOOK__SINK__SIGNING_KEY"] = SIGNING_KEY
    proc = ChildProcess(
        name,
        tidelake_argv("route", *args),
        log_path=env.log_dir / f"{name}.log",
        base_env=child_env,
        cwd=REPO,
    )
    return proc.start()


def _statuses(env: StageEnv) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        nc = await env.client()
        try:
            js = nc.jetstream()
            return {name: await route_status(js, env.cfg, name) for name in ROUTES}
        finally:
            await nc.close()

    return asyncio.run(read())


async def _api_post(env: StageEnv, path: str) -> dict[str, Any]:
    """POST to the API (``tidelake serve``'s application, in this process)."""
    cfg = load_config(
        env.config_path, environ={"TIDELAKE_ROUTES__HOOK__SINK__SIGNING_KEY": SIGNING_KEY}
    )
    transport = httpx.ASGITransport(app=create_app(cfg))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        response = await client.post(path, json={}, timeout=60)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _wait_caught_up(env: StageEnv, last_seq: int, procs: dict[str, ChildProcess]) -> None:
    deadline = time.monotonic() + 180
    while True:
        for name, proc in procs.items():
            assert proc.alive(), f"route {name} died:\n{proc.log_tail()}"
        statuses = _statuses(env)
        if all(s.acked_seq >= last_seq and s.in_flight == 0 for s in statuses.values()):
            return
        assert time.monotonic() < deadline, f"routes not caught up to {last_seq}: {statuses}"
        time.sleep(0.3)


def _pg_rows(pg: PostgresServer, table: str, columns: list[str]) -> dict[str, dict[str, Any]]:
    conn = pg.connect("routes")
    try:
        with conn.cursor() as cur:
            cols = ", ".join(f'"{c}"::text' for c in columns)
            cur.execute(f'SELECT {cols} FROM "{DATABASE}"."{table}"')
            rows = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
    finally:
        conn.close()
    keys = PRIMARY_KEYS[table]
    return {_key_text({k: r[k] for k in keys}): r for r in rows}


def _redis_rows(redis: RedisServer, table: str) -> dict[str, dict[str, Any]]:
    client = redis_client.Redis.from_url(redis.url, decode_responses=True)
    try:
        out = {}
        for name in client.scan_iter(match=row_key("t", f"{DATABASE}.{table}", "") + "*"):
            if name == tombstone_key("t", f"{DATABASE}.{table}"):
                continue
            row = client.hgetall(name)
            row.pop("_tl_position")
            keys = PRIMARY_KEYS[table]
            out[_key_text({k: row[k] for k in keys})] = row
        return out
    finally:
        client.close()


def _expected(workload: OrderWorkload, table: str) -> dict[str, dict[str, Any]]:
    keys = PRIMARY_KEYS[table]
    return {
        _key_text({k: row[k] for k in keys}): row
        for row in workload.expected_rows()[f"{DATABASE}.{table}"]
    }


def _mismatches(
    expected: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]], *, nulls_absent: bool
) -> list[str]:
    out = [f"missing {k!r}" for k in expected.keys() - got.keys()]
    out += [f"unexpected {k!r}" for k in got.keys() - expected.keys()]
    for k in expected.keys() & got.keys():
        want = expected[k]
        if nulls_absent:  # Redis keeps NULL as an absent field
            want = {c: v for c, v in want.items() if v is not None}
        if want != got[k]:
            out.append(f"{k!r}: expected {want}, got {got[k]}")
    return out


def test_three_routes_with_kills_a_replay_and_a_reprocess_equal_the_source(
    nats_server: EmbeddedNats,
    postgres: PostgresServer,
    redis: RedisServer,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    admin = postgres.connect()
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS routes")
        cur.execute("CREATE DATABASE routes")
    admin.close()
    env = _env(nats_server, tmp_path / "home", postgres, redis, receiver)
    workload = OrderWorkload(WorkloadSpec(events=EVENTS, seed=19, customers=60))
    messages = [
        (env.subject(DATABASE, m.table), m.payload) for txn in workload.transactions() for m in txn
    ]
    half = len(messages) // 2
    asyncio.run(env.publish(messages[:half]))

    procs = {name: _spawn(env, "run", name, name=name) for name in ROUTES}
    try:
        # Each route killed -9 once while it works through the first half, then restarted.
        for name in ROUTES:
            deadline = time.monotonic() + 60
            while _statuses(env)[name].acked_seq < half // 4:
                assert procs[name].alive(), procs[name].log_tail()
                assert time.monotonic() < deadline, f"{name} made no progress"
                time.sleep(0.05)
            procs[name].kill()
            procs[name] = _spawn(env, "run", name, name=f"{name}-2")
        asyncio.run(env.publish(messages[half:]))
        _wait_caught_up(env, len(messages), procs)
    finally:
        for proc in procs.values():
            proc.stop(20)

    statuses = _statuses(env)
    # The receiver refused its first two requests (a bug of its own): their changes were
    # dead-lettered, nothing else was.
    assert statuses["hook"].dead_letters > 0
    assert 0 == statuses["replica"].dead_letters == statuses["cache"].dead_letters
    assert receiver.bad_signatures == 0

    # The replica from scratch once more: the stream replayed over what it holds.
    replay = _spawn(env, "replay", "replica", "--from-seq", "1", name="replay")
    assert 0 == replay.wait(60), replay.log_tail()
    again = _spawn(env, "run", "replica", "--until-idle", name="replica-replayed")
    assert 0 == again.wait(120), again.log_tail()

    # The dead letters, once the receiver is fixed: re-processed through the API.
    answer = asyncio.run(_api_post(env, "/api/routes/hook/reprocess"))
    assert answer["still_failing"] == 0
    assert answer["applied"] == statuses["hook"].dead_letters
    assert 0 == _statuses(env)["hook"].dead_letters

    problems: dict[str, list[str]] = {}
    for table in ("customers", "orders", "order_items"):
        expected = _expected(workload, table)
        columns = list(next(iter(expected.values())).keys())
        problems[f"postgres {table}"] = _mismatches(
            expected, _pg_rows(postgres, table, columns), nulls_absent=False
        )
        if table != "order_items":
            problems[f"redis {table}"] = _mismatches(
                expected, _redis_rows(redis, table), nulls_absent=True
            )
    problems["webhook orders"] = _mismatches(
        _expected(workload, "orders"), receiver.rows(f"{DATABASE}.orders"), nulls_absent=False
    )
    assert {k: v[:5] for k, v in problems.items() if v} == {}
    assert len(_expected(workload, "orders")) > 100  # the comparison had rows to compare
