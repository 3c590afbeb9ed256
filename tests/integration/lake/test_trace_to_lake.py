"""One trace path from the source to the lake on real components (docs/tracing.md): the
capture's publisher, a ``tidelake stage --once`` child and a ``tidelake ingest --once``
child (Spark + Hudi) export by OTLP/HTTP to a real Jaeger (tests/support/jaeger.py). Each
publish span is linked from its batch's stage span, each stage span from the ingest round
that committed its manifest, each table's commit span (a child of its round) names an
instant of the table's Hudi timeline, and the update of an aggregate view over one of the
tables after the round (a child of the round too) names the commit it includes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lakekit import lake_env
from stagekit import StageEnv, canal_json, run

from support.jaeger import Jaeger, refs, span_ctx, tags
from tidelake.capture.publisher import Publisher
from tidelake.lake.hudi import split_table_id, table_path
from tidelake.runtime import tracing

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TABLES = ("shop.orders", "shop.items")
PER_TABLE = 100
#: An aggregate view over shop.orders, updated by the ingest after each round.
VIEW = "names"
VIEW_SQL = "SELECT name, COUNT(*) AS n FROM shop.orders GROUP BY name"


async def _publish(env: StageEnv) -> None:
    async with await Publisher.open(env.cfg.bus, env.server.url) as pub:
        for i in range(PER_TABLE):
            for table_id in TABLES:
                database, table = split_table_id(table_id)
                payload = canal_json(database, table, i, 1000 + i)
                await pub.publish(env.subject(database, table), payload, f"{table_id}-{i}")
        await pub.durable()


def _timeline(lake_root: str, table_id: str) -> set[str]:
    """The requested instants of the table's completed (delta)commits, from the file names
    of its Hudi timeline (``<requested>_<completed>.<action>`` from table version 8 on,
    ``<requested>.<action>`` before)."""
    hoodie = Path(table_path(lake_root, *split_table_id(table_id))) / ".hoodie"
    out = set()
    for path in (*hoodie.glob("timeline/*"), *hoodie.glob("*")):
        stem, _, action = path.name.partition(".")
        if action in ("commit", "deltacommit"):
            out.add(stem.split("_")[0])
    return out


def test_one_trace_path_from_publish_to_the_hudi_commit(
    stage_env_factory: Callable[..., StageEnv], jaeger: Jaeger
) -> None:
    env = stage_env_factory(
        tracing={"enabled": True, "otlp_endpoint": jaeger.otlp_endpoint, "service_name": "tl2l"},
        stage={"max_age_s": 0.5, "max_events": 100},
    )
    tracing.setup(env.cfg.tracing, "capture")
    try:
        run(_publish(env))
    finally:
        tracing.shutdown()  # exports the publish spans
    count = PER_TABLE * len(TABLES)

    stager = env.spawn_stager(once=True)
    assert 0 == stager.wait(120), env.log_text()
    manifests = env.staged().manifests
    assert count == sum(m.staged for m in manifests)

    views = {f"TIDELAKE_VIEWS__{VIEW.upper()}__SQL": VIEW_SQL}
    ingest = env.run_cli("ingest", "--once", env=lake_env(Path(env.cfg.home), **views))
    assert 0 == ingest.returncode, ingest.stderr[-3000:]
    assert f"{count} events, {len(manifests)} manifests" in ingest.stderr

    # publish → stage: every publish span is linked from the stage span of its batch.
    publish = jaeger.wait_spans("tl2l-capture", count)
    stage = jaeger.wait_spans("tl2l-stager", len(manifests))
    assert count == len(publish)
    assert len(manifests) == len(stage)
    assert {span_ctx(s) for s in publish} == set().union(*(refs(s, "FOLLOWS_FROM") for s in stage))

    # stage → ingest round: the rounds link every stage span, and only those.
    spans = jaeger.wait_spans("tl2l-ingest", 1 + len(TABLES) + 1)
    rounds = [s for s in spans if s["operationName"] == "ingest round"]
    commits = [s for s in spans if s["operationName"].startswith("commit ")]
    views = [s for s in spans if s["operationName"] == f"view {VIEW}"]
    assert rounds
    assert len(spans) == len(rounds) + len(commits) + len(views)
    assert {span_ctx(s) for s in stage} == set().union(*(refs(r, "FOLLOWS_FROM") for r in rounds))
    assert len(manifests) == sum(tags(r)["tidelake.manifests"] for r in rounds)

    # round → commit: one commit span per table and round, a child of its round, naming an
    # instant of the table's Hudi timeline; together they hold every event.
    round_ids = {span_ctx(r) for r in rounds}
    by_table: dict[str, list[str]] = {}
    for span in commits:
        attrs = tags(span)
        assert len(refs(span, "CHILD_OF") & round_ids) == 1, span
        assert f"commit {attrs['tidelake.table']}" == span["operationName"]
        assert "tidelake.failed" not in attrs
        by_table.setdefault(attrs["tidelake.table"], []).append(attrs["hudi.instant"])
    assert set(TABLES) == set(by_table)
    lake_root = env.cfg.lake_root
    for table_id, instants in by_table.items():
        assert set(instants) <= _timeline(lake_root, table_id), (table_id, instants)
    events = sum(tags(s)["tidelake.events"] for s in commits)
    assert count == events

    # round → view: the view's update after each round is a child of that round and
    # includes the round's commit of its base table (the same Hudi instant); the first
    # builds the view table.
    orders = {
        next(iter(refs(c, "CHILD_OF"))): tags(c)["hudi.instant"]
        for c in commits
        if tags(c)["tidelake.table"] == "shop.orders"
    }
    assert len(views) == len(rounds)
    for span in views:
        attrs = tags(span)
        (parent,) = refs(span, "CHILD_OF") & round_ids
        assert (VIEW, "aggregate") == (attrs["tidelake.view"], attrs["tidelake.view.kind"])
        assert "error.type" not in attrs, attrs
        assert "shop.orders" == attrs["tidelake.view.base_table"]
        assert orders[parent] == attrs["hudi.instant"]
    first = min(views, key=lambda s: int(s["startTime"]))
    assert "rebuild" == tags(first)["tidelake.view.outcome"]
    assert PER_TABLE == tags(first)["tidelake.view.groups"]  # one group per name
