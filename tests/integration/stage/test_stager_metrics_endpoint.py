"""``tidelake stage`` with ``TIDELAKE_METRICS__PORT``: its own ``/healthz`` and ``/metrics``
against a real nats-server (the probes of the shipped deployments use exactly this), and a
port already taken fails the start at once with a clear error."""

from __future__ import annotations

import orjson
import pytest
from stagekit import StageEnv, canal_json, run, stop_process, wait_for

from support.scrape import get as _get
from support.scrape import samples as _samples
from tidelake.runtime.processes import free_port

pytestmark = pytest.mark.integration


def test_stage_serves_healthz_and_its_own_counters(stage_env: StageEnv) -> None:
    """While the stager runs, /healthz answers 200 ok and /metrics holds what this process
    staged (tidelake_stager_*), tidelake_build_info and the process collectors."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = stage_env.spawn_stager(once=False, extra_env={"TIDELAKE_METRICS__PORT": str(port)})
    try:
        wait_for(lambda: _get(f"{base}/healthz")[0] == 200, 30, "/healthz to answer 200")
        status, body = _get(f"{base}/healthz")
        health = orjson.loads(body)
        assert (200, "ok", "stager", proc.pid) == (
            status,
            health["status"],
            health["process"],
            health["pid"],
        )
        n = 25
        run(
            stage_env.publish(
                [
                    (stage_env.subject("shop", "orders"), canal_json("shop", "orders", i, 10 + i))
                    for i in range(n)
                ]
                + [(stage_env.subject("shop", "orders"), b"not json at all")]
            )
        )

        def staged() -> float:
            return _samples(_get(f"{base}/metrics")[1]).get(
                "tidelake_stager_messages_received_total", 0
            )

        wait_for(lambda: staged() == n + 1, 30, "the stager's counters to show the batch")
        samples = _samples(_get(f"{base}/metrics")[1])
        assert n == samples["tidelake_stager_messages_staged_total"]
        assert 1 == samples['tidelake_stager_messages_dead_lettered_total{reason="not_json"}']
        assert n == samples['tidelake_stager_events_staged_total{table="shop.orders"}']
        assert samples["tidelake_stager_batches_total"] >= 1
        assert samples["tidelake_stager_flush_duration_seconds_count"] >= 1
        build = [k.split("{")[1] for k in samples if k.startswith("tidelake_build_info{")]
        assert [True, True] == [f'{label}="' in "".join(build) for label in ("version", "python")]
        assert 1 == len(build)
        assert samples["process_cpu_seconds_total"] > 0
        assert "python_info" in {k.split("{")[0] for k in samples}
        assert samples['tidelake_main_loop_age_seconds{process="stager"}'] < 5
        assert 404 == _get(f"{base}/nothing")[0]
    finally:
        assert 0 == stop_process(proc)


def test_a_taken_metrics_port_fails_the_start(stage_env: StageEnv) -> None:
    """A second stager given the port the first one serves on exits 2 at once, naming the
    setting and the address, instead of running without its probe endpoint."""
    port = free_port()
    env = {"TIDELAKE_METRICS__PORT": str(port)}
    first = stage_env.spawn_stager(once=False, extra_env=env)
    try:
        wait_for(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 30, "the first stager")
        second = stage_env.spawn_stager(once=False, name="second", extra_env=env)
        assert 2 == second.wait(30)
        log = " ".join(stage_env.log_text("second").split())
        assert f"metrics.port: cannot serve /metrics and /healthz on 127.0.0.1:{port}" in log
        assert "the port is taken" in log
    finally:
        assert 0 == stop_process(first)
