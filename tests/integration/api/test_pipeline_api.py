"""``tidelake serve`` on a running pipeline: metrics, status, DLQ, pause/resume, explorer, replay.

One pipeline (real nats-server, stager, ingest on Spark + Hudi, serve) for the module; each
test works on its own table so the order of the tests does not matter.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

import pytest
from apikit import Pipeline, canal_row, documented_metrics, wait_for

from tidelake.bus import dlq
from tidelake.verify.lake import read_table

pytestmark = [pytest.mark.integration]


def _covered(pipeline: Pipeline, table: str, seq: int) -> dict[str, Any] | None:
    t = pipeline.table(table)
    return t if t is not None and t["checkpoint_seq"] >= seq else None


def test_curl_metrics_of_a_running_pipeline_shows_every_documented_metric(
    pipeline: Pipeline,
) -> None:
    """Rows applied and one dead letter; `curl /metrics` of serve, the stager and the ingest
    then has a sample of every metric named in docs/metrics.md (the capture's and the routes'
    are in their tests), and the counts reconcile with what was published."""
    seqs = pipeline.publish_rows("shop.metrics", range(1, 6))
    pipeline.publish([("shop.broken", b"not json at all")])
    wait_for(
        lambda: _covered(pipeline, "shop.metrics", seqs[-1]), 300, "the lake to apply the rows"
    )
    wait_for(lambda: pipeline.status()["bus"]["dlq"]["messages"] >= 1, 30, "the dead letter")

    def curl(url: str) -> str:
        return subprocess.run(
            ["curl", "-sS", "--fail", url], capture_output=True, text=True, timeout=60, check=True
        ).stdout

    def staged_by_the_stager() -> bool:
        own = curl(f"{pipeline.metrics_urls['stager']}/metrics")
        return 'tidelake_stager_messages_dead_lettered_total{reason="not_json"} 1.0' in own

    wait_for(staged_by_the_stager, 30, "the stager's own counters")
    out = curl(f"{pipeline.url}/metrics")
    own = {name: curl(f"{url}/metrics") for name, url in pipeline.metrics_urls.items()}
    samples = {
        line.split("{")[0].split(" ")[0]
        for text in (out, *own.values())
        for line in text.splitlines()
        if not line.startswith("#")
    }
    declared = {
        line.split()[2]
        for text in (out, *own.values())
        for line in text.splitlines()
        if line.startswith("# TYPE ")
    }
    # A capture's, a route's and a managed source's own metrics are scraped in their tests
    # (none of them runs here): tests/integration/capture/test_capture_lag.py,
    # tests/integration/route/test_routes_into_sinks.py,
    # tests/integration/capture/test_rest_sources_managed.py; the views' (no view is
    # configured here): tests/integration/view/test_view_keeper_process.py.
    prefixes = (
        "tidelake_capturer_",
        "tidelake_router_",
        "tidelake_poller_",
        "tidelake_ingester_view_",
    )
    names = [n for n in documented_metrics() if not n.startswith(prefixes)]
    assert len(names) >= 60
    # No capture of ours runs here: serve's capture-health families (read from the capture's
    # heartbeat) are declared without samples; tests/integration/capture/test_capture_lag.py
    # scrapes them with values from a real capture.
    missing = [
        n
        for n in names
        if not ({n, f"{n}_bucket", f"{n}_count"} & samples)
        and not (n.startswith("tidelake_capture_") and n in declared)
    ]
    assert missing == []
    assert 'tidelake_ingest_records_upserted_total{table="shop.metrics"} 5.0' in out
    assert 'tidelake_stage_messages_dead_lettered_total{reason="not_json"} 1.0' in out
    assert 'tidelake_process_up{stage="ingest"} 1.0' in out
    assert 'tidelake_ingester_events_applied_total{table="shop.metrics"} 5.0' in own["ingest"]
    assert "tidelake_build_info{" in out


def test_status_shows_a_fresh_table_whose_freshness_follows_new_commits(pipeline: Pipeline) -> None:
    """A table's freshness is seconds after its rows land, and a later commit resets it."""
    first = pipeline.publish_rows("shop.fresh", range(1, 3))
    t1 = wait_for(lambda: _covered(pipeline, "shop.fresh", first[-1]), 300, "the first rows")
    assert t1["state"] == "fresh"
    assert t1["freshness_s"] is not None
    assert t1["freshness_s"] < 60
    time.sleep(1.5)
    second = pipeline.publish_rows("shop.fresh", range(3, 5))
    t2 = wait_for(lambda: _covered(pipeline, "shop.fresh", second[-1]), 300, "the second rows")
    assert t2["max_commit_ts_ms"] > t1["max_commit_ts_ms"]
    assert t2["last_commit_ms"] > t1["last_commit_ms"]
    assert t2["upserts"] == 4
    status = pipeline.status()
    assert status["processes"]["ingest"]["up"]
    assert status["processes"]["stager"]["up"]


