"""The dashboard in headless chromium: healthy, stale and API-down states, the charts'
history after a reload and a restart of serve, the per-table page, the message explorer
within the page, the routes page (each route's state and messages, pause and resume,
re-processing its dead letters), and a running pipeline whose table freshness the page follows.

The three states are built from the real record a pipeline leaves (a real nats-server with
the stream, ``commits.jsonl``, heartbeat files) behind a real ``tidelake serve``; the last
test runs the whole pipeline (stager, ingest on Spark + Hudi, serve) the way the demo does.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
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

from tidelake.api.history import Sample, history_dir
from tidelake.bus import dlq
from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_consumer, ensure_streams
from tidelake.bus.server import EmbeddedNats, free_port
from tidelake.config import load_config
from tidelake.lake.ledger import BlockedDdl, Ledger
from tidelake.pipeline.processes import StageProcess
from tidelake.pipeline.webhook_receiver import WebhookReceiver
from tidelake.route import runner as route_runner
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
    port: int

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

    def past(self, minutes: int) -> int:
        """A history of ``minutes``: a commit of each table every 30 s (varying events, lag
        and duration, one DDL) in the commit log, and serve's samples every 5 s (staged
        counts, a dead-letter episode, the consumer's backlog) as an earlier serve left them.
        Returns the time of the oldest commit (ms)."""
        now = int(time.time() * 1000)
        start = now - minutes * 60_000
        lines = []
        for i in range(minutes * 2):
            t = start + i * 30_000
            for k, table in enumerate(("shop.orders", "shop.items")):
                wave = (i + 7 * k) % 12
                lines.append(
                    {
                        "table": table,
                        "seq": 1,
                        "events": 200 + 60 * wave + 150 * k,
                        "upserts": 200,
                        "deletes": 0,
                        "committed_at_ms": t + k * 1000,
                        "max_commit_ts_ms": t + k * 1000 - 1500 - 250 * wave - 900 * k,
                        "duration_ms": 700 + 40 * wave,
                    }
                )
        lines.insert(
            len(lines) // 2,
            {
                "table": "shop.items",
                "seq": 1,
                "ddl": 1,
                "ddl_type": "ALTER",
                "ddl_action": "add_column",
                "ddl_changes": ["add column note varchar(64)"],
                "committed_at_ms": start + minutes * 30_000,
                "duration_ms": 2400,
            },
        )
        with (self.lake_state / "commits.jsonl").open("ab") as f:
            f.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        ring = history_dir(load_config(self.config_path, environ={}))
        ring.mkdir(parents=True, exist_ok=True)
        samples, staged = [], 0
        for i in range(minutes * 12):
            t = start + i * 5000
            staged += 170 + (i % 12) * 10
            dlq_depth = 2 if minutes * 4 < i < minutes * 7 else 0
            samples.append(Sample(t, staged, staged, 0, dlq_depth, 3 + (i * 7) % 11, 5))
        (ring / "history.jsonl").write_bytes(b"".join(x.dumps() + b"\n" for x in samples))
        return start

    def restart_serve(self) -> None:
        """Stop serve and start it again on the same port (a restart loses nothing)."""
        self.serve.stop(timeout_s=10)
        env = {"TIDELAKE_CONFIG": str(self.config_path)}
        home = self.config_path.parent
        self.serve = start_serve(self.config_path, home, self.port, env, "--stale-after", "30")


@pytest.fixture(scope="module")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture
def site(nats: EmbeddedNats, tmp_path: Path) -> Iterator[Callable[..., Site]]:
    """``site(messages={table: n})``: a stream holding ``n`` messages per table, and serve;
    ``routes`` are the config's ``routes``."""
    started: list[Site] = []

    def make(messages: dict[str, int], routes: dict[str, Any] | None = None) -> Site:
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
            **({"routes": routes} if routes else {}),
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
        lake_state = Path(cfg.lake_root) / "_tidelake"
        lake_state.mkdir(parents=True, exist_ok=True)
        made = Site(
            f"http://127.0.0.1:{port}",
            lake_state,
            Path(cfg.stage_root) / "_tidelake",
            serve,
            config_path,
            nats,
            port,
        )
        started.append(made)
        return made

    yield make
    for made in started:
        made.serve.stop(timeout_s=10)


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


