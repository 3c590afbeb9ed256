"""A source catalog: column types and primary keys of source tables, read from the source.

The lake types a row's values from the table's definition, not from what a message says
(issue 15): where a producer sends no types (Debezium ``schemas.enable=false``), types without
parameters (TiCDC's default ``mysqlType``: ``decimal``, ``enum``) or no key at all (Debezium
Server), a DSN the user configures lets the lake read the definition from the source itself.

* MySQL, MariaDB and TiDB (``mysql://``): ``information_schema.COLUMNS.COLUMN_TYPE`` as the
  server writes it (``decimal(12,2)``, ``bigint(20) unsigned``, ``enum('a','b')``,
  ``set('x','y')``, ``bit(12)``), in ``ORDINAL_POSITION`` order; the key from
  ``information_schema.KEY_COLUMN_USAGE`` rows of constraint ``PRIMARY`` in their
  ``ORDINAL_POSITION`` (the order of the ``PRIMARY KEY (...)`` clause). TiDB serves the same
  ``information_schema`` tables, so TiCDC users point this at the TiDB server: its
  ``KEY_COLUMN_USAGE`` rows come from ``keyColumnUsageInTable`` (pingcap/tidb,
  ``executor/infoschema_reader.go``), which names an integer handle key (``PKIsHandle``)
  ``PRIMARY`` with ORDINAL_POSITION 1 and lists the other keys from the table's indices. MariaDB's
  ``JSON`` is an alias of ``LONGTEXT`` and is reported as ``longtext``: that is what the
  server holds.
* PostgreSQL (``postgresql://``): ``format_type(atttypid, atttypmod)`` (``numeric(12,2)``,
  ``numeric``, ``character(5)``, ``timestamp(3) without time zone``, ``text[]``) in ``attnum``
  order, the same text the pgoutput capture puts in its events; the key in ``pg_index.indkey``
  order. An enum type is its ``format_type`` name (``mood``, or ``s.mood`` outside the search
  path), not an ``enum('a',...)`` list: PostgreSQL sends an enum's label as its value on every
  path (pgoutput, Debezium), so the lake needs no label list to store it.

Table ids are ``db.table`` (PostgreSQL: ``schema.table`` in the DSN's database). A table the
source does not have is absent from the result: the caller decides whether that is an error.
The whole read costs two queries whatever the number of tables (columns, then keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidelake.capture.dsn import SourceDsn, parse_dsn
from tidelake.errors import TidelakeError, Transient

#: Relation kinds that hold rows: ordinary and partitioned tables.
_PG_TABLE_KINDS = ("r", "p")


class CatalogUnavailableError(TidelakeError, Transient):
    """The source catalog could not be read (server down, credentials refused)."""


@dataclass(frozen=True)
class TableDefinition:
    """One source table as its catalog describes it."""

    #: Column → source type text, in the table's column order.
    columns: dict[str, str]
    #: Primary-key columns in key order; empty when the table has none.
    primary_key: tuple[str, ...]


def read_catalog(
    dsn: str, password: str | None, tables: Sequence[str]
) -> dict[str, TableDefinition]:
    """The definitions of ``tables`` (``db.table`` ids) that exist in the source at ``dsn``.

    ``password`` (from the environment) wins over one in the DSN, as for the capture.
    """
    source = parse_dsn(dsn, password)
    wanted: list[tuple[str, str]] = []
    for table_id in dict.fromkeys(tables):
        database, sep, table = table_id.partition(".")
        if not sep or not database or not table:
            raise ValueError(f"source catalog: table id {table_id!r} is not db.table")
        wanted.append((database, table))
    if not wanted:
        return {}
    if source.kind == "mysql":
        columns, keys = _mysql(source, wanted)
    else:
        columns, keys = _postgres(source, wanted)
    return {
        f"{database}.{table}": TableDefinition(cols, tuple(keys.get((database, table), ())))
        for (database, table), cols in columns.items()
    }


Columns = dict[tuple[str, str], dict[str, str]]
Keys = dict[tuple[str, str], list[str]]


def _collect(column_rows: Sequence[Sequence[Any]], key_rows: Sequence[Sequence[Any]],
             wanted: list[tuple[str, str]]) -> tuple[Columns, Keys]:  # fmt: skip
    """Rows ``(db, table, column, type)`` and ``(db, table, column)``, already in order."""
    want = set(wanted)
    columns: Columns = {}
    for database, table, column, sql_type in column_rows:
        ident = (str(database), str(table))
        if ident in want:
            columns.setdefault(ident, {})[str(column)] = str(sql_type)
    keys: Keys = {}
    for database, table, column in key_rows:
        ident = (str(database), str(table))
        if ident in want:
            keys.setdefault(ident, []).append(str(column))
    return columns, keys


def _mysql(source: SourceDsn, wanted: list[tuple[str, str]]) -> tuple[Columns, Keys]:
    import pymysql

    try:
        conn = pymysql.connect(
            host=source.host, port=source.port, user=source.user,
            password=source.password or "", charset="utf8mb4", autocommit=True,
            connect_timeout=10,
        )  # fmt: skip
    except pymysql.err.OperationalError as exc:
        raise CatalogUnavailableError(
            f"source catalog: cannot connect to {source.redacted()}: {exc}"
        ) from exc
    # Filtered by schema and by table name separately (one query, not one per table); the
    # pairs are matched exactly afterwards. information_schema compares names with the
    # server's case rules, so the exact match keeps only the ids asked for.
    databases = sorted({d for d, _ in wanted})
    names = sorted({t for _, t in wanted})
    marks_db = ", ".join(["%s"] * len(databases))
    marks_t = ", ".join(["%s"] * len(names))
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_TYPE "
                f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN ({marks_db}) "
                f"AND TABLE_NAME IN ({marks_t}) "
                "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                (*databases, *names),
            )
            column_rows = cur.fetchall()
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME "
                "FROM information_schema.KEY_COLUMN_USAGE WHERE CONSTRAINT_NAME = 'PRIMARY' "
                f"AND TABLE_SCHEMA IN ({marks_db}) AND TABLE_NAME IN ({marks_t}) "
                "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
                (*databases, *names),
            )
            key_rows = cur.fetchall()
    finally:
        conn.close()
    return _collect(column_rows, key_rows, wanted)


def _postgres(source: SourceDsn, wanted: list[tuple[str, str]]) -> tuple[Columns, Keys]:
    import psycopg2

    try:
        conn = psycopg2.connect(
            host=source.host, port=source.port, user=source.user, dbname=source.database,
            password=source.password or None, connect_timeout=10,
            application_name="tidelake-catalog",
        )  # fmt: skip
    except psycopg2.OperationalError as exc:
        raise CatalogUnavailableError(
            f"source catalog: cannot connect to {source.redacted()}: {exc}"
        ) from exc
    schemas = [s for s, _ in wanted]
    names = [t for _, t in wanted]
    # The (schema, table) pairs as a relation of two arrays: exact names, one query.
    pairs = "(SELECT * FROM unnest(%s::text[], %s::text[]) AS w(nspname, relname))"
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(
                "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod) "
                "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                f"JOIN {pairs} w ON w.nspname = n.nspname AND w.relname = c.relname "
                "WHERE c.relkind = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY n.nspname, c.relname, a.attnum",
                (schemas, names, list(_PG_TABLE_KINDS)),
            )
            column_rows = cur.fetchall()
            cur.execute(
                "SELECT n.nspname, c.relname, a.attname FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                f"JOIN {pairs} w ON w.nspname = n.nspname AND w.relname = c.relname "
                "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
                "WHERE i.indisprimary ORDER BY n.nspname, c.relname, k.ord",
                (schemas, names),
            )
            key_rows = cur.fetchall()
    finally:
        conn.close()
    return _collect(column_rows, key_rows, wanted)
