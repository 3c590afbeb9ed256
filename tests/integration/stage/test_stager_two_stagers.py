"""Two stagers on one durable consumer (failover; ``tidelake chaos --stagers 2``) catch up
on a backlog at the speed of one, exactly once (issue 23, chaos finding).

The backlog is one a dead stager held: every message is redelivered after AckWait, split
between the two live stagers in small interleaved lots. Before the fix each stager held
messages ahead of a gap the other one held and they took turns, one lot per gap check
(about a second each: catch-up took 200-600 s in chaos runs). Now the stager that sees the
other fill its gap hands its held messages back and pauses fetching, so one takes the
stream (``Stager._give_back``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from stagekit import StageEnv, canal_json, run, stop_process, wait_for

pytestmark = pytest.mark.integration

#: Small lots: the redelivered backlog interleaves finely between the two stagers.
FETCH_BATCH = 5
#: One gap check per lot would take N / FETCH_BATCH seconds (800 s); the fix needs a few.
CATCH_UP_LIMIT_S = 80.0


def _publish(env: StageEnv, n: int) -> None:
    tables = ("orders", "customers")
    run(
        env.publish(
            [
                (
                    env.subject("shop", tables[i % 2]),
                    canal_json("shop", tables[i % 2], i, 460 * 10**15 + i),
                )
                for i in range(n)
            ]
        )
    )


def _take_all_and_vanish(env: StageEnv, n: int) -> None:
    """Pull the whole backlog on the stagers' consumer and close without acking: a stager
    killed holding it. Everything comes back after AckWait, to whoever pulls then."""

    async def take() -> None:
        nc = await env.client()
        try:
            psub = await nc.jetstream().pull_subscribe_bind(
                env.cfg.bus.consumer.durable, stream=env.cfg.bus.stream.name
            )
            got = 0
            while got < n:
                got += len(await psub.fetch(n - got, timeout=5))
        finally:
            await nc.close()

    run(take())


def _all_acked(env: StageEnv) -> bool:
    info = run(env.consumer_info())
    return (0, 0) == (info.num_pending, info.num_ack_pending)


def test_two_stagers_catch_up_on_a_redelivered_backlog_exactly_once(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """4,000 messages redelivered in interleaved lots of 5 to two live stagers: staged
    exactly once, nothing dead-lettered, both processes exit 0, and the catch-up ends well
    within a bound the take-turns bug exceeds tenfold (one lot per ~1 s gap check)."""
    n = 4000
    env = stage_env_factory(
        bus={"consumer": {"ack_wait_s": 3.0}},
        stage={"max_events": 1000, "max_age_s": 0.3, "fetch_batch": FETCH_BATCH},
    )
    _publish(env, n)
    _take_all_and_vanish(env, n)
    procs = [env.spawn_stager(once=False, name=f"twin{i}") for i in (1, 2)]
    try:
        started = time.monotonic()
        wait_for(lambda: _all_acked(env), CATCH_UP_LIMIT_S, "both stagers catch up")
        took_s = time.monotonic() - started
        assert all(p.alive() for p in procs), [env.log_text(f"twin{i}") for i in (1, 2)]
    finally:
        statuses = [stop_process(p) for p in procs]
    assert [0, 0] == statuses, [env.log_text(f"twin{i}") for i in (1, 2)]
    staged = env.staged()
    assert dict.fromkeys(range(1, n + 1), 1) == dict(staged.seq_counts)
    assert {"shop.orders": n // 2, "shop.customers": n // 2} == dict(staged.rows_by_table)
    assert [] == run(env.dlq_messages())
    print(f"two stagers caught up on {n} redelivered messages in {took_s:.1f} s")
