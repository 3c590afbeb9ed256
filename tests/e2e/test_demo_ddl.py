"""`tidelake demo --with-ddl` end to end: schema changes mid-stream, rows and schemas verified.

The long form (`make e2e`): in `make test` the same DDL demo runs twice with more on top,
through Trino (tests/e2e/test_demo_trino.py, copy-on-write) and with Kafka as the bus
(tests/e2e/test_demo_kafka.py); this one checks every table the DDL steps leave, by name."""

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.long]


def test_demo_with_ddl_ends_with_the_sources_rows_and_schemas(tmp_path: Path) -> None:
    """Every DDL step lands (add, drop, rename, widen, create and drop a table, rename a
    table): the lake's rows and column types equal the workload's, dropped tables are gone."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelake.cli",
            "demo",
            "--with-ddl",
            "--events",
            "4000",
            "--rate",
            "1000",
            "--json",
            "--home",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    assert 0 == summary["mismatches"], summary["per_table"]
    expected_tables = {
        "shop.customers",
        "shop.orders",
        "shop.order_items",
        "shop.promotions",
        "shop.import_tmp",
        "shop.coupons",
    }
    assert expected_tables == set(summary["per_table"])
    assert 0 == summary["per_table"]["shop.coupons"]["rows_in_lake"]  # renamed away
    assert summary["per_table"]["shop.promotions"]["rows_in_lake"] > 0
    assert 0 == proc.returncode