def test_the_capture_card_shows_lag_snapshots_and_skipped_tables_and_a_long_commit(
    page: Page, site: Callable[..., Site]
) -> None:
    """A capture heartbeat with slot lag, retained WAL, a running snapshot and a skipped
    table (issue 22, lag and health) appears as the capture card: behind, slot lag and
    retained WAL in units, the slot's wal_status, the snapshot's rows and percentage, the
    skipped table's reason. An ingest heartbeat of a round committing for 40 s (a long
    commit: lake/round_beat.py) keeps the ingest up and says what it commits."""
    s = site({"shop.orders": 3})
    now = int(time.time() * 1000)
    s.commit("shop.orders", 3, now - 2_000)
    s.beat()
    write_heartbeat(
        s.lake_state, "ingest", "applying", cursor=0, paused=[],
        round={"started_ms": now - 41_000, "phase": "committing",
               "committing": {"shop.orders": now - 40_000}},
    )  # fmt: skip
    write_heartbeat(
        s.stage_state, "capture", "running", source="postgres", phase="streaming",
        lag={"bytes": 3 * 1024 * 1024, "retained_wal_bytes": 5 * 1024**3, "seconds": 12.0,
             "gtid_behind": None, "wal_status": "extended", "safe_wal_size": None,
             "at_ms": now},
        snapshot={"tables": {"shop.big": {"state": "running", "rows_done": 250, "rows_total": 1000,
                                          "chunks_done": 3, "started_ms": now - 60_000,
                                          "updated_ms": now - 1_000}}},
        skipped={"shop.nokey": "no primary key (capture.keyless: skip)"},
    )  # fmt: skip
    _open(page, s.url)
    card = page.get_by_test_id("capture")
    expect(card).to_be_visible()
    expect(page.get_by_test_id("capture-source")).to_have_text("postgres · streaming")
    expect(page.get_by_test_id("capture-behind")).to_have_text("12 s")
    expect(page.get_by_test_id("capture-lag-bytes")).to_have_text("3.0 MiB")
    expect(page.get_by_test_id("capture-retained")).to_have_text("5.0 GiB")
    expect(page.get_by_test_id("capture-note")).to_contain_text("slot wal_status extended")
    snapshot = page.get_by_test_id("snapshot-shop.big")
    expect(snapshot).to_contain_text("running")
    expect(snapshot).to_contain_text("25 %")
    expect(page.get_by_test_id("skipped-shop.nokey")).to_contain_text("no primary key")
    expect(page.get_by_test_id("activity-ingest")).to_contain_text("committing shop.orders for 4")
    expect(page.get_by_test_id("processes")).not_to_contain_text("down")
    assert screenshot(page, "capture").stat().st_size > 10_000


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
    freshness grows while the source is idle, and drops back when newer rows land; under a
    steady flow of rows the table stays green (fresh), and after a reload the charts show the
    commits made before it."""
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
        state = page.get_by_test_id("state-shop.live")
        seen = []
        for n in range(40):  # 20 s of 10 rows every 0.5 s
            pipeline.publish_rows("shop.live", range(100 + 10 * n, 110 + 10 * n))
            time.sleep(0.5)
            seen.append(state.text_content())
        steady = seen[10:]
        assert steady.count("fresh") >= 0.8 * len(steady), seen
        expect(state).to_have_css("color", GREEN)
        reloaded = int(time.time() * 1000)
        page.reload()
        drawn = _chart(page, "chart-lag")
        assert int(drawn["first-ms"]) < reloaded - 10_000, drawn
        assert int(_chart(page, "chart-throughput")["points"]) > 0
        page.get_by_test_id("windows").get_by_role("button", name="15 min").click()
        page.wait_for_timeout(1500)
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


GREEN = "rgb(63, 185, 80)"


def _chart(page: Page, test_id: str) -> dict[str, str]:
    """What a chart drew: buckets with a value, the oldest of them, its axes' labels."""
    chart = page.get_by_test_id(test_id)
    expect(chart.locator("canvas")).to_have_count(1, timeout=15_000)
    wait_for(lambda: int(chart.get_attribute("data-points") or 0) > 0, 15, f"{test_id} drawn")
    return {
        k: chart.get_attribute(f"data-{k}") or ""
        for k in ("points", "first-ms", "x-ticks", "y-ticks")
    }


