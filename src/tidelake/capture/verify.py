"""``tidelake verify``: a live source table against its Hudi table, row by row.

Both sides are read completely: the source through its own driver (PyMySQL, psycopg2), the
lake JVM-free through hudi-rs (``lake/verify.py``). Every value is brought to one comparable
text by the column's source SQL type, independently of the capture's and the ingest's own
conversions, so a bug in either shows up as a difference. The result holds the counts, an
order-independent hash of each side (XOR of a 128-bit hash per row), and the first keys that
differ with the differing columns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from tidelake.capture.dsn import SourceDsn, parse_dsn
from tidelake.capture.mysql_values import _float32_text, render, snapshot_select
from tidelake.lake.compare import MAX_SAMPLES, canonical

_FLOAT32 = frozenset({"float", "real", "float4"})
_FLOAT64 = frozenset({"double", "double precision", "float8"})
_JSON = frozenset({"json", "jsonb"})
#: MySQL types the capture renders as text the lake keeps as a string.
_MYSQL_RENDERED = frozenset({"time", "set", "enum"})
#: PostgreSQL types read typed; every other type is compared as its output text.
_PG_TYPED = (
    "smallint", "integer", "bigint", "numeric", "real", "double precision", "boolean",
    "date", "timestamp", "bytea",
)  # fmt: skip


def _base(sql_type: str) -> str:
    return sql_type.split("(", 1)[0].strip().lower()


def comparable(value: Any, sql_type: str) -> str | None:
    """One text per value, the same whether read from the source or from the lake."""
    if value is None:
        return None
    base = _base(sql_type)
    if isinstance(value, memoryview):
        value = bytes(value)
    if base in _FLOAT32:
        return _float32_text(float(value))
    if base in _FLOAT64:
        return repr(float(value))
    if base == "bit":
        number = int.from_bytes(value, "big") if isinstance(value, bytes) else int(value)
        return str(number)
    if base in _JSON:
        parsed = orjson.loads(value) if isinstance(value, str | bytes) else value
        return orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS).decode()
    if base in _MYSQL_RENDERED or isinstance(value, dt.timedelta | set | frozenset):
        return render(value, sql_type)
    return canonical(value)


@dataclass
class Verification:
    """The outcome for one table."""

    table: str
    rows_source: int = 0
    rows_lake: int = 0
    missing: int = 0
    unexpected: int = 0
    different: int = 0
    duplicate_keys: int = 0
    hash_source: str = ""
    hash_lake: str = ""
    samples: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def mismatches(self) -> int:
        return self.missing + self.unexpected + self.different + self.duplicate_keys

    @property
    def ok(self) -> bool:
        return self.error is None and self.mismatches == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "mismatches": self.mismatches}


Key = tuple[str | None, ...]
Row = dict[str, str | None]


def _row_hash(row: Row, columns: Sequence[str]) -> int:
    digest = hashlib.blake2b(orjson.dumps([row.get(c) for c in columns]), digest_size=16).digest()
    return int.from_bytes(digest, "big")


def compare_tables(
    table: str,
    pk: Sequence[str],
    columns: Sequence[str],
    source: Iterable[Row],
    lake: Iterable[Row],
) -> Verification:
    """Compare comparable rows (see :func:`comparable`) by primary key."""
    result = Verification(table)
    want: dict[Key, Row] = {}
    h_source = 0
    for row in source:
        want[tuple(row[c] for c in pk)] = row
        h_source ^= _row_hash(row, columns)
    result.rows_source = len(want)
    seen: set[Key] = set()
    h_lake = 0
    diffs: list[tuple[Key, str]] = []
    for row in lake:
        result.rows_lake += 1
        h_lake ^= _row_hash(row, columns)
        key = tuple(row.get(c) for c in pk)
        if key in seen:
            result.duplicate_keys += 1
            diffs.append((key, f"duplicate key {key} in the lake"))
            continue
        seen.add(key)
        expect = want.get(key)
        if expect is None:
            result.unexpected += 1
            diffs.append((key, f"key {key} is in the lake, not in the source"))
            continue
        if any(expect.get(c) != row.get(c) for c in columns):
            result.different += 1
            cols = {c: (expect.get(c), row.get(c)) for c in columns if expect.get(c) != row.get(c)}
            diffs.append((key, f"key {key} differs (source, lake): {cols}"))
    for key in want:
        if key not in seen:
            result.missing += 1
            diffs.append((key, f"key {key} is in the source, not in the lake"))
    result.hash_source = f"{h_source:032x}"
    result.hash_lake = f"{h_lake:032x}"
    diffs.sort(key=lambda d: tuple((v is None, _sortable(v)) for v in d[0]))
    result.samples = [text for _, text in diffs[:MAX_SAMPLES]]
    return result


def _sortable(value: str | None) -> tuple[int, float, str]:
    if value is None:
        return (0, 0.0, "")
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


# --- reading the source -----------------------------------------------------------------------


@dataclass
class SourceTable:
    """A source table's columns (in order), their SQL types and its primary key."""

    columns: list[str]
    types: dict[str, str]
    pk: tuple[str, ...]


