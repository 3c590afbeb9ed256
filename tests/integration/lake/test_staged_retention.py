"""Staged batches leave staging once every table has passed them (lake/retention.py).

The order workload is published to a real nats-server, staged by real ``tidelake stage
--once`` processes in small batches and ingested into Hudi by the real ingest, in three
rounds. After each, staging holds exactly the batches some table still needs, the retired
totals count every message exactly once, and the lake equals the workload:

1. nothing paused: every batch goes;
2. ``shop.order_items`` paused by the operator: the batches holding its events after its
   checkpoint stay, the others go;
3. resumed: its events are applied from the batches that stayed, and every batch goes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from stagekit import StageEnv, make_stage_env, run, stop_process

from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, load_config
from tidelake.lake.ingest import Ingestor
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.demo import verify_workload
from tidelake.runtime.storage import open_storage
from tidelake.stage.manifest import BATCH_DIR, MANIFEST_DIR, read_retired
from tidelake.workload.orders import OrderWorkload, WorkloadSpec
from tidelake.workload.ticdc import Message

pytestmark = pytest.mark.integration

PAUSED = "shop.order_items"


def _publish(env: StageEnv, messages: list[Message]) -> None:
    """Publish on the env's stream (the workload names ``cdc.<db>.<table>``)."""
    prefix = env.cfg.bus.stream.subjects[0].removesuffix(">")
    run(env.publish([(prefix + m.subject.removeprefix("cdc."), m.payload) for m in messages]))


def _stage(env: StageEnv) -> None:
    proc = env.spawn_stager(once=True)
    try:
        assert 0 == proc.wait(300), env.log_text()
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise AssertionError("the stager did not drain:\n" + env.log_text()[-3000:]) from None


def _staged(cfg: Config) -> tuple[int, int]:
    """How many manifests and batch files staging holds."""
    storage = open_storage(cfg.stage_root, cfg.storage.s3)
    return len(storage.list(MANIFEST_DIR)), len(storage.list(BATCH_DIR))


def test_passed_batches_leave_staging_and_their_counts_stay(
    nats_server: EmbeddedNats, spark: SparkSession, tmp_path: Path
) -> None:
    """Staging is emptied of what every table passed, kept for a paused table, and the
    retired totals reconcile with the messages published."""
    overrides = {
        "lake": {"spark": {"master": "local[2]", "driver_memory": "1g"}},
        "stage": {"max_events": 30, "retention": {"interval_s": 0}},
    }
    env = make_stage_env(nats_server, tmp_path / "home", overrides)
    cfg = load_config(env.config_path, environ={})
    workload = OrderWorkload(WorkloadSpec(events=360, seed=11))
    messages = [m for txn in workload.transactions() for m in txn]
    first, second = messages[: len(messages) // 2], messages[len(messages) // 2 :]
    storage = open_storage(cfg.stage_root, cfg.storage.s3)

    _publish(env, first)
    _stage(env)
    assert _staged(cfg)[0] > 3  # several batches to retire
    Ingestor(cfg, spark).run_once()
    assert (0, 0) == _staged(cfg)
    assert len(first) == read_retired(storage)[1].received

    Ledger(cfg.lake_state_dir).request(PAUSED, "pause", reason="retention test")
    _publish(env, second)
    _stage(env)
    staged_before = _staged(cfg)
    Ingestor(cfg, spark).run_once()
    held = _staged(cfg)
    assert 0 < held[0] <= staged_before[0]  # the paused table's batches stay
    assert held[1] > 0

    Ledger(cfg.lake_state_dir).request(PAUSED, "resume")
    Ingestor(cfg, spark).run_once()
    assert (0, 0) == _staged(cfg)
    _, totals = read_retired(storage)
    assert (len(messages), len(messages)) == (
        totals.received,
        totals.staged + totals.dead_lettered + totals.skipped,
    )
    comparisons = verify_workload(cfg, workload)
    assert {c.table: 0 for c in comparisons} == {c.table: c.mismatches for c in comparisons}
    assert all(c.rows_in_lake == c.rows_expected > 0 for c in comparisons), comparisons
