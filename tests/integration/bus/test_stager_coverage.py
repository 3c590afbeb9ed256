"""Which subjects no stager takes (bus/coverage.py), against the real nats-server: the
stagers' consumers are told apart by the marker provisioning writes into their metadata."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from stagekit import StageEnv, canal_json, run

from tidelake.api.jetstream import JetStream
from tidelake.bus.coverage import Coverage, stream_coverage
from tidelake.bus.provision import (
    STAGER_METADATA,
    Provisioned,
    consumer_config,
    ensure_consumer,
    own_metadata,
)
from tidelake.config import BusConfig

pytestmark = pytest.mark.integration


def _worker(probe: StageEnv, durable: str, subjects: list[str]) -> BusConfig:
    """The bus settings of a worker on the probe's stream taking ``subjects``."""
    bus = probe.cfg.bus.model_copy(deep=True)
    bus.consumer.durable = durable
    bus.consumer.filter_subjects = subjects
    return bus


async def _coverage(env: StageEnv) -> Coverage | None:
    nc = await env.client()
    try:
        return await stream_coverage(nc.jetstream(), env.cfg.bus.stream.name)
    finally:
        await nc.close()


def test_coverage_names_the_one_subject_no_worker_takes(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """Two workers take shop.a and shop.b; messages on shop.a, shop.b and shop.c: coverage
    names exactly shop.c with its three messages, and both stagers. A route's consumer (every
    subject, no marker) and an ordered consumer (a view's replay) take nothing here; serve's
    bus state lists it under ``unstaged``."""
    env = stage_env_factory()
    stream = env.cfg.bus.stream.name
    a, b, c = (env.subject("shop", t) for t in ("a", "b", "c"))

    async def setup() -> None:
        nc = await env.client()
        try:
            js = nc.jetstream()
            # The fixture's own stager takes every subject: this stream has workers instead.
            await js.delete_consumer(stream, env.cfg.bus.consumer.durable)
            await ensure_consumer(js, _worker(env, "worker-1", [a]))
            await ensure_consumer(js, _worker(env, "worker-2", [b]))
            route = dataclasses.replace(
                consumer_config(env.cfg.bus), name=None, durable_name="route-sink", metadata=None
            )
            await js.add_consumer(stream, route)
            await js.subscribe(">", stream=stream, ordered_consumer=True)
            messages = [(a, 1), (a, 2), (b, 3), (c, 4), (c, 5), (c, 6)]
            await env.publish([(s, canal_json("shop", s[-1], i, 10**15 + i)) for s, i in messages])
            assert Coverage(("worker-1", "worker-2"), {c: 3}) == await stream_coverage(js, stream)
        finally:
            await nc.close()
        bus = JetStream(env.cfg.bus, env.server.url)
        try:
            expected = {
                "subjects": {c: 3},
                "subject_count": 1,
                "messages": 3,
                "stagers": ["worker-1", "worker-2"],
            }
            assert expected == (await bus.state([]))["unstaged"]
        finally:
            await bus.close()

    run(setup())


def test_a_consumer_made_before_the_marker_gets_it_on_the_next_provisioning(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """A stager's consumer created without the marker (an older tidelake) leaves coverage
    unknown; the next provisioning adds the marker in place (an update of ``metadata`` only),
    the one after changes nothing (the server's own ``_nats.*`` keys do not count), and
    coverage then sees the stager take everything."""
    env = stage_env_factory()
    bus = env.cfg.bus
    durable = bus.consumer.durable

    async def go() -> tuple[Coverage | None, list[Provisioned], dict[str, str], Coverage | None]:
        nc = await env.client()
        try:
            js = nc.jetstream()
            await js.delete_consumer(bus.stream.name, durable)
            old = dataclasses.replace(consumer_config(bus), metadata=None)
            created = await js.add_consumer(bus.stream.name, old)
            assert {} == own_metadata(created.config.metadata)
            before = await stream_coverage(js, bus.stream.name)
            report: list[Provisioned] = []
            await ensure_consumer(js, bus, report)
            info = await ensure_consumer(js, bus, report)
            after = await stream_coverage(js, bus.stream.name)
            return before, report, info.config.metadata or {}, after
        finally:
            await nc.close()

    before, report, metadata, after = run(go())
    assert before is None
    assert [("updated", ("metadata",)), ("unchanged", ())] == [(p.action, p.fields) for p in report]
    assert STAGER_METADATA == own_metadata(metadata)
    assert Coverage((durable,), {}) == after
