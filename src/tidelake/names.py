"""Source names as data: the one mapping from a (database, table) pair to every name tidelake
derives from it, and the rules a name must meet to be accepted (docs/names.md).

A source table is named by two strings that may hold anything their database allows: dots,
backticks, spaces, any case, any script. Each derived name is a function of the pair that is
**injective** (two tables never share a derived name) and, where a reader needs the pair
back, **reversible**:

==========================  ==================================  ==================================
derived name                plain ``shop.orders``               rule
==========================  ==================================  ==================================
table id (config, status)   ``shop.orders``                     :func:`table_id`: a part holding
                                                                ``.`` or a backtick is quoted in
                                                                backticks, inner ones doubled
lake path segments          ``shop/orders``                     :func:`lake_segment`: percent-
                                                                encoding; a leading ``.``/``_``
                                                                is encoded too (never hidden)
staged file                 ``shop.orders.jsonl``               :func:`stage_file_name`: like the
                                                                lake, ``.`` encoded as well
Hudi table name (Avro)      ``shop_orders``                     :func:`hudi_table_name`
catalog identifiers         ```shop`.`orders```                 :func:`catalog_name`: Spark's
                                                                catalog takes ``[a-z0-9_]`` and
                                                                ignores case: others escaped
==========================  ==================================  ==================================

Plain lowercase names keep the paths tidelake always gave them; an existing Hudi table keeps
the table name stored in its ``hoodie.properties`` (``lake/store.py``), since Hudi refuses a
write whose ``hoodie.table.name`` differs.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote

#: The longest path segment most filesystems (ext4, xfs, APFS) and S3 tools accept, in bytes.
MAX_SEGMENT_BYTES = 255

# Kept as they are in a lake path segment (today's rule: existing lakes keep their paths).
_LAKE_SAFE = "-_.$"
# A staged file is ``<db>.<table>.jsonl``: the dot separates, so it is encoded inside a part.
_STAGE_SAFE = "-_$"
# A leading character that hides a path from Spark/Hadoop listings (and ``ls``).
_HIDDEN_PREFIX = {".": "%2E", "_": "%5F"}

_PLAIN_ID_PART = re.compile(r"[^.`]+")
_AVRO_KEPT = re.compile(r"[A-Za-z0-9]")
_HEX = frozenset("0123456789abcdef")


# --- table ids -------------------------------------------------------------------------------


def _id_part(name: str) -> str:
    if _PLAIN_ID_PART.fullmatch(name):
        return name
    return "`" + name.replace("`", "``") + "`"


def table_id(database: str, table: str) -> str:
    """``database.table``: the text that names a source table in config, status and logs.

    A part holding a ``.`` or a backtick is written in backticks with inner
    backticks doubled, so ``a.b``/``c`` is ```a.b`.c`` and ``a``/``b.c`` is ``a.`b.c```;
    every other name is written as it is. :func:`split_table_id` reverses it.
    """
    if (  # the hot path: one f-string per staged event
        database
        and table
        and "." not in database
        and "." not in table
        and "`" not in database
        and "`" not in table
    ):
        return f"{database}.{table}"
    if not table:  # a database-level DDL (CREATE DATABASE) names no table
        return f"{_id_part(database)}."
    return f"{_id_part(database)}.{_id_part(table)}"


def _read_quoted(text: str, start: int) -> tuple[str, int]:
    """The backtick-quoted name starting at ``text[start] == '`'``; and the index after it."""
    out = []
    i = start + 1
    while i < len(text):
        if text[i] == "`":
            if text[i + 1 : i + 2] == "`":
                out.append("`")
                i += 2
                continue
            return "".join(out), i + 1
        out.append(text[i])
        i += 1
    raise ValueError(f"unclosed backtick in table name {text!r}")


def split_table_id(text: str) -> tuple[str, str]:
    """``"db.table"`` → ``("db", "table")``, the reverse of :func:`table_id`.

    Either part may be quoted in backticks (inner backticks doubled). An unquoted database
    ends at the first dot; an unquoted table is the rest of the text, dots included (so a
    hand-written ``db.t.x`` still means table ``t.x`` of ``db``).
    """
    if text.startswith("`"):
        database, i = _read_quoted(text, 0)
        if text[i : i + 1] != ".":
            raise ValueError(f"not a 'database.table' name: {text!r}")
    else:
        database, sep, _ = text.partition(".")
        if not sep:
            raise ValueError(f"not a 'database.table' name: {text!r}")
        i = len(database)
    rest = text[i + 1 :]
    if rest.startswith("`"):
        table, j = _read_quoted(rest, 0)
        if j != len(rest):
            raise ValueError(f"text after the quoted table name in {text!r}")
    else:
        table = rest
    if not database or not table:
        raise ValueError(f"not a 'database.table' name: {text!r}")
    return database, table


# --- paths -----------------------------------------------------------------------------------


def _quote(text: str, safe: str) -> str:
    encoded = quote(text, safe=safe)
    # ``quote`` never encodes ``.``; a staged file name needs it encoded (it separates).
    return encoded if "." in safe else encoded.replace(".", "%2E")


def _segment(name: str, safe: str) -> str:
    if not name:
        raise ValueError("an empty name has no path")
    encoded = _quote(name, safe)
    # ``_x``/``.x`` would be hidden from Spark and Hadoop (and ``_tidelake`` is our state
    # directory): its first character is percent-encoded, which no hidden name starts with.
    head = _HIDDEN_PREFIX.get(encoded[0])
    if head is not None:
        encoded = head + encoded[1:]
    if len(encoded) > MAX_SEGMENT_BYTES:
        # Percent-encoding triples every byte of a non-ASCII letter: keep those as UTF-8
        # (a 64-letter MySQL name in any script fits), still encoding ASCII punctuation.
        compact = "".join(c if ord(c) > 0x7F else _quote(c, safe) for c in name)
        head = _HIDDEN_PREFIX.get(compact[0])
        encoded = head + compact[1:] if head is not None else compact
    if len(encoded.encode()) > MAX_SEGMENT_BYTES:
        raise ValueError(f"name too long for a path segment ({len(name)} characters)")
    return encoded


def lake_segment(name: str) -> str:
    """One path segment of the lake (``<lake_root>/<db>/<table>``) for a source name.

    Letters, digits and ``-_.$`` stay, everything else is percent-encoded (UTF-8), and a
    leading ``.`` or ``_`` is encoded as ``%2E``/``%5F``: no table is hidden from Spark or
    lands in the ``_tidelake`` state directory. A name whose encoding would pass 255 bytes
    keeps its non-ASCII letters as UTF-8. :func:`segment_name` reverses it.
    """
    return _segment(name, _LAKE_SAFE)


def segment_name(segment: str) -> str:
    """The source name of a lake path segment: the reverse of :func:`lake_segment`."""
    return unquote(segment)


def lake_path(lake_root: str, database: str, table: str) -> str:
    """``<lake_root>/<db segment>/<table segment>``."""
    return f"{lake_root.rstrip('/')}/{lake_segment(database)}/{lake_segment(table)}"


def legacy_lake_path(lake_root: str, database: str, table: str) -> str | None:
    """Where tidelake before names.py put a table (segments percent-encoded, a leading ``.``
    or ``_`` kept), None when that rule gave no path; only to find tables written then."""
    if database in ("", ".", "..") or table in ("", ".", ".."):
        return None
    db, name = quote(database, safe=_LAKE_SAFE), quote(table, safe=_LAKE_SAFE)
    return f"{lake_root.rstrip('/')}/{db}/{name}"


def stage_file_name(database: str, table: str) -> str:
    """The staged file of a table in its batch directory: ``<db>.<table>.jsonl``, each part
    percent-encoded with its dots, so ```a.b`.c`` and ``a.`b.c``` never share a file.

    A name too long for one path segment is staged as ``~<sha256 of the table id>.jsonl``
    (the manifest names the table of each file; an encoded name holds two dots, a hashed
    one a single dot, so the two never meet).
    """
    try:
        name = f"{_segment(database, _STAGE_SAFE)}.{_segment(table, _STAGE_SAFE)}.jsonl"
    except ValueError:
        name = ""
    if not name or len(name.encode()) > MAX_SEGMENT_BYTES:
        digest = hashlib.sha256(table_id(database, table).encode("utf-8", "surrogatepass"))
        return f"~{digest.hexdigest()}.jsonl"
    return name


# --- Hudi table names ------------------------------------------------------------------------


def _avro_part(name: str, *, first: bool) -> str:
    out = []
    for i, c in enumerate(name):
        if _AVRO_KEPT.fullmatch(c) and not (first and i == 0 and c.isdigit()):
            out.append(c)
        else:
            out.append(f"_{ord(c):x}_")
    return "".join(out)


_PLAIN_HUDI_PART = re.compile(r"[a-z0-9]+")


def hudi_table_name(database: str, table: str) -> str:
    """The Hudi table name of a new table (also its Avro record name): ``[A-Za-z_][A-Za-z0-9_]*``.

    Two lowercase names of letters and digits (the database starting with a letter) keep
    tidelake's first rule, joined by one ``_``: ``shop.orders`` → ``shop_orders``. Any other
    pair is escaped: ASCII letters and digits stay, any other character (``_`` included)
    becomes ``_<hex code point>_``, a leading digit is escaped too, and the parts are joined
    by ``__`` (a code point's hex never starts with ``_``): ``a_b.c`` → ``a_5f_b__c``,
    ``a.b_c`` → ``a__b_5f_c``. A plain name never holds ``__`` and an escaped one always
    does, so no two tables share a name; :func:`parse_hudi_table_name` reverses it.
    """
    if not database or not table:
        raise ValueError("a Hudi table name needs a database and a table")
    if (
        _PLAIN_HUDI_PART.fullmatch(database)
        and _PLAIN_HUDI_PART.fullmatch(table)
        and not database[0].isdigit()
    ):
        return f"{database}_{table}"
    return f"{_avro_part(database, first=True)}__{_avro_part(table, first=False)}"


def parse_hudi_table_name(name: str) -> tuple[str, str]:
    """``(database, table)`` of a name made by :func:`hudi_table_name`."""
    if "__" not in name:
        database, sep, table = name.partition("_")
        if (
            not sep
            or not _PLAIN_HUDI_PART.fullmatch(database)
            or not _PLAIN_HUDI_PART.fullmatch(table)
        ):
            raise ValueError(f"not a Hudi table name of names.py: {name!r}")
        return database, table
    parts: list[list[str]] = [[]]
    i = 0
    while i < len(name):
        c = name[i]
        if c != "_":
            parts[-1].append(c)
            i += 1
        elif name[i + 1 : i + 2] == "_":
            if len(parts) == 2:
                raise ValueError(f"two separators in {name!r}")
            parts.append([])
            i += 2
        else:
            end = name.find("_", i + 1)
            digits = name[i + 1 : end]
            if end < 0 or not digits or not set(digits) <= _HEX:
                raise ValueError(f"not an encoded Hudi table name: {name!r}")
            parts[-1].append(chr(int(digits, 16)))
            i = end + 1
    if len(parts) != 2:
        raise ValueError(f"no separator in {name!r}")
    return "".join(parts[0]), "".join(parts[1])


# --- catalog identifiers ---------------------------------------------------------------------


_PLAIN_CATALOG = re.compile(r"[a-z0-9][a-z0-9_]*")
_CATALOG_KEPT = re.compile(r"[a-z0-9]")


def catalog_name(name: str) -> str:
    """The identifier of a database or table in Spark's catalog: ``[a-z0-9_]+``.

    Spark's catalog accepts only letters, digits and ``_`` and ignores case, so names are
    mapped into lowercase ``[a-z0-9_]``. A name of lowercase letters, digits and ``_`` that
    does not start with ``_`` is itself: ``orders`` → ``orders``. Any other is escaped and
    starts with ``_``: lowercase letters and digits stay, an upper-case ASCII letter is
    lowered, any other character becomes ``_<hex code point>_``, and ``_x<hex mask>`` closes
    the name, the bits of the mask marking the letters that were upper case: ``Orders`` →
    ``_orders_x1``, ``ORDERS`` → ``_orders_x3f``, ``my db`` → ``_my_20_db_x0``,
    ``_tidelake`` → ``__5f_tidelake_x0``. ``Shop.Orders`` and ``shop.orders`` are two catalog
    tables; :func:`parse_catalog_name` reverses it.
    """
    if _PLAIN_CATALOG.fullmatch(name):
        return name
    out = ["_"]
    mask = 0
    for i, c in enumerate(name):
        if _CATALOG_KEPT.fullmatch(c):
            out.append(c)
        elif "A" <= c <= "Z":
            out.append(c.lower())
            mask |= 1 << i
        else:
            out.append(f"_{ord(c):x}_")
    return "".join(out) + f"_x{mask:x}"


def parse_catalog_name(text: str) -> str:
    """The source name of a catalog identifier made by :func:`catalog_name`."""
    if not text.startswith("_"):
        return text
    chars: list[str] = []
    i = 1
    while i < len(text):
        c = text[i]
        if c != "_":
            chars.append(c)
            i += 1
        elif text[i + 1 : i + 2] == "x":
            mask = int(text[i + 2 :], 16)
            return "".join(ch.upper() if mask >> n & 1 else ch for n, ch in enumerate(chars))
        else:
            end = text.find("_", i + 1)
            digits = text[i + 1 : end]
            if end < 0 or not digits or not set(digits) <= _HEX:
                raise ValueError(f"not an encoded catalog name: {text!r}")
            chars.append(chr(int(digits, 16)))
            i = end + 1
    raise ValueError(f"no case mask in {text!r}")


# --- what a source may name ------------------------------------------------------------------

#: Column-name prefixes the lake writes itself (lineage) or Hudi does (meta columns): a source
#: column with one would be dropped or shadowed, so it is refused (case-insensitively, like
#: Spark resolves columns).
RESERVED_COLUMN_PREFIXES = ("_tl_", "_hoodie_")
#: The reason prefix of every name refusal (a dead letter's ``Tidelake-Reason``).
REASON = "illegal_name"
#: MySQL and TiDB: 64 characters; PostgreSQL: NAMEDATALEN - 1 = 63 bytes.
MYSQL_MAX_CHARS = 64
POSTGRES_MAX_BYTES = 63


def _dialect(source: str) -> str:
    """``postgres``, ``mysql`` (MySQL, MariaDB, TiDB) or ``any`` for the producer ``source``."""
    text = source.lower()
    if "postgres" in text:
        return "postgres"
    if any(word in text for word in ("mysql", "mariadb", "tidb")):
        return "mysql"
    return "any"


def name_problem(name: str, *, kind: str, source: str = "") -> str | None:
    """Why ``name`` (a database, table or column name from producer ``source``) cannot be a
    source name, or None when it can.

    No source allows an empty name, a NUL or text that is not Unicode (a lone surrogate). Per
    producer: MySQL/MariaDB/TiDB names are at most 64 characters of the Basic Multilingual
    Plane and do not end with a space; PostgreSQL names are at most 63 bytes of UTF-8; an
    unknown producer gets the widest of both (64 characters).
    """
    if not name:
        return f"{REASON}: empty {kind} name"
    shown = repr(name[:80])
    if "\x00" in name:
        return f"{REASON}: {kind} name {shown} holds a NUL character"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return f"{REASON}: {kind} name {shown} is not valid Unicode"
    dialect = _dialect(source)
    if dialect == "postgres":
        if size > POSTGRES_MAX_BYTES:
            return (
                f"{REASON}: {kind} name {shown} is {size} bytes; PostgreSQL allows "
                f"{POSTGRES_MAX_BYTES}"
            )
        return None
    if len(name) > MYSQL_MAX_CHARS:
        return (
            f"{REASON}: {kind} name {shown} is {len(name)} characters; the longest legal "
            f"name is {MYSQL_MAX_CHARS}"
        )
    if dialect == "mysql":
        if any(ord(c) > 0xFFFF for c in name):
            return f"{REASON}: {kind} name {shown} holds a character MySQL does not allow"
        if name.endswith(" "):
            return f"{REASON}: {kind} name {shown} ends with a space, which MySQL does not allow"
    return None


def columns_problem(columns: list[str], *, source: str = "") -> str | None:
    """Why a row with these column names cannot be stored, or None.

    Refused: a name ``name_problem`` refuses, a reserved prefix (``_tl_*``, ``_hoodie_*``,
    any case), and two names equal but for case (``Id`` and ``id``: Spark resolves columns
    ignoring case, so one would shadow the other).
    """
    seen: dict[str, str] = {}
    for column in columns:
        problem = name_problem(column, kind="column", source=source)
        if problem is not None:
            return problem
        lowered = column.lower()
        if lowered.startswith(RESERVED_COLUMN_PREFIXES):
            return (
                f"{REASON}: column {column!r} uses a prefix reserved by tidelake and Hudi "
                f"({', '.join(p + '*' for p in RESERVED_COLUMN_PREFIXES)})"
            )
        other = seen.setdefault(lowered, column)
        if other != column:
            return (
                f"{REASON}: columns {other!r} and {column!r} differ only in case; the lake "
                "(Spark) resolves column names ignoring case"
            )
    return None
