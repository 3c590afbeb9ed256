"""The Hive Metastore sync, seen from Trino: a real metastore (3.1.3) kept in sync by the real
ingest (``tidelake ingest --once`` processes), and a real Trino (476) reading through it.

Every kind of catalog change the source can make, one round each: a database created empty, a
table created and filled; a column added, a row deleted, a table truncated and filled again;
a table dropped, its database dropped. After each round Trino lists the databases, tables and
columns the source has, and reads the rows it has (through the ``hudi`` catalog and the
``hive`` one, which redirects)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lakekit import Lake, ddl_event, event

from tidelake.events import ChangeEvent, Op, Position
from tidelake.pipeline import metastore, trino
from tidelake.pipeline.metastore import HiveMetastore
from tidelake.pipeline.trino import TrinoServer

pytestmark = [
    pytest.mark.integration,
    # `make e2e`: in `make test`, tests/e2e/test_demo_trino.py has the ingest keep the same
    # metastore in sync through tables created, evolved and dropped, and reads them in Trino.
    pytest.mark.long,
    pytest.mark.skipif(
        not (metastore.available() and trino.available()),
        reason="the Hive Metastore and Trino are installed by scripts/setup with "
        "TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

ACCOUNTS = {"id": "bigint", "name": "varchar(32)"}
ORDERS = {"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrinoServer]:
    home = tmp_path_factory.mktemp("engines")
    with HiveMetastore(home / "metastore") as hms, TrinoServer(home / "trino", hms.uri) as server:
        yield server


def _database_ddl(database: str, sql: str, seq: int) -> ChangeEvent:
    """A database DDL as TiCDC's canal-json carries it (table ""; tests/integration/lake/
    test_ddl.py has the sources)."""
    return ChangeEvent(
        source="tidb",
        database=database,
        table="",
        op=Op.DDL,
        position=Position((100 + seq, 0)),
        ddl=sql,
        ddl_type="QUERY",
        seq=seq,
        commit_ts_ms=1_714_929_186_000 + seq,
    )


def _ingest(lake: Lake, uri: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "ingest", "--once"],
        env=lake.env | {"TIDELAKE_LAKE__CATALOG__HIVE_METASTORE_URI": uri},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr[-3000:]


def _rows(server: TrinoServer, table: str, catalog: str = "hudi") -> list[tuple[Any, ...]]:
    database, name = table.split(".")
    names, rows = server.query(f'SELECT * FROM {catalog}."{database}"."{name}"', catalog)
    own = [i for i, n in enumerate(names) if not n.startswith(("_hoodie_", "_tl_"))]
    return sorted(tuple(str(row[i]) for i in own) for row in rows)


def _columns(server: TrinoServer, table: str) -> list[str]:
    database, name = table.split(".")
    _, rows = server.query(f'SHOW COLUMNS FROM hudi."{database}"."{name}"')
    return [r[0] for r in rows if not r[0].startswith(("_hoodie_", "_tl_"))]


def _listing(server: TrinoServer) -> dict[str, list[str]]:
    """Trino's databases (but its own) and their tables."""
    _, schemas = server.query("SHOW SCHEMAS FROM hudi")
    out = {}
    for (schema,) in schemas:
        if schema not in ("information_schema", "default"):
            _, tables = server.query(f'SHOW TABLES FROM hudi."{schema}"')
            out[schema] = sorted(t for (t,) in tables)
    return out


def test_trino_sees_every_catalog_change_the_source_makes(
    lake_factory: Callable[..., Lake], engines: TrinoServer, tmp_path: Path
) -> None:
    lake = lake_factory()
    uri = engines.metastore_uri
    seq = itertools.count(1)

    def row(op: str, key: int, table: str, values: dict[str, str], types: dict[str, str]) -> Any:
        n = next(seq)
        return event(op, key, 100 + n, n, table=table, values=values, types=types)

    # Round 1: an empty database, and a table created and filled in another.
    lake.stage([_database_ddl("crm_empty", "CREATE DATABASE `crm_empty`", next(seq))])
    lake.stage(
        [
            row("insert", 1, "crm.accounts", {"name": "Ada"}, ACCOUNTS),
            row("insert", 2, "crm.accounts", {"name": "Linus"}, ACCOUNTS),
            row("insert", 1, "crm.orders", {"status": "new", "amount": "1.50"}, ORDERS),
            row("insert", 2, "crm.orders", {"status": "new", "amount": "2.50"}, ORDERS),
        ]
    )
    _ingest(lake, uri)
    assert {"crm_empty": [], "crm": ["accounts", "orders"]} == _listing(engines)
    assert [("1", "Ada"), ("2", "Linus")] == _rows(engines, "crm.accounts")
    assert _rows(engines, "crm.accounts") == _rows(engines, "crm.accounts", "hive")

    # Round 2: a column added and filled, a row deleted, a table truncated and filled again.
    n = next(seq)
    lake.stage(
        [ddl_event("crm.accounts", "ALTER TABLE `crm`.`accounts` ADD COLUMN `note` VARCHAR(16)",
                   "ALTER", 100 + n, n)]
    )  # fmt: skip
    with_note = ACCOUNTS | {"note": "varchar(16)"}
    lake.stage(
        [
            row("insert", 3, "crm.accounts", {"name": "Grace", "note": "new"}, with_note),
            row("delete", 1, "crm.accounts", {"name": "Ada", "note": ""}, with_note),
        ]
    )
    n = next(seq)
    lake.stage([ddl_event("crm.orders", "TRUNCATE TABLE `crm`.`orders`", "TRUNCATE", 100 + n, n)])
    lake.stage([row("insert", 7, "crm.orders", {"status": "paid", "amount": "7.00"}, ORDERS)])
    _ingest(lake, uri)
    assert ["id", "name", "note"] == _columns(engines, "crm.accounts")
    assert [("2", "Linus", "None"), ("3", "Grace", "new")] == _rows(engines, "crm.accounts")
    assert [("7", "paid", "7.00")] == _rows(engines, "crm.orders")

    # Round 3: a table dropped, then a whole database.
    n = next(seq)
    lake.stage([ddl_event("crm.orders", "DROP TABLE `crm`.`orders`", "ERASE", 100 + n, n)])
    lake.stage([_database_ddl("crm_empty", "DROP DATABASE `crm_empty`", next(seq))])
    _ingest(lake, uri)
    assert {"crm": ["accounts"]} == _listing(engines)
    assert [("2", "Linus", "None"), ("3", "Grace", "new")] == _rows(engines, "crm.accounts")
