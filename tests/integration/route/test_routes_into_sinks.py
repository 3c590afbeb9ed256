"""One stream, three destinations, operated by hand: the order workload through the three
routes of ``demo --sinks`` (pipeline/demo_sinks.py: a real PostgreSQL, a real redis-server,
a webhook receiver), each route its own ``tidelake route run`` process, each killed -9 once
mid-stream and started again; then ``tidelake route replay`` from the first sequence, and the
webhook route's dead letters re-processed through the API (``POST
/api/routes/hook/reprocess``). Every destination equals the workload's expected final state,
row by row and value by value.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from stagekit import REPO, StageEnv, make_stage_env

from tidelake.api.server import create_app
from tidelake.bus.server import EmbeddedNats
from tidelake.config import load_config
from tidelake.pipeline import redis as redis_server
from tidelake.pipeline.demo_sinks import ROUTES, DemoSinks, statuses
from tidelake.runtime.processes import ChildProcess, free_port, tidelake_argv
from tidelake.workload.orders import DATABASE, OrderWorkload, WorkloadSpec

pytestmark = [
    pytest.mark.timeout(420),
    pytest.mark.skipif(
        not redis_server.available(),
        reason="redis-server is installed by scripts/setup (TIDELAKE_SETUP_DATABASES=1, or "
        "TIDELAKE_SETUP_TESTS=1)",
    ),
]

EVENTS = 1_500


@pytest.fixture
def sinks(tmp_path: Path) -> Iterator[DemoSinks]:
    sinks = DemoSinks(tmp_path / "sinks").start()
    try:
        yield sinks
    finally:
        sinks.stop()


def _spawn(
    env: StageEnv, sinks: DemoSinks, *args: str, name: str, metrics_port: int | None = None
) -> ChildProcess:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    child_env["TIDELAKE_CONFIG"] = str(env.config_path)
    child_env.update(sinks.env())
    if metrics_port is not None:
        child_env["TIDELAKE_METRICS__PORT"] = str(metrics_port)
    proc = ChildProcess(
        name,
        tidelake_argv("route", *args),
        log_path=env.log_dir / f"{name}.log",
        base_env=child_env,
        cwd=REPO,
    )
    return proc.start()


def _metrics(port: int) -> str:
    """A route process's own /metrics (it may still be binding its port)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"no /metrics on port {port}"
            time.sleep(0.2)


async def _api_post(env: StageEnv, sinks: DemoSinks, path: str) -> dict[str, Any]:
    """POST to the API (``tidelake serve``'s application, in this process)."""
    cfg = load_config(env.config_path, environ=sinks.env())
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
        now = statuses(env.cfg)
        if all(s.acked_seq >= last_seq and s.in_flight == 0 for s in now.values()):
            return
        assert time.monotonic() < deadline, f"routes not caught up to {last_seq}: {now}"
        time.sleep(0.3)


def test_three_routes_with_kills_a_replay_and_a_reprocess_equal_the_source(
    nats_server: EmbeddedNats, sinks: DemoSinks, tmp_path: Path
) -> None:
    env = make_stage_env(nats_server, tmp_path / "home", sinks.settings())
    workload = OrderWorkload(WorkloadSpec(events=EVENTS, seed=19, customers=60))
    messages = [
        (env.subject(DATABASE, m.table), m.payload) for txn in workload.transactions() for m in txn
    ]
    half = len(messages) // 2
    asyncio.run(env.publish(messages[:half]))

    ports = {name: free_port() for name in ROUTES}
    procs = {
        name: _spawn(env, sinks, "run", name, name=name, metrics_port=ports[name])
        for name in ROUTES
    }
    scraped: list[str] = []  # each route process's own /metrics, read before it goes
    try:
        # Each route killed -9 once while it works through the first half, then restarted.
        for name in ROUTES:
            deadline = time.monotonic() + 60
            while statuses(env.cfg)[name].acked_seq < half // 4:
                assert procs[name].alive(), procs[name].log_tail()
                assert time.monotonic() < deadline, f"{name} made no progress"
                time.sleep(0.05)
            scraped.append(_metrics(ports[name]))
            procs[name].kill()
            procs[name] = _spawn(
                env, sinks, "run", name, name=f"{name}-2", metrics_port=ports[name]
            )
        asyncio.run(env.publish(messages[half:]))
        _wait_caught_up(env, len(messages), procs)
        scraped += [_metrics(ports[name]) for name in ROUTES]
    finally:
        for proc in procs.values():
            assert 0 == proc.stop(20), proc.log_tail()  # SIGTERM: a clean stop

    # Every documented tidelake_router_* metric was sampled by a route process.
    samples = {
        line.split("{")[0].split(" ")[0]
        for text in scraped
        for line in text.splitlines()
        if not line.startswith("#")
    }
    doc = (REPO / "docs" / "metrics.md").read_text()
    router = sorted(set(re.findall(r"`(tidelake_router_[a-z_]+)`", doc)))
    assert len(router) >= 6
    assert [] == [n for n in router if not ({n, f"{n}_bucket", f"{n}_count"} & samples)]
    assert 'tidelake_router_dead_letters_total{reason="sink_rejected",route="hook"}' in "".join(
        scraped
    )

    before = statuses(env.cfg)
    # The receiver refused its first two requests (a bug of its own): their changes were
    # dead-lettered, nothing else was.
    assert before["hook"].dead_letters > 0
    assert 0 == before["replica"].dead_letters
    assert 0 == before["cache"].dead_letters
    assert 0 == sinks.receiver.bad_signatures

    # The replica from scratch once more: the stream replayed over what it holds.
    replay = _spawn(env, sinks, "replay", "replica", "--from-seq", "1", name="replay")
    assert 0 == replay.wait(60), replay.log_tail()
    again = _spawn(env, sinks, "run", "replica", "--until-idle", name="replica-replayed")
    assert 0 == again.wait(120), again.log_tail()
    assert statuses(env.cfg)["replica"].acked_seq == len(messages)

    # The dead letters, once the receiver is fixed: re-processed through the API.
    answer = asyncio.run(_api_post(env, sinks, "/api/routes/hook/reprocess"))
    assert 0 == answer["still_failing"]
    assert before["hook"].dead_letters == answer["applied"]
    assert 0 == statuses(env.cfg)["hook"].dead_letters

    comparisons = sinks.verify(workload)
    assert {c.table: c.samples for c in comparisons if c.mismatches} == {}
    assert all(c.rows_expected > 20 for c in comparisons)  # there were rows to compare
    assert {c.table for c in comparisons} == {
        f"{sink} {DATABASE}.{table}"
        for sink, tables in (
            ("postgres", ("customers", "orders", "order_items")),
            ("redis", ("customers", "orders")),
            ("webhook", ("orders",)),
        )
        for table in tables
    }
