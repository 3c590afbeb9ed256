"""``demo --trino``: a private Hive Metastore that the ingest keeps in sync, a Trino server over
it, and the workload's expected state compared with what Trino answers, table by table.

The metastore starts first (the ingest registers each table there as it creates it), Trino
after; both stop with the demo. Trino reads through its ``hudi`` catalog; the ``hive`` catalog
redirects there (pipeline/trino.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tidelake.names import catalog_name
from tidelake.pipeline.metastore import HiveMetastore
from tidelake.pipeline.trino import TrinoServer, rows_as_dicts
from tidelake.verify.compare import Comparison, compare_rows
from tidelake.workload.ticdc import Workload

#: Columns tidelake and Hudi add to every table: not the source's.
_OWN_PREFIXES = ("_hoodie_", "_tl_")


def trino_table(table_id: str, catalog: str = "hudi") -> str:
    """``catalog."db"."table"`` of a source table as the catalog sync registered it."""
    database, table = table_id.split(".", 1)
    return f'{catalog}."{catalog_name(database)}"."{catalog_name(table)}"'


class QueryEngines:
    """The metastore and the Trino server of one demo, under ``home``."""

    def __init__(self, home: Path) -> None:
        self.metastore = HiveMetastore(home / "metastore")
        self.trino: TrinoServer | None = None
        self._home = home

    def start_metastore(self) -> QueryEngines:
        self.metastore.start()
        return self

    def start_trino(self, s3: Any = None) -> TrinoServer:
        self.trino = TrinoServer(self._home / "trino", self.metastore.uri, s3=s3).start()
        return self.trino

    def settings(self) -> dict[str, Any]:
        """What the demo's config file says so that the ingest keeps the metastore in sync."""
        return {"lake": {"catalog": {"hive_metastore_uri": self.metastore.uri}}}

    def stop(self) -> None:
        if self.trino is not None:
            self.trino.stop()
        self.metastore.stop()


def verify_through_trino(trino: TrinoServer, workload: Workload) -> list[Comparison]:
    """Every expected table read by Trino, row by row and by column names; every table the
    DDL dropped absent from Trino's catalog."""
    results = []
    for table, rows in workload.expected_rows().items():
        name = table.split(".", 1)[1]
        schema = workload.schemas[name]
        names, data = trino.query(f"SELECT * FROM {trino_table(table)}")
        comparison = compare_rows(
            table, workload.primary_keys[name], rows, rows_as_dicts(names, data), list(schema)
        )
        columns = [c for c in names if not c.startswith(_OWN_PREFIXES)]
        if sorted(columns) != sorted(schema):
            comparison.schema = [f"Trino's columns {sorted(columns)}, source's {sorted(schema)}"]
        # The same table named through the Hive catalog is redirected to the Hudi one.
        _, counted = trino.query(f"SELECT count(*) FROM {trino_table(table, 'hive')}", "hive")
        if counted[0][0] != len(data):
            comparison.schema.append(f"hive catalog: {counted[0][0]} rows, hudi: {len(data)}")
        results.append(comparison)
    for table in getattr(workload, "dropped_tables", []):
        database, name = table.split(".", 1)
        _, listed = trino.query(f'SHOW TABLES FROM hudi."{catalog_name(database)}"')
        still = [row[0] for row in listed if row[0] == catalog_name(name)]
        results.append(
            Comparison(
                table,
                unexpected=len(still),
                schema=[f"dropped at the source, still in Trino's catalog: {still}"]
                if still
                else [],
            )
        )
    return results
