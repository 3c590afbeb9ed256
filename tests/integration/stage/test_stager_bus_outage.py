"""A stager waits a bus outage out (issue 23, chaos finding): nats-server paused past AckWait
while the stager holds a backlog behind a gap, or down when the stager starts. The stager
process survives (same pid), acks and dead-letters nothing because of the outage, and once
the bus is back every message is staged exactly once.

Each test stops this module's own nats-server (the ``nats_server`` fixture is per module)
and brings it back before it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from stagekit import StageEnv, canal_json, run, stop_process, wait_for

from tidelake.bus.server import EmbeddedNats

pytestmark = pytest.mark.integration

ACK_WAIT_S = 2.0


def _publish(env: StageEnv, first: int, n: int) -> None:
    run(
        env.publish(
            [
                (env.subject("shop", "orders"), canal_json("shop", "orders", i, 450 * 10**15 + i))
                for i in range(first, first + n)
            ]
        )
    )


def _take_first_and_vanish(env: StageEnv) -> None:
    """Pull message 1 on the stager's consumer and close without acking it: a stager that
    died holding it. Its redelivery comes only after AckWait, so the real stager holds the
    rest behind that gap (the code path that checks the gap on the bus)."""

    async def take() -> None:
        nc = await env.client()
        try:
            psub = await nc.jetstream().pull_subscribe_bind(
                env.cfg.bus.consumer.durable, stream=env.cfg.bus.stream.name
            )
            msgs = await psub.fetch(1, timeout=5)
            assert [1] == [m.metadata.sequence.stream for m in msgs]
        finally:
            await nc.close()

    run(take())


def _all_acked(env: StageEnv) -> bool:
    try:
        info = run(env.consumer_info())
    except Exception:  # the server still coming back
        return False
    return (0, 0) == (info.num_pending, info.num_ack_pending)


def _assert_exactly_once(env: StageEnv, n: int) -> None:
    staged = env.staged()
    assert dict.fromkeys(range(1, n + 1), 1) == dict(staged.seq_counts)
    assert {"shop.orders": n} == dict(staged.rows_by_table)
    assert [] == run(env.dlq_messages())


@pytest.fixture
def outage_env(stage_env_factory: Callable[..., StageEnv]) -> StageEnv:
    return stage_env_factory(
        # A short connect timeout: a first connection gives up (and is retried by the
        # stager) after 3 s instead of nats-py retrying inside one attempt.
        bus={"consumer": {"ack_wait_s": ACK_WAIT_S}, "connect_timeout_s": 1.0},
        stage={"max_events": 500, "max_age_s": 0.3, "fetch_batch": 5000},
    )


def test_nats_paused_past_ack_wait_while_holding_a_backlog_behind_a_gap(
    outage_env: StageEnv, nats_server: EmbeddedNats
) -> None:
    """Chaos finding: ``nats: timeout`` from the gap check killed the stager. nats-server
    is SIGSTOPped for three AckWaits while the stager holds 2..n behind a gap; the same
    stager process then stages everything exactly once, nothing dead-lettered."""
    n = 3000
    _publish(outage_env, 0, n)
    _take_first_and_vanish(outage_env)
    proc = outage_env.spawn_stager(once=False, name="outage")
    try:
        wait_for(
            lambda: run(outage_env.consumer_info()).num_ack_pending == n, 30, "stager holds 2..n"
        )
        pid = proc.pid
        nats_server.process.pause()  # SIGSTOP: clients' requests time out
        try:
            time.sleep(3 * ACK_WAIT_S + 6)  # past nats-py's 5 s request timeout too
            assert proc.alive(), outage_env.log_text("outage")
        finally:
            nats_server.process.resume()
        wait_for(lambda: _all_acked(outage_env), 90, "everything staged after the outage")
        assert pid == proc.pid
        assert proc.alive(), outage_env.log_text("outage")
        assert "bus unreachable; retrying" in outage_env.log_text("outage")
    finally:
        status = stop_process(proc)
    assert 0 == status, outage_env.log_text("outage")
    _assert_exactly_once(outage_env, n)


def test_stager_started_while_nats_is_down_waits_for_it(
    outage_env: StageEnv, nats_server: EmbeddedNats
) -> None:
    """Chaos finding: a stager (re)started while nats-server is down exited with a
    connection error. It now waits with back-off and, once the server is back, stages the
    backlog exactly once as the same process."""
    n = 2000
    _publish(outage_env, 0, n)
    nats_server.stop()
    try:
        proc = outage_env.spawn_stager(once=False, name="early")
        try:
            time.sleep(3 * outage_env.cfg.bus.connect_timeout_s + 4.0)  # past a connect
            assert proc.alive(), outage_env.log_text("early")
            pid = proc.pid
        finally:
            nats_server.start()
        try:
            wait_for(lambda: _all_acked(outage_env), 90, "the backlog staged")
            assert pid == proc.pid
            assert "bus unreachable at start-up; retrying" in outage_env.log_text("early")
        finally:
            status = stop_process(proc)
    finally:
        if not nats_server.running:
            nats_server.start()
    assert 0 == status, outage_env.log_text("early")
    _assert_exactly_once(outage_env, n)
