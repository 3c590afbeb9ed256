"""After a MariaDB primary failover the lake (Spark + Hudi) equals the promoted server
(issue 22, "must show"): the scenario of tests/integration/capture/gtidkit.py (primary
SIGKILLed mid-workload, replica promoted, capture resumed there by GTID), then the CDC
stream staged in two batches — what was read on the old primary, then what was read on the
new one — and ingested batch by batch, so the second batch meets the per-table position
watermark the first one committed: its positions (server epoch 1) must sort above it or the
ingest would drop them as stale. ``tidelake verify``'s comparison then finds no difference."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lakekit import Lake

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.gtid import epoch_of
from tidelake.verify.source import verify_table

sys.path.insert(0, str(Path(__file__).parents[1] / "capture"))
from capturekit import decoded, stream_messages
from gtidkit import fail_over, topology

pytestmark = pytest.mark.integration


def test_lake_equals_the_promoted_server_after_a_failover(lake: Lake, tmp_path: Path) -> None:
    """Snapshot + changes from the old primary, then changes from the promoted replica,
    ingested in that order: the Hudi table equals the promoted server's table row by row."""
    with EmbeddedNats(tmp_path / "nats") as nats, topology(tmp_path) as (primary, replica):
        done = fail_over(tmp_path, nats, primary, replica)
        done.run.process.stop()
        events = decoded(stream_messages(nats.url))
        old = [e for e in events if epoch_of(e.position.parts) == 0]
        new = [e for e in events if epoch_of(e.position.parts) == 1]
        assert len(old) + len(new) == len(events)
        assert new
        lake.stage(old)
        assert {} == lake.ingest().refused
        lake.stage(new)
        assert {} == lake.ingest().refused
        result = verify_table(replica.dsn, lake.config.lake_root, "fo.t")
        assert result.error is None, result.error
        assert result.mismatches == 0, result.samples
        assert result.rows_source == result.rows_lake > 0
