"""Issue 23, deliver 1, end to end: OS crashes mid-run lose no acknowledged change.

The whole local stack lives on the lossy filesystem (tests/support/lossyfs.py): the embedded
nats-server's store, the staging root, the lake and the ingest's state. The orders workload
is published with PubAcks; the stager and the continuous ingest run; then, while the ingest
has committed only part of it, every process is SIGKILLed and everything not fsync-ed is
dropped (as a power loss would), the stack is started again on what is left — several times.
At the end the lake equals the workload's expected state row by row: 0 lost, 0 duplicated.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from support.lossyfs import LossyMount
from tidelake.bus.server import EmbeddedNats
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.demo import publish_workload, verify_workload
from tidelake.pipeline.stack import LocalStack
from tidelake.workload.orders import DATABASE, OrderWorkload, WorkloadSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 600
CRASHES = 2
SETTINGS: dict[str, Any] = {
    "stage": {"max_age_s": 0.3, "max_events": 50},
    "ingest": {"warm_up": False},
    "lake": {"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
}


def _crash(stack: LocalStack, lossy: LossyMount) -> dict[str, Any]:
    """SIGKILL every process of the stack (stages with their JVM, then nats-server), then
    drop what was not synced and remount."""
    for child in stack.children:
        child.kill()
    if stack.nats is not None:
        stack.nats.kill()
    return lossy.crash()


def _covered(state_dir: Path, last: dict[str, int]) -> dict[str, int]:
    """Per table, how far the ingest's commits cover the table's last published sequence."""
    ledger = Ledger(state_dir)
    try:
        done = ledger.covered()
    except (OSError, ValueError):
        return {}
    return {t: min(done.get(t, 0), seq) for t, seq in last.items()}


# ext4's rule for names only: under the strict POSIX rule nats-server (2.14.9, 2.15.2) loses
# a stream created since the last crash, since it never fsyncs the stream's new directories
# (tests/crash/test_nats_os_crash.py makes its stream durable first for that reason).
@pytest.mark.parametrize("lossy", ["ext4-names"], indirect=True)
def test_os_crashes_mid_run_lose_no_acknowledged_change(
    lossy: LossyMount, nats_binary: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish 600 acked changes of the orders workload, crash the OS (SIGKILL all + drop
    unsynced) twice while the ingest is part-way, restart, finish: the lake equals the
    source, every table, every row (issue 23: acked means durable, end to end)."""
    if not hasattr(EmbeddedNats(lossy.mountpoint), "sync_always"):
        pytest.skip("the embedded nats-server does not run with sync_interval: always yet")
    monkeypatch.setenv("TIDELAKE_NATS_SERVER", nats_binary)
    home = lossy.mountpoint / "home"
    home.mkdir()
    stack = LocalStack(home, settings=SETTINGS).start()
    dropped: list[dict[str, Any]] = []
    try:
        stack.wait_healthy(240)
        workload = OrderWorkload(WorkloadSpec(events=EVENTS, seed=23))
        published, _rate = asyncio.run(
            publish_workload(stack.cfg, stack.bus_url, workload, rate=3_000)
        )
        last = {f"{DATABASE}.{t}": seqs[-1] for t, seqs in published.seqs.items() if seqs}
        total = sum(last.values())
        for _ in range(CRASHES):
            # Crash once the ingest has landed some, not all, of what was published.
            deadline = time.monotonic() + 240
            start = sum(_covered(stack.cfg.lake_state_dir, last).values())
            while sum(_covered(stack.cfg.lake_state_dir, last).values()) <= start:
                assert time.monotonic() < deadline, "the ingest made no progress"
                time.sleep(0.1)
            assert sum(_covered(stack.cfg.lake_state_dir, last).values()) < total, (
                "finished before the crash"
            )
            dropped.append(_crash(stack, lossy))
            stack = LocalStack(home, settings=SETTINGS).start()
            stack.wait_healthy(240)
        deadline = time.monotonic() + 300
        while _covered(stack.cfg.lake_state_dir, last) != last:
            assert time.monotonic() < deadline, (
                f"not all covered: {_covered(stack.cfg.lake_state_dir, last)}"
            )
            time.sleep(0.2)
        cfg = stack.cfg
        dlq = asyncio.run(stack.dlq_depth())
    finally:
        stack.stop(timeout_s=30)
    print(f"crashes: {dropped}")
    comparisons = verify_workload(cfg, workload)
    assert (0, CRASHES) == (dlq, sum(1 for d in dropped if d["bytes_dropped"] > 0))
    assert {c.table: 0 for c in comparisons} == {c.table: c.mismatches for c in comparisons}
    assert all(c.rows_in_lake == c.rows_expected > 0 for c in comparisons), comparisons
