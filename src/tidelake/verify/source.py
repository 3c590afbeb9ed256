"""``tidelake verify``: a live source table against its Hudi table, row by row.

Both sides are read completely: the source through its own driver (PyMySQL, psycopg2), the
lake JVM-free through hudi-rs (``verify/lake.py``). Every value is brought to one comparable
text by the column's source SQL type, independently of the capture's and the ingest's own
conversions, so a bug in either shows up as a difference. The result holds the counts, an
order-independent hash of each side (XOR of a 128-bit hash per row), and the first keys that
differ with the differing columns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from tidelake.capture.dsn import SourceDsn, parse_dsn
from tidelake.capture.mysql_values import _float32_text, render, snapshot_select
from tidelake.names import split_table_id
from tidelake.verify.compare import MAX_SAMPLES, canonical

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


def _type_name(sql_type: str) -> str:
    """``time(3) with time zone`` → ``time with time zone``: the name without modifiers."""
    return " ".join(re.sub(r"\([^)]*\)", " ", sql_type).lower().split())


def _element_type(sql_type: str) -> str | None:
    """The element type of an array type (``integer[]``, ``_int4``), else None."""
    text = sql_type.strip().lower()
    if text.endswith("[]"):
        return text.rstrip("[]").strip()
    if text.startswith("_") and len(text) > 1:
        return text[1:]
    return None


def comparable(value: Any, sql_type: str) -> str | None:
    """One text per value, the same whether read from the source or from the lake.

    The lake holds what the producer sent: tidelake's own capture carries PostgreSQL's output
    text, Debezium its own forms (UTC ``ZonedTime``, ISO-8601 intervals, JSON arrays, money as
    a decimal). For those types every spelling of one value reduces to one canonical text;
    a text that is none of the known spellings stays as it is, so it shows as a difference.
    """
    if value is None:
        return None
    base = _base(sql_type)
    name = _type_name(sql_type)
    if isinstance(value, memoryview):
        value = bytes(value)
    element = _element_type(sql_type)
    if element is not None:
        return _array_text(value, element)
    if name in _TIMETZ:
        return _timetz_text(value)
    if name.startswith("interval"):
        return _interval_canonical(value)
    if name == "money":
        return _money_text(value)
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


# --- time with time zone ------------------------------------------------------------------

_TIMETZ = frozenset({"time with time zone", "timetz"})
#: PostgreSQL's timetz output (``13:45:56.5+02``, offsets ``+HH[:MM[:SS]]``) and Debezium's
#: ZonedTime (``DateTimeFormatter.ISO_OFFSET_TIME`` in UTC: ``11:45:56.5Z``).
_TIMETZ_RE = re.compile(
    r"^(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(?:(Z)|([+-])(\d{2})(?::?(\d{2})(?::?(\d{2}))?)?)$"
)
_DAY_US = 86_400_000_000


def _fraction(micros: int) -> str:
    return f".{micros:06d}".rstrip("0") if micros else ""


def _timetz_text(value: Any) -> str:
    """The instant's time of day in UTC, ``HH:MM:SS[.f]Z``: Debezium's ZonedTime drops the
    offset (PostgresValueConverter.convertTimeWithZone: ``withOffsetSameInstant(UTC)``), so
    the offset is not part of the comparison; PostgreSQL's end of day ``24:00:00`` at UTC
    stays itself (Debezium's PostgresTimeBoundary)."""
    text = str(value).strip()
    match = _TIMETZ_RE.match(text)
    if not match:
        return text
    hh, mm, ss, frac, zulu, sign, oh, om, os_ = match.groups()
    fraction = (frac or "").ljust(9, "0")
    if fraction[6:].strip("0"):
        return text  # beyond microseconds: not a PostgreSQL value
    local = ((int(hh) * 60 + int(mm)) * 60 + int(ss or 0)) * 1_000_000 + int(fraction[:6])
    offset = 0 if zulu else (int(oh) * 60 + int(om or 0)) * 60 + int(os_ or 0)
    utc = local - (offset if sign != "-" else -offset) * 1_000_000
    if not (local == _DAY_US and offset == 0):
        utc %= _DAY_US
    seconds, micros = divmod(utc, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_fraction(micros)}Z"


# --- interval -------------------------------------------------------------------------------

#: PostgreSQL's ``postgres`` IntervalStyle (datetime.c EncodeInterval/AddPostgresIntPart):
#: ``[+-]N year[s] [+-]N mon[s] [+-]N day[s] [+-]HH:MM:SS[.f]``, each part only if not zero.
_PG_UNITS = {"year": 12, "years": 12, "mon": 1, "mons": 1}
_PG_CLOCK_RE = re.compile(r"^([+-]?)(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
#: ISO-8601 durations: Debezium's ``interval.handling.mode=string``
#: (io.debezium.time.Interval.toIsoString: ``P<y>Y<m>M<d>DT<h>H<m>M<s>S``, every part
#: present, each signed) and PostgreSQL's ``iso_8601`` IntervalStyle (only non-zero parts).
_ISO_RE = re.compile(
    r"^([+-])?P(?:([+-]?\d+)Y)?(?:([+-]?\d+)M)?(?:([+-]?\d+)W)?(?:([+-]?\d+)D)?"
    r"(?:T(?:([+-]?\d+)H)?(?:([+-]?\d+)M)?(?:([+-]?\d+(?:\.\d+)?)S)?)?$"
)

Interval = tuple[int, int, int]


def _pg_interval(text: str) -> Interval | None:
    months = days = micros = 0
    tokens = text.split()
    i = 0
    while i < len(tokens):
        clock = _PG_CLOCK_RE.match(tokens[i])
        if clock:
            if i != len(tokens) - 1:
                return None
            sign, hh, mm, ss, frac = clock.groups()
            total = ((int(hh) * 60 + int(mm)) * 60 + int(ss)) * 1_000_000
            total += int((frac or "").ljust(6, "0"))
            micros = -total if sign == "-" else total
            break
        if i + 1 >= len(tokens) or not re.fullmatch(r"[+-]?\d+", tokens[i]):
            return None
        number, unit = int(tokens[i]), tokens[i + 1]
        if unit in _PG_UNITS:
            months += number * _PG_UNITS[unit]
        elif unit in ("day", "days"):
            days += number
        else:
            return None
        i += 2
    return (months, days, micros) if tokens else None


def _iso_interval(text: str) -> Interval | None:
    match = _ISO_RE.match(text)
    if not match or text.rstrip("T").endswith("P"):
        return None
    sign, y, mo, w, d, h, mi, s = match.groups()
    if text.endswith("T"):
        return None
    seconds = Decimal(s or 0) * 1_000_000
    if seconds != seconds.to_integral_value():
        return None  # below a microsecond: PostgreSQL has no such interval
    months = int(y or 0) * 12 + int(mo or 0)
    days = int(w or 0) * 7 + int(d or 0)
    micros = (int(h or 0) * 3600 + int(mi or 0) * 60) * 1_000_000 + int(seconds)
    factor = -1 if sign == "-" else 1
    return (factor * months, factor * days, factor * micros)


def parse_interval(text: str) -> Interval | None:
    """``(months, days, microseconds)``, PostgreSQL's own three fields, from the
    ``postgres`` style text or an ISO-8601 duration; None for anything else."""
    text = text.strip()
    if text.startswith(("P", "-P", "+P")):
        return _iso_interval(text)
    return _pg_interval(text)


def _trunc_div(a: int, b: int) -> int:
    """C's integer division (toward zero), as EncodeInterval's fields are computed."""
    q = abs(a) // b
    return -q if a < 0 else q


def interval_text(months: int, days: int, micros: int) -> str:
    """The ``postgres`` IntervalStyle text of the three fields (datetime.c EncodeInterval)."""
    year = _trunc_div(months, 12)
    mon = months - 12 * year
    parts: list[str] = []
    before = False
    for value, unit in ((year, "year"), (mon, "mon"), (days, "day")):
        if value:
            plus = "+" if before and value > 0 else ""
            parts.append(f"{plus}{value} {unit}{'' if value == 1 else 's'}")
            before = value < 0
    if not parts or micros:
        sign = "-" if micros < 0 else "+" if before else ""
        seconds, fraction = divmod(abs(micros), 1_000_000)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        parts.append(f"{sign}{clock}{_fraction(fraction)}")
    return " ".join(parts)


def _interval_canonical(value: Any) -> str:
    """An interval as PostgreSQL's ``postgres`` style text of its (months, days, µs): the same
    for the source's text, tidelake's capture (the same text) and Debezium's ISO-8601 string.
    The fields are not folded into each other (``1 day`` is not ``24:00:00``, as PostgreSQL
    keeps them); Debezium's default MicroDuration folds months into days, so it differs."""
    text = str(value)
    fields = parse_interval(text)
    return text if fields is None else interval_text(*fields)


# --- money ----------------------------------------------------------------------------------

#: PostgreSQL's cash_out under a C/English lc_monetary: ``$1,234.56``, ``-$0.01``.
_MONEY_RE = re.compile(r"^(\(?)(-?)([^\d\s().,-]*)(-?)(\d{1,3}(?:,\d{3})*|\d+)(\.\d+)?\)?$")


def _money_text(value: Any) -> str:
    """A money amount as plain decimal text without trailing fraction zeros: the source is
    read as ``::numeric``, Debezium sends a Decimal of ``money.fraction.digits`` scale
    (PostgresValueConverter.convertMoney), tidelake's capture keeps cash_out's text."""
    if isinstance(value, Decimal | int):
        amount = Decimal(value)
    else:
        text = str(value).strip()
        match = _MONEY_RE.match(text.replace(" ", ""))
        if not match:
            return text
        paren, minus1, _, minus2, whole, frac = match.groups()
        negative = bool(paren) or bool(minus1) or bool(minus2)
        amount = Decimal(whole.replace(",", "") + (frac or ""))
        if negative:
            amount = -amount
    if amount == 0:
        return "0"
    text = format(amount, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


# --- arrays ---------------------------------------------------------------------------------

_INT_ELEMENTS = frozenset({"smallint", "integer", "bigint", "int2", "int4", "int8", "oid"})
_FLOAT_ELEMENTS = _FLOAT32 | _FLOAT64
_BOOL_ELEMENTS = frozenset({"boolean", "bool"})


class _LiteralError(ValueError):
    pass


#: array_out's dimensions prefix, written when a lower bound is not 1.
_BOUNDS_RE = re.compile(r"^(\[-?\d+:-?\d+\])+=")


def _pg_array(text: str) -> list[Any]:
    """PostgreSQL's array_out text → nested lists of element texts (None for NULL).

    Elements are quoted when empty, ``NULL`` or holding a brace, comma, quote, backslash or
    white space; inside quotes a backslash escapes the next character. A lower bound other
    than 1 is written first (``[0:1]={1,2}``); it is dropped, as Debezium drops it."""
    if text.startswith("["):
        eq = text.find("=")
        if eq < 0:
            raise _LiteralError(text)
        text = text[eq + 1 :]
    pos = 0

    def parse() -> list[Any]:
        nonlocal pos
        if text[pos] != "{":
            raise _LiteralError(text)
        pos += 1
        items: list[Any] = []
        if text[pos] == "}":
            pos += 1
            return items
        while True:
            if text[pos] == "{":
                items.append(parse())
            elif text[pos] == '"':
                pos += 1
                chars: list[str] = []
                while text[pos] != '"':
                    if text[pos] == "\\":
                        pos += 1
                    chars.append(text[pos])
                    pos += 1
                pos += 1
                items.append("".join(chars))
            else:
                end = pos
                while text[end] not in ",}":
                    end += 1
                raw = text[pos:end].strip()
                items.append(None if raw.upper() == "NULL" else raw)
                pos = end
            if text[pos] == ",":
                pos += 1
                continue
            if text[pos] == "}":
                pos += 1
                return items
            raise _LiteralError(text)

    try:
        parsed = parse()
    except IndexError as exc:
        raise _LiteralError(text) from exc
    if text[pos:].strip():
        raise _LiteralError(text)
    return parsed


def _element(value: Any, element_type: str) -> Any:
    """One element as PostgreSQL's output text of it (None stays None): a JSON number or
    boolean and the literal's text of the same value meet."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_element(v, element_type) for v in value]
    name = _type_name(element_type)
    if name in _BOOL_ELEMENTS and isinstance(value, bool):
        return "t" if value else "f"
    try:
        if name in _INT_ELEMENTS and not isinstance(value, bool):
            return str(int(value))
        if name in _FLOAT_ELEMENTS and not isinstance(value, bool):
            return comparable(float(value), name)
    except (TypeError, ValueError):
        pass
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return canonical(value)


def _array_text(value: Any, element_type: str) -> str:
    """An array as JSON of its elements' texts: the same for PostgreSQL's array literal (the
    source, tidelake's capture) and the JSON array Debezium writes (JsonConverter of a
    Connect ARRAY), nested arrays included."""
    if isinstance(value, list | tuple):
        items: Any = list(value)
    else:
        text = value.decode() if isinstance(value, bytes) else str(value)
        stripped = text.strip()
        try:
            if stripped.startswith("{") or _BOUNDS_RE.match(stripped):
                items = _pg_array(stripped)
            else:
                items = orjson.loads(stripped)
        except (orjson.JSONDecodeError, _LiteralError):
            return text
        if not isinstance(items, list):
            return text
    return orjson.dumps(_element(items, element_type)).decode()


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
    #: Source rows sharing their key with an earlier one: one lake row stands for all of
    #: them (a full-row key over identical rows: docs/capture.md); not a mismatch by itself.
    collapsed: int = 0
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
    """Compare comparable rows (see :func:`comparable`) by key (``pk``: the primary key, or
    the key the capture uses: ``capture.keys``, every column under ``keyless: full_row``).

    Source rows with one key count once (``rows_source``, the hash), as the lake holds them
    once; how many collapsed is ``collapsed``."""
    result = Verification(table)
    want: dict[Key, Row] = {}
    total = 0
    for row in source:
        want[tuple(row[c] for c in pk)] = row
        total += 1
    h_source = 0
    for row in want.values():
        h_source ^= _row_hash(row, columns)
    result.rows_source = len(want)
    result.collapsed = total - len(want)
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
    # Arrays as their literal too (``integer[]`` would otherwise come back as a Python list).
    text_oids = {
        int(oid)
        for _, t, oid in described
        if not str(t).startswith(_PG_TYPED) or str(t).endswith("[]")
    }

    def rows() -> Iterator[Row]:
        try:
            with conn.cursor(name="tidelake_verify") as cur:
                output_text(cur, text_oids)
                cur.itersize = 5000
                # money as its amount: cash_out's text depends on lc_monetary.
                select = ", ".join(
                    f"{quote_ident(c)}::numeric" if meta.types[c] == "money" else quote_ident(c)
                    for c in meta.columns
                )
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
    source: str | SourceDsn,
    lake_root: str,
    table_id: str,
    password: str | None = None,
    *,
    keys: Mapping[str, Sequence[str]] | None = None,
    keyless: str = "skip",
) -> Verification:
    """Compare the live source table ``table_id`` (``db.table``; PostgreSQL: ``schema.table``)
    with its Hudi table under ``lake_root``, by the key the capture uses (``keys`` =
    ``capture.keys``, else the primary key, else every column when ``keyless`` is
    ``full_row``: capture/keys.py). Never raises: errors land in ``error``."""
    from tidelake.verify.lake import read_table

    result = Verification(table_id)
    try:
        dsn = source if isinstance(source, SourceDsn) else parse_dsn(source, password)
        database, table = split_table_id(table_id)
        reader = _mysql_rows if dsn.kind == "mysql" else _pg_rows
        meta, source_rows = reader(dsn, database, table)
        key = tuple((keys or {}).get(table_id) or meta.pk)
        if not key and keyless == "full_row":
            key = tuple(meta.columns)
        if not key:
            raise LookupError(
                f"{table_id} has no primary key: nothing to compare by (capture.keys names one)"
            )
        lake = read_table(lake_root, table_id).to_pylist()
        lake_rows = (
            {c: comparable(row.get(c), meta.types[c]) for c in meta.columns} for row in lake
        )
        return compare_tables(table_id, key, meta.columns, source_rows, lake_rows)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
