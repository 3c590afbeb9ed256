"""The charts' history (api/history.py): buckets, window bounds, smoothing, percentiles, the
commit log entered by binary search, the durable sample ring, and the route."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tidelake.api.history import (
    MAX_POINTS,
    MAX_WINDOW_S,
    CommitLog,
    CommitPoint,
    History,
    Sample,
    SampleRing,
    bucket_starts,
    clamp_step,
    commit_series,
    counter_rate,
    default_step,
    gauge_max,
    moving_average,
    offset_at,
    percentile,
)
from tidelake.api.server import create_app
from tidelake.config import load_config

NOW = 1_800_000_005_000  # 5 s into a 10 s bucket


def _commit(t_ms: int, table: str = "shop.orders", events: int = 10, **kw: Any) -> bytes:
    line = {
        "table": table,
        "seq": 1,
        "events": events,
        "committed_at_ms": t_ms,
        "max_commit_ts_ms": t_ms - kw.pop("lag_ms", 2000),
        "duration_ms": kw.pop("duration_ms", 500),
        **kw,
    }
    return orjson.dumps(line) + b"\n"


def test_buckets_are_aligned_to_the_step_and_cover_the_window() -> None:
    """A 60 s window at 10 s steps: 7 aligned buckets, the first holding now - 60 s and the
    last holding now; a moment later the same buckets."""
    starts = bucket_starts(NOW, 60, 10)
    assert [s - starts[0] for s in starts] == [0, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000]
    assert starts[0] <= NOW - 60_000 < starts[0] + 10_000
    assert starts[-1] <= NOW < starts[-1] + 10_000
    assert bucket_starts(NOW + 3000, 60, 10) == starts


def test_the_step_keeps_any_window_within_the_point_cap() -> None:
    """The default step is a round number giving ≤ 360 points; a step asked too fine is raised
    to 10 s and to what keeps the window under MAX_POINTS."""
    assert default_step(3600) == 10
    assert default_step(6 * 3600) == 60
    assert clamp_step(3600, 1) == 10
    assert len(bucket_starts(NOW, MAX_WINDOW_S, clamp_step(MAX_WINDOW_S, 10))) <= MAX_POINTS + 1


def test_moving_average_smooths_spikes_and_keeps_gaps() -> None:
    """A trailing mean over 3 buckets turns one burst into a plateau; a gap stays a gap and
    is not counted as zero."""
    assert moving_average([0.0, 30.0, 0.0, 0.0, None, 6.0], 3) == [0.0, 15.0, 10.0, 10.0, None, 3.0]


def test_percentile_is_nearest_rank() -> None:
    """p50 of 1..10 is 5, p99 is 10; no values is None."""
    values = [float(v) for v in range(10, 0, -1)]
    assert (percentile(values, 50), percentile(values, 99), percentile([], 50)) == (5.0, 10.0, None)


def test_commit_series_rates_lag_and_duration_per_bucket() -> None:
    """Events per second per bucket (the current bucket by its elapsed seconds), then smoothed;
    lag and duration percentiles only where commits are; commits outside the window dropped."""
    starts = bucket_starts(NOW, 60, 10)
    commits = [
        CommitPoint(starts[0] - 1, "t", 999, 100, 100),  # before the window
        CommitPoint(starts[1] + 1, "t", 100, 1000, 2000),
        CommitPoint(starts[1] + 2, "t", 100, 3000, 4000),
        CommitPoint(starts[-1] + 1, "t", 50, 500, 1000),  # the current bucket: 5 s so far
    ]
    s = commit_series(commits, starts, 10, NOW, 1)
    assert s["committed_per_s"] == [0.0, 20.0, 0.0, 0.0, 0.0, 0.0, 10.0]
    assert s["lag_p50_s"] == [None, 2.0, None, None, None, None, 1.0]
    assert s["lag_p99_s"][1] == 4.0
    assert s["duration_max_s"][1] == 3.0
    assert s["commits"] == [0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    smoothed = commit_series(commits, starts, 10, NOW, 2)["committed_per_s"]
    assert smoothed[:3] == [0.0, 10.0, 10.0]


def test_counter_rate_from_samples_and_gaps_where_none_were_taken() -> None:
    """The staged rate between the samples at a bucket's two ends; a bucket after the samples
    stop (serve was down) is a gap; a counter that went back is a gap, not a negative rate."""
    starts = bucket_starts(NOW, 60, 10)
    samples = [Sample(t, 0, (t - starts[0]) // 100, 0) for t in range(starts[0], starts[3], 5000)]
    rates = counter_rate(samples, "staged", starts, 10_000, NOW)
    assert rates[:2] == [10.0, 10.0]
    assert rates[-1] is None
    back = [Sample(starts[0], 0, 50, 0), Sample(starts[0] + 5000, 0, 10, 0)]
    assert counter_rate(back, "staged", starts[:1], 10_000, NOW) == [None]


def test_gauge_is_the_largest_value_sampled_in_each_bucket() -> None:
    """The DLQ depth per bucket: the largest sample in it; unknown (bus down) samples skipped."""
    starts = bucket_starts(NOW, 60, 10)
    samples = [
        Sample(starts[0] + 1, 0, 0, 0, dlq=1),
        Sample(starts[0] + 2, 0, 0, 0, dlq=3),
        Sample(starts[1] + 1, 0, 0, 0, dlq=None),
    ]
    assert gauge_max(samples, "dlq", starts, 10_000)[:3] == [3, None, None]


def test_offset_at_finds_the_window_in_a_long_log(tmp_path: Path) -> None:
    """In a log of 20,000 commits a second apart, the offset found for a time is at most a few
    lines before the first commit at that time, never after it."""
    path = tmp_path / "commits.jsonl"
    lines = [_commit(NOW - (20_000 - i) * 1000) for i in range(20_000)]
    path.write_bytes(b"".join(lines))
    since = NOW - 600 * 1000
    offset = offset_at(path, since)
    first = sum(len(line) for line in lines[: 20_000 - 600])
    assert first - 4096 <= offset <= first


def test_commit_log_reads_only_the_window_then_what_is_appended(tmp_path: Path) -> None:
    """Commits older than the longest window are not kept; a line appended later is read on
    the next refresh; a torn last line waits; a rewritten file is read afresh."""
    path = tmp_path / "commits.jsonl"
    path.write_bytes(_commit(NOW - 2 * MAX_WINDOW_S * 1000) + _commit(NOW - 1000))
    log = CommitLog(tmp_path)
    log.refresh(NOW)
    assert [p.t_ms for p in log.points] == [NOW - 1000]
    with path.open("ab") as f:
        f.write(_commit(NOW, ddl=1, ddl_type="ALTER") + b'{"table": "torn')
    log.refresh(NOW)
    assert [p.t_ms for p in log.points] == [NOW - 1000, NOW]
    assert [d["ddl_type"] for d in log.ddl["shop.orders"]] == ["ALTER"]
    path.write_bytes(_commit(NOW - 5))
    log.refresh(NOW)
    assert [p.t_ms for p in log.points] == [NOW - 5]


def test_the_sample_ring_survives_a_restart_and_stays_bounded(tmp_path: Path) -> None:
    """Samples are appended durably and read back by a new ring (a restarted serve); past a
    quarter over capacity the file is rewritten to the newest samples."""
    ring = SampleRing(tmp_path, capacity=8)
    for i in range(11):
        ring.add(Sample(NOW + i, 0, i, 0, dlq=i))
    again = SampleRing(tmp_path, capacity=8)
    assert [s.staged for s in again.samples] == list(range(3, 11))
    assert len((tmp_path / "history.jsonl").read_bytes().splitlines()) <= 10
    ring.add(Sample(NOW, 0, 99, 0))  # a clock step back is not recorded
    assert ring.samples[-1].staged == 10


def test_history_route_answers_series_from_the_record(tmp_path: Path) -> None:
    """GET /api/history and /api/tables/{table}/history answer the series from commits.jsonl
    and the ring; a window outside the bounds is refused (422)."""
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    state = cfg.lake_state_dir
    state.mkdir(parents=True)
    now = int(time.time() * 1000)
    (state / "commits.jsonl").write_bytes(
        _commit(now - 120_000) + _commit(now - 60_000, table="shop.items", ddl=1, ddl_type="ALTER")
    )
    history = History.of(cfg)
    app = create_app(cfg, history=history)

    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.get(path)

    whole = asyncio.run(get("/api/history?window=600")).json()
    assert whole["step_s"] == 10
    assert whole["commits_in_window"] == 2
    assert len(whole["t"]) == len(whole["series"]["committed_per_s"])
    assert {"staged_per_s", "dlq_messages", "lag_p99_s", "duration_p50_s"} <= set(whole["series"])
    one = asyncio.run(get("/api/tables/shop.items/history?window=600")).json()
    assert one["commits_in_window"] == 1
    assert [d["ddl_type"] for d in one["ddl"]] == ["ALTER"]
    assert one["blocked_ddl"] is None
    assert asyncio.run(get("/api/history?window=5")).status_code == 422


@pytest.mark.parametrize("window", [60, 3600, MAX_WINDOW_S])
def test_every_series_has_one_value_per_bucket(tmp_path: Path, window: int) -> None:
    """Whatever the window, every series is as long as the time axis."""
    history = History(tmp_path, tmp_path / "serve")
    out = history.query(window, now_ms=NOW)
    assert {len(v) for v in out["series"].values()} == {len(out["t"])}


def test_history_routes_need_the_token_when_one_is_set(tmp_path: Path) -> None:
    """Like every other API route, the history answers 401 without the bearer token."""
    cfg = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path), "TIDELAKE_API__TOKEN": "t"})
    app = create_app(cfg)

    async def get(path: str, token: str | None) -> int:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return (await c.get(path, headers=headers)).status_code

    for path in ("/api/history", "/api/tables/shop.orders/history"):
        assert (asyncio.run(get(path, None)), asyncio.run(get(path, "t"))) == (401, 200), path


def test_the_sampler_records_the_monitors_counts_and_survives_a_failed_snapshot(
    tmp_path: Path,
) -> None:
    """Each round records the stager's totals, the DLQ depth and the consumer's backlog; a
    snapshot that raises (the bus gone mid-call) is logged and the next round goes on; with
    the bus down the gauges are unknown, not zero."""
    from types import SimpleNamespace

    history = History(tmp_path, tmp_path / "serve")
    totals = SimpleNamespace(received=7, staged=6, dead_lettered=1)
    bus = {"dlq": {"messages": 2}, "consumer": {"pending": 4, "ack_pending": 1}}
    answers: list[Any] = [
        SimpleNamespace(now_ms=NOW, stage=SimpleNamespace(totals=totals), bus=bus),
        RuntimeError("bus gone"),
        SimpleNamespace(now_ms=NOW + 10, stage=SimpleNamespace(totals=totals), bus=None),
    ]

    async def snapshot() -> Any:
        answer = answers.pop(0) if answers else None
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            await asyncio.sleep(3600)
        return answer

    async def run() -> None:
        task = asyncio.create_task(history.sample_forever(snapshot, every_s=0.001))
        while answers:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(run())
    assert list(history.ring.samples) == [
        Sample(NOW, 7, 6, 1, dlq=2, pending=4, ack_pending=1),
        Sample(NOW + 10, 7, 6, 1),
    ]
