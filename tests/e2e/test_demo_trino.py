"""`tidelake demo --with-ddl --trino`: a real Hive Metastore (3.1.3) kept in sync by the ingest
and a real Trino (476) over it; every table read through Trino equals the source after schema
changes, updates and deletes, and tables dropped at the source are gone from Trino's catalog.

Copy-on-write at table version 9 (the default), and merge-on-read at version 6 compacted after
every delta commit: Trino 476 reads merge-on-read tables read-optimized (as of their latest
compaction, docs/query-engines.md), so that is how such a table is current for it. The
merge-on-read form runs in `make e2e` (marked long)."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tidelake.pipeline import metastore, trino

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (metastore.available() and trino.available()),
        reason="the Hive Metastore and Trino are installed by scripts/setup with "
        "TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

LAYOUTS = {
    "cow-v9": {"TIDELAKE_LAKE__TABLE_TYPE": "COPY_ON_WRITE", "TIDELAKE_LAKE__TABLE_VERSION": "9"},
    "mor-v6": {
        "TIDELAKE_LAKE__TABLE_TYPE": "MERGE_ON_READ",
        "TIDELAKE_LAKE__TABLE_VERSION": "6",
        "TIDELAKE_LAKE__TABLE_SERVICES__COMPACTION_DELTA_COMMITS": "1",
    },
}


@pytest.mark.parametrize(
    "layout",
    # Merge-on-read at version 6 is the long form (`make e2e`): copy-on-write at 9 keeps
    # `make test` within its time.
    ["cow-v9", pytest.param("mor-v6", marks=pytest.mark.long)],
)
def test_trino_reads_the_source_after_ddl_and_deletes(tmp_path: Path, layout: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelake.cli",
            "demo",
            "--with-ddl",
            "--trino",
            "--events",
            "3000",
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
        env=os.environ | LAYOUTS[layout],
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    assert 0 == summary["mismatches"], summary["per_table"]
    assert 0 == summary["trino_mismatches"], summary["per_table"]
    tables = summary["per_table"]
    # Every table was read through Trino, the dropped ones included (checked absent).
    assert all("trino_mismatches" in t for t in tables.values()), tables
    assert {"shop.customers", "shop.orders", "shop.order_items"} <= set(tables)
    assert sum(t["rows_expected"] for t in tables.values()) > 500
    props = tmp_path / "demo" / "lake" / "shop" / "orders" / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    assert f"hoodie.table.version={LAYOUTS[layout]['TIDELAKE_LAKE__TABLE_VERSION']}" in text
    assert f"hoodie.table.type={LAYOUTS[layout]['TIDELAKE_LAKE__TABLE_TYPE']}" in text
