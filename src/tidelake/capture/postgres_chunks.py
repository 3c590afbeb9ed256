"""PostgreSQL chunk reads of incremental snapshots (the engine: ``capture/incremental.py``).

Each worker thread reads a chunk on its own connection in a ``REPEATABLE READ READ ONLY``
transaction, and takes that transaction's snapshot with it: ``pg_current_snapshot()``
(``xmin:xmax:xip``, PostgreSQL docs "System Information Functions", Snapshot Information):
a transaction is visible to it when its xid is below ``xmin``, or below ``xmax`` and not in
the in-progress list. PostgreSQL makes a commit visible in the order of ProcArray removal,
not of its WAL commit record, so no LSN says exactly which transactions a snapshot holds; the
xids do, and pgoutput's BEGIN carries each streamed transaction's xid. So:

- a streamed transaction is *seen* by the chunk when its xid is visible in the snapshot (its
  32-bit xid is widened with the epoch of the snapshot's ``xmax``, as the server's
  ``FullTransactionId`` does);
- after the read, the worker writes a non-transactional logical message
  (``pg_logical_emit_message(false, 'tidelake.snapshot', <token>)``, the same mechanism the
  capture's heartbeat uses; PostgreSQL docs "Replication Management Functions"): pgoutput
  hands it to the stream at its WAL place, so when it arrives the stream holds every
  transaction that committed before the read ended: the stream has *passed* the chunk. It
  writes WAL only, no table, and also keeps an idle source moving;
- the read is *valid* unless a transaction streamed before dispatch is not visible to it
  (its commit record was sent before it became visible): then the chunk is read again.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelake.capture.incremental import ChunkResult, ChunkSpec, Plan, range_plan
from tidelake.capture.pgoutput import RelationInfo
from tidelake.capture.snapshot import keyset_params, keyset_query

#: Prefix of the logical messages that mark the end of a chunk read.
SNAPSHOT_PREFIX = "tidelake.snapshot"
#: int2, int4, int8: a table keyed by one of these is cut into ranges read in parallel.
_INTEGER_OIDS = frozenset({20, 21, 23})
#: Commits remembered for :meth:`PostgresChunks.valid` (a commit sent before it became
#: visible is a matter of microseconds: a few thousand commits back is plenty).
RECENT_COMMITS = 4096


@dataclass(frozen=True)
class PgWatermark:
    """A chunk read's snapshot and the token of its end-of-read message."""

    xmin: int
    xmax: int
    xip: frozenset[int]
    token: str

    @classmethod
    def parse(cls, text: str, token: str) -> PgWatermark:
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x), token)

    def visible(self, xid: int) -> bool:
        """Is the (32-bit) ``xid`` of a committed transaction visible in this snapshot?"""
        # The full xid nearest xmax with these low 32 bits (within 2^31 either side), as
        # PostgreSQL widens one (FullXidRelativeTo, src/backend/storage/ipc/procarray.c).
        delta = ((xid - self.xmax) + (1 << 31)) % (1 << 32) - (1 << 31)
        full = self.xmax + delta
        if full < self.xmin:
            return True
        return full < self.xmax and full not in self.xip


