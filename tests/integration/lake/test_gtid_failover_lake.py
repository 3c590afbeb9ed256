"""After a MariaDB primary failover the lake (Spark + Hudi) equals the promoted server
(issue 22, "must show"), also when transactions are published twice across the switch.

The scenario is ``gtidkit.crash_then_fail_over`` (tests/integration/capture): the capture is
SIGKILLed with transactions published past its saved position, the primary is SIGKILLed,
the replica promoted and written to, and the restarted capture resumes there by GTID from
its saved position, so it publishes those transactions again under new positions (server
epoch 1). The CDC stream is staged in two batches — what was read on the old primary, then
what was read on the new one — and ingested batch by batch, so the second batch meets the
per-table position watermark the first one committed: its positions must sort above it or
the ingest would drop them as stale. ``tidelake verify``'s comparison then finds no
difference, row by row."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lakekit import Lake

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.gtid import epoch_of
from tidelake.verify.source import verify_table

sys.path.insert(0, str(Path(__file__).parents[1] / "capture"))
from capturekit import decoded, fold, mysql_rows, row_differences, stream_messages
from gtidkit import crash_then_fail_over, topology

pytestmark = pytest.mark.integration


def test_lake_equals_the_promoted_server_after_a_failover(lake: Lake, tmp_path: Path) -> None:
    """Snapshot + changes from the old primary, then (republished and new) changes from the
    promoted replica, ingested in that order: the Hudi table equals the promoted server's
    table row by row, and so does the stream folded by key and position."""
    with EmbeddedNats(tmp_path / "nats") as nats, topology(tmp_path) as (primary, replica):
        done = crash_then_fail_over(tmp_path, nats, primary, replica)
        done.run.process.stop()
        state = done.run.position()
        assert state is not None
        assert (state["epoch"], state["server"]["address"]) == (1, f"127.0.0.1:{replica.port}")
        assert done.republished > 0
        events = decoded(stream_messages(nats.url))
        old = [e for e in events if epoch_of(e.position.parts) == 0]
        new = [e for e in events if epoch_of(e.position.parts) == 1]
        assert len(old) + len(new) == len(events)
        assert len(new) > done.republished
        source = mysql_rows(replica.connect(), "fo.t")
        assert "" == row_differences(source, fold(events, "fo.t"))
        lake.stage(old)
        assert {} == lake.ingest().refused
        lake.stage(new)
        assert {} == lake.ingest().refused
        result = verify_table(replica.dsn, lake.config.lake_root, "fo.t")
        assert result.error is None, result.error
        assert result.mismatches == 0, result.samples
        assert result.rows_source == result.rows_lake == len(source)
