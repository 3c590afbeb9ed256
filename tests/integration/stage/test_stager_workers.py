"""Several stagers over one stream, each on its own durable consumer and subject set
(``bus.consumer.filter_subjects``: one worker's share), against the real nats-server.

Each stages exactly the messages of its own subjects, in stream order, and quickly although
its stream sequences skip every other worker's message; a restarted one stages a dead
predecessor's messages before newer ones, the gap check looking at every filter.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_consumer
from tidelake.errors import BusError
from tidelake.stage.consumer import run_stager
from tidelake.view.replay import replay

pytestmark = pytest.mark.integration

TABLES = ("a", "b", "c", "d")


def _workers(factory: Callable[..., StageEnv], **stage: Any) -> tuple[StageEnv, StageEnv]:
    """Worker 1 takes tables a and b, worker 2 table c, on one stream; nobody takes d."""
    probe = factory()  # names the test's stream
    stream = probe.cfg.bus.stream
    first = factory(
        bus={
            "stream": {"name": stream.name, "subjects": stream.subjects},
            "dlq": {
                "name": probe.cfg.bus.dlq.name,
                "subject_prefix": probe.cfg.bus.dlq.subject_prefix,
            },
            "consumer": {
                "durable": "worker-1",
                "ack_wait_s": 2.0,
                "filter_subjects": [probe.subject("shop", "a"), probe.subject("shop", "b")],
            },
        },
        ingest={"tables": ["shop.a", "shop.b"]},
        stage={"max_events": 40, "max_age_s": 0.2, **stage},
    )
    second = factory(
        bus={
            "stream": {"name": stream.name, "subjects": stream.subjects},
            "dlq": {
                "name": probe.cfg.bus.dlq.name,
                "subject_prefix": probe.cfg.bus.dlq.subject_prefix,
            },
            "consumer": {
                "durable": "worker-2",
                "ack_wait_s": 2.0,
                "filter_subjects": [probe.subject("shop", "c")],
            },
        },
        ingest={"tables": ["shop.c"]},
        stage={"max_events": 40, "max_age_s": 0.2, **stage},
    )
    return first, second


def _publish(env: StageEnv, rows: range) -> dict[str, set[int]]:
    """Rows round-robin over the four tables; the stream sequences of each table."""
    messages = [
        (env.subject("shop", TABLES[i % 4]), canal_json("shop", TABLES[i % 4], i, 10**15 + i))
        for i in rows
    ]
    run(env.publish(messages))
    out: dict[str, set[int]] = {t: set() for t in TABLES}
    for i in rows:
        out[TABLES[i % 4]].add(i + 1)  # the stream holds nothing else: sequence = row + 1
    return out


def _assert_in_order(env: StageEnv) -> set[int]:
    """Each sequence staged once, manifests in stream order; the sequences staged."""
    staged = env.staged()
    ranges = sorted((m.seq_first, m.seq_last) for m in staged.manifests)
    for (_, last), (first, _) in itertools.pairwise(ranges):
        assert first > last
    assert {1} == set(staged.seq_counts.values())
    return set(staged.seq_counts)


def test_each_worker_stages_its_own_subjects_in_order_and_fast(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """600 messages round-robin over four tables: worker 1 stages a and b, worker 2 c,
    nobody d; each within seconds (one gap check a second per skipped sequence would take
    minutes)."""
    one, two = _workers(stage_env_factory)
    seqs = _publish(one, range(600))
    started = time.monotonic()
    asyncio.run(run_stager(one.cfg, once=True))
    asyncio.run(run_stager(two.cfg, once=True))
    took_s = time.monotonic() - started
    assert seqs["a"] | seqs["b"] == _assert_in_order(one)
    assert seqs["c"] == _assert_in_order(two)
    assert took_s < 30, took_s


async def _hold_unacked(env: StageEnv, n: int) -> None:
    """Play a dead stager of the worker: take its first ``n`` deliveries, never ack them."""
    nc = await connect(env.cfg.bus, env.server.url)
    try:
        psub = await nc.jetstream().pull_subscribe_bind(
            env.cfg.bus.consumer.durable, stream=env.cfg.bus.stream.name
        )
        assert n == len(await psub.fetch(n, timeout=5))
    finally:
        await nc.close()


def test_a_restarted_worker_stager_stages_its_predecessors_messages_first(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """Worker 1's first 20 deliveries held by a dead stager (AckWait 2 s), 200 more
    messages published: its new stager still stages every message of a and b once, in
    stream order; worker 2 is untouched by it."""
    one, two = _workers(stage_env_factory)
    first = _publish(one, range(80))
    run(_hold_unacked(one, 20))
    later = _publish(one, range(80, 280))
    asyncio.run(run_stager(one.cfg, once=True))
    asyncio.run(run_stager(two.cfg, once=True))
    mine = first["a"] | first["b"] | later["a"] | later["b"]
    assert mine == _assert_in_order(one)
    assert first["c"] | later["c"] == _assert_in_order(two)


def test_a_changed_subject_set_is_refused(stage_env_factory: Callable[..., StageEnv]) -> None:
    """A worker's consumer keeps its subject set: provisioning the same durable with another
    set raises BusError naming filter_subjects, the same set (of one subject too) changes
    nothing."""
    one, _ = _workers(stage_env_factory)

    async def provision(bus: Any) -> Any:
        nc = await connect(bus, one.server.url)
        try:
            return await ensure_consumer(nc.jetstream(), bus)
        finally:
            await nc.close()

    info = run(provision(one.cfg.bus))
    assert sorted(one.cfg.bus.consumer.filter_subjects) == sorted(info.config.filter_subjects)
    changed = one.cfg.bus.model_copy(deep=True)
    changed.consumer.filter_subjects = [one.subject("shop", "a")]
    with pytest.raises(BusError, match="filter_subjects"):
        run(provision(changed))
    # A set of one subject, as the server keeps it, is found unchanged on the next start.
    single = changed.model_copy(deep=True)
    single.consumer.durable = "worker-3"
    first = run(provision(single))
    assert first.created == run(provision(single)).created


def test_a_replay_reads_only_the_workers_subjects(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """Replaying table a with worker 1's config reads the messages of its two subjects only
    (a and b, not c or d), and gives every row event of a in stream order."""
    one, _ = _workers(stage_env_factory)
    seqs = _publish(one, range(200))
    through = max(seqs["a"])
    replayed = asyncio.run(replay(one.cfg, "shop.a", through, one.server.url))
    assert len({s for s in seqs["a"] | seqs["b"] if s <= through}) == replayed.messages
    assert sorted(seqs["a"]) == [e.seq for e in replayed.events]
