"""tidelake's capture output: canal-json messages with the ``_tidelake`` position extension.

One row change per message, with TiCDC's field set (``id, database, table, pkNames, isDdl,
type, es, ts, sql, sqlType, mysqlType, data, old``) plus
``_tidelake: {"position": Position.encode(), "source": "mysql"|"postgres", "commit_ts_ms"}``,
which ``formats/canal_json.py`` decodes (docs/architecture.md §1). Values are canal-json text (NULL
is null); ``old`` holds only the columns an UPDATE changed, as canal does.

The ``Nats-Msg-Id`` is the position itself, so a message republished after a capture
restart is dropped by JetStream inside the duplicate window.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from tidelake.events import Position

#: java.sql.Types codes by base type, what canal puts in ``sqlType`` (informational only).
_JAVA_SQL_TYPES = {
    "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "integer": 4, "bigint": -5,
    "float": 7, "real": 7, "double": 8, "decimal": 3, "numeric": 3, "bit": -7,
    "bool": 16, "boolean": 16, "date": 91, "datetime": 93, "timestamp": 93, "time": 92,
    "year": 12, "char": 1, "varchar": 12, "binary": -2, "varbinary": -3, "tinyblob": 2004,
    "blob": 2004, "mediumblob": 2004, "longblob": 2004, "bytea": -2, "json": 12,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message for JetStream, and what the capture's bookkeeping needs of it."""

    subject: str
    msg_id: str
    payload: bytes
    table: str
    commit_ts_ms: int


@dataclass(frozen=True, slots=True)
class Resume:
    """A resume point: once every message emitted before it is acknowledged, ``state`` may
    be saved (``capture/position.py``) and confirmed to the source."""

    state: dict[str, Any]


Item = Outgoing | Resume

_UNSAFE_SUBJECT = re.compile(r"[^A-Za-z0-9_\-]")


@lru_cache(maxsize=4096)
def subject_for(database: str, table: str) -> str:
    """``cdc.<database>.<table>``, each name with characters NATS reserves replaced."""
    return f"cdc.{_UNSAFE_SUBJECT.sub('_', database)}.{_UNSAFE_SUBJECT.sub('_', table)}"


def _sql_types(types: Mapping[str, str]) -> dict[str, int]:
    out = {}
    for col, t in types.items():
        base = t.split("(", 1)[0].split(" ", 1)[0].lower()
        out[col] = _JAVA_SQL_TYPES.get(base, 12)
    return out