def test_after_a_reload_and_a_serve_restart_the_charts_show_the_past(
    page: Page, site: Callable[..., Site]
) -> None:
    """40 minutes of commits and samples exist before the page opens and serve restarted in
    between: each chart (changes/s, commit lag, commit duration, dead letters) shows points
    older than the page with time and unit labels, again after a reload; a steady pipeline
    (checkpoints a moment behind the stream) is healthy and its tables green."""
    s = site({"shop.orders": 3, "shop.items": 2})
    oldest = s.past(40)
    s.restart_serve()
    now = int(time.time() * 1000)
    s.commit("shop.orders", 3, now - 2_000, events=120)
    s.commit("shop.items", 4, now - 3_000, events=80)  # one message still on its way
    s.beat()
    opened = int(time.time() * 1000)
    _open(page, s.url)
    for test_id, unit in (
        ("chart-throughput", "/s"),
        ("chart-lag", " s"),
        ("chart-duration", " ms"),
        ("chart-dlq", ""),
    ):
        drawn = _chart(page, test_id)
        assert int(drawn["points"]) > 60, (test_id, drawn)
        assert int(drawn["first-ms"]) < opened - 30 * 60_000, (test_id, drawn)
        if test_id != "chart-throughput":  # a rate is 0 where nothing happened, not a gap
            assert int(drawn["first-ms"]) >= oldest - 60_000, (test_id, drawn)
        assert re.search(r"\b\d\d:\d\d\b", drawn["x-ticks"]), (test_id, drawn)
        assert unit in drawn["y-ticks"], (test_id, drawn)
    expect(page.get_by_test_id("history-note")).to_contain_text("sampled by serve since")
    ring = history_dir(load_config(s.config_path, environ={})) / "history.jsonl"
    wait_for(lambda: len(ring.read_bytes().splitlines()) > 40 * 12, 15, "serve's own samples")
    expect(page.get_by_test_id("pipeline-state")).to_have_text("healthy")
    for table in ("shop.orders", "shop.items"):
        cell = page.get_by_test_id(f"state-{table}")
        expect(cell).to_have_text("fresh")
        expect(cell).to_have_css("color", GREEN)
    page.reload()
    expect(page.get_by_test_id("last-updated")).to_contain_text("updated", timeout=15_000)
    again = _chart(page, "chart-throughput")
    assert int(again["first-ms"]) < opened - 30 * 60_000
    page.get_by_test_id("windows").get_by_role("button", name="15 min").click()
    wait_for(
        lambda: int(_chart(page, "chart-throughput")["first-ms"]) > opened - 16 * 60_000,
        15,
        "the 15 min window",
    )
    page.get_by_test_id("windows").get_by_role("button", name="1 h").click()
    wait_for(
        lambda: int(_chart(page, "chart-throughput")["first-ms"]) < opened - 30 * 60_000,
        15,
        "the 1 h window",
    )
    assert screenshot(page, "history-after-reload").stat().st_size > 10_000


def test_the_table_page_shows_state_history_ddl_and_pauses(
    page: Page, site: Callable[..., Site]
) -> None:
    """#/table/<id>: a table's state, checkpoint, charts of its own commits, recent commits
    and DDL history; a table paused on a DDL shows why, the DDL it waits on and a resume
    button; the pause button records the operator's request."""
    s = site({"shop.orders": 3, "shop.items": 2})
    s.past(30)
    now = int(time.time() * 1000)
    s.commit("shop.orders", 3, now - 2_000, events=90)
    s.commit("shop.items", 4, now - 3_000, events=10)
    ledger = Ledger(s.lake_state)
    reason = "DDL cannot be applied: MODIFY COLUMN qty narrows bigint to int (docs/type-mapping.md)"
    ledger.save_paused({"shop.items": reason})
    ledger.record_blocked(
        "shop.items",
        BlockedDdl(seq=5, ddl="ALTER TABLE items MODIFY qty INT", reason="narrowing"),
    )
    s.beat()
    _open(page, s.url)
    page.get_by_test_id("link-shop.orders").click()
    expect(page.get_by_test_id("table-page")).to_be_visible()
    expect(page.get_by_test_id("overview")).to_be_hidden()
    expect(page.get_by_test_id("table-title")).to_have_text("shop.orders")
    expect(page.get_by_test_id("table-state")).to_have_text("fresh")
    expect(page.get_by_test_id("tcard-checkpoint")).to_have_text("3")
    for test_id in ("chart-table-rate", "chart-table-lag", "chart-table-duration"):
        assert int(_chart(page, test_id)["points"]) > 50, test_id
    expect(page.get_by_test_id("table-commits").locator("tbody tr")).to_have_count(
        20, timeout=15_000
    )
    page.get_by_test_id("table-control").click()
    wait_for(
        lambda: (
            (httpx.get(f"{s.url}/api/tables/shop.orders").json().get("control") or {}).get("action")
            == "pause"
        ),
        15,
        "the pause request",
    )
    page.goto(f"{s.url}/?interval=400#/table/shop.items")
    expect(page.get_by_test_id("table-state")).to_have_text("paused", timeout=15_000)
    expect(page.get_by_test_id("table-paused")).to_contain_text("narrows bigint to int")
    expect(page.get_by_test_id("table-control")).to_have_text("resume")
    expect(page.get_by_test_id("table-ddl")).to_contain_text("add column note varchar(64)")
    expect(page.get_by_test_id("table-blocked")).to_contain_text("MODIFY qty INT")
    _chart(page, "chart-table-rate")
    assert screenshot(page, "table-page").stat().st_size > 10_000


