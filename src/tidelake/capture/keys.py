"""Which columns key a captured table, or why the capture does not take it.

The lake keys every table (its Hudi record key = the canal-json ``pkNames`` the capture
sends), so every captured table needs a key that identifies a row in the snapshot, in every
INSERT, and in the before image of every UPDATE and DELETE. :func:`resolve_key` decides it
from the table's shape and the configuration, in this order:

1. ``capture.keys["db.table"]`` (the operator's key, as HoodieStreamer's record key field
   and Flink CDC's chunk key column allow): those columns, in that order;
2. the table's primary key;
3. no key: ``capture.keyless: skip`` skips the table (the default), ``full_row`` keys it by
   every column — identical rows then share one key and are one row in the lake (docs/capture.md,
   "Tables without a primary key"); ``tidelake verify`` compares such a table by distinct rows.

A chosen key is refused (the table is skipped, with the reason) when

- it names a column the table lacks;
- one of its columns can be NULL: the lake refuses a NULL key value (``formats/_common.py``
  ``row_key``), so such a row would be dead-lettered long after the choice was made; the
  reason names the statement that forbids NULLs;
- PostgreSQL would not send it in the old tuple of an UPDATE/DELETE. pgoutput sends the
  replica identity's columns only (PostgreSQL docs, "ALTER TABLE ... REPLICA IDENTITY":
  DEFAULT = the primary key, USING INDEX = that index's columns, FULL = every column,
  NOTHING = none): the key must be among them. The capture never changes the identity
  itself; the reason names the ``ALTER TABLE ... REPLICA IDENTITY FULL`` the owner may run.

MySQL/MariaDB need no identity check: ``binlog_row_image=FULL`` (checked at start) puts
every column in the before image (MySQL reference manual, ``binlog_row_image``).

A skipped table is never silent: the source keeps ``table → reason``, saves it with its
position state, puts it in the heartbeat (``"skipped"``) and ``tidelake status`` shows it as
skipped instead of stale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidelake.config import CaptureConfig

#: pg_class.relreplident values (PostgreSQL catalog docs, pg_class).
IDENTITY_NAMES = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


@dataclass(frozen=True, slots=True)
class TableShape:
    """What the key choice needs to know of one source table."""

    table_id: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    #: Columns declared NOT NULL.
    not_null: frozenset[str]
    #: PostgreSQL only: ``pg_class.relreplident`` and the columns its old tuple carries
    #: (``None`` = MySQL/MariaDB, whose before image holds every column).
    identity: str | None = None
    identity_columns: tuple[str, ...] = ()
    #: PostgreSQL: the SQL name of the table for the statements a reason names.
    sql_name: str | None = None


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The key of a captured table (``skipped`` None), or why it is skipped (``key`` empty)."""

    key: tuple[str, ...]
    how: str  # "primary" | "configured" | "full_row" | "skipped"
    skipped: str | None = None


def _skip(reason: str) -> KeyChoice:
    return KeyChoice((), "skipped", reason)


def resolve_key(cfg: CaptureConfig, shape: TableShape) -> KeyChoice:
    """The key ``shape`` is captured with, or the reason it is not (module docstring)."""
    name = shape.sql_name or shape.table_id
    configured = cfg.keys.get(shape.table_id)
    if configured:
        missing = [c for c in configured if c not in shape.columns]
        if missing:
            return _skip(
                f"capture.keys names {', '.join(missing)}, which {shape.table_id} does not have "
                f"(columns: {', '.join(shape.columns)})"
            )
        key, how = tuple(configured), "configured"
    elif shape.primary_key:
        key, how = shape.primary_key, "primary"
    elif cfg.keyless == "full_row":
        key, how = shape.columns, "full_row"
    else:
        return _skip(
            f'no primary key: set capture.keys["{shape.table_id}"] to its key columns, or '
            "capture.keyless: full_row (docs/capture.md, Tables without a primary key)"
        )
    # Every problem at once: the user fixes them in one go, not one restart each.
    problems = []
    if how != "primary":
        nullable = [c for c in key if c not in shape.not_null]
        if nullable:
            fix = (
                f"ALTER TABLE {name} ALTER COLUMN {nullable[0]} SET NOT NULL"
                if shape.identity is not None
                else f"ALTER TABLE {name} MODIFY {nullable[0]} <type> NOT NULL"
            )
            what = "capture.keys" if how == "configured" else "capture.keyless: full_row"
            problems.append(
                f"{what}: key column {', '.join(nullable)} can be NULL and the lake refuses a "
                f"NULL key: {fix}"
            )
    if shape.identity is not None:
        problem = identity_problem(shape, key)
        if problem:
            problems.append(problem)
    if problems:
        return _skip("; ".join(problems))
    return KeyChoice(key, how)


def identity_problem(shape: TableShape, key: Sequence[str]) -> str | None:
    """Why PostgreSQL's old tuple would lack a column of ``key`` (None: it holds them all)."""
    if shape.identity == "f":
        return None
    have = set(shape.identity_columns)
    if set(key) <= have and have:
        return None
    name = shape.sql_name or shape.table_id
    ident = IDENTITY_NAMES.get(shape.identity or "", shape.identity or "?")
    if shape.identity == "d" and not shape.primary_key:
        ident = "DEFAULT without a primary key (= NOTHING)"
    return (
        f"REPLICA IDENTITY {ident}: PostgreSQL would not send key column(s) "
        f"{', '.join(c for c in key if c not in have)} with an UPDATE or DELETE; the table's "
        f"owner can run ALTER TABLE {name} REPLICA IDENTITY FULL (the capture never changes it)"
    )


def skipped_text(skipped: Mapping[str, str]) -> str:
    """One line naming every skipped table and its reason (for a log line)."""
    return "; ".join(f"{t}: {r}" for t, r in sorted(skipped.items()))
