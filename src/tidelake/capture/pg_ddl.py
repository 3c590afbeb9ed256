"""PostgreSQL DDL log (``capture.ddl_log: true``): table DDL in the same stream as the rows.

pgoutput carries no DDL (PostgreSQL manual, "Logical Replication — Restrictions": "The database
schema and DDL commands are not replicated"; Debezium's PostgreSQL connector documents the same
limit and reports no DDL at all). Column changes can be derived from the Relation message sent
before a table's next change (``postgres.relation_ddl``), but a dropped table sends nothing ever
again, a renamed one is seen only at its next change, and a dropped-and-recreated one looks like
a new relation. So the capture installs, in its own ``tidelake`` schema:

* ``tidelake.ddl_log``: one row per table DDL command — ``action`` (``create``, ``drop``,
  ``rename``), the command tag, the table's OID, schema and name, the old schema and name of a
  rename, the columns (name, ``format_type`` text, type OID, type modifier) and primary key of a
  created or renamed table, the statement text (``current_query()``) and ``txid_current()``;
* ``tidelake.ddl_names``: OID → schema and name of every ordinary or partitioned table (not
  the partitions: the capture takes a partitioned table as one), kept by the triggers, so that
  an ``ALTER TABLE`` whose table changed its name (``RENAME TO``, ``SET SCHEMA``) is told from
  one that did not (``pg_event_trigger_ddl_commands()`` gives only the new identity), and a
  dropped partition from a dropped table;
* ``tidelake.ddl_publications``: the capture publications the triggers add a new keyed table
  of ``capture.tables`` to, in the DDL's own transaction (:func:`follow_publication`);
* two event triggers (PostgreSQL manual, "Event Triggers"): ``tidelake_ddl_end`` on
  ``ddl_command_end`` for ``CREATE TABLE``, ``CREATE TABLE AS``, ``SELECT INTO`` and ``ALTER
  TABLE`` reads ``pg_event_trigger_ddl_commands()``; ``tidelake_ddl_drop`` on ``sql_drop``
  (``DROP TABLE``, ``DROP SCHEMA … CASCADE``, ``DROP OWNED``) reads
  ``pg_event_trigger_dropped_objects()``.

The triggers write in the DDL's own transaction, and ``tidelake.ddl_log`` is in the capture's
publication: its inserts arrive in the same pgoutput stream, in commit order with the rows
around them, at the place of the DDL inside its transaction. The capture turns each insert into
the canal-json DDL event the lake applies (``lake/ddl.py``) and never publishes the log's own
rows. Event triggers do not fire for ``TRUNCATE`` (PostgreSQL 15 manual, "Overview of Event
Trigger Behavior": ``ddl_command_start``/``_end`` fire for CREATE, ALTER, DROP, SECURITY LABEL,
COMMENT, GRANT, REVOKE and SELECT INTO); pgoutput sends TRUNCATE itself, so that path stays in
``postgres.py``. The same page says ``sql_drop`` runs once the objects are gone from the
catalogs, which is why the old names live in ``ddl_names``.

Seen on PostgreSQL 15 here (tests/integration/capture/test_postgres_ddl_log.py and a pgoutput
slot read by hand): TRUNCATE logs nothing; a DDL run with ``session_replication_role =
replica`` fires no event trigger; a row inserted in the ``CREATE TABLE``'s own transaction
after the trigger's ``ALTER PUBLICATION ... ADD TABLE`` is streamed, while the rows a ``CREATE
TABLE AS`` writes (before ``ddl_command_end``) are not.

Which path owns which DDL: the log owns whole tables (CREATE, DROP, RENAME/SET SCHEMA); the
Relation messages own columns (ADD/DROP/RENAME COLUMN, TYPE); pgoutput's Truncate message owns
TRUNCATE. A log event updates
the capture's known relation (by OID) before the table's next Relation message arrives, so the
Relation path then sees no difference and does not emit the rename again; the Relation path
never emits CREATE or DROP. A rename the log missed (the trigger failed, or was installed
after it) is still derived from the Relation message, as without the log.

The trigger functions are ``SECURITY DEFINER`` (the installing superuser writes the log, not
the role that ran the DDL) with a fixed ``search_path``, and catch every error into a
``WARNING``: tidelake never makes a user's DDL fail. ``CREATE EVENT TRIGGER`` needs a
superuser (manual, CREATE EVENT TRIGGER), so the option is off by default; see
docs/capture.md "PostgreSQL DDL" for privileges and removal (:data:`UNINSTALL_SQL`).

Positions: a log event is a change of its transaction like any row, ``(commit LSN, index)``,
so it sorts against every row published before and after it exactly as the source committed
them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from tidelake.capture.pgoutput import RelationInfo

log = structlog.get_logger(__name__)

SCHEMA = "tidelake"
LOG_TABLE = "ddl_log"
NAMES_TABLE = "ddl_names"
PUBLICATIONS_TABLE = "ddl_publications"
END_TRIGGER = "tidelake_ddl_end"
DROP_TRIGGER = "tidelake_ddl_drop"
#: Bumped whenever the installed SQL changes: an older installation is replaced at start.
VERSION = "tidelake ddl log 4"
#: Seconds between two deletes of confirmed log rows.
HOUSEKEEPING_S = 60.0

_INSTALL = f"""
SELECT pg_advisory_xact_lock(hashtext('tidelake.ddl_log'));
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.{LOG_TABLE} (
    id bigserial PRIMARY KEY,
    action text NOT NULL,
    command_tag text NOT NULL,
    relid oid NOT NULL,
    schema_name text NOT NULL,
    table_name text NOT NULL,
    old_schema text,
    old_table text,
    columns jsonb,
    primary_key jsonb,
    statement text,
    txid bigint NOT NULL DEFAULT txid_current(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.{NAMES_TABLE} (
    relid oid PRIMARY KEY,
    schema_name text NOT NULL,
    table_name text NOT NULL
);
INSERT INTO {SCHEMA}.{NAMES_TABLE}
SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence <> 't' AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '{SCHEMA}')
ON CONFLICT (relid) DO UPDATE SET schema_name = excluded.schema_name,
                                  table_name = excluded.table_name;

CREATE TABLE IF NOT EXISTS {SCHEMA}.{PUBLICATIONS_TABLE} (
    pubname text PRIMARY KEY,
    regexes text[] NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION {SCHEMA}.ddl_publish(rel oid, nsp text, relname text, pk jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    pub record;
BEGIN
    -- A keyed table entering a capture's tables joins its publication in this transaction:
    -- its rows from here on are in the stream, with no gap for a snapshot to fill.
    IF pk IS NULL OR pk = '[]'::jsonb THEN
        RETURN;
    END IF;
    FOR pub IN SELECT d.pubname FROM {SCHEMA}.{PUBLICATIONS_TABLE} d
                 JOIN pg_publication p ON p.pubname = d.pubname
                WHERE NOT p.puballtables
                  AND EXISTS (SELECT 1 FROM unnest(d.regexes) r WHERE nsp || '.' || relname ~ r)
                  AND NOT EXISTS (SELECT 1 FROM pg_publication_rel pr
                                   WHERE pr.prpubid = p.oid AND pr.prrelid = rel) LOOP
        BEGIN
            EXECUTE format('ALTER PUBLICATION %I ADD TABLE %I.%I', pub.pubname, nsp, relname);
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'tidelake ddl log: publication %: % (%)', pub.pubname, SQLERRM,
                SQLSTATE;
        END;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION {SCHEMA}.ddl_table_shape(rel oid, OUT columns jsonb, OUT pk jsonb)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT (SELECT coalesce(jsonb_agg(jsonb_build_array(a.attname,
                                                        format_type(a.atttypid, a.atttypmod),
                                                        a.atttypid::bigint, a.atttypmod)
                                      ORDER BY a.attnum), '[]'::jsonb)
              FROM pg_attribute a WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped),
           (SELECT coalesce(jsonb_agg(a.attname ORDER BY k.n), '[]'::jsonb)
              FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
              JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = rel AND i.indisprimary)
$$;

CREATE OR REPLACE FUNCTION {SCHEMA}.ddl_log_end() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    cmd record;
    known record;
    nsp text;
    rel text;
    shape record;
BEGIN
    FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands()
               WHERE object_type = 'table' AND NOT in_extension LOOP
        SELECT n.nspname, c.relname INTO nsp, rel FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.oid = cmd.objid AND c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
           AND NOT c.relispartition;
        CONTINUE WHEN nsp IS NULL OR nsp = '{SCHEMA}';
        SELECT * INTO known FROM {SCHEMA}.{NAMES_TABLE} WHERE relid = cmd.objid;
        IF cmd.command_tag <> 'ALTER TABLE' THEN
            shape := {SCHEMA}.ddl_table_shape(cmd.objid);
            INSERT INTO {SCHEMA}.{LOG_TABLE} (action, command_tag, relid, schema_name,
                table_name, columns, primary_key, statement)
            VALUES ('create', cmd.command_tag, cmd.objid, nsp, rel, shape.columns, shape.pk,
                    current_query());
            PERFORM {SCHEMA}.ddl_publish(cmd.objid, nsp, rel, shape.pk);
        ELSIF known.relid IS NOT NULL
              AND (known.schema_name, known.table_name) IS DISTINCT FROM (nsp, rel) THEN
            shape := {SCHEMA}.ddl_table_shape(cmd.objid);
            INSERT INTO {SCHEMA}.{LOG_TABLE} (action, command_tag, relid, schema_name,
                table_name, old_schema, old_table, columns, primary_key, statement)
            VALUES ('rename', cmd.command_tag, cmd.objid, nsp, rel, known.schema_name,
                    known.table_name, shape.columns, shape.pk, current_query());
            PERFORM {SCHEMA}.ddl_publish(cmd.objid, nsp, rel, shape.pk);
        END IF;
        INSERT INTO {SCHEMA}.{NAMES_TABLE} VALUES (cmd.objid, nsp, rel)
        ON CONFLICT (relid) DO UPDATE SET schema_name = excluded.schema_name,
                                          table_name = excluded.table_name;
    END LOOP;
EXCEPTION WHEN OTHERS THEN
    -- A failing log must never fail the user's DDL: the DDL goes on, unlogged.
    RAISE WARNING 'tidelake ddl log: % (%)', SQLERRM, SQLSTATE;
END $$;

CREATE OR REPLACE FUNCTION {SCHEMA}.ddl_log_drop() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    obj record;
BEGIN
    FOR obj IN SELECT * FROM pg_event_trigger_dropped_objects()
               WHERE object_type = 'table' AND NOT is_temporary
                 AND schema_name IS DISTINCT FROM '{SCHEMA}' LOOP
        -- Only a table the names knew: a partition (never tracked, as it is no table of
        -- its own for the capture) is gone from the catalog and could not be told apart.
        DELETE FROM {SCHEMA}.{NAMES_TABLE} WHERE relid = obj.objid;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO {SCHEMA}.{LOG_TABLE} (action, command_tag, relid, schema_name, table_name,
            statement)
        VALUES ('drop', tg_tag, obj.objid, obj.schema_name, obj.object_name, current_query());
    END LOOP;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'tidelake ddl log: % (%)', SQLERRM, SQLSTATE;
END $$;

-- Runs as its owner (a superuser): only the triggers call it, never a user directly.
REVOKE ALL ON FUNCTION {SCHEMA}.ddl_publish(oid, text, text, jsonb) FROM PUBLIC;
COMMENT ON FUNCTION {SCHEMA}.ddl_log_end() IS '{VERSION}';
"""

_CREATE_TRIGGERS = f"""
CREATE EVENT TRIGGER {END_TRIGGER} ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')
    EXECUTE FUNCTION {SCHEMA}.ddl_log_end();
CREATE EVENT TRIGGER {DROP_TRIGGER} ON sql_drop
    WHEN TAG IN ('DROP TABLE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION {SCHEMA}.ddl_log_drop();
"""

#: What removes the DDL log from a database (docs/capture.md "PostgreSQL DDL").
UNINSTALL_SQL = f"""DROP EVENT TRIGGER IF EXISTS {END_TRIGGER};
DROP EVENT TRIGGER IF EXISTS {DROP_TRIGGER};
DROP FUNCTION IF EXISTS {SCHEMA}.ddl_log_end(), {SCHEMA}.ddl_log_drop(),
    {SCHEMA}.ddl_table_shape(oid), {SCHEMA}.ddl_publish(oid, text, text, jsonb);
DROP TABLE IF EXISTS {SCHEMA}.{LOG_TABLE}, {SCHEMA}.{NAMES_TABLE}, {SCHEMA}.{PUBLICATIONS_TABLE};"""


class DdlLogError(Exception):
    """The DDL log cannot be installed or published (the message says what to do)."""


def installed(cur: Any) -> bool:
    """Whether both event triggers exist, enabled, with the current functions."""
    cur.execute(
        "SELECT count(*) FROM pg_event_trigger WHERE evtname IN (%s, %s) AND evtenabled <> 'D'",
        (END_TRIGGER, DROP_TRIGGER),
    )
    if int(cur.fetchone()[0]) != 2:
        return False
    # From the catalogs, which every role reads (to_regprocedure needs USAGE on the schema).
    cur.execute(
        "SELECT obj_description(p.oid, 'pg_proc') FROM pg_proc p JOIN pg_namespace n "
        "ON n.oid = p.pronamespace WHERE n.nspname = %s AND p.proname = 'ddl_log_end'",
        (SCHEMA,),
    )
    row = cur.fetchone()
    return bool(row and row[0] == VERSION)


def install(conn: Any) -> bool:
    """Install (or upgrade) the log table, the functions and the event triggers, in one
    transaction; idempotent. False when they were there already, at this version.

    An existing installation is left as it is (a capture without superuser can then use the
    log a superuser installed); an older version is replaced. Raises :class:`DdlLogError`
    when the role may not create event triggers."""
    import psycopg2

    autocommit = conn.autocommit
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            if installed(cur):
                conn.rollback()
                return False
            cur.execute(_INSTALL)
            cur.execute(
                "SELECT evtname FROM pg_event_trigger WHERE evtname IN (%s, %s)",
                (END_TRIGGER, DROP_TRIGGER),
            )
            for (name,) in cur.fetchall():
                cur.execute(f"DROP EVENT TRIGGER {name}")
            cur.execute(_CREATE_TRIGGERS)
        conn.commit()
    except psycopg2.errors.InsufficientPrivilege as exc:
        conn.rollback()
        raise DdlLogError(
            "capture.ddl_log installs event triggers, which needs a superuser once "
            f"({str(exc).strip()}): run the capture once as a superuser, or set "
            "capture.ddl_log: false (dropped tables then never reach the lake)"
        ) from exc
    except Exception:
        conn.rollback()
        raise
    finally:
        conn.autocommit = autocommit
    log.info("ddl log installed", table=f"{SCHEMA}.{LOG_TABLE}",
             triggers=[END_TRIGGER, DROP_TRIGGER])  # fmt: skip
    return True


def publish(conn: Any, publication: str) -> None:
    """Put ``tidelake.ddl_log`` into ``publication`` unless it is there (FOR ALL TABLES)."""
    from psycopg2 import sql

    with conn.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
            "AND tablename = %s",
            (publication, SCHEMA, LOG_TABLE),
        )
        if cur.fetchone():
            return
        cur.execute(
            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}.{}").format(
                sql.Identifier(publication), sql.Identifier(SCHEMA), sql.Identifier(LOG_TABLE)
            )
        )
    log.info("ddl log added to the publication", publication=publication)


def glob_regex(pattern: str) -> str:
    """A ``capture.tables`` pattern (fnmatch: ``*``, ``?``, ``[seq]``, ``[!seq]``) as an
    anchored PostgreSQL regular expression over ``schema.table``."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body = pattern[i:end]
            i = end + 1
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
        else:
            out.append(ch if ch.isalnum() or ch == "_" else "\\" + ch)
    out.append("$")
    return "".join(out)


def follow_publication(conn: Any, publication: str, patterns: Sequence[str] | None) -> None:
    """Let the triggers add a keyed table created in (or renamed into) ``patterns`` to
    ``publication`` in the DDL's own transaction; None: never (a publication the capture
    does not manage is the user's). An empty list stands for every table."""
    with conn.cursor() as cur:
        if patterns is None:
            cur.execute(
                f"DELETE FROM {SCHEMA}.{PUBLICATIONS_TABLE} WHERE pubname = %s", (publication,)
            )
            return
        regexes = [glob_regex(p) for p in patterns] or ["^.*$"]
        cur.execute(
            f"INSERT INTO {SCHEMA}.{PUBLICATIONS_TABLE} (pubname, regexes) VALUES (%s, %s) "
            "ON CONFLICT (pubname) DO UPDATE SET regexes = excluded.regexes, updated_at = now()",
            (publication, regexes),
        )


def is_internal(namespace: str, name: str) -> bool:
    """Whether a relation is one of the DDL log's own tables: never captured as a table, even
    when ``capture.tables`` patterns match the ``tidelake`` schema."""
    return namespace == SCHEMA and name in (LOG_TABLE, NAMES_TABLE, PUBLICATIONS_TABLE)


def _simple(name: str) -> str:
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'


def qualified(namespace: str, name: str) -> str:
    """``schema.table`` as DDL text, each part quoted only when it needs it."""
    return f"{_simple(namespace)}.{_simple(name)}"


@dataclass(frozen=True, slots=True)
class LogRow:
    """One ``tidelake.ddl_log`` row, as an insert of it arrives through pgoutput."""

    id: int
    action: str
    command_tag: str
    relid: int
    schema: str
    table: str
    old_schema: str | None
    old_table: str | None
    columns: list[tuple[str, str, int, int]]
    pk: tuple[str, ...]
    statement: str | None

    @classmethod
    def from_values(cls, names: Sequence[str], values: Sequence[object]) -> LogRow:
        row = dict(zip(names, values, strict=True))

        def text(col: str) -> str | None:
            value = row.get(col)
            return value if isinstance(value, str) else None

        columns = orjson.loads(text("columns") or "[]")
        return cls(
            id=int(text("id") or 0),
            action=text("action") or "",
            command_tag=text("command_tag") or "",
            relid=int(text("relid") or 0),
            schema=text("schema_name") or "",
            table=text("table_name") or "",
            old_schema=text("old_schema"),
            old_table=text("old_table"),
            columns=[(str(c[0]), str(c[1]), int(c[2]), int(c[3])) for c in columns],
            pk=tuple(str(c) for c in orjson.loads(text("primary_key") or "[]")),
            statement=text("statement"),
        )

    @property
    def name(self) -> tuple[str, str]:
        """(schema, table) after the DDL."""
        return self.schema, self.table

    def relation(self) -> RelationInfo:
        """The table as the log saw it right after the DDL (the same OIDs and modifiers a
        later Relation message carries, so the Relation path finds nothing changed)."""
        return RelationInfo(
            self.relid,
            self.schema,
            self.table,
            [(name, oid, mod) for name, _t, oid, mod in self.columns],
            {name: type_text for name, type_text, _o, _m in self.columns},
            self.pk,
        )


def create_statement(rel: RelationInfo) -> str:
    """``CREATE TABLE`` of ``rel`` with its ``format_type`` column types and primary key."""
    cols = [f"{_simple(name)} {rel.types[name]}" for name, _oid, _mod in rel.columns]
    if rel.pk:
        cols.append(f"PRIMARY KEY ({', '.join(_simple(c) for c in rel.pk)})")
    return f"CREATE TABLE {qualified(rel.namespace, rel.name)} ({', '.join(cols)})"


def rename_statement(old_namespace: str, old_name: str, namespace: str, name: str) -> str:
    """``ALTER TABLE old RENAME TO new``; across schemas the new name is qualified (the form
    the lake's parser reads as a move; PostgreSQL itself spells it ``SET SCHEMA``)."""
    target = _simple(name) if namespace == old_namespace else qualified(namespace, name)
    return f"ALTER TABLE {qualified(old_namespace, old_name)} RENAME TO {target}"


@dataclass(frozen=True, slots=True)
class DdlEvent:
    """A DDL event for the stream: canal DDL type, statement, and the table it is about."""

    ddl_type: str
    sql: str
    relation: RelationInfo
    #: The table holds rows the stream never carried (a rename into ``capture.tables``):
    #: only a snapshot of it brings them.
    needs_snapshot: bool = False


class DdlLog:
    """Turns the log's inserts into DDL events, keeps the capture's relations in step, and
    deletes the log rows the capture confirmed."""

    def __init__(self) -> None:
        #: (commit LSN, log id) of log rows streamed but not yet confirmed.
        self._pending: list[tuple[int, int]] = []
        self._deletable = 0
        self._deleted = 0
        self._last_housekeeping = float("-inf")

    def events(
        self,
        row: LogRow,
        relations: dict[int, RelationInfo],
        captured: Callable[[RelationInfo], bool],
        commit_lsn: int,
    ) -> list[DdlEvent]:
        """The DDL events of one log row; ``relations`` (the capture's, by OID) is updated.

        ``captured`` says whether the capture takes a table (a relation the capture never saw
        has no columns and no key: ``captured`` then decides by its name). A rename out of
        the captured tables drops the lake's table (the source has no captured table of that
        name any more); a rename into them creates it (its existing rows need a snapshot).
        """
        self._pending.append((commit_lsn, row.id))
        known = relations.get(row.relid)
        if row.action == "create":
            rel = row.relation()
            relations[row.relid] = rel
            # CREATE TABLE AS / SELECT INTO cannot declare a primary key: such a table joins
            # the publication (and gets its snapshot) when the capture's sync adds it.
            return [DdlEvent("CREATE", create_statement(rel), rel)] if captured(rel) else []
        if row.action == "drop":
            relations.pop(row.relid, None)
            rel = known or RelationInfo(row.relid, row.schema, row.table, [], {}, ())
            if not captured(rel):
                return []
            return [DdlEvent("ERASE", f"DROP TABLE {qualified(rel.namespace, rel.name)}", rel)]
        if row.action == "rename":
            empty = RelationInfo(row.relid, row.schema, row.table, [], {}, ())
            logged = row.relation() if row.columns else moved(known or empty, *row.name)
            # The columns the capture knew stay: a column changed in the same transaction
            # before the rename is still derived from the next Relation message.
            base = known or logged
            old = moved(
                base,
                row.old_schema or (known.namespace if known else row.schema),
                row.old_table or (known.name if known else row.table),
            )
            new = moved(base, *row.name)
            relations[row.relid] = new
            was, now = captured(old), captured(new)
            if was and now:
                sql = rename_statement(old.namespace, old.name, new.namespace, new.name)
                return [DdlEvent("RENAME", sql, new)]
            if was:
                return [DdlEvent("ERASE", f"DROP TABLE {qualified(old.namespace, old.name)}", old)]
            if captured(logged):
                # New to the lake: created as the table is now.
                relations[row.relid] = logged
                return [DdlEvent("CREATE", create_statement(logged), logged, needs_snapshot=True)]
            return []
        log.warning("unknown ddl log action", action=row.action, id=row.id)
        return []

    def confirmed(self, lsn: int) -> None:
        """Log rows of transactions committed at or before ``lsn`` may be deleted."""
        done = [i for commit, i in self._pending if commit <= lsn]
        if done:
            self._deletable = max(self._deletable, *done)
            self._pending = [(c, i) for c, i in self._pending if c > lsn]

    def housekeeping(self, query: Callable[..., Any], now: float | None = None) -> int | None:
        """Delete the confirmed log rows, at most every :data:`HOUSEKEEPING_S`; the highest id
        deleted, or None when nothing was due.

        Safe for every capture on the database, whatever its slot: logical decoding reads an
        insert from the WAL, not from the table, so a row deleted after its commit still
        reaches a slot that has not streamed it yet. The deletes themselves arrive through
        pgoutput and are dropped by the capture."""
        now = time.monotonic() if now is None else now
        if self._deletable <= self._deleted or now - self._last_housekeeping < HOUSEKEEPING_S:
            return None
        self._last_housekeeping = now
        query(f"DELETE FROM {SCHEMA}.{LOG_TABLE} WHERE id <= %s", (self._deletable,))
        self._deleted = self._deletable
        return self._deleted


def moved(rel: RelationInfo, namespace: str, name: str) -> RelationInfo:
    """``rel`` under another name (a new object: the capture's saved state tracks identity)."""
    return RelationInfo(rel.relid, namespace, name, list(rel.columns), dict(rel.types), rel.pk)
