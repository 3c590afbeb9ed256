"""The lake's disk fills up, then is freed: the ingest shows the cause while it waits and
resumes by itself, no manual step (issue 23, deliver 4; ``lake/ingest.py`` failure policy).

Probe: after the lake's disk filled and was freed, tables stayed paused in memory with
``errors: []``. Here the lake root (Hudi tables and the ingest's state) is a real 64 MiB
tmpfs filled by a ballast file while a continuous ingest (real Spark and Hudi) has rows to
write; the table must wait with its cause ("No space left on device") shown in the
heartbeat ``status`` reads (written in place on the full disk), never be paused, and land
everything once the ballast is removed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lakekit import Lake, event

from support.small_disk import fill, mounted_tmpfs
from tidelake.lake.ledger import Ledger

pytestmark = pytest.mark.integration


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs (needs root, as the fault suite does), unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "lake", 64) as disk:
        yield disk


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def test_a_full_lake_disk_holds_the_table_with_its_cause_then_it_resumes_alone(
    lake_factory: Callable[..., Lake], small_disk: Path
) -> None:
    """Rows 1-5 land; the disk fills; rows 6-10 are staged: the table waits for a retry
    with "No space left on device" as its cause (``retrying``), is never paused; the
    ballast is removed: rows 6-10 land with no request to resume, nothing held back."""
    lake = lake_factory(TIDELAKE_LAKE__ROOT=str(small_disk), TIDELAKE_INGEST__INTERVAL_S="0.2")
    values = {"status": "new", "amount": "1.00"}
    lake.stage([event("insert", i, i, i, values=values) for i in range(1, 6)])
    lake.ingest()
    ballast = fill(small_disk)
    lake.stage([event("insert", i, i, i, values=values) for i in range(6, 11)])

    ingestor = lake.ingestor()
    stop = threading.Event()
    causes: set[str] = set()
    heartbeat_causes: set[str] = set()  # what status and serve show, read from the full disk
    worker = threading.Thread(target=ingestor.run_continuous, args=(0.2, stop), daemon=True)
    worker.start()
    try:

        def waiting_with_cause() -> bool:
            retry = ingestor.retrying.get("shop.orders")
            if retry is not None:
                causes.add(retry.cause)
            shown = (Ledger(lake.config.lake_state_dir).heartbeat() or {}).get("retrying") or {}
            if "shop.orders" in shown:
                heartbeat_causes.add(str(shown["shop.orders"]))
            return retry is not None and retry.failures >= 2 and bool(heartbeat_causes)

        _wait(waiting_with_cause, 300, "the table to wait for space with its cause")
        assert {} == ingestor.paused
        ballast.unlink()  # space freed: nobody resumes anything

        def landed() -> bool:
            return not ingestor.retrying and len(lake.state()) == 10

        _wait(landed, 300, "rows 6-10 to land after the space came back")
    finally:
        stop.set()
        worker.join(120)
    assert any("no space left on device" in c.lower() for c in causes), causes
    assert any("no space left on device" in c.lower() for c in heartbeat_causes), heartbeat_causes
    expected = ({str(i): ("new",) for i in range(1, 11)}, {}, {})
    assert expected == (lake.state(), ingestor.paused, ingestor.retrying)
