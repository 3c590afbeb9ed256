"""The order workload (``workload/orders.py``) run as SQL against a real MariaDB or PostgreSQL.

The same seeded mix of transactions — new orders with their items, status and total updates,
a row updated twice in one transaction, deletes, customers — turned into SQL statements, one
database transaction per workload transaction. TiCDC's DELETE + INSERT of a renumbered order
is executed as one ``UPDATE ... SET id = new`` (a real primary-key update, which the binlog
and pgoutput show as one UPDATE whose key changed).

The tables are ``shop.customers``, ``shop.orders``, ``shop.order_items``: a MariaDB database
or a PostgreSQL schema named ``shop``, with the SQL types of :data:`SCHEMAS`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from tidelake.workload.orders import DATABASE, PRIMARY_KEYS, SCHEMAS, OrderWorkload, WorkloadSpec

Dialect = Literal["mysql", "postgres"]
Statement = tuple[str, tuple[Any, ...]]

#: PostgreSQL spelling of the workload's MySQL types.
_PG_TYPES = {"bigint": "bigint", "int": "integer", "datetime": "timestamp", "date": "date"}


def _pg_type(mysql_type: str) -> str:
    if mysql_type.startswith("decimal"):
        return mysql_type.replace("decimal", "numeric")
    return _PG_TYPES.get(mysql_type, mysql_type)


def schema_statements(dialect: Dialect) -> list[str]:
    """``CREATE DATABASE/SCHEMA shop`` and its three tables (idempotent)."""
    out = [
        f"CREATE DATABASE IF NOT EXISTS {DATABASE}"
        if dialect == "mysql"
        else f"CREATE SCHEMA IF NOT EXISTS {DATABASE}"
    ]
    for table, columns in SCHEMAS.items():
        cols = [
            f"{name} {sql_type if dialect == 'mysql' else _pg_type(sql_type)}"
            + (" NOT NULL" if name in PRIMARY_KEYS[table] else "")
            for name, sql_type in columns.items()
        ]
        cols.append(f"PRIMARY KEY ({', '.join(PRIMARY_KEYS[table])})")
        out.append(f"CREATE TABLE IF NOT EXISTS {DATABASE}.{table} ({', '.join(cols)})")
    return out


@dataclass(frozen=True, slots=True)
class _Change:
    table: str
    kind: str
    row: dict[str, str | None]


def _changes(payloads: list[bytes]) -> list[_Change]:
    out = []
    for payload in payloads:
        body = orjson.loads(payload)
        out.append(_Change(body["table"], body["type"], body["data"][0]))
    return out


def _where(table: str, row: dict[str, str | None]) -> tuple[str, tuple[Any, ...]]:
    pk = PRIMARY_KEYS[table]
    return " AND ".join(f"{c} = %s" for c in pk), tuple(row[c] for c in pk)


def statements(changes: list[_Change]) -> Iterator[Statement]:
    """The SQL of one transaction's changes."""
    i = 0
    while i < len(changes):
        change = changes[i]
        table = f"{DATABASE}.{change.table}"
        nxt = changes[i + 1] if i + 1 < len(changes) else None
        if (
            change.kind == "DELETE"
            and nxt is not None
            and nxt.kind == "INSERT"
            and nxt.table == change.table
        ):
            # A renumbering: one primary-key UPDATE instead of TiCDC's DELETE + INSERT.
            where, key = _where(change.table, change.row)
            cols = list(nxt.row)
            sets = ", ".join(f"{c} = %s" for c in cols)
            yield f"UPDATE {table} SET {sets} WHERE {where}", (*[nxt.row[c] for c in cols], *key)
            i += 2
            continue
        if change.kind == "INSERT":
            cols = list(change.row)
            marks = ", ".join(["%s"] * len(cols))
            values = tuple(change.row[c] for c in cols)
            yield f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", values
        elif change.kind == "UPDATE":
            where, key = _where(change.table, change.row)
            cols = [c for c in change.row if c not in PRIMARY_KEYS[change.table]]
            sets = ", ".join(f"{c} = %s" for c in cols)
            yield f"UPDATE {table} SET {sets} WHERE {where}", (*[change.row[c] for c in cols], *key)
        else:
            where, key = _where(change.table, change.row)
            yield f"DELETE FROM {table} WHERE {where}", key
        i += 1


@dataclass
class SqlRunResult:
    """What the SQL workload did."""

    transactions: int = 0
    statements: int = 0
    #: Rows the statements changed: what the change log holds (MySQL logs no row event for
    #: an UPDATE that sets the values a row already has; PostgreSQL does).
    rows_changed: int = 0
    elapsed_s: float = 0.0


def run_sql_workload(
    conn: Any,
    spec: WorkloadSpec,
    *,
    rate: float,
    on_progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SqlRunResult:
    """Execute the workload through DB-API ``conn`` (autocommit off), ``rate`` statements/s.

    Each workload transaction is committed on its own. Returns when ``spec.events`` changes
    were produced or ``should_stop()`` says so.
    """
    # The SQL workload creates its tables itself; the capture sends their DDL.
    workload = OrderWorkload(dataclasses.replace(spec, create_tables=False))
    result = SqlRunResult()
    start = time.monotonic()
    cur = conn.cursor()
    try:
        for txn in workload.transactions():
            for sql, params in statements(_changes([m.payload for m in txn])):
                cur.execute(sql, params)
                result.statements += 1
                result.rows_changed += max(cur.rowcount, 0)
            conn.commit()
            result.transactions += 1
            if on_progress is not None:
                on_progress(result.statements)
            ahead = start + result.statements / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            if should_stop is not None and should_stop():
                break
    finally:
        cur.close()
    result.elapsed_s = time.monotonic() - start
    return result
