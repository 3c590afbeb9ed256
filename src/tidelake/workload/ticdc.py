"""What TiCDC writes, for the workloads: canal-json messages with the TiDB extension.

One :class:`TicdcEncoder` per changefeed: it hands out TiDB commit timestamps (TSO), numbers
the messages of a transaction (the message id is the position) and renders row and DDL
messages as TiCDC's canal-json encoder does with its default settings: ``mysqlType`` without
parameters (``decimal``, not ``decimal(12,2)``), so the lake must type values by the table's
definition, as it must for the real producer. The workloads (``orders.py``,
``many_tables.py``) decide what changes; this module decides how a change looks on the wire.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

Row = dict[str, str | None]
Key = tuple[str, ...]

#: java.sql.Types codes TiCDC puts in ``sqlType``.
_SQL_TYPE_CODES = {"bigint": -5, "int": 4, "varchar": 12, "decimal": 3, "date": 91, "datetime": 93}


@dataclass(frozen=True, slots=True)
class Message:
    """One canal-json message ready to publish."""

    subject: str
    msg_id: str
    payload: bytes
    table: str
    commit_ts_ms: int


class Workload(Protocol):
    """A generated change stream the demo publishes and then verifies the lake against."""

    #: Column name → source type per table (bare table name), in table order.
    schemas: dict[str, dict[str, str]]
    #: Primary-key columns per table, in key order.
    primary_keys: dict[str, tuple[str, ...]]

    def transactions(self) -> Iterator[list[Message]]:
        """The stream, one source transaction at a time, in commit order."""
        ...

    @property
    def emitted(self) -> int:
        """Messages produced so far."""
        ...

    def expected_rows(self) -> dict[str, list[Row]]:
        """The final state per ``db.table``, as canal-json text."""
        ...


class TicdcEncoder:
    """Canal-json messages of one changefeed over ``database``, numbered as TiCDC numbers them."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.emitted = 0
        self._last_physical = 0
        self._logical = 0
        self._txn_ts = 0
        self._txn_index = 0
        self._type_maps_by_columns: dict[
            tuple[tuple[str, str], ...], tuple[dict[str, int], dict[str, str]]
        ] = {}

    def commit_ts(self, same_ms: bool = False) -> int:
        """A TiDB TSO: physical milliseconds << 18 | logical counter, strictly increasing."""
        now = int(time.time() * 1000)
        if same_ms or now <= self._last_physical:
            self._logical += 1
        else:
            self._last_physical, self._logical = now, 0
        return (self._last_physical << 18) | self._logical

    def row(
        self,
        table: str,
        kind: str,
        row: Row,
        commit_ts: int,
        types: Mapping[str, str],
        primary_key: Sequence[str],
        old: Row | None = None,
    ) -> Message:
        """An INSERT, UPDATE (``old``: the row before) or DELETE of one row."""
        physical = commit_ts >> 18
        sql_types, mysql_types = self._type_maps(types)
        body: dict[str, Any] = {
            "id": 0,
            "database": self.database,
            "table": table,
            "pkNames": list(primary_key),
            "isDdl": False,
            "type": kind,
            "es": physical,
            "ts": int(time.time() * 1000),
            "sql": "",
            "sqlType": sql_types,
            "mysqlType": mysql_types,
            "old": [old] if old is not None else None,
            "data": [row],
            "_tidb": {"commitTs": commit_ts},
        }
        # The message id is the position: commitTs plus the index inside the transaction
        # (one key may change twice in one transaction, so the key cannot stand in for it).
        if commit_ts != self._txn_ts:
            self._txn_ts, self._txn_index = commit_ts, 0
        else:
            self._txn_index += 1
        self.emitted += 1
        return Message(
            subject=f"cdc.{self.database}.{table}",
            msg_id=f"tidb:{commit_ts}:{self._txn_index}",
            payload=orjson.dumps(body),
            table=table,
            commit_ts_ms=physical,
        )

    def _type_maps(self, types: Mapping[str, str]) -> tuple[dict[str, int], dict[str, str]]:
        """``sqlType`` and ``mysqlType`` of a table's columns, built once per column list
        (a fifth of a message's generation when built per row; the DDL workload changes
        a table's columns, so the columns are the key). orjson writes the shared dicts as
        it wrote fresh ones."""
        key = tuple(types.items())
        maps = self._type_maps_by_columns.get(key)
        if maps is None:
            maps = (
                {c: _SQL_TYPE_CODES.get(t.split("(")[0], 12) for c, t in types.items()},
                {c: ticdc_mysql_type(t) for c, t in types.items()},
            )
            self._type_maps_by_columns[key] = maps
        return maps

    def ddl(self, table: str, kind: str, sql: str) -> Message:
        """A canal-json DDL message as TiCDC writes one (``isDdl``, no rows), in a
        transaction of its own."""
        commit_ts = self.commit_ts()
        physical = commit_ts >> 18
        body: dict[str, Any] = {
            "id": 0,
            "database": self.database,
            "table": table,
            "pkNames": None,
            "isDdl": True,
            "type": kind,
            "es": physical,
            "ts": int(time.time() * 1000),
            "sql": sql,
            "sqlType": None,
            "mysqlType": None,
            "data": None,
            "old": None,
            "_tidb": {"commitTs": commit_ts},
        }
        self.emitted += 1
        return Message(
            subject=f"cdc.{self.database}.{table}",
            msg_id=f"tidb:{commit_ts}:ddl",
            payload=orjson.dumps(body),
            table=table,
            commit_ts_ms=physical,
        )

    def create_table_sql(
        self, table: str, types: Mapping[str, str], primary_key: Sequence[str]
    ) -> str:
        """``CREATE TABLE`` as TiCDC sends it: the TiDB parser's restore (back-quoted names,
        upper-case keywords, the clustered-index feature comment: ``addSpecialComment`` in
        pingcap/tiflow cdc/owner/ddl_sink.go)."""
        columns = ",".join(f"`{c}` {t.upper()}" for c, t in types.items())
        key = ",".join(f"`{c}`" for c in primary_key)
        return (
            f"CREATE TABLE `{self.database}`.`{table}` ({columns},PRIMARY KEY({key}) "
            "/*T![clustered_index] CLUSTERED */)"
        )


def ticdc_mysql_type(source_type: str) -> str:
    """The ``mysqlType`` TiCDC's canal-json writes by default: the type name without its
    parameters, `` unsigned`` kept (``GetMySQLType`` in pingcap/tiflow
    pkg/sink/codec/utils/mysql_types.go, content-compatible off): ``decimal(12,2)`` →
    ``decimal``. The lake takes precision and scale from the CREATE TABLE."""
    name = source_type.split("(", 1)[0].strip().lower()
    return f"{name} unsigned" if "unsigned" in source_type.lower() else name
