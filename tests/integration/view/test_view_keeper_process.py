"""The views in the real ingest process (``tidelake ingest --continuous``): updated after each
round, their state in ``tidelake view status``, their metrics on the ingest's /metrics, and a
``tidelake view rebuild`` asked of the running ingest (view/keeper.py, cli/view.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from lakekit import Lake, event

from tidelake.runtime.processes import free_port
from tidelake.view.keeper import read_state

REPO = Path(__file__).resolve().parents[3]
TYPES = {"id": "bigint", "customer_id": "bigint", "amount": "decimal(10,2)"}
SQL = "SELECT customer_id, COUNT(*) AS orders FROM shop.orders GROUP BY customer_id"


def _order(oid: int, pos: int, customer: int) -> Any:
    values = {"customer_id": str(customer), "amount": "1.00"}
    return event("insert", oid, pos, pos, values=values, types=TYPES)


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _cli(lake: Lake, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "view", *args],
        env={**os.environ, **lake.env},
        cwd=REPO,
        capture_output=True,
        timeout=300,
        check=False,
    )


def test_the_running_ingest_keeps_the_views(
    lake_factory: Callable[..., Lake], tmp_path: Path
) -> None:
    port = free_port()
    lake = lake_factory(
        TIDELAKE_VIEWS__SPEND__SQL=SQL,
        TIDELAKE_METRICS__PORT=str(port),
        TIDELAKE_INGEST__INTERVAL_S="0.5",
    )
    lake.stage([_order(1, 1, 10), _order(2, 2, 11)])
    log = tmp_path / "ingest.log"
    ingest = subprocess.Popen(
        [sys.executable, "-m", "tidelake.cli", "ingest", "--continuous"],
        env={**os.environ, **lake.env},
        cwd=REPO,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait("the view built", lambda: read_state(lake.config).get("spend", {}).get("base"))
        assert read_state(lake.config)["spend"]["outcome"] == "rebuild"
        lake.stage([_order(3, 3, 10)])
        _wait(
            "the view updated by a step",
            lambda: read_state(lake.config)["spend"]["outcome"] == "step",
        )
        status = _cli(lake, "status", "--json")
        assert status.returncode == 0, status.stderr.decode()
        (entry,) = orjson.loads(status.stdout)
        assert (entry["view"], entry["outcome"], entry["lag_s"]) == ("spend", "step", 0.0)

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
        assert 'tidelake_ingester_view_runs_total{outcome="step",view="spend"}' in metrics
        assert 'tidelake_ingester_view_lag_seconds{view="spend"} 0.0' in metrics
        assert 'tidelake_ingester_view_updated_timestamp_seconds{view="spend"}' in metrics
        assert "tidelake_ingester_view_run_duration_seconds_count" in metrics

        # The ingest holds the lake: `view run` is refused, `view rebuild` is handed to it.
        assert _cli(lake, "run").returncode == 1
        rebuilt = _cli(lake, "rebuild", "--json", "--wait", "240")
        assert rebuilt.returncode == 0, rebuilt.stderr.decode()
        (done,) = orjson.loads(rebuilt.stdout)
        assert (done["view"], done["outcome"]) == ("spend", "rebuild")
    finally:
        ingest.send_signal(signal.SIGTERM)
        ingest.wait(120)
    assert ingest.returncode == 0, log.read_text()[-3000:]
    verified = _cli(lake, "verify", "--json")
    assert verified.returncode == 0, verified.stderr.decode()
    assert orjson.loads(verified.stdout.splitlines()[-1])[0]["ok"]  # after Spark's own lines
