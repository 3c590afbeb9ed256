"""``tidelake query``: SQL over the lake's tables, answered by DuckDB (default) or Spark.

The default engine needs no JVM: the tables a statement names (found by DuckDB's parser, or
sqlglot for what that does not serialize) are read by hudi-rs into Arrow
(:func:`tidelake.verify.lake.read_table`, the latest snapshot) and the statement runs in an
in-memory DuckDB where ``db.table`` is a view in schema ``db``. Only the named tables are
read, so a query over one table of a large lake answers in well under a second.
``--engine spark`` starts a Spark session with every lake table registered, for what only
Spark reads: time travel, incremental queries, Spark SQL syntax. Both return a
:class:`QueryResult`; printing it is the CLI's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from tidelake.config import Config
from tidelake.errors import IngestError
from tidelake.lake.hudi import TIDELAKE_DIR, local_dir, split_table_id
from tidelake.names import segment_name, table_id

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import SparkSession

Engine = Literal["duckdb", "spark"]
ENGINES: tuple[Engine, ...] = ("duckdb", "spark")


class QueryError(IngestError):
    """The statement did not parse, named an unknown table, or failed to run."""


@dataclass(frozen=True)
class QueryResult:
    """Column names and at most ``limit`` rows; ``truncated`` when more rows exist."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def referenced_tables(sql: str, con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """``(db, table)`` of every schema-qualified table ``sql`` reads, in order, once each.

    DuckDB's own parser reads the statement (``json_serialize_sql``: the dialect it runs in,
    and no sqlglot import on the way to a sub-second answer); what it does not serialize
    (statements other than queries) is parsed by sqlglot. An unqualified name (a common
    table expression, a typo) is left to the engine, which names it if it is unknown."""
    rows = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
    tree = orjson.loads(rows[0][0]) if rows else {"error": True}
    if tree.get("error"):
        return _sqlglot_tables(sql)
    found: dict[tuple[str, str], None] = {}
    todo: list[Any] = [tree["statements"]]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(reversed(node))
        elif isinstance(node, dict):
            table = node.get("type") == "BASE_TABLE" and not node.get("catalog_name")
            if table and node.get("schema_name"):
                found[(node["schema_name"], node["table_name"])] = None
            todo.extend(reversed(list(node.values())))
    return list(found)


def _sqlglot_tables(sql: str) -> list[tuple[str, str]]:
    import sqlglot
    from sqlglot import exp

    try:
        statements = sqlglot.parse(sql, read="duckdb")
    except sqlglot.errors.ParseError as exc:
        raise QueryError(f"the statement does not parse: {exc}") from exc
    found: dict[tuple[str, str], None] = {}
    for statement in statements:
        for table in statement.find_all(exp.Table) if statement is not None else ():
            if table.db and table.name and not table.catalog:
                found[(table.db, table.name)] = None
    return list(found)


def known_tables(lake_root: str) -> list[str]:
    """``db.table`` of every table of a local lake (empty for one on object storage), sorted.

    The same glob as ``lake.store.discover_tables``, without that module's Spark imports:
    ``query`` answers faster than PySpark imports."""
    base = local_dir(lake_root)
    if base is None or not base.is_dir():
        return []
    return sorted(
        table_id(segment_name(props.parents[2].name), segment_name(props.parents[1].name))
        for props in base.glob("*/*/.hoodie/hoodie.properties")
        if props.parents[2].name != TIDELAKE_DIR
    )


def _resolve(config: Config, database: str, table: str, known: list[str]) -> str:
    """The lake's ``db.table`` for a name in SQL: exact, else the one equal ignoring case
    (SQL identifiers are case-insensitive unless quoted)."""
    wanted = f"{database}.{table}"
    exact = [t for t in known if split_table_id(t) == (database, table)]
    if exact:
        return exact[0]
    folded = [t for t in known if tuple(p.lower() for p in split_table_id(t)) == (
        database.lower(), table.lower())]  # fmt: skip
    if len(folded) == 1:
        return folded[0]
    if local_dir(config.lake_root) is None:
        return wanted  # object storage: read_table says whether it exists
    shown = ", ".join(known) if known else "none yet"
    raise QueryError(f"unknown table {wanted}; known: {shown}")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def run_duckdb(config: Config, sql: str, limit: int) -> QueryResult:
    """Run ``sql`` in DuckDB over the snapshots of the lake tables it names."""
    import duckdb

    from tidelake.verify.lake import read_table

    known = known_tables(config.lake_root)
    con = duckdb.connect(":memory:")
    try:
        # Spark's session runs in UTC (lake/spark.py): the two engines show the same instants.
        con.execute("SET TimeZone = 'UTC'")
        for n, (database, table) in enumerate(referenced_tables(sql, con)):
            if database == TIDELAKE_DIR:
                raise QueryError(f"{database}.{table}: the lake's own state is not a table")
            table_id = _resolve(config, database, table, known)
            try:
                data = read_table(config.lake_root, table_id, config.storage.s3)
            except (IngestError, OSError) as exc:  # refused (schema-on-read) or unreadable
                raise QueryError(f"{table_id}: {exc} (--engine spark may read it)") from exc
            if not data.column_names:
                raise QueryError(f"unknown table {table_id}; it holds no data yet")
            arrow_name = f"__tidelake_arrow_{n}"
            con.register(arrow_name, data)
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(database)}")
            con.execute(
                f"CREATE OR REPLACE VIEW {_quote(database)}.{_quote(table)} AS "
                f"SELECT * FROM {_quote(arrow_name)}"
            )
        try:
            cursor = con.execute(sql)
            if cursor.description is None:  # a statement with no result set
                return QueryResult([], [], False)
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchmany(limit + 1)
            return QueryResult(columns, rows[:limit], len(rows) > limit)
        except duckdb.Error as exc:
            raise QueryError(str(exc).split("\n", 1)[0]) from exc
    finally:
        con.close()


def run_spark(
    config: Config, sql: str, limit: int, spark: SparkSession | None = None
) -> QueryResult:
    """Run ``sql`` as Spark SQL with every lake table registered: in ``spark`` when given
    (left running), else in a session started for it and stopped after."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from tidelake.lake.spark import build_spark_session, register_lake_tables

    own = spark is None
    if spark is None:
        spark = build_spark_session(config, app_name="tidelake-query")
    else:
        register_lake_tables(spark, config.lake_root)
    try:
        try:
            df = spark.sql(sql)
            rows = df.limit(limit + 1).collect()
        except (PySparkException, Py4JJavaError) as exc:
            raise QueryError(str(exc).split("\n", 1)[0]) from exc
        return QueryResult(list(df.columns), [tuple(r) for r in rows[:limit]], len(rows) > limit)
    finally:
        if own:
            spark.stop()


def run_query(config: Config, sql: str, limit: int, engine: Engine = "duckdb") -> QueryResult:
    """Run ``sql`` on ``engine``; :class:`QueryError` says why it failed."""
    if engine == "spark":
        return run_spark(config, sql, limit)
    return run_duckdb(config, sql, limit)
