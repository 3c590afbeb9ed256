"""The dashboard in headless chromium: healthy, stale and API-down states, and a running
pipeline whose table freshness the page follows.

The three states are built from the real record a pipeline leaves (a real nats-server with
the stream, ``commits.jsonl``, heartbeat files) behind a real ``tidelake serve``; the last
test runs the whole pipeline (stager, ingest on Spark + Hudi, serve) the way the demo does.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from apikit import (
    Pipeline,
    canal_row,
    run_async,
    start_pipeline,
    start_serve,
    wait_for,
    write_config,
)
from browserkit import screenshot
from playwright.sync_api import Page, expect

from tidelake.bus import dlq
from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_consumer, ensure_streams
from tidelake.bus.server import EmbeddedNats, free_port
from tidelake.config import load_config
from tidelake.pipeline.processes import StageProcess
from tidelake.runtime.heartbeat import write_heartbeat

_sites = itertools.count(1)


@dataclass
class Site:
    """A served record: the page at ``url``; ``serve`` can be stopped to take the API down."""

    url: str
    lake_state: Path
    stage_state: Path
    serve: StageProcess
    config_path: Path
    nats: EmbeddedNats

    def beat(self) -> None:
        """Heartbeats of a live stager and ingest."""
        write_heartbeat(self.stage_state, "stager", "running")
        write_heartbeat(self.lake_state, "ingest", "idle", cursor=0, paused=[])

    def commit(self, table: str, seq: int, newest_commit_ms: int, events: int = 3) -> None:
        line = {
            "table": table,
            "seq": seq,
            "events": events,
            "upserts": events,
            "deletes": 0,
            "committed_at_ms": int(time.time() * 1000),
            "max_commit_ts_ms": newest_commit_ms,
            "duration_ms": 850,
        }
        with (self.lake_state / "commits.jsonl").open("ab") as f:
            f.write(orjson.dumps(line) + b"\n")


@pytest.fixture(scope="module")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture
def site(nats: EmbeddedNats, tmp_path: Path) -> Iterator[Callable[..., Site]]:
    """``site(messages={table: n})``: a stream holding ``n`` messages per table, and serve."""
    started: list[StageProcess] = []

    def make(messages: dict[str, int]) -> Site:
        n = next(_sites)
        home = tmp_path / f"site{n}"
        port = free_port()
        config_path = write_config(
            home,
            nats.url,
            port,
            bus={
                "stream": {"name": f"DASH{n}", "subjects": [f"dash{n}.>"]},
                "dlq": {"name": f"DASHDLQ{n}", "subject_prefix": f"dashdlq{n}"},
            },
        )
        cfg = load_config(config_path, environ={})
        pipe = Pipeline(home, cfg, config_path, nats, "", None)

        async def provision() -> None:
            nc = await connect(cfg.bus, nats.url)
            try:
                await ensure_streams(nc.jetstream(), cfg.bus)
                await ensure_consumer(nc.jetstream(), cfg.bus)
            finally:
                await nc.close()

        run_async(provision())
        now = int(time.time() * 1000)
        for table, count in messages.items():
            pipe.publish([(table, canal_row(table, i, now)) for i in range(count)])
        serve = start_serve(
            config_path, home, port, {"TIDELAKE_CONFIG": str(config_path)}, "--stale-after", "30"
        )
        started.append(serve)
        lake_state = Path(cfg.lake_root) / "_tidelake"
        lake_state.mkdir(parents=True, exist_ok=True)
        return Site(
            f"http://127.0.0.1:{port}",
            lake_state,
            Path(cfg.stage_root) / "_tidelake",
            serve,
            config_path,
            nats,
        )

    yield make
    for serve in started:
        serve.stop(timeout_s=10)


def _open(page: Page, url: str) -> None:
    page.goto(f"{url}/?interval=400")
    expect(page.get_by_test_id("last-updated")).to_contain_text("updated", timeout=15_000)


def test_healthy_pipeline_shows_fresh_tables_and_no_banner(
    page: Page, site: Callable[..., Site]
) -> None:
    """Every table's checkpoint covers its stream and the processes beat: the page says
    healthy, shows each table fresh with its freshness, and no banner."""
    s = site({"shop.orders": 3, "shop.items": 2})
    now = int(time.time() * 1000)
    s.commit("shop.orders", 3, now - 2_000)
    s.commit("shop.items", 5, now - 1_000, events=2)
    s.beat()
    _open(page, s.url)
    expect(page.get_by_test_id("pipeline-state")).to_have_text("healthy")
    expect(page.get_by_test_id("state-shop.orders")).to_have_text("fresh")
    expect(page.get_by_test_id("state-shop.items")).to_have_text("fresh")
    expect(page.get_by_test_id("banner")).to_be_hidden()
    freshness = float(
        page.get_by_test_id("freshness-shop.orders").get_attribute("data-value") or "-1"
    )
    assert 0 <= freshness < 30
    expect(page.get_by_test_id("commits")).to_contain_text("shop.items")
    expect(page.get_by_test_id("card-dlq")).to_have_text("0")
    assert screenshot(page, "healthy").stat().st_size > 10_000


def test_stale_table_raises_the_stale_banner(page: Page, site: Callable[..., Site]) -> None:
    """A table whose newest applied change is 10 minutes old while messages wait for it:
    the table is stale and a banner names it."""
    s = site({"shop.orders": 2, "shop.late": 4})
    now = int(time.time() * 1000)
    s.commit("shop.orders", 2, now - 1_000, events=2)
    s.commit("shop.late", 3, now - 600_000, events=1)
    s.beat()
    _open(page, s.url)
    banner = page.get_by_test_id("banner")
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("data-kind", "stale")
    expect(banner).to_contain_text("shop.late")
    expect(page.get_by_test_id("state-shop.late")).to_have_text("stale")
    expect(page.get_by_test_id("state-shop.orders")).to_have_text("fresh")
    expect(page.get_by_test_id("pipeline-state")).to_have_text("stale")
    assert screenshot(page, "stale").stat().st_size > 10_000


def test_api_down_raises_the_unreachable_banner_and_keeps_the_last_data(
    page: Page, site: Callable[..., Site]
) -> None:
    """The server stops while the page is open: the page says the API is unreachable and
    keeps showing the last tables it had."""
    s = site({"shop.orders": 1})
    s.commit("shop.orders", 2, int(time.time() * 1000), events=1)
    s.beat()
    _open(page, s.url)
    expect(page.get_by_test_id("state-shop.orders")).to_have_text("fresh")
    s.serve.stop(timeout_s=10)
    banner = page.get_by_test_id("banner")
    expect(banner).to_have_attribute("data-kind", "unreachable", timeout=15_000)
    expect(banner).to_contain_text("API unreachable")
    expect(page.get_by_test_id("pipeline-state")).to_have_text("unreachable")
    expect(page.get_by_test_id("state-shop.orders")).to_have_text("fresh")
    assert screenshot(page, "api-down").stat().st_size > 10_000


@pytest.mark.slow
def test_dashboard_of_a_running_pipeline_follows_a_tables_freshness(
    page: Page, tmp_path: Path
) -> None:
    """Stager, ingest and serve running: the page shows the table once its rows land, its
    freshness grows while the source is idle, and drops back when newer rows land."""
    pipeline = start_pipeline(tmp_path / "pipeline")
    try:
        seqs = pipeline.publish_rows("shop.live", range(1, 4))
        page.goto(f"{pipeline.url}/?interval=500")
        cell = page.get_by_test_id("freshness-shop.live")
        expect(page.get_by_test_id("state-shop.live")).to_have_text("fresh", timeout=300_000)

        def shown() -> float:
            return float(cell.get_attribute("data-value") or "nan")

        first = shown()
        aged = wait_for(lambda: (v := shown()) > first + 2 and v, 30, "freshness to grow")
        later = pipeline.publish_rows("shop.live", range(4, 7))
        wait_for(
            lambda: (t := pipeline.table("shop.live")) and t["checkpoint_seq"] >= later[-1],
            300,
            "the new rows to land",
        )
        fresher = wait_for(lambda: (v := shown()) < aged and v, 15, "freshness to drop")
        assert fresher < aged
        assert seqs[-1] < later[-1]
        expect(page.get_by_test_id("pipeline-state")).to_have_text("healthy", timeout=15_000)
        expect(page.get_by_test_id("commits")).to_contain_text("shop.live")
        assert screenshot(page, "running-pipeline").stat().st_size > 10_000
    finally:
        pipeline.stop()


def test_dead_letters_can_be_discarded_and_messages_explored_from_the_page(
    page: Page, site: Callable[..., Site]
) -> None:
    """The page lists a dead letter with its reason and discards it on request; the message
    explorer pages a table's messages with their stager state and whether the lake has them."""
    s = site({"shop.orders": 3})
    s.commit("shop.orders", 2, int(time.time() * 1000), events=2)
    s.beat()
    cfg = load_config(s.config_path, environ={})
    subject = cfg.bus.stream.subjects[0].removesuffix(">") + "shop.orders"
    pipe = Pipeline(s.config_path.parent, cfg, s.config_path, s.nats, "", None)
    pipe.publish(
        [(dlq.dlq_subject(cfg.bus.dlq.subject_prefix, subject), b"{oops")],
        headers=dlq.dlq_headers("not JSON: oops", subject, 4, 1),
    )
    page.on("dialog", lambda d: d.accept())
    _open(page, s.url)
    row = page.locator("[data-dlq]")
    expect(row).to_have_count(1, timeout=15_000)
    expect(row).to_contain_text("not JSON: oops")
    assert screenshot(page, "dead-letters").stat().st_size > 10_000
    row.get_by_role("button", name="discard").click()
    expect(page.locator("[data-dlq]")).to_have_count(0, timeout=15_000)
    expect(page.get_by_test_id("card-dlq")).to_have_text("0", timeout=15_000)
    page.get_by_test_id("explorer-table").select_option("shop.orders")
    page.get_by_test_id("explorer").get_by_role("button", name="show").click()
    rows = page.locator("#messages-body tr")
    expect(rows).to_have_count(3, timeout=15_000)
    expect(rows.first.locator("[data-state]")).to_have_text("pending")
    expect(rows.nth(1)).to_contain_text("yes")
    expect(rows.nth(2)).to_contain_text("no")
