"""``kill -9`` of a stager at the worst moments, redelivery after AckWait, SIGTERM: nothing
is lost, duplicates only appear as manifests whose sequence ranges overlap.

The stagers run as ``python -m tidelake.cli stage`` child processes. The crash points use
the test-only hook ``TEST_TIDELAKE_CRASH_AT`` (see ``tidelake.stage.consumer``).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from stagekit import StagedLines, StageEnv, canal_json, run, stop_process, wait_for

from tidelake.stage.manifest import BATCH_DIR

pytestmark = pytest.mark.integration

TABLES = ("orders", "customers", "payments")


def _publish(env: StageEnv, n: int) -> None:
    run(
        env.publish(
            [
                (
                    env.subject("shop", TABLES[i % 3]),
                    canal_json("shop", TABLES[i % 3], i, 440 * 10**15 + i),
                )
                for i in range(n)
            ]
        )
    )


def _assert_all_staged_at_least_once(staged: StagedLines, n: int) -> None:
    assert set(staged.seq_counts) == set(range(1, n + 1)), "a message was lost"
    for seq, count in staged.seq_counts.items():
        if count > 1:
            holders = [m for m in staged.manifests if m.seq_first <= seq <= m.seq_last]
            assert len(holders) >= count, f"seq {seq} duplicated inside one manifest"


def _overlapping_pairs(staged: StagedLines) -> int:
    ms = staged.manifests
    return sum(
        1
        for i, a in enumerate(ms)
        for b in ms[i + 1 :]
        if a.seq_first <= b.seq_last and b.seq_first <= a.seq_last
    )


@pytest.fixture
def crash_env(stage_env_factory: Callable[..., StageEnv]) -> StageEnv:
    """Short AckWait so a dead stager's messages come back quickly; small batches."""
    return stage_env_factory(
        bus={"consumer": {"ack_wait_s": 1.5}}, stage={"max_events": 1000, "max_age_s": 0.5}
    )


def test_kill_between_files_and_manifest_then_restart_loses_nothing(crash_env: StageEnv) -> None:
    """SIGKILL after the data files, before the manifest: the orphan files belong to no
    manifest, the batch is redelivered and staged by the restarted stager."""
    n = 3000
    _publish(crash_env, n)
    first = crash_env.spawn_stager(once=True, crash_at="after_files", name="crash1")
    assert first.wait(60) == -signal.SIGKILL
    storage = crash_env.storage
    assert storage.list("manifests") == []
    orphans = {p.split("/")[1] for p in storage.list(BATCH_DIR)}
    assert len(orphans) == 1

    second = crash_env.spawn_stager(once=True, name="restart")
    assert second.wait(90) == 0, crash_env.log_text("restart")

    staged = crash_env.staged()
    _assert_all_staged_at_least_once(staged, n)
    assert max(staged.seq_counts.values()) == 1  # the orphan batch never counted
    assert orphans.isdisjoint(m.batch_id for m in staged.manifests)
    assert sum(staged.rows_by_table.values()) == n
    info = run(crash_env.consumer_info())
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


def test_kill_between_manifest_and_ack_restages_as_overlapping_manifest(
    crash_env: StageEnv,
) -> None:
    """SIGKILL after the manifest, before the acks: the batch exists AND is redelivered;
    the restarted stager stages it again as a manifest overlapping the first."""
    n = 3000
    _publish(crash_env, n)
    first = crash_env.spawn_stager(once=True, crash_at="after_manifest", name="crash2")
    assert first.wait(60) == -signal.SIGKILL
    assert len(crash_env.storage.list("manifests")) == 1

    second = crash_env.spawn_stager(once=True, name="restart")
    assert second.wait(90) == 0, crash_env.log_text("restart")

    staged = crash_env.staged()
    _assert_all_staged_at_least_once(staged, n)
    duplicated = [s for s, c in staged.seq_counts.items() if c > 1]
    assert duplicated, "the manifested-but-unacked batch should have been staged twice"
    assert _overlapping_pairs(staged) >= 1
    info = run(crash_env.consumer_info())
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


def test_stalled_stager_past_ack_wait_is_redelivered_to_another(crash_env: StageEnv) -> None:
    """A stager frozen (SIGSTOP) past AckWait holding a batch: a second stager gets the
    redeliveries and stages them; the first, resumed and stopped, flushes its stale batch.
    Every message is staged, duplicates only as overlapping manifests."""
    n = 900  # under max_events and fetch_batch: the first stager holds all of them
    first = crash_env.spawn_stager(
        once=False,
        name="stalled",
        extra_env={"TIDELAKE_STAGE__MAX_AGE_S": "60", "TIDELAKE_STAGE__MAX_EVENTS": "5000"},
    )
    try:
        _publish(crash_env, n)
        wait_for(
            lambda: run(crash_env.consumer_info()).num_ack_pending == n, 30, "first stager fetch"
        )
        first.send_signal(signal.SIGSTOP)
        time.sleep(crash_env.cfg.bus.consumer.ack_wait_s + 1.0)

        second = crash_env.spawn_stager(once=True, name="rescuer")
        assert second.wait(60) == 0, crash_env.log_text("rescuer")
        rescued = crash_env.staged()
        assert set(rescued.seq_counts) == set(range(1, n + 1))
    finally:
        status = stop_process(first)  # SIGCONT + SIGTERM: finish the stale batch, exit 0
    assert status == 0, crash_env.log_text("stalled")

    staged = crash_env.staged()
    _assert_all_staged_at_least_once(staged, n)
    assert max(staged.seq_counts.values()) == 2
    assert _overlapping_pairs(staged) >= 1
    info = run(crash_env.consumer_info())
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


def test_sigterm_mid_batch_flushes_it_and_exits_zero(
    stage_env_factory: Callable[..., StageEnv],
) -> None:
    """SIGTERM while a batch is open (age limit far away): the batch is flushed and acked,
    the process exits 0."""
    env = stage_env_factory(stage={"max_age_s": 60, "max_events": 50_000})
    n = 1500
    proc = env.spawn_stager(once=False, name="term")
    try:
        _publish(env, n)
        wait_for(lambda: run(env.consumer_info()).num_ack_pending == n, 30, "stager fetch")
        assert env.storage.list("manifests") == []  # the batch is still open
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, env.log_text("term")
    finally:
        stop_process(proc)
    staged = env.staged()
    assert len(staged.manifests) == 1
    assert set(staged.seq_counts) == set(range(1, n + 1))
    info = run(env.consumer_info())
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
