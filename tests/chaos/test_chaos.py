"""Short fault runs inside the test suite: every fault kind of ``tidelake chaos`` at least once,
on every process it applies to, while a real producer (``tidelake capture`` reading a private
MariaDB) writes; then the lake compared row by row with the live source tables.

`make chaos` runs the long version (docs/reliability.md records its result). These runs
mount loop devices (the disk-full faults): they need root, as the rest of the suite's
services do not — they are skipped, saying so, without it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from tidelake.runtime.processes import ChildProcess, tidelake_argv

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # The harness's own limit (below) plus its stop grace fit inside this.
    pytest.mark.timeout(1080),
    pytest.mark.skipif(os.geteuid() != 0, reason="disk-full faults mount loop devices (root)"),
]


def _chaos(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``tidelake chaos … --json`` as a child process; its JSON result."""
    home = tmp_path / "chaos"
    argv = tidelake_argv("chaos", "--home", str(home), "--json", *args)
    # SIGINT when it overruns: the harness stops its stack and unmounts its disks in its
    # finally; whatever is still left after the grace period is SIGKILLed by the process layer.
    harness = ChildProcess(
        "chaos",
        argv,
        log_path=tmp_path / "chaos.log",
        stop_signal=signal.SIGINT,
        stop_timeout_s=120,
    ).start()
    try:
        status = harness.wait(900)  # a short run takes 3 to 5 minutes
    finally:
        harness.stop()
    # stdout and stderr share the log: the result is the last JSON line.
    json_lines = [line for line in harness.log_tail(4000).splitlines() if line.startswith("{")]
    assert json_lines, harness.log_tail(60)
    result: dict[str, Any] = orjson.loads(json_lines[-1])
    result["exit_status"] = status
    return result


def _assert_exact(result: dict[str, Any]) -> None:
    """0 lost, 0 duplicated, 0 resurrected, 0 different, nothing dead-lettered."""
    assert None is result["error"], result["error"]
    assert 0 == result["lost"], result["per_table"]
    assert 0 == result["duplicated"], result["per_table"]
    assert 0 == result["mismatches"], result["per_table"]
    assert {} == result["dead_letters"]
    assert 0 == result["dlq"]
    assert result["rows_in_lake"] == result["rows_expected"] > 0
    assert 3 == result["tables"]
    assert 0 == result["exit_status"]


def test_every_fault_kind_on_every_process_loses_duplicates_and_resurrects_nothing(
    tmp_path: Path,
) -> None:
    """Issue 23 deliver 3 (short form), staging on a local disk: kill -9 of nats-server, both
    stagers, the ingest and the capture; SIGSTOP past AckWait of a stager while the second
    one runs (and of the ingest and the capture); nats-server stopped or frozen past AckWait;
    the stage root's and the lake's filesystems full, then freed; restart storms — each at
    least once. The lake equals the MariaDB source: nothing acked was lost, nothing
    duplicated, no valid event dead-lettered, and it recovered with no manual step."""
    result = _chaos(
        tmp_path,
        "--source", "mariadb",
        "--seed", "11",
        "--events", "1200",
        "--rate", "12",
        "--min-faults", "16",
        "--kinds", "kill,pause,bus-down,disk-full,restart-storm",
    )  # fmt: skip
    _assert_exact(result)
    assert {"kill", "pause", "bus-down", "disk-full", "restart-storm"} == set(result["faults"])
    assert all(n >= 1 for n in result["faults"].values()), result["faults"]
    assert {"nats", "stager", "stager-2", "ingest", "capture"} == set(result["processes"])
    assert all(n >= 1 for n in result["kills"].values()), result["kills"]
    assert {"disk-full/stage", "disk-full/lake"} <= set(result["faults_by_target"])
    assert {"pause/stager", "pause/stager-2"} <= set(result["faults_by_target"])
    assert result["faults_total"] >= 16
    assert {} == result["unexpected_exits"], result["actions"]


@pytest.mark.long  # make e2e; make test keeps the every-fault-kind run as chaos's short form
def test_object_store_down_slow_and_full_loses_nothing(tmp_path: Path) -> None:
    """Issue 23 deliver 3 (short form), staging in MinIO: MinIO killed and kept down past
    AckWait (every request fails), throttled (frozen and thawed in a duty cycle past
    AckWait), its disk full, and kill -9 of every process MinIO included. The lake equals the
    MariaDB source with nothing dead-lettered."""
    result = _chaos(
        tmp_path,
        "--source", "mariadb",
        "--stage-store", "s3",
        "--seed", "12",
        "--events", "800",
        "--rate", "12",
        "--min-faults", "8",
        "--kinds", "store-down,store-slow,disk-full,kill",
    )  # fmt: skip
    _assert_exact(result)
    assert all(n >= 1 for n in result["faults"].values()), result["faults"]
    assert {"store-down/minio", "store-slow/minio", "kill/minio"} <= set(result["faults_by_target"])
    assert "disk-full/stage" in result["faults_by_target"]
    assert {} == result["unexpected_exits"], result["actions"]