@pytest.mark.parametrize("width", [1400, 1024])
def test_the_message_explorer_stays_within_the_page(
    page: Page, site: Callable[..., Site], width: int
) -> None:
    """Long table names, subjects, payloads and dead-letter reasons end in an ellipsis or wrap
    in the detail panel: the page is never wider than the window."""
    long_table = "shop.order_line_items_with_a_remarkably_long_name_for_the_overflow_test"
    s = site({long_table: 3})
    s.commit(long_table, 3, int(time.time() * 1000), events=3)
    s.beat()
    cfg = load_config(s.config_path, environ={})
    subject = cfg.bus.stream.subjects[0].removesuffix(">") + long_table
    pipe = Pipeline(s.config_path.parent, cfg, s.config_path, s.nats, "", None)
    pipe.publish(
        [(dlq.dlq_subject(cfg.bus.dlq.subject_prefix, subject), b"{oops" * 200)],
        headers=dlq.dlq_headers("not JSON: " + "unexpected character " * 30, subject, 4, 1),
    )
    page.set_viewport_size({"width": width, "height": 1000})
    _open(page, s.url)
    expect(page.locator("[data-dlq]")).to_have_count(1, timeout=15_000)
    page.get_by_test_id("explorer").get_by_role("button", name="show").click()
    rows = page.locator("#messages-body tr")
    expect(rows).to_have_count(3, timeout=15_000)
    rows.first.click()
    detail = page.get_by_test_id("message-detail")
    expect(detail).to_be_visible()
    expect(detail).to_contain_text(long_table)

    def fits() -> bool:
        return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))

    assert fits(), page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    box = detail.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= width
    page.get_by_test_id("messages").scroll_into_view_if_needed()
    assert screenshot(page, f"explorer-{width}").stat().st_size > 10_000