def test_dlq_replay_lands_a_newer_event_and_counts_an_older_one_as_stale(
    pipeline: Pipeline,
) -> None:
    """Two dead letters replayed through the API: the one newer than the table's watermark is
    applied; the older one, whose key the lake deleted at a later position, is skipped as
    stale and counted, so the delete holds (lake/deletes.py, docs/guarantees.md); both leave
    the DLQ, and their copies in the stream carry Tidelake-Replay."""
    now = int(time.time() * 1000)
    applied = pipeline.publish(
        [
            ("shop.dead", canal_row("shop.dead", 1, now)),
            ("shop.dead", canal_row("shop.dead", 1, now + 500, kind="DELETE")),
        ]
    )
    wait_for(lambda: _covered(pipeline, "shop.dead", applied[-1]), 300, "the first rows")
    subject = pipeline.subject_prefix + "shop.dead"
    dlq_subject = dlq.dlq_subject(pipeline.cfg.bus.dlq.subject_prefix, subject)
    older = canal_row("shop.dead", 1, now - 60_000, kind="UPDATE", name="old")
    newer = canal_row("shop.dead", 2, now + 1_000)
    before = {m["dlq_seq"] for m in pipeline.get("/api/dlq").json()["messages"]}
    for i, payload in enumerate((older, newer)):
        pipeline.publish(
            [(dlq_subject, payload)], headers=dlq.dlq_headers("max_deliver", subject, 9000 + i, 6)
        )
    listed = [m for m in pipeline.get("/api/dlq").json()["messages"] if m["dlq_seq"] not in before]
    assert [subject, subject] == [m["original_subject"] for m in listed]
    shown = pipeline.get(f"/api/dlq/{listed[0]['dlq_seq']}").json()
    assert shown["reason"] == "max_deliver"
    assert '"name":"old"' in shown["payload"]
    replayed = [pipeline.post(f"/api/dlq/{m['dlq_seq']}/replay").json() for m in listed]
    assert all(r["subject"] == subject for r in replayed)
    last = max(r["seq"] for r in replayed)
    t = wait_for(lambda: _covered(pipeline, "shop.dead", last), 300, "the replays to be ingested")
    t = wait_for(
        lambda: (x := pipeline.table("shop.dead")) and x["skipped_stale"] >= 1 and x,
        60,
        "stale count",
    )
    assert t["skipped_stale"] == 1
    # Row 1's insert and delete may collapse into one delete in a round; row 2 is an upsert.
    assert t["upserts"] in (1, 2)
    rows = read_table(pipeline.cfg.lake_root, "shop.dead").to_pylist()
    assert [(2, "name-2")] == sorted((int(r["id"]), r["name"]) for r in rows)
    remaining = {m["dlq_seq"] for m in pipeline.get("/api/dlq").json()["messages"]}
    assert not remaining & {m["dlq_seq"] for m in listed}
    copy = pipeline.get(f"/api/messages/{replayed[0]['seq']}").json()
    assert str(listed[0]["dlq_seq"]) == copy["headers"]["Tidelake-Replay"]
    assert pipeline.post(f"/api/dlq/{listed[0]['dlq_seq']}/replay").status_code == 404


def test_pause_holds_a_table_back_and_resume_catches_it_up(pipeline: Pipeline) -> None:
    """A paused table keeps its checkpoint while another table moves on; resumed, it applies
    the events staged meanwhile."""
    first = pipeline.publish_rows("shop.held", range(1, 3))
    wait_for(lambda: _covered(pipeline, "shop.held", first[-1]), 300, "the first rows")
    assert pipeline.post("/api/tables/shop.held/pause", {"reason": "backfill"}).status_code == 200
    wait_for(
        lambda: (pipeline.table("shop.held") or {}).get("paused"), 30, "the ingest to pause it"
    )
    held = pipeline.publish_rows("shop.held", range(3, 6))
    other = pipeline.publish_rows("shop.other", range(1, 3))
    wait_for(lambda: _covered(pipeline, "shop.other", other[-1]), 300, "the other table")
    t = pipeline.table("shop.held")
    assert t is not None
    assert t["state"] == "paused"
    assert t["paused"] == "paused by operator: backfill"
    assert first[-1] == t["checkpoint_seq"]
    assert pipeline.post("/api/tables/shop.held/resume").status_code == 200
    t = wait_for(lambda: _covered(pipeline, "shop.held", held[-1]), 300, "the resumed table")
    assert t["paused"] is None
    assert t["upserts"] == 5


