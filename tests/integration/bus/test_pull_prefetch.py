"""The pull fetcher's prefetch: the next request is open while the caller works, and stopping
never strands the messages it brings.

A message delivered to an inbox nobody listens to any more comes back only after AckWait,
and a restarted stager would hold every newer message until then (stream order): so stop
waits for the open request to end and keeps what it brought.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.bus.pull import PullFetcher

pytestmark = pytest.mark.integration


def test_stop_keeps_what_the_open_request_brings(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """50 messages, batches of 20: the first fetch leaves a request for 20 more open; after
    stop those 20 are buffered, and only the 10 never asked for stay undelivered."""
    env = stage_env_factory()
    subject = env.subject("shop", "orders")
    run(env.publish([(subject, canal_json("shop", "orders", i, 10**15 + i)) for i in range(50)]))

    async def main() -> tuple[list[int], list[int]]:
        nc = await env.client()
        try:
            puller = await PullFetcher(
                nc, env.cfg.bus.stream.name, env.cfg.bus.consumer.durable, prefetch=20
            ).start()
            first = await puller.fetch(20, 1.0)
            await puller.stop()
            rest = puller.take_buffered()
            for msg in (*first, *rest):
                await msg.ack()
            await nc.flush()
            return [m.metadata.sequence.stream for m in first], [
                m.metadata.sequence.stream for m in rest
            ]
        finally:
            await nc.close()

    first, rest = run(main())
    assert list(range(1, 21)) == first
    assert list(range(21, 41)) == rest
    info = run(env.consumer_info())
    assert 0 == info.num_ack_pending
    assert 10 == info.num_pending


def test_a_fetch_returns_the_prefetched_messages_without_a_new_request(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """Two fetches of 20 return messages 1-20 and 21-40 in order; the second is served by
    the request the first left open."""
    env = stage_env_factory()
    subject = env.subject("shop", "orders")
    run(env.publish([(subject, canal_json("shop", "orders", i, 10**15 + i)) for i in range(40)]))

    async def main() -> list[list[int]]:
        nc = await env.client()
        try:
            puller = await PullFetcher(
                nc, env.cfg.bus.stream.name, env.cfg.bus.consumer.durable, prefetch=20
            ).start()
            lots = [await puller.fetch(20, 1.0), await puller.fetch(20, 1.0)]
            requests = puller._requests
            await puller.stop()
            for msg in (*lots[0], *lots[1], *puller.take_buffered()):
                await msg.ack()
            await nc.flush()
            assert 3 == requests  # the first, the one served by the second fetch, the next
            return [[m.metadata.sequence.stream for m in lot] for lot in lots]
        finally:
            await nc.close()

    assert [list(range(1, 21)), list(range(21, 41))] == run(main())


def test_small_lots_do_not_pile_up_prefetched_messages(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """100 messages, prefetch 20, ten fetches of one: at most two requests' worth (40) is
    ever delivered; the other 60 stay undelivered on the server."""
    env = stage_env_factory()
    subject = env.subject("shop", "orders")
    run(env.publish([(subject, canal_json("shop", "orders", i, 10**15 + i)) for i in range(100)]))

    async def main() -> int:
        nc = await env.client()
        try:
            puller = await PullFetcher(
                nc, env.cfg.bus.stream.name, env.cfg.bus.consumer.durable, prefetch=20
            ).start()
            taken = [m for _ in range(10) for m in await puller.fetch(1, 1.0)]
            await puller.stop()
            delivered = len(taken) + len(puller.take_buffered())
            info = await nc.jetstream().consumer_info(
                env.cfg.bus.stream.name, env.cfg.bus.consumer.durable
            )
            assert 100 - delivered == info.num_pending
            return delivered
        finally:
            await nc.close()

    delivered = run(main())
    assert 10 < delivered <= 40
