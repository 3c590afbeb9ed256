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

Databases: ``CREATE DATABASE`` at the source makes the database exist in the catalog at once,
while it holds no table yet, and ``DROP DATABASE`` removes it. The lake's directories cannot
tell an empty database (there is nothing to discover), so the ingest records each database's
last DDL in ``<state>/databases.json`` (through ``lake/ledger.py``: per database, the stream
sequence of its last DDL and whether it exists after it): the stream sequence makes a
replayed ``CREATE`` after a ``DROP`` (or the reverse) change nothing, and
:func:`register_databases` re-creates the existing ones in a new session's in-memory catalog.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from tidelake.lake.hudi import local_dir
from tidelake.lake.ledger import Ledger
from tidelake.names import catalog_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger(__name__)


def quote_identifier(name: str) -> str:
    """A Spark SQL identifier in backticks, inner backticks doubled."""
    return "`" + name.replace("`", "``") + "`"


def catalog_identifier(name: str) -> str:
    """The quoted catalog identifier of a source database or table name: Spark's catalog
    takes only ``[A-Za-z0-9_]`` and ignores case, so other names are escaped
    (``names.catalog_name``: ``Orders`` is ``_orders_x1``) and ``Shop.Orders`` never answers
    for ``shop.orders``."""
    return quote_identifier(catalog_name(name))


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register_table(spark: SparkSession, database: str, table: str, path: str) -> None:
    """Make ``database.table`` name the Hudi table at ``path`` in the session catalog."""
    db, name = catalog_identifier(database), catalog_identifier(table)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
    local = local_dir(path)
    wanted = (local.resolve().as_uri() if local is not None else path).rstrip("/")
    if spark.catalog.tableExists(f"{db}.{name}"):
        location = _table_location(spark, f"{db}.{name}")
        if location is not None and _same_location(location, wanted):
            return
        # Another lake (a test's, a moved root) registered this name: the table is external,
        # so dropping it forgets the name and leaves the data where it is.
        spark.sql(f"DROP TABLE {db}.{name}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {db}.{name} USING hudi LOCATION {_sql_string(wanted)}")


def _same_location(location: str, wanted: str) -> bool:
    if wanted.startswith("file://"):
        return Path(location.removeprefix("file:")).resolve() == Path(
            wanted.removeprefix("file://")
        )
    return location.rstrip("/") == wanted


def _table_location(spark: SparkSession, qualified: str) -> str | None:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {qualified}").collect():
        if row["col_name"] == "Location":
            return str(row["data_type"])
    return None


def _qualified(database: str, table: str) -> str:
    return f"{catalog_identifier(database)}.{catalog_identifier(table)}"


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


def create_database(spark: SparkSession, ledger: Ledger, database: str, seq: int) -> bool:
    """``CREATE DATABASE`` at stream sequence ``seq``: the catalog has ``database``, empty or
    not. False (nothing done) when a later database DDL was applied already."""
    if not ledger.record_database(database, seq, exists=True):
        return False
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {catalog_identifier(database)}")
    except Exception as exc:  # the catalog is a convenience: never fail the ingest on it
        log.warning("database not created in the catalog", database=database, error=str(exc))
    return True


def drop_database(spark: SparkSession, ledger: Ledger, database: str, seq: int) -> bool:
    """``DROP DATABASE`` at ``seq`` (its tables are dropped by the caller first): the catalog
    forgets ``database``. A catalog entry the lake did not make keeps it (RESTRICT)."""
    if not ledger.record_database(database, seq, exists=False):
        return False
    try:
        spark.sql(f"DROP DATABASE IF EXISTS {catalog_identifier(database)}")
    except Exception as exc:
        log.warning("database not dropped from the catalog", database=database, error=str(exc))
    return True


def register_databases(spark: SparkSession, ledger: Ledger) -> list[str]:
    """Create every database the source created and did not drop (a new session's in-memory
    catalog knows only the databases of the tables it found in the lake)."""
    names = []
    for database, held in sorted(ledger.databases().items()):
        if held.exists:
            try:
                spark.sql(f"CREATE DATABASE IF NOT EXISTS {catalog_identifier(database)}")
                names.append(database)
            except Exception as exc:
                log.warning("database not registered", database=database, error=str(exc))
    return names