class PostgresChunks:
    """:class:`~tidelake.capture.incremental.ChunkSource` of a ``PostgresSource``.

    ``source`` connects (``connect()``, autocommit, the capture's session settings);
    ``meta`` is a second ``PostgresSource`` whose catalog reads (``catalog_relation``, the
    key capture/keys.py resolves) use a connection of its own, not the stream thread's;
    ``output_text`` registers the casters that read values as the type's output text and
    ``quote_ident`` quotes a name (both from ``capture/postgres.py``).
    """

    def __init__(
        self,
        source: Any,
        meta: Any,
        output_text: Callable[[Any, set[int]], None],
        quote_ident: Callable[[str], str],
    ) -> None:
        self.source = source
        self._meta = meta
        self._output_text = output_text
        self._quote = quote_ident
        self._meta_lock = threading.Lock()
        self._local = threading.local()
        #: (commit sequence, xid) of the last commits the stream received (stream thread).
        self.recent: deque[tuple[int, int]] = deque(maxlen=RECENT_COMMITS)
        self.commits = 0
        #: Tokens of the end-of-read messages the stream received (stream thread).
        self.markers: set[str] = set()

    def committed(self, xid: int) -> None:
        """The stream received a commit (stream thread)."""
        self.commits += 1
        self.recent.append((self.commits, xid))

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self.source.connect()
            self._local.conn = conn
        return conn

    def close_worker(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            conn.close()
        self._local.conn = None

    def close(self) -> None:
        self._meta.close()

    def relation(self, table: str) -> RelationInfo:
        schema, name = table.split(".", 1)
        with self._meta_lock:
            rows = self._meta._query(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
                (schema, name),
            )
            if not rows:
                raise LookupError(f"{table}: no such table")
            with self._meta._control().cursor() as cur:
                rel: RelationInfo = self._meta.catalog_relation(cur, int(rows[0][0]))
        if not rel.pk:
            raise LookupError(f"{table}: no key the capture can use (capture.keys)")
        return rel

    # -- ChunkSource ------------------------------------------------------------------------

    def plan_table(self, table: str, chunk_rows: int) -> Plan:
        quote_ident = self._quote
        rel = self.relation(table)
        conn = self._conn()
        with conn.cursor() as cur:
            cur.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s",
                        (rel.relid,))  # fmt: skip
            estimate = int(cur.fetchone()[0])
            first = next(c for c in rel.columns if c[0] == rel.pk[0])
            if first[1] not in _INTEGER_OIDS:
                return Plan("keyset", rows_total=estimate)
            col = quote_ident(first[0])
            cur.execute(
                f"SELECT min({col}), max({col}) FROM "
                f"{quote_ident(rel.namespace)}.{quote_ident(rel.name)}"
            )
            lo, hi = cur.fetchone()
        return range_plan(
            None if lo is None else int(lo), None if hi is None else int(hi), estimate, chunk_rows
        )

    def read_chunk(self, spec: ChunkSpec, chunk_rows: int) -> ChunkResult:
        quote_ident = self._quote
        rel = self.relation(spec.table)
        names = [c[0] for c in rel.columns]
        table_sql = f"{quote_ident(rel.namespace)}.{quote_ident(rel.name)}"
        params: list[Any] = []
        if spec.keyset:
            sql = keyset_query(
                quote_ident, table_sql, names, rel.pk, after=spec.after is not None,
                limit=chunk_rows,
            )  # fmt: skip
            params = keyset_params(spec.after) if spec.after is not None else []
        else:
            first = f"{table_sql}.{quote_ident(rel.pk[0])}"
            where = []
            if spec.lo is not None:
                where.append(f"{first} >= %s")
                params.append(spec.lo)
            if spec.hi is not None:
                where.append(f"{first} < %s")
                params.append(spec.hi)
            sql = f"SELECT {', '.join(quote_ident(n) for n in names)} FROM {table_sql}"
            if where:
                sql += " WHERE " + " AND ".join(where)
        conn = self._conn()
        token = uuid.uuid4().hex
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                # The snapshot is taken by the transaction's first statement: this one.
                cur.execute("SELECT pg_current_snapshot()::text")
                snapshot = str(cur.fetchone()[0])
            with conn.cursor() as rows:
                self._output_text(rows, {c[1] for c in rel.columns})
                rows.execute(sql, params or None)
                raw = rows.fetchall()
            conn.rollback()
        finally:
            conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_logical_emit_message(false, %s, %s)", (SNAPSHOT_PREFIX, token))
        out = []
        for values in raw:
            data = dict(zip(names, values, strict=True))
            out.append((tuple(data[c] for c in rel.pk), data))
        last = list(out[-1][0]) if out else None
        return ChunkResult(
            spec, out, PgWatermark.parse(snapshot, token), last=last,
            final=spec.keyset and len(out) < chunk_rows, meta=rel,
        )  # fmt: skip

    def sees(self, watermark: Any, mark: Any) -> bool:
        return bool(watermark.visible(int(mark)))

    def passed(self, watermark: Any, point: Any) -> bool:
        return watermark.token in self.markers

    def valid(self, watermark: Any, floor: Any) -> bool:
        if floor is None:
            return True
        return all(watermark.visible(xid) for seq, xid in self.recent if seq <= floor)
