"""``tidelake query``: Spark SQL over the lake's tables, printed as a table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tidelake.config import Config
from tidelake.errors import IngestError


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return str(value)


def run_query(config: Config, sql: str, limit: int, console: Console) -> int:
    """Run ``sql`` in a session with every lake table registered; returns the rows shown."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    from tidelake.lake.spark import build_spark_session

    spark = build_spark_session(config, app_name="tidelake-query")
    try:
        try:
            df = spark.sql(sql)
            rows = df.limit(limit + 1).collect()
        except (PySparkException, Py4JJavaError) as exc:
            raise IngestError(str(exc).split("\n", 1)[0]) from exc
        table = Table(show_lines=False)
        for name in df.columns:
            table.add_column(name)
        for row in rows[:limit]:
            table.add_row(*(_cell(v) for v in row))
        console.print(table)
        shown = min(len(rows), limit)
        more = " (more not shown; --limit)" if len(rows) > limit else ""
        console.print(f"{shown} row(s){more}")
        return shown
    finally:
        spark.stop()