def test_the_routes_page_shows_what_each_route_has_and_has_not_received(
    page: Page, site: Callable[..., Site], tmp_path: Path
) -> None:
    """#/routes (issue 19): each route's sink, state, acknowledged sequence, pending, in-flight
    and dead letters; a route's messages as it sees them (applied, in flight, pending,
    dead-lettered with the reason) with the table filter and a start sequence; pause and resume
    recorded in <home>/routes.yaml; its dead letters re-processed into the sink.

    Route ``hook`` (into a webhook receiver here) has its consumer on the bus, taken as its
    process would: seq 1 applied, seq 2 dead-lettered (and acknowledged), seq 3 delivered and
    not yet acknowledged, the rest pending. Route ``idle`` never started: it has no consumer."""
    key_file = tmp_path / "hook.key"
    key_file.write_text("k3y")
    receiver = WebhookReceiver("k3y").start()
    try:
        sink = {"kind": "webhook", "url": receiver.url, "signing_key_file": str(key_file)}
        s = site(
            {"shop.orders": 4, "shop.items": 2},
            routes={"hook": {"sink": sink}, "idle": {"tables": ["shop.items"], "sink": sink}},
        )
        cfg = load_config(s.config_path, environ={})
        prefix = cfg.bus.stream.subjects[0].removesuffix(">")
        reason = "where: no column amount in shop.orders"

        async def take() -> None:
            nc = await connect(cfg.bus, s.nats.url)
            try:
                js = nc.jetstream()
                await route_runner.ensure_consumer(js, cfg, "hook")
                sub = await js.pull_subscribe_bind(
                    route_runner.durable_name("hook"), stream=cfg.bus.stream.name
                )
                taken = await sub.fetch(3, timeout=5)
                assert [m.metadata.sequence.stream for m in taken] == [1, 2, 3]
                await js.publish(
                    f"{route_runner.route_dlq_prefix(cfg, 'hook')}.{prefix}shop.orders",
                    taken[1].data,
                    headers=dlq.dlq_headers(reason, prefix + "shop.orders", 2, 1),
                )
                await taken[0].ack_sync()
                await taken[1].ack_sync()  # dead-lettered, then acknowledged
            finally:
                await nc.close()

        run_async(take())
        s.beat()
        page.on("dialog", lambda d: d.accept())
        _open(page, s.url)
        page.get_by_test_id("nav-routes").click()
        expect(page.get_by_test_id("routes-page")).to_be_visible()
        expect(page.get_by_test_id("overview")).to_be_hidden()
        expect(page.get_by_test_id("route-state-hook")).to_have_text("running", timeout=15_000)
        expect(page.get_by_test_id("route-state-idle")).to_have_text("not started")
        expect(page.get_by_test_id("route-acked-hook")).to_have_text("2")
        expect(page.get_by_test_id("route-inflight-hook")).to_have_text("1")
        expect(page.get_by_test_id("route-pending-hook")).to_have_text("3")
        expect(page.get_by_test_id("route-dlq-hook")).to_have_text("1")
        expect(page.get_by_test_id("route-pending-idle")).to_have_text("-")
        expect(page.get_by_test_id("route-reprocess-idle")).to_be_disabled()

        page.get_by_test_id("route-link-hook").click()
        expect(page.get_by_test_id("route-title")).to_have_text("hook")
        rows = page.locator("#route-messages-body tr")
        expect(rows).to_have_count(6, timeout=15_000)
        states = {1: "applied", 2: "dead-lettered", 3: "in flight", 4: "pending", 6: "pending"}
        for seq, state in states.items():
            expect(page.get_by_test_id(f"msg-route-state-{seq}")).to_have_text(state)
        expect(rows.nth(1)).to_have_attribute("data-route-state", "dead_lettered")
        expect(rows.nth(1)).to_contain_text(reason)
        expect(rows.nth(0)).not_to_contain_text("where:")
        expect(page.get_by_test_id("route-explorer-summary")).to_have_text(
            "this page: 1 applied · 1 in flight · 3 pending · 1 dead-lettered"
        )
        rows.nth(1).click()
        expect(page.get_by_test_id("route-message-detail")).to_contain_text(reason)
        assert screenshot(page, "routes").stat().st_size > 10_000

        page.get_by_test_id("route-explorer-table").select_option("shop.items")
        page.get_by_test_id("route-explorer").get_by_role("button", name="show").click()
        expect(rows).to_have_count(2, timeout=15_000)
        expect(rows.first).to_contain_text("shop.items")
        page.get_by_test_id("route-explorer-table").select_option("")
        page.locator("#route-explorer-seq").fill("3")
        page.get_by_test_id("route-explorer").get_by_role("button", name="show").click()
        expect(rows).to_have_count(4, timeout=15_000)
        expect(rows.first.locator("[data-state]")).to_have_text("in flight")

        registry = s.config_path.parent / "routes.yaml"

        def paused() -> list[str]:
            if not registry.exists():
                return []
            return (yaml.safe_load(registry.read_text()) or {}).get("paused") or []

        page.get_by_test_id("route-pause-hook").click()
        expect(page.get_by_test_id("route-state-hook")).to_have_text("paused", timeout=15_000)
        assert paused() == ["hook"]
        page.get_by_test_id("route-resume-hook").click()
        expect(page.get_by_test_id("route-state-hook")).to_have_text("running", timeout=15_000)
        assert paused() == []

        page.get_by_test_id("route-reprocess-hook").click()
        result = page.get_by_test_id("routes-result")
        expect(result).to_contain_text("1 applied, 0 still failing", timeout=15_000)
        expect(page.get_by_test_id("route-dlq-hook")).to_have_text("0", timeout=15_000)
        expect(page.get_by_test_id("msg-route-state-3")).to_have_text("in flight")
        assert [r["id"] for r in receiver.rows("shop.orders")] == ["1"]

        # Back on the overview, its explorer (the same code) still pages the stream as the
        # stager sees it.
        page.get_by_test_id("nav").get_by_role("link", name="overview").click()
        expect(page.get_by_test_id("overview")).to_be_visible()
        expect(page.get_by_test_id("routes-page")).to_be_hidden()
        page.get_by_test_id("explorer").get_by_role("button", name="show").click()
        stream = page.locator("#messages-body tr")
        expect(stream).to_have_count(6, timeout=15_000)
        expect(stream.first.locator("[data-state]")).to_have_text("pending")
        stream.first.click()
        expect(page.get_by_test_id("message-detail")).to_contain_text("name-0")
    finally:
        receiver.stop()
