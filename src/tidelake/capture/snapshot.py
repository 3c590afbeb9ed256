"""Initial snapshot: the rows a table holds at the hand-off point, read in key order by chunks.

Each source opens a read transaction that sees exactly the state at a known log position
(MySQL/MariaDB: a consistent-snapshot transaction at a binlog file + offset; PostgreSQL: the
snapshot the replication slot exported at its consistent point). The snapshot rows get
positions just below that point, ``(point - 1, running index)``, so in every table they sort
after whatever the lake already holds from an earlier attempt and before every change
streamed from the point on: streaming then starts exactly at the point, with no gap and no
duplicate (docs/architecture.md §2, docs/capture.md).

Chunks are keyset reads (``WHERE key > last key ORDER BY key LIMIT n``), so a large table
never sits in memory and an interrupted snapshot resumes after the last acknowledged key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

log = structlog.get_logger(__name__)


@dataclass
class SnapshotProgress:
    """How far the snapshot got: the part of the capture state saved with each chunk."""

    #: Tables read completely, as ``db.table``.
    done: list[str] = field(default_factory=list)
    #: The table being read, and the key (canal text) of its last row published.
    table: str | None = None
    after: list[str | None] | None = None
    #: Rows published so far (the running index of the snapshot positions).
    rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"done": list(self.done), "table": self.table, "after": self.after,
                "rows": self.rows}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SnapshotProgress:
        d = d or {}
        return cls(list(d.get("done") or []), d.get("table"), d.get("after"), int(d.get("rows", 0)))


def keyset_query(
    quote: Callable[[str], str],
    table_sql: str,
    columns: Sequence[str],
    pk: Sequence[str],
    *,
    after: bool,
    limit: int,
    placeholder: str = "%s",
    select: Sequence[str] | None = None,
) -> str:
    """``SELECT columns FROM table [WHERE key > (...)] ORDER BY key LIMIT n``.

    The key comparison is written out (``a > x OR (a = x AND b > y)``) rather than as a row
    value, which MySQL's range optimizer uses reliably. ``select`` replaces the plain column
    list (MySQL reads FLOAT columns as DOUBLE: ``mysql_values.snapshot_select``).
    """
    cols = ", ".join(select) if select is not None else ", ".join(quote(c) for c in columns)
    # Key columns qualified by the table: a bare ORDER BY name may resolve to an output column
    # of that name, which ``select`` may make an expression (CAST(... AS DOUBLE)).
    key = [f"{table_sql}.{quote(c)}" for c in pk]
    order = ", ".join(key)
    where = ""
    if after:
        terms = []
        for i, col in enumerate(key):
            eqs = [f"{k} = {placeholder}" for k in key[:i]]
            terms.append("(" + " AND ".join([*eqs, f"{col} > {placeholder}"]) + ")")
        where = " WHERE " + " OR ".join(terms)
    return f"SELECT {cols} FROM {table_sql}{where} ORDER BY {order} LIMIT {limit}"


def keyset_params(after: Sequence[Any]) -> list[Any]:
    """The parameters of :func:`keyset_query` for the last key ``after``."""
    params: list[Any] = []
    for i in range(len(after)):
        params.extend(after[:i])
        params.append(after[i])
    return params


def read_chunks(
    cursor: Any,
    quote: Callable[[str], str],
    table_sql: str,
    columns: Sequence[str],
    pk: Sequence[str],
    chunk_rows: int,
    after: Sequence[Any] | None,
    select: Sequence[str] | None = None,
) -> Iterator[list[tuple[Any, ...]]]:
    """Chunks of rows in key order, starting after the key ``after`` (None: from the start)."""
    pk_index = [list(columns).index(c) for c in pk]
    last = list(after) if after is not None else None
    while True:
        sql = keyset_query(
            quote, table_sql, columns, pk, after=last is not None, limit=chunk_rows, select=select
        )
        cursor.execute(sql, keyset_params(last) if last is not None else None)
        rows = [tuple(r) for r in cursor.fetchall()]
        if not rows:
            return
        yield rows
        if len(rows) < chunk_rows:
            return
        last = [rows[-1][i] for i in pk_index]


class SnapshotBar:
    """A progress bar on a terminal, a log line every few seconds otherwise."""

    def __init__(self, total_rows: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.total = total_rows
        self.done = 0
        self._last_log = 0.0
        self._progress: Progress | None = None
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description:<28}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task("snapshot", total=total_rows)

    def advance(self, table: str, rows: int) -> None:
        self.done += rows
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, description=f"snapshot {table}")
        elif time.monotonic() - self._last_log > 5:
            self._last_log = time.monotonic()
            log.info("snapshot progress", table=table, rows=self.done, estimated_total=self.total)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        log.info("snapshot read", rows=self.done)