def test_explorer_pages_a_table_by_sequence_and_time_with_its_stager_state(
    pipeline: Pipeline,
) -> None:
    """Pages of one table's messages in order, each acked by the stager and in the lake;
    a start time after the last message gives an empty page."""
    seqs = pipeline.publish_rows("shop.pages", range(1, 6))
    wait_for(lambda: _covered(pipeline, "shop.pages", seqs[-1]), 300, "the rows")
    page = pipeline.get("/api/messages", table="shop.pages", limit=3).json()
    assert seqs[:3] == [m["seq"] for m in page["messages"]]
    assert seqs[3] == page["next_seq"]
    assert {"acked"} == {m["state"] for m in page["messages"]}
    assert all(m["in_lake"] for m in page["messages"])
    nxt = pipeline.get("/api/messages", table="shop.pages", start_seq=page["next_seq"]).json()
    assert seqs[3:] == [m["seq"] for m in nxt["messages"]]
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 3600))
    assert pipeline.get("/api/messages", start_time=future).json()["messages"] == []
    assert pipeline.get("/api/messages", start_time="yesterday").status_code == 422


def test_cli_replay_from_seq_republishes_and_the_copies_change_no_row(
    pipeline: Pipeline,
) -> None:
    """`tidelake replay --from-seq --to-seq` republishes a table's range; the copies sit below
    the watermark with no later delete of their keys, so they are applied (lake/deletes.py),
    and Hudi's ordering by position keeps every row as it was."""
    seqs = pipeline.publish_rows("shop.again", range(1, 5))
    t0 = wait_for(lambda: _covered(pipeline, "shop.again", seqs[-1]), 300, "the rows")
    before = read_table(pipeline.cfg.lake_root, "shop.again").to_pylist()
    args = ("replay", "--from-seq", str(seqs[0]), "--to-seq", str(seqs[2]), "--table", "shop.again")
    dry = pipeline.cli(*args, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert '"messages":3' in dry.stdout
    done = pipeline.cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert '"dry_run":false' in done.stdout
    t = wait_for(
        lambda: (x := pipeline.table("shop.again")) and x["upserts"] >= t0["upserts"] + 3 and x,
        120,
        "the copies to be applied",
    )
    assert (t0["upserts"] + 3, 0) == (t["upserts"], t["skipped_stale"])
    after = read_table(pipeline.cfg.lake_root, "shop.again").to_pylist()

    # A copy's position keeps the source's commitTs; only the stream sequence in it is new.
    def rows(table: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["name"], r["_tl_position"].split(".")[0]) for r in table)

    assert rows(before) == rows(after)
    copies = pipeline.get("/api/messages", table="shop.again", start_seq=seqs[-1] + 1).json()
    assert [f"stream:{s}" for s in seqs[:3]] == [m["replay"] for m in copies["messages"]]


def test_cli_status_and_dlq_verbs_on_the_running_pipeline(pipeline: Pipeline) -> None:
    """`tidelake status` prints the tables; `dlq list` then `dlq discard --all --yes` empties
    the dead-letter queue."""
    seqs = pipeline.publish_rows("shop.cli", range(1, 2))
    wait_for(lambda: _covered(pipeline, "shop.cli", seqs[-1]), 300, "the row")
    # Earlier tests on this pipeline may have left dead letters: wait for this one.
    before = pipeline.status()["bus"]["dlq"]["messages"]
    pipeline.publish([("shop.cli", b"{broken")])
    wait_for(
        lambda: pipeline.status()["bus"]["dlq"]["messages"] >= before + 1, 30, "its dead letter"
    )
    status = pipeline.cli("status")
    assert status.returncode == 0, status.stderr
    assert "shop.cli" in status.stdout
    assert "processes" in status.stdout
    listed = pipeline.cli("dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "shop.cli" in listed.stdout
    gone = pipeline.cli("dlq", "discard", "--all", "--yes")
    assert gone.returncode == 0, gone.stderr
    discarded = re.search(r"(\d+) discarded", gone.stdout)
    assert discarded is not None, gone.stdout
    assert int(discarded[1]) >= before + 1
    # Every letter it listed is gone. A letter the earlier tests' traffic dead-letters after
    # that listing stays (a suite run once saw 2 arrive), but not this test's.
    left = pipeline.cli("dlq", "list")
    assert left.returncode == 0, left.stderr
    assert "shop.cli" not in left.stdout, left.stdout