class CanalEncoder:
    """Builds the messages of one source (``source`` is ``mysql`` or ``postgres``)."""

    def __init__(self, source: str, msg_id_prefix: str | None = None) -> None:
        self.source = source
        self.prefix = msg_id_prefix or source
        self._id = 0
        # The sqlType of the last types mapping: every row of a table (or of a binlog event)
        # shares one mapping object, so it is computed once, not per row.
        self._types_ref: Mapping[str, str] | None = None
        self._sql_types: dict[str, int] = {}

    def _sql_types_of(self, types: Mapping[str, str]) -> dict[str, int]:
        if types is not self._types_ref:
            self._types_ref, self._sql_types = types, _sql_types(types)
        return self._sql_types

    def _message(
        self, body: dict[str, Any], database: str, table: str, position: Position, ms: int
    ) -> Outgoing:
        self._id += 1
        body["id"] = self._id
        body["_tidelake"] = {
            "position": position.encode(),
            "source": self.source,
            "commit_ts_ms": ms,
        }
        return Outgoing(
            subject=subject_for(database, table),
            msg_id=f"{self.prefix}:{position}",
            payload=orjson.dumps(body),
            table=f"{database}.{table}",
            commit_ts_ms=ms,
        )

    def row(
        self,
        *,
        database: str,
        table: str,
        pk: Sequence[str],
        kind: str,
        data: Mapping[str, str | None],
        old: Mapping[str, str | None] | None,
        types: Mapping[str, str],
        position: Position,
        commit_ts_ms: int,
    ) -> Outgoing:
        """An INSERT, UPDATE (``old`` = the full before image) or DELETE of one row."""
        changed = None
        if kind == "UPDATE" and old is not None:
            changed = {c: v for c, v in old.items() if data.get(c) != v}
        body: dict[str, Any] = {
            "database": database,
            "table": table,
            "pkNames": list(pk),
            "isDdl": False,
            "type": kind,
            "es": commit_ts_ms,
            "ts": int(time.time() * 1000),
            "sql": "",
            "sqlType": self._sql_types_of(types),
            "mysqlType": types if isinstance(types, dict) else dict(types),
            "data": [data if isinstance(data, dict) else dict(data)],
            "old": [changed] if changed is not None else None,
        }
        return self._message(body, database, table, position, commit_ts_ms)

    def inserts(
        self,
        *,
        database: str,
        table: str,
        pk: Sequence[str],
        rows: Sequence[Mapping[str, str | None]],
        types: Mapping[str, str],
        position: Position,
        commit_ts_ms: int,
    ) -> Outgoing:
        """Several INSERTs of one table in one message (an incremental snapshot's rows:
        capture/incremental.py). Row ``i`` decodes at ``position + (i,)`` when there are
        several (formats/canal_json.py), so they sort together where ``position`` does; one
        message instead of one per row is what lets a snapshot outrun the publisher."""
        body: dict[str, Any] = {
            "database": database,
            "table": table,
            "pkNames": list(pk),
            "isDdl": False,
            "type": "INSERT",
            "es": commit_ts_ms,
            "ts": int(time.time() * 1000),
            "sql": "",
            "sqlType": self._sql_types_of(types),
            "mysqlType": types if isinstance(types, dict) else dict(types),
            "data": [r if isinstance(r, dict) else dict(r) for r in rows],
            "old": None,
        }
        return self._message(body, database, table, position, commit_ts_ms)

    def ddl(
        self,
        *,
        database: str,
        table: str,
        sql: str,
        ddl_type: str,
        position: Position,
        commit_ts_ms: int,
        types: Mapping[str, str] | None = None,
        pk: Sequence[str] = (),
    ) -> Outgoing:
        """A DDL statement of one table (``ddl_type``: CREATE, ALTER, ERASE, TRUNCATE, ...)."""
        body: dict[str, Any] = {
            "database": database,
            "table": table,
            "pkNames": list(pk) or None,
            "isDdl": True,
            "type": ddl_type,
            "es": commit_ts_ms,
            "ts": int(time.time() * 1000),
            "sql": sql,
            "sqlType": _sql_types(types or {}),
            "mysqlType": dict(types or {}),
            "data": None,
            "old": None,
        }
        return self._message(body, database, table, position, commit_ts_ms)


# --- MySQL DDL statements: which table, which canal DDL type ----------------------------------

_NAME = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
_COMMENTS = re.compile(r"/\*.*?\*/|--[^\n]*|#[^\n]*", re.S)
_DDL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.I | re.S))
    for kind, pattern in (
        ("CREATE", rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+"
                   rf"(?:IF\s+NOT\s+EXISTS\s+)?{_QUALIFIED}"),
        ("ALTER", rf"^ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}"),
        ("ERASE", rf"^DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?"
                  rf"((?:{_QUALIFIED}\s*,\s*)*{_QUALIFIED})"),
        ("TRUNCATE", rf"^TRUNCATE\s+(?:TABLE\s+)?{_QUALIFIED}"),
        ("RENAME", rf"^RENAME\s+TABLES?\s+{_QUALIFIED}\s+TO\s+"),
        ("CINDEX", rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?"
                   rf"INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?{_NAME}\s+(?:USING\s+\w+\s+)?ON\s+{_QUALIFIED}"),
        ("DINDEX", rf"^DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?{_NAME}\s+ON\s+{_QUALIFIED}"),
    )
)  # fmt: skip


def _unquote(name: str) -> str:
    name = name.strip()
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def _split_qualified(text: str, default_db: str) -> tuple[str, str]:
    parts = re.findall(_NAME, text)
    if len(parts) >= 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_db, _unquote(parts[0])


def classify_ddl(sql: str, default_db: str) -> list[tuple[str, str, str]]:
    """``[(ddl type, database, table)]`` of a MySQL DDL statement; ``[]`` when it names no
    table (CREATE DATABASE, GRANT, ...). A DROP of several tables gives one entry each."""
    text = _COMMENTS.sub(" ", sql).strip()
    for kind, pattern in _DDL_PATTERNS:
        match = pattern.match(text)
        if not match:
            continue
        if kind == "ERASE":
            names = re.findall(_QUALIFIED, match.group(1))
            return [(kind, *_split_qualified(n, default_db)) for n in names]
        return [(kind, *_split_qualified(match.group(1), default_db))]
    return []