def _backquote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _mysql_rows(dsn: SourceDsn, database: str, table: str) -> tuple[SourceTable, Iterator[Row]]:
    import pymysql
    import pymysql.cursors

    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password or "",
        charset="utf8mb4", init_command="SET time_zone = '+00:00'",
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        cols = [(str(n), str(t)) for n, t in cur.fetchall()]
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        pk = tuple(str(r[0]) for r in cur.fetchall())
    if not cols:
        conn.close()
        raise LookupError(f"{database}.{table} does not exist on {dsn.redacted()}")
    meta = SourceTable([n for n, _ in cols], dict(cols), pk)

    def rows() -> Iterator[Row]:
        try:
            with conn.cursor(pymysql.cursors.SSCursor) as cur:
                # As the capture's snapshot reads them (FLOAT exactly, not as 6 digits).
                names = ", ".join(snapshot_select(_backquote, meta.columns, meta.types))
                cur.execute(f"SELECT {names} FROM `{database}`.`{table}`")
                for values in cur:
                    yield {
                        c: comparable(v, meta.types[c])
                        for c, v in zip(meta.columns, values, strict=True)
                    }
        finally:
            conn.close()

    return meta, rows()


def _pg_rows(dsn: SourceDsn, schema: str, table: str) -> tuple[SourceTable, Iterator[Row]]:
    import psycopg2

    from tidelake.capture.postgres import SESSION_OPTIONS, output_text, quote_ident

    conn = psycopg2.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, dbname=dsn.database,
        password=dsn.password or None, options=SESSION_OPTIONS,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid "
            "FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY a.attnum",
            (f"{quote_ident(schema)}.{quote_ident(table)}",),
        )
        described = cur.fetchall()
        cols = [(str(n), str(t)) for n, t, _ in described]
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY "
            "AS k(attnum, n) ON true JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
            "a.attnum = k.attnum WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY k.n",
            (f"{quote_ident(schema)}.{quote_ident(table)}",),
        )
        pk = tuple(str(r[0]) for r in cur.fetchall())
    meta = SourceTable([n for n, _ in cols], dict(cols), pk)

    # Every other type as its output text, as the capture reads it on both paths (a ``::text``
    # cast would strip a character(n) value's padding).
    text_oids = {int(oid) for _, t, oid in described if not str(t).startswith(_PG_TYPED)}

    def rows() -> Iterator[Row]:
        try:
            with conn.cursor(name="tidelake_verify") as cur:
                output_text(cur, text_oids)
                cur.itersize = 5000
                select = ", ".join(quote_ident(c) for c in meta.columns)
                cur.execute(f"SELECT {select} FROM {quote_ident(schema)}.{quote_ident(table)}")
                for values in cur:
                    yield {
                        c: comparable(v, meta.types[c])
                        for c, v in zip(meta.columns, values, strict=True)
                    }
        finally:
            conn.close()

    return meta, rows()


def verify_table(
    source: str | SourceDsn, lake_root: str, table_id: str, password: str | None = None
) -> Verification:
    """Compare the live source table ``table_id`` (``db.table``; PostgreSQL: ``schema.table``)
    with its Hudi table under ``lake_root``. Never raises: errors land in ``error``."""
    from tidelake.lake.verify import read_table

    result = Verification(table_id)
    try:
        dsn = source if isinstance(source, SourceDsn) else parse_dsn(source, password)
        database, table = table_id.split(".", 1)
        reader = _mysql_rows if dsn.kind == "mysql" else _pg_rows
        meta, source_rows = reader(dsn, database, table)
        if not meta.pk:
            raise LookupError(f"{table_id} has no primary key: nothing to compare by")
        lake = read_table(lake_root, table_id).to_pylist()
        lake_rows = (
            {c: comparable(row.get(c), meta.types[c]) for c in meta.columns} for row in lake
        )
        return compare_tables(table_id, meta.pk, meta.columns, source_rows, lake_rows)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
