"""The staging disk full, the stager restarted again and again, the disk freed: every valid
event is staged, none is dead-lettered as ``max_deliver`` (issue 23, deliver 4).

Probe: with the stage root full, restarts dead-lettered valid events as ``max_deliver`` and
``dlq replay`` then skipped them as stale (2,731 rows lost for good). The staging root here
is a real size-limited filesystem (a 2 MiB tmpfs, filled by a ballast file), the stager a
real ``tidelake stage`` process killed with SIGKILL while it waits for space, so each
restart raises every message's delivery count past ``max_deliver``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stagekit import StageEnv, canal_json, run, stop_process, wait_for

from support.small_disk import fill, mounted_tmpfs

pytestmark = pytest.mark.integration

ROWS = 300
MAX_DELIVER = 2
RESTARTS = 4


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root, as the fault suite does), unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "staging", 2) as disk:
        yield disk


@pytest.fixture
def full_env(stage_env_factory: Callable[..., StageEnv], small_disk: Path) -> StageEnv:
    """Staging on the small disk; a short AckWait and a low max_deliver, so a few restarts
    put every message past it."""
    return stage_env_factory(
        bus={"consumer": {"ack_wait_s": 1.0, "max_deliver": MAX_DELIVER}},
        stage={"root": str(small_disk), "max_age_s": 0.3},
    )


def test_restarts_while_the_stage_root_is_full_dead_letter_nothing(
    full_env: StageEnv, small_disk: Path
) -> None:
    """Fill the staging disk, publish ROWS valid events, start and SIGKILL the stager
    RESTARTS times while it waits for space (nothing is acked meanwhile), free the disk:
    one more stager stages every event exactly once in its manifests, and the DLQ is empty."""
    env = full_env
    ballast = fill(small_disk)
    run(
        env.publish(
            [
                (env.subject("shop", "orders"), canal_json("shop", "orders", i, 441 * 10**15 + i))
                for i in range(ROWS)
            ]
        )
    )
    for n in range(RESTARTS):
        stager = env.spawn_stager(once=False, name=f"full{n}")
        try:
            wait_for(
                lambda n=n: "staging storage failed" in env.log_text(f"full{n}"),
                60,
                "the stager to find the disk full",
            )
        finally:
            stager.kill()
        assert 0 == run(env.consumer_info()).ack_floor.stream_seq  # nothing acked
        # The next delivery comes after AckWait: each restart counts one more.
    deliveries = run(env.consumer_info()).num_redelivered
    assert deliveries > 0

    ballast.unlink()  # space freed
    stager = env.spawn_stager(once=False, name="freed")
    try:

        def settled() -> bool:
            info = run(env.consumer_info())
            return info.num_pending == 0 and info.num_ack_pending == 0

        wait_for(settled, 120, "the stager to stage everything")
    finally:
        stop_process(stager)
    log = env.log_text("freed")
    staged = env.staged()
    dead = run(env.dlq_messages())
    expected = (set(range(1, ROWS + 1)), 0, 0)
    actual = (set(staged.seq_counts), len(dead), sum(m.dead_lettered for m in staged.manifests))
    assert expected == actual, log[-3000:]
    assert "message past max_deliver tried again" in log  # the restarts did count
    assert [] == env.storage.list("_tidelake/suspects")  # cleared once staged
