"""Traces from publish to staging, and to a route's sink, on real components
(docs/tracing.md): the capture's publisher, a ``tidelake stage --once`` child and a ``tidelake
route run --until-idle`` child export by OTLP/HTTP to a real Jaeger (tests/support/jaeger.py);
the stage span of each batch is linked to the publish span of every message it holds, and
its context is in the batch's manifest for the ingest; the route's span of each batch it
applies is linked to the publish spans as well."""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stagekit import REPO, StageEnv, canal_json, run, wait_for

from support.jaeger import Jaeger, refs, span_ctx, tags
from tidelake.capture.publisher import Publisher
from tidelake.pipeline.webhook_receiver import WebhookReceiver
from tidelake.runtime import tracing
from tidelake.runtime.processes import tidelake_argv

pytestmark = pytest.mark.integration

_services = itertools.count(1)


def _traced_env(
    factory: Callable[..., StageEnv], jaeger: Jaeger, *, routes: Any = None, **extra: Any
) -> StageEnv:
    prefix = f"tl{next(_services)}"
    settings = {
        "enabled": True,
        "otlp_endpoint": jaeger.otlp_endpoint,
        "service_name": prefix,
        **extra,
    }
    more = {"routes": routes} if routes else {}
    return factory(tracing=settings, stage={"max_age_s": 0.5, "max_events": 1000}, **more)


async def _publish(env: StageEnv, count: int) -> None:
    async with await Publisher.open(env.cfg.bus, env.server.url) as pub:
        for i in range(count):
            subject = env.subject("shop", "orders")
            payload = canal_json("shop", "orders", i, 1000 + i)
            await pub.publish(subject, payload, f"orders-{i}", headers={"Tidelake-Key": "k"})
        await pub.durable()


def _spans_of(jaeger: Jaeger, service: str, want: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def enough() -> bool:
        nonlocal found
        found = jaeger.spans(service)
        return len(found) >= want

    wait_for(enough, 30, f"{want} spans of {service} in jaeger")
    return found


def test_stage_span_links_every_publish_span(
    stage_env_factory: Callable[..., StageEnv], jaeger: Jaeger, tmp_path: Path
) -> None:
    env = _traced_env(stage_env_factory, jaeger)
    prefix = env.cfg.tracing.service_name
    count = 12
    tracing.setup(env.cfg.tracing, "capture")
    try:
        run(_publish(env, count))
    finally:
        tracing.shutdown()  # exports the publish spans

    # The messages on the bus carry traceparent; payload and Nats-Msg-Id are as published.
    proc = env.spawn_stager(once=True)
    assert 0 == proc.wait(120), env.log_text()
    staged = env.staged()
    assert count == sum(m.staged for m in staged.manifests)

    publish = _spans_of(jaeger, f"{prefix}-capture", count)
    assert count == len(publish)
    assert {f"orders-{i}" for i in range(count)} == {
        tags(s)["messaging.message.id"] for s in publish
    }
    assert all(tags(s)["span.kind"] == "producer" for s in publish)
    publish_ctx = {(int(s["traceID"], 16), int(s["spanID"], 16)) for s in publish}

    stage = _spans_of(jaeger, f"{prefix}-stager", len(staged.manifests))
    assert len(staged.manifests) == len(stage)
    linked: set[tuple[int, int]] = set()
    for span in stage:
        attrs = tags(span)
        assert "consumer" == attrs["span.kind"]
        manifest = next(m for m in staged.manifests if m.batch_id == attrs["tidelake.batch_id"])
        assert manifest.name == attrs["tidelake.manifest"]
        assert (manifest.seq_first, manifest.seq_last) == (
            attrs["tidelake.seq_first"],
            attrs["tidelake.seq_last"],
        )
        assert manifest.received == attrs["messaging.batch.message_count"]
        # The manifest carries the stage span's own context, for the ingest to link.
        ctx = tracing.extract(manifest.trace)
        assert ctx is not None
        assert (ctx.trace_id, ctx.span_id) == (int(span["traceID"], 16), int(span["spanID"], 16))
        refs = span.get("references") or []
        linked |= {(int(r["traceID"], 16), int(r["spanID"], 16)) for r in refs}
    # Every publish span is a parent (a link) of the stage span of its batch: same trace ids.
    assert publish_ctx == linked


def test_links_are_capped(
    stage_env_factory: Callable[..., StageEnv], jaeger: Jaeger, tmp_path: Path
) -> None:
    """tracing.max_links bounds the links of a stage span; the rest are counted."""
    env = _traced_env(stage_env_factory, jaeger, max_links=3)
    prefix = env.cfg.tracing.service_name
    tracing.setup(env.cfg.tracing, "capture")
    try:
        run(_publish(env, 10))
    finally:
        tracing.shutdown()
    proc = env.spawn_stager(once=True)
    assert 0 == proc.wait(120), env.log_text()
    staged = env.staged()
    stage = _spans_of(jaeger, f"{prefix}-stager", len(staged.manifests))
    for span in stage:
        attrs = tags(span)
        links = len(span.get("references") or [])
        assert links <= 3
        assert attrs["messaging.batch.message_count"] == links + attrs["tidelake.links.unlinked"]


def test_route_span_links_every_publish_span(
    stage_env_factory: Callable[..., StageEnv], jaeger: Jaeger, tmp_path: Path
) -> None:
    """``tidelake route run`` makes one span per batch it applies (here into a webhook
    receiver), linked to the publish span of each message, with its sequence range."""
    key_file = tmp_path / "hook.key"
    key_file.write_text("route-tracing-key")
    receiver = WebhookReceiver("route-tracing-key").start()
    try:
        sink = {"kind": "webhook", "url": receiver.url, "signing_key_file": str(key_file)}
        env = _traced_env(stage_env_factory, jaeger, routes={"hook": {"sink": sink}})
        prefix = env.cfg.tracing.service_name
        count = 12
        tracing.setup(env.cfg.tracing, "capture")
        try:
            run(_publish(env, count))
        finally:
            tracing.shutdown()
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
        child_env["TIDELAKE_CONFIG"] = str(env.config_path)
        done = subprocess.run(
            tidelake_argv("route", "run", "hook", "--until-idle"),
            env=child_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert 0 == done.returncode, done.stderr[-3000:]
        assert count == len(receiver.rows("shop.orders"))
    finally:
        receiver.stop()

    publish = jaeger.wait_spans(f"{prefix}-capture", count)
    routed: list[dict[str, Any]] = []

    def all_routed() -> bool:  # one span per fetched batch, exported as the process stops
        nonlocal routed
        routed = jaeger.spans(f"{prefix}-route")
        return count == sum(tags(s)["tidelake.changes"] for s in routed)

    wait_for(all_routed, 30, f"route spans of {count} changes in jaeger")
    assert {span_ctx(s) for s in publish} == set().union(*(refs(s, "FOLLOWS_FROM") for s in routed))
    attrs = [tags(s) for s in routed]
    assert all(a["span.kind"] == "consumer" and a["tidelake.route"] == "hook" for a in attrs)
    assert {"webhook"} == {a["tidelake.sink"] for a in attrs}
    assert (1, count) == (
        min(a["tidelake.seq_first"] for a in attrs),
        max(a["tidelake.seq_last"] for a in attrs),
    )
