"""Catalog sync: the Spark catalog (or a Hive metastore) shows every table's current schema.

Tables are registered as external Hudi tables (``CREATE TABLE … USING hudi LOCATION``):
dropping a catalog entry forgets the name and never touches the data. After a schema change
the entry is dropped and created again, so the catalog takes the schema from the table's
latest commit instead of keeping the one it saw at registration, then ``REFRESH TABLE``
clears Spark's cached plans and file listings. A renamed table loses its old entry and gets
a new one; a dropped table loses its entry.

With ``lake.catalog.hive_metastore_uri`` set, the session's catalog is that metastore
(``lake/spark.py``) and the same statements keep it in sync; without, it is Spark's
in-memory catalog, rebuilt from the lake at every session start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelake.lake.spark import quote_identifier, register_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _qualified(database: str, table: str) -> str:
    return f"{quote_identifier(database)}.{quote_identifier(table)}"


def sync_table(spark: SparkSession, database: str, table: str, path: str) -> None:
    """(Re-)register ``database.table`` at ``path`` with its current schema."""
    name = _qualified(database, table)
    if spark.catalog.tableExists(name):
        spark.sql(f"DROP TABLE {name}")  # external: the entry only, never the data
    register_table(spark, database, table, path)
    spark.sql(f"REFRESH TABLE {name}")


def unregister_table(spark: SparkSession, database: str, table: str) -> None:
    """Forget ``database.table`` in the catalog (its data is handled by the caller)."""
    name = _qualified(database, table)
    if spark.catalog.tableExists(name):
        spark.sql(f"DROP TABLE {name}")
