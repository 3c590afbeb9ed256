"""A short chaos run inside the test suite: kill -9 and SIGSTOP of nats-server, the stager and
the ingest while the order workload flows, then the lake compared row by row.

`make chaos` runs the long version (docs/reliability.md records its result).
"""

from __future__ import annotations

import signal
from pathlib import Path

import orjson
import pytest

from tidelake.runtime.processes import ChildProcess, tidelake_argv

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_short_chaos_run_loses_duplicates_and_resurrects_nothing(tmp_path: Path) -> None:
    """Each of nats-server, the stager and the ingest is killed at least 3 times at seeded
    moments (plus SIGSTOP pauses past AckWait); the lake still equals the expected state:
    0 mismatches (no row missing, unexpected, duplicated or different), nothing dead-lettered,
    and no stage ever exited on its own."""
    home = tmp_path / "chaos"
    argv = tidelake_argv(
        "chaos",
        "--seed", "11",
        "--events", "1500",
        "--rate", "50",
        "--min-kills", "9",
        "--min-kills-each", "3",
        "--home", str(home),
        "--json",
    )  # fmt: skip
    # SIGINT when it overruns: the harness stops its stack in its finally; whatever is still
    # left after the grace period (it too, its victims) is SIGKILLed by the process layer.
    harness = ChildProcess(
        "chaos",
        argv,
        log_path=tmp_path / "chaos.log",
        stop_signal=signal.SIGINT,
        stop_timeout_s=120,
    ).start()
    try:
        status = harness.wait(900)
    finally:
        harness.stop()
    # stdout and stderr share the log: the result is the last JSON line.
    json_lines = [line for line in harness.log_tail(4000).splitlines() if line.startswith("{")]
    assert json_lines, harness.log_tail(60)
    result = orjson.loads(json_lines[-1])
    assert None is result["error"], result
    assert 0 == result["mismatches"], result["per_table"]
    assert 0 == result["dlq"]
    assert {} == result["unexpected_exits"], result["actions"]
    assert {"nats", "stager", "ingest"} == set(result["kills"])
    assert all(n >= 3 for n in result["kills"].values()), result["kills"]
    assert result["kills_total"] >= 9
    assert result["events"] >= 1500
    assert result["rows_in_lake"] == result["rows_expected"] > 0
    assert 3 == result["tables"]
    assert 0 == status
