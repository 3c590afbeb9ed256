"""``tidelake demo --source mariadb|postgres --json``: a private server, the SQL workload,
capture, stager and ingest processes, then verify against the live tables."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("source", ["mariadb", "postgres"])
def test_demo_source_lake_equals_live_tables(source: str, tmp_path: Path) -> None:
    """The lake ends equal to the live source tables: mismatches 0, equal row hashes."""
    proc = subprocess.run(
        [
            sys.executable, "-m", "tidelake.cli", "demo", "--source", source,
            "--events", "2000", "--rate", "2000", "--json", "--home", str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    expected = {"mismatches": 0, "dlq": 0, "tables": 3}
    assert expected == {k: summary[k] for k in expected}, summary
    assert summary["events"] >= 1500
    assert summary["rows_in_lake"] == summary["rows_expected"] > 0
    for table in summary["per_table"].values():
        assert table["hash_source"] == table["hash_lake"]
    assert 0 == proc.returncode
