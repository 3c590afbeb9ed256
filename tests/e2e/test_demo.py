"""`tidelake demo` end to end: real nats-server, stager and ingest processes, Spark + Hudi."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_demo_lake_equals_source(tmp_path: Path) -> None:
    """A small demo run ends with every table equal to the workload's expected state, even
    with another home and bus left in the caller's environment (the demo pins its own)."""
    env = {
        **os.environ,
        "TIDELAKE_HOME": str(tmp_path / "elsewhere"),
        "TIDELAKE_BUS__URL": "nats://127.0.0.1:1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelake.cli",
            "demo",
            "--events",
            "4000",
            "--rate",
            "2000",
            "--json",
            "--home",
            str(tmp_path / "demo"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    expected = {"mismatches": 0, "dlq": 0, "tables": 3}
    assert expected == {k: summary[k] for k in expected}, summary
    assert summary["events"] >= 4000
    assert summary["rows_in_lake"] == summary["rows_expected"] > 0
    assert summary["freshness_p99_s"] is not None
    assert 0 == proc.returncode
    assert not (tmp_path / "elsewhere").exists()
