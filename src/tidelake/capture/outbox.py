"""Transactional outbox for PostgreSQL sources (``capture.outbox: true``).

Instead of every captured table, the capture streams one table, ``tidelake.outbox``. Rows get
there in the same transaction as the business change: written by the application itself (the
classic outbox pattern) or, for every table ``capture.tables`` names, by an ``AFTER INSERT OR
UPDATE OR DELETE`` row trigger that tidelake installs. Each outbox row is one event:
``aggregate_type`` (the trigger uses the table name), ``aggregate_id`` (the primary-key values
joined by ``:``), ``event_type`` (INSERT/UPDATE/DELETE) and ``payload`` (the row as jsonb).

Routing: an outbox INSERT is published to ``cdc.outbox.<aggregate_type>`` as a canal-json
INSERT of table ``outbox.<aggregate_type>`` keyed by the outbox ``id`` — one append-only event
log per aggregate type in the lake. Deleting old outbox rows (housekeeping) is not routed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from tidelake.capture import pgoutput
from tidelake.capture.canal import CanalEncoder, Outgoing
from tidelake.capture.tables import TableFilter
from tidelake.events import Position

if TYPE_CHECKING:
    from tidelake.capture.pgoutput import RelationInfo

log = structlog.get_logger(__name__)

SCHEMA = "tidelake"
TABLE = "outbox"
ROUTED_DATABASE = "outbox"
TRIGGER = "tidelake_outbox"

_INSTALL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.{TABLE} (
    id bigserial PRIMARY KEY,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    payload jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION {SCHEMA}.outbox_capture() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    image jsonb;
    key_id text;
BEGIN
    IF TG_OP = 'DELETE' THEN image := to_jsonb(OLD); ELSE image := to_jsonb(NEW); END IF;
    SELECT string_agg(image ->> k, ':') INTO key_id FROM unnest(TG_ARGV) AS k;
    INSERT INTO {SCHEMA}.{TABLE} (aggregate_type, aggregate_id, event_type, payload)
    VALUES (TG_TABLE_NAME, coalesce(key_id, ''), TG_OP, image);
    RETURN NULL;
END $$;
"""


def install_outbox(conn: Any, tables: TableFilter) -> list[str]:
    """Create the outbox table, its trigger function and a trigger on each captured table
    (idempotent); returns the tables that got a trigger."""
    with conn.cursor() as cur:
        cur.execute(_INSTALL)
        cur.execute(
            "SELECT c.oid, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname NOT IN "
            "('pg_catalog', 'information_schema', %s)",
            (SCHEMA,),
        )
        candidates = [(int(o), str(n), str(t)) for o, n, t in cur.fetchall()]
        installed = []
        for relid, namespace, table in candidates:
            if not tables(namespace, table):
                continue
            cur.execute(
                "SELECT a.attname FROM pg_index i JOIN LATERAL unnest(i.indkey) WITH ORDINALITY "
                "AS k(attnum, n) ON true JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                "a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
                (relid,),
            )
            keys = [str(r[0]) for r in cur.fetchall()]
            target = f'"{namespace}"."{table}"'
            args = ", ".join("'" + k.replace("'", "''") + "'" for k in keys)
            cur.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {target}")
            cur.execute(
                f"CREATE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OR DELETE ON {target} "
                f"FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.outbox_capture({args})"
            )
            installed.append(f"{namespace}.{table}")
    log.info("outbox installed", tables=installed)
    return installed


def route_outbox(
    encoder: CanalEncoder,
    rel: RelationInfo,
    message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
    position: Position,
    commit_ms: int,
) -> Outgoing | None:
    """The routed event of an outbox INSERT; None for anything else."""
    if (rel.namespace, rel.name) != (SCHEMA, TABLE) or not isinstance(message, pgoutput.Insert):
        return None
    names = [c[0] for c in rel.columns]
    data = dict(zip(names, message.new, strict=True))
    aggregate = str(data.get("aggregate_type") or "unknown")
    return encoder.row(
        database=ROUTED_DATABASE,
        table=aggregate,
        pk=("id",),
        kind="INSERT",
        data={k: v for k, v in data.items() if isinstance(v, str) or v is None},
        old=None,
        types=rel.types,
        position=position,
        commit_ts_ms=commit_ms,
    )
