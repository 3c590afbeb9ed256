"""Provisioning the streams and the consumer is idempotent and applies config changes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from stagekit import StageEnv, run

from tidelake.bus.provision import SERVER_MAX_DELIVER, ensure_consumer, ensure_streams
from tidelake.config import BusConfig
from tidelake.errors import BusError

pytestmark = pytest.mark.integration


async def _provision(env: StageEnv, bus: BusConfig) -> tuple[object, ...]:
    nc = await env.client()
    try:
        js = nc.jetstream()
        cdc, dlq = await ensure_streams(js, bus)
        consumer = await ensure_consumer(js, bus)
        return cdc, dlq, consumer
    finally:
        await nc.close()


def test_provisioning_twice_changes_nothing(stage_env: StageEnv) -> None:
    """A second run (the fixture already ran one) finds everything as configured."""
    cdc, dlq, consumer = run(_provision(stage_env, stage_env.cfg.bus))
    again = run(_provision(stage_env, stage_env.cfg.bus))
    assert (cdc, dlq, consumer) == again
    bus = stage_env.cfg.bus
    assert cdc.config.subjects == bus.stream.subjects  # type: ignore[attr-defined]
    assert cdc.config.storage == "file"  # type: ignore[attr-defined]
    assert cdc.config.retention == "limits"  # type: ignore[attr-defined]
    assert cdc.config.duplicate_window == bus.stream.duplicate_window_s  # type: ignore[attr-defined]
    assert dlq.config.subjects == [f"{bus.dlq.subject_prefix}.>"]  # type: ignore[attr-defined]
    cfg = consumer.config  # type: ignore[attr-defined]
    assert (cfg.durable_name, cfg.ack_policy) == (bus.consumer.durable, "explicit")
    assert cfg.ack_wait == bus.consumer.ack_wait_s
    assert cfg.max_deliver == SERVER_MAX_DELIVER
    assert cfg.max_ack_pending == bus.consumer.max_ack_pending


def test_changed_limits_are_updated_in_place(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """A new max_age / ack_wait is applied without recreating the stream or consumer."""
    env = stage_env_factory()
    cdc, _, consumer = run(_provision(env, env.cfg.bus))
    changed = env.cfg.bus.model_copy(deep=True)
    changed.stream.max_age_s = 3600
    changed.consumer.ack_wait_s = 7
    cdc2, _, consumer2 = run(_provision(env, changed))
    assert cdc2.config.max_age == 3600  # type: ignore[attr-defined]
    assert cdc2.created == cdc.created  # type: ignore[attr-defined]
    assert consumer2.config.ack_wait == 7  # type: ignore[attr-defined]
    assert consumer2.created == consumer.created  # type: ignore[attr-defined]


def test_a_changed_filter_subject_is_refused_not_silently_recreated(
    stage_env: StageEnv,
) -> None:
    """A change that would need the consumer recreated raises BusError naming the field."""
    changed = stage_env.cfg.bus.model_copy(deep=True)
    changed.consumer.filter_subject = stage_env.subject("shop", "orders")
    with pytest.raises(BusError, match="filter_subject"):
        run(_provision(stage_env, changed))
