"""Routes managed at run time through the API, as ``tidelake run`` supervises them
(pipeline/stack.py ``sync_routes``, route/registry.py): a route paused stops consuming and the
explorer shows its messages pending; a route added starts and catches up while the other keeps
going; a route resumed catches up; a route removed exits by itself. Real nats-server, real
redis-server, a webhook receiver in this process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from stagekit import make_stage_env

from tidelake.api.server import create_app
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config
from tidelake.pipeline import redis as redis_server
from tidelake.pipeline.processes import run_env
from tidelake.pipeline.redis import RedisServer
from tidelake.pipeline.stack import LocalStack
from tidelake.pipeline.webhook_receiver import WebhookReceiver
from tidelake.route.runner import route_status
from tidelake.workload.orders import DATABASE, OrderWorkload, WorkloadSpec

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not redis_server.available(),
        reason="redis-server is installed by scripts/setup (TIDELAKE_SETUP_TESTS=1)",
    ),
]

KEY = "management-test-key"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver(KEY).start()
    try:
        yield server
    finally:
        server.stop()


def _acked(cfg: Config, name: str) -> int:
    async def read() -> int:
        from tidelake.bus.connection import connect

        nc = await connect(cfg.bus, reconnect=False)
        try:
            return (await route_status(nc.jetstream(), cfg, name)).acked_seq
        finally:
            await nc.close()

    return asyncio.run(read())


def _wait_acked(cfg: Config, name: str, seq: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _acked(cfg, name) < seq:
        assert time.monotonic() < deadline, f"route {name} not at {seq}: {_acked(cfg, name)}"
        time.sleep(0.2)


class Api:
    """The API's application, called in this process."""

    def __init__(self, cfg: Config) -> None:
        self.app = create_app(cfg)

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return await c.request(method, path, json=body or {}, timeout=60)

        response = asyncio.run(go())
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


def test_pause_add_resume_remove_through_the_api(
    nats_server: EmbeddedNats, redis: RedisServer, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = make_stage_env(
        nats_server,
        home,
        {"routes": {"cache": {"sink": {"kind": "redis", "url": redis.url}}}},
    )
    workload = OrderWorkload(WorkloadSpec(events=400, seed=3, customers=20))
    messages = [
        (env.subject(DATABASE, m.table), m.payload) for txn in workload.transactions() for m in txn
    ]
    first = len(messages) // 2
    asyncio.run(env.publish(messages[:first]))

    # The supervisor's part of `tidelake run`, on this test's bus.
    stack = LocalStack(home, cfg=env.cfg, config_path=env.config_path)
    stack.url = nats_server.url
    stack.env = run_env(env.config_path, home.resolve(), nats_server.url)
    api = Api(env.cfg)
    try:
        assert ["+cache"] == stack.sync_routes()
        _wait_acked(env.cfg, "cache", first)

        # Paused: nothing more is consumed; the explorer shows the rest pending.
        assert api.call("POST", "/api/routes/cache/pause")["paused"]
        cache = stack.child("route-cache")
        deadline = time.monotonic() + 30  # it reads the registry between batches (every 2 s)
        while "route paused" not in cache.log_since_start():
            assert time.monotonic() < deadline, cache.log_tail()
            time.sleep(0.2)
        asyncio.run(env.publish(messages[first:]))
        time.sleep(4)
        assert first == _acked(env.cfg, "cache")
        page = api.call("GET", f"/api/routes/cache/messages?start_seq={first}&limit=5")
        assert ["applied", "pending", "pending"] == [m["route_state"] for m in page["messages"][:3]]

        # Added at run time: the supervisor starts it; it catches up on its own.
        key_file = tmp_path / "signing.key"
        key_file.write_text(KEY)
        hook = {
            "tables": [f"{DATABASE}.orders"],
            "sink": {"kind": "webhook", "url": receiver.url, "signing_key_file": str(key_file)},
        }
        assert api.call("POST", "/api/routes", {"name": "hook", "route": hook})["added"]
        assert ["+hook"] == stack.sync_routes()
        _wait_acked(env.cfg, "hook", len(messages))
        assert receiver.rows(f"{DATABASE}.orders")
        assert 0 == receiver.bad_signatures
        assert first == _acked(env.cfg, "cache")  # still paused

        assert not api.call("POST", "/api/routes/cache/resume")["paused"]
        _wait_acked(env.cfg, "cache", len(messages))
        listed = {r["name"]: r for r in api.call("GET", "/api/routes")["routes"]}
        assert {"cache", "hook"} == set(listed)
        assert all(r["acked_seq"] == len(messages) for r in listed.values())

        # Removed: its process sees it and exits by itself; the supervisor lets it go.
        assert api.call("DELETE", "/api/routes/hook")["removed"]
        hook_child = stack.child("route-hook")
        assert 0 == hook_child.wait(30), hook_child.log_tail()
        assert ["-hook"] == stack.sync_routes()
        assert [] == stack.sync_routes()
        assert ["cache"] == [r["name"] for r in api.call("GET", "/api/routes")["routes"]]
    finally:
        stack.stop_stages(20)
