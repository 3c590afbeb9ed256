"""Manifests follow stream order even when JetStream delivers out of order.

A restarted stager gets new messages at once, but those its dead predecessor held only after
AckWait. Were the new ones staged first, the ingest (which skips every sequence at or below
a table's checkpoint) would later skip the held ones as duplicates: lost rows. The stager
holds messages back until the gap before them is redelivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus.connection import connect
from tidelake.stage.consumer import run_stager

pytestmark = pytest.mark.integration


async def _hold_unacked(env: StageEnv, n: int) -> None:
    """Play the dead predecessor: take the first ``n`` deliveries and never ack them."""
    nc = await connect(env.cfg.bus, env.server.url)
    try:
        js = nc.jetstream()
        psub = await js.pull_subscribe_bind(
            env.cfg.bus.consumer.durable, stream=env.cfg.bus.stream.name
        )
        got = await psub.fetch(n, timeout=5)
        assert n == len(got)
    finally:
        await nc.close()  # gone without acking, like a SIGKILLed process


def test_restarted_stager_stages_a_predecessors_messages_before_newer_ones(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """Messages 1-30 held unacked by a dead stager; 31-60 arrive; the new stager's manifests
    still cover 1..60 in order, each starting right after the previous one ended."""
    env = stage_env_factory(
        bus={"consumer": {"ack_wait_s": 2.0}}, stage={"max_events": 10, "max_age_s": 0.2}
    )
    subject = env.subject("shop", "orders")
    run(env.publish([(subject, canal_json("shop", "orders", i, 10**15 + i)) for i in range(30)]))
    run(_hold_unacked(env, 30))
    run(
        env.publish([(subject, canal_json("shop", "orders", i, 10**15 + i)) for i in range(30, 60)])
    )
    asyncio.run(run_stager(env.cfg, once=True))

    staged = env.staged()
    by_creation = sorted(staged.manifests, key=lambda m: m.batch_id)
    ends = [(m.seq_first, m.seq_last) for m in by_creation]
    expected_starts = [1] + [last + 1 for _, last in ends[:-1]]
    assert expected_starts == [first for first, _ in ends]
    assert set(range(1, 61)) == set(staged.seq_counts)
    assert {1} == set(staged.seq_counts.values())
