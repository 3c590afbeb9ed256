"""``tidelake run`` end to end: the supervised local stack as one child process, fed TiCDC
canal-json on its embedded nats-server, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from urllib.request import urlopen

import orjson
import psutil
import pytest
import yaml

from tidelake.bus.discovery import read_record
from tidelake.config import load_config
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.demo import publish_workload, verify_workload
from tidelake.runtime.heartbeat import read_heartbeat
from tidelake.runtime.processes import ChildProcess, free_port, http_ok, tidelake_argv
from tidelake.workload.orders import DATABASE, OrderWorkload, WorkloadSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 400


def _config(home: Path, nats_port: int, api_port: int, metrics_port: int) -> Path:
    data = {
        "home": str(home),
        # No bus.url: `run` starts its embedded nats-server, on a port the test knows.
        "bus": {"embedded": {"port": nats_port}},
        "api": {"port": api_port},
        # run's own /metrics and /healthz here, its stager and ingest on the next ports.
        "metrics": {"port": metrics_port},
        "stage": {"max_age_s": 0.5},
        "ingest": {"warm_up": False},
        "lake": {"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
    }
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_run_lands_published_changes_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`tidelake run --serve` with an embedded nats-server: once its stager and ingest report
    healthy, it has printed where the bus and the dashboard are and recorded its bus in
    <home>/bus.json; a second shell (no config, only TIDELAKE_HOME) finds the bus there
    (`status --json`: bus and both stages up), the served API answers, and 400 canal-json
    changes of three tables are published to the recorded URL; every table's commits cover
    its last message and the lake equals the workload's expected state row by row. SIGTERM
    then stops it with exit status 0, the record is gone, the stager and the ingest record a
    clean stop in their heartbeats, and no process it started (nats-server, stages, the API,
    the JVM) is left."""
    home = tmp_path / "home"
    nats_port = free_port()
    api_port = free_port()
    metrics_port = free_port()
    config_path = _config(home, nats_port, api_port, metrics_port)
    cfg = load_config(config_path, environ={})
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    staging_beats = Path(cfg.stage_root) / "_tidelake"
    ledger = Ledger(cfg.lake_state_dir)

    def healthy(_p: ChildProcess) -> bool:
        ingest = ledger.heartbeat() or {}
        stager = read_heartbeat(staging_beats, "stager") or {}
        return ingest.get("state") in ("idle", "applying") and stager.get("state") == "running"

    run = ChildProcess(
        "run",
        tidelake_argv("run", "--config", str(config_path), "--interval", "0.3", "--serve"),
        log_path=home / "run.log",
        base_env=env,
        ready=healthy,
        startup_timeout_s=240,
        stop_timeout_s=90,
    )
    run.start()
    try:
        assert run.pid is not None
        record = read_record(home)
        assert record is not None
        assert (f"nats://127.0.0.1:{nats_port}", run.pid) == (record.url, record.pid)
        printed = run.log_tail(200)
        assert f"bus        nats://127.0.0.1:{nats_port}" in printed
        assert f"dashboard  http://127.0.0.1:{api_port}/" in printed
        # run, its stager (port + 2) and its ingest (port + 3) each answer /healthz.
        beats = [
            orjson.loads(urlopen(f"http://127.0.0.1:{metrics_port + n}/healthz", timeout=5).read())
            for n in (0, 2, 3)
        ]
        assert [("ok", "run"), ("ok", "stager"), ("ok", "ingest")] == [
            (b["status"], b["process"]) for b in beats
        ]
        second_shell = {**env, "TIDELAKE_HOME": str(home)}
        status = subprocess.run(
            tidelake_argv("status", "--json"),
            env=second_shell,
            cwd=tmp_path,
            capture_output=True,
            timeout=60,
            check=True,
        )
        seen = orjson.loads(status.stdout)
        assert (True, None, True, True) == (
            seen["bus"]["up"],
            seen["bus"]["error"],
            seen["processes"]["stager"]["up"],
            seen["processes"]["ingest"]["up"],
        )
        run.wait_until(http_ok(f"http://127.0.0.1:{api_port}/api/health"), 60, "the API up")
        descendants = [p.pid for p in psutil.Process(run.pid).children(recursive=True)]
        workload = OrderWorkload(WorkloadSpec(events=EVENTS, seed=3))
        published, _rate = asyncio.run(publish_workload(cfg, record.url, workload, rate=2_000))
        last = {f"{DATABASE}.{t}": seqs[-1] for t, seqs in published.seqs.items() if seqs}

        def covered(_p: ChildProcess) -> bool:
            done = ledger.covered()
            return all(done.get(table, 0) >= seq for table, seq in last.items())

        run.wait_until(covered, 150, "every table covered")
        stopped = run.stop(sig=signal.SIGTERM)
    finally:
        run.stop(timeout_s=30)

    assert 0 == stopped, run.log_tail(60)
    assert read_record(home) is None
    assert 3 == len(last)
    assert ["stopped", "stopped"] == [
        (ledger.heartbeat() or {}).get("state"),
        (read_heartbeat(staging_beats, "stager") or {}).get("state"),
    ]
    assert len(descendants) >= 3  # nats-server, stager, ingest (and the ingest's JVM)
    assert [] == [pid for pid in descendants if _alive(pid)]
    comparisons = verify_workload(cfg, workload)
    assert {c.table: 0 for c in comparisons} == {c.table: c.mismatches for c in comparisons}
    assert all(c.rows_in_lake == c.rows_expected > 0 for c in comparisons), comparisons
