"""PostgreSQL table DDL through the event-trigger DDL log (``capture.ddl_log: true``) on a real
server: DROP, RENAME, SET SCHEMA, CREATE + rows (also in the CREATE's own transaction),
TRUNCATE and a DROP followed by a CREATE of the same name with other columns reach the stream
as DDL events, in commit order with the rows around them, once each; the log's own rows are
never published."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from capturekit import CaptureRun, decoded, stream_messages

from tidelake.bus.server import EmbeddedNats
from tidelake.capture import pg_ddl
from tidelake.capture.pgoutput import parse_lsn
from tidelake.capture.servers import PostgresServer
from tidelake.events import Op

pytestmark = pytest.mark.integration


def _caught_up(server: PostgresServer, run: CaptureRun, timeout_s: float = 60) -> None:
    """Until the saved LSN passes every WAL record inserted so far (see
    test_postgres_capture._caught_up for why the insert position)."""
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        lsn = parse_lsn(cur.fetchone()[0])
    conn.close()
    run.wait_until(lambda s: s["phase"] == "streaming" and int(s["lsn"]) >= lsn, timeout_s)


def test_table_ddl_reaches_the_stream_in_order(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Each table DDL arrives once, as the DDL event the lake applies, between the rows that
    precede and follow it at the source; TRUNCATE (which fires no event trigger) still comes
    from pgoutput; a rename out of ``capture.tables`` is a DROP for the lake; nothing of
    ``tidelake.ddl_log`` (inserts, or the housekeeping's deletes) is published."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE SCHEMA dl; CREATE SCHEMA elsewhere; "
            "CREATE TABLE dl.a (id int PRIMARY KEY, v text); "
            "CREATE TABLE dl.gone (id int PRIMARY KEY, v text); "
            "CREATE TABLE dl.t (id int PRIMARY KEY)"
        )
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["dl.*"],
        capture={"slot": "tl_dl", "publication": "tl_dl", "heartbeat_s": 0.5, "ddl_log": True},
    ).start()  # fmt: skip
    run.wait_until(lambda s: s["phase"] == "streaming", 60)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO dl.a VALUES (1, 'one')")
        cur.execute("BEGIN; ALTER TABLE dl.a RENAME TO a2; INSERT INTO dl.a2 VALUES (2, 'two'); "
                    "COMMIT")  # fmt: skip
        cur.execute("INSERT INTO dl.gone VALUES (1, 'x')")
        cur.execute("DROP TABLE dl.gone")
        # Created and written in one transaction: the trigger puts the table into the
        # capture's publication inside it, so its rows are streamed from the first one.
        cur.execute(
            "BEGIN; CREATE TABLE dl.gone (k text PRIMARY KEY, n bigint, at timestamp(3)); "
            "INSERT INTO dl.gone VALUES ('k1', 7, '2024-05-05 12:00:00.125'); COMMIT"
        )
        cur.execute("INSERT INTO dl.gone VALUES ('k2', 8, NULL)")
        cur.execute("INSERT INTO dl.t VALUES (1)")
        cur.execute("TRUNCATE dl.t")
        # A column added before a rename in one transaction: the rename from the log, the
        # column from the next Relation message, then the row.
        cur.execute(
            "BEGIN; ALTER TABLE dl.t ADD COLUMN note text DEFAULT 'n'; "
            "ALTER TABLE dl.t RENAME TO t2; INSERT INTO dl.t2 VALUES (2, 'x'); COMMIT"
        )
        cur.execute("ALTER TABLE dl.a2 SET SCHEMA elsewhere")
        cur.execute("INSERT INTO elsewhere.a2 VALUES (3, 'not captured')")
        cur.execute("CREATE TABLE elsewhere.other (id int PRIMARY KEY)")
    _caught_up(postgres, run)
    # Housekeeping: confirmed log rows are deleted (at most once a minute: here the first
    # one) and those deletes are not published.
    deadline = time.monotonic() + 20
    with conn.cursor() as cur:
        while True:
            cur.execute("SELECT count(*) FROM tidelake.ddl_log WHERE id = 1")
            if cur.fetchone()[0] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        cur.execute("SELECT count(*) FROM tidelake.ddl_log WHERE id = 1")
        assert 0 == cur.fetchone()[0]
    _caught_up(postgres, run)
    events = decoded(stream_messages(nats.url))
    seen = [
        (e.op, e.table_id, e.ddl if e.op is Op.DDL else (e.key or {}))
        for e in sorted(events, key=lambda e: e.position)
    ]
    assert [
        (Op.INSERT, "dl.a", {"id": "1"}),
        (Op.DDL, "dl.a2", "ALTER TABLE dl.a RENAME TO a2"),
        (Op.INSERT, "dl.a2", {"id": "2"}),
        (Op.INSERT, "dl.gone", {"id": "1"}),
        (Op.DDL, "dl.gone", "DROP TABLE dl.gone"),
        (Op.DDL, "dl.gone",
         "CREATE TABLE dl.gone (k text, n bigint, at timestamp(3) without time zone, "
         "PRIMARY KEY (k))"),
        (Op.INSERT, "dl.gone", {"k": "k1"}),
        (Op.INSERT, "dl.gone", {"k": "k2"}),
        (Op.INSERT, "dl.t", {"id": "1"}),
        (Op.DDL, "dl.t", "TRUNCATE TABLE dl.t"),
        (Op.DDL, "dl.t2", "ALTER TABLE dl.t RENAME TO t2"),
        (Op.DDL, "dl.t2", "ALTER TABLE dl.t2 ADD COLUMN note text DEFAULT 'n'::text"),
        (Op.INSERT, "dl.t2", {"id": "2"}),
        (Op.DDL, "dl.a2", "DROP TABLE dl.a2"),
    ] == seen  # fmt: skip
    assert [e.position for e in events] == sorted(e.position for e in events)
    assert not [e for e in events if e.database == "tidelake"]
    run.process.stop()
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'tidelake_ddl_%%'")
        assert 2 == cur.fetchone()[0]
        # The removal docs/capture.md shows leaves nothing of the DDL log behind.
        cur.execute(pg_ddl.UNINSTALL_SQL)
        cur.execute(
            "SELECT (SELECT count(*) FROM pg_event_trigger) + (SELECT count(*) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'tidelake') + "
            "(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'tidelake')"
        )
        assert 0 == cur.fetchone()[0]
    conn.close()


def test_a_superuser_installs_once_then_every_role_is_logged_and_never_failed(
    postgres: PostgresServer,
) -> None:
    """Installing needs a superuser (CREATE EVENT TRIGGER): a plain role is refused with the
    reason; once installed, the plain role finds it and needs nothing more. DDL run by any role
    is logged (SECURITY DEFINER), and a broken log warns instead of failing the user's DDL."""
    import psycopg2

    admin = postgres.connect()
    with admin.cursor() as cur:
        cur.execute(pg_ddl.UNINSTALL_SQL)
        cur.execute("CREATE ROLE tl_app LOGIN; CREATE SCHEMA priv AUTHORIZATION tl_app")
    app = psycopg2.connect(host=postgres.host, port=postgres.port, user="tl_app",
                           dbname="postgres")  # fmt: skip
    app.autocommit = True
    try:
        with pytest.raises(pg_ddl.DdlLogError, match="superuser"):
            pg_ddl.install(app)
        assert pg_ddl.install(admin) is True
        assert pg_ddl.install(app) is False  # found at this version: nothing to do
        with admin.cursor() as cur:  # the grants docs/capture.md names for later runs
            cur.execute(
                "GRANT USAGE ON SCHEMA tidelake TO tl_app; "
                "GRANT SELECT, DELETE ON tidelake.ddl_log TO tl_app; "
                "GRANT SELECT, INSERT, UPDATE, DELETE ON tidelake.ddl_publications TO tl_app"
            )
        pg_ddl.follow_publication(app, "tl_priv", ["priv.*"])
        pg_ddl.follow_publication(app, "tl_priv", ["priv.*", "other.*"])
        pg_ddl.DdlLog().housekeeping(lambda q, p: app.cursor().execute(q, p))
        with app.cursor() as cur:
            cur.execute("DELETE FROM tidelake.ddl_log WHERE id <= 0")
        with app.cursor() as cur:
            cur.execute("CREATE TABLE priv.a (id int PRIMARY KEY)")
            cur.execute("DROP TABLE priv.a")
        with app.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
            # The SECURITY DEFINER helper that alters publications is the triggers' only.
            cur.execute("SELECT tidelake.ddl_publish(0, 'priv', 'x', '[\"id\"]')")
        with admin.cursor() as cur:
            cur.execute("ALTER TABLE tidelake.ddl_names RENAME TO ddl_names_away")
        with app.cursor() as cur:
            cur.execute("CREATE TABLE priv.b (id int PRIMARY KEY)")  # the log fails: no error
            assert any("tidelake ddl log" in n for n in app.notices)
        with admin.cursor() as cur:
            cur.execute("ALTER TABLE tidelake.ddl_names_away RENAME TO ddl_names")
            cur.execute("SELECT action, table_name FROM tidelake.ddl_log ORDER BY id")
            assert [("create", "a"), ("drop", "a")] == cur.fetchall()
            cur.execute("SELECT to_regclass('priv.b') IS NOT NULL")
            assert cur.fetchone()[0]
    finally:
        app.close()
        with admin.cursor() as cur:
            cur.execute(pg_ddl.UNINSTALL_SQL)
            cur.execute("DROP OWNED BY tl_app; DROP ROLE tl_app")
        admin.close()


def _log_membership(conn: Any, publication: str) -> int:
    """The ``pg_publication_rel`` row that puts the DDL log into ``publication``."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT r.oid FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid "
            "WHERE p.pubname = %s AND r.prrelid = 'tidelake.ddl_log'::regclass",
            (publication,),
        )
        return int(cur.fetchone()[0])


def test_ddl_while_the_capture_is_down_arrives_even_with_its_log_rows_deleted(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """Log rows are read from the WAL, not from the table: a DROP and a RENAME made while the
    capture is stopped, whose log rows were then deleted (another capture's housekeeping),
    still reach the stream when it resumes from its saved position."""
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE SCHEMA down; CREATE TABLE down.a (id int PRIMARY KEY); "
            "CREATE TABLE down.b (id int PRIMARY KEY); INSERT INTO down.a VALUES (1)"
        )
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["down.*"],
        capture={"slot": "tl_down", "publication": "tl_down", "heartbeat_s": 0.5,
                 "ddl_log": True},
    ).start()  # fmt: skip
    _caught_up(postgres, run)
    run.process.stop()
    membership = _log_membership(conn, "tl_down")
    with conn.cursor() as cur:
        cur.execute("DROP TABLE down.a")
        cur.execute("ALTER TABLE down.b RENAME TO c")
        cur.execute("DELETE FROM tidelake.ddl_log")
    run.start()
    _caught_up(postgres, run)
    run.process.stop()
    # The restart never took the log out of the publication (a DDL in that moment would be
    # lost): the same pg_publication_rel row holds it.
    assert membership == _log_membership(conn, "tl_down")
    ddl = [e.ddl for e in decoded(stream_messages(nats.url)) if e.op is Op.DDL]
    assert ["DROP TABLE down.a", "ALTER TABLE down.b RENAME TO c"] == ddl
    with conn.cursor() as cur:
        cur.execute(pg_ddl.UNINSTALL_SQL)
    conn.close()


def test_partitions_are_not_tables_of_their_own_in_the_log(postgres: PostgresServer) -> None:
    """A partitioned table is logged as one table; creating, renaming and dropping one of its
    partitions logs nothing (the capture takes the partitioned table, not its partitions)."""
    conn = postgres.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(pg_ddl.UNINSTALL_SQL)
            cur.execute("CREATE SCHEMA part")
            pg_ddl.install(conn)
            cur.execute(
                "CREATE TABLE part.p (id int, d date, PRIMARY KEY (id, d)) PARTITION BY RANGE (d); "
                "CREATE TABLE part.p1 PARTITION OF part.p "
                "FOR VALUES FROM ('2024-01-01') TO ('2025-01-01'); "
                "ALTER TABLE part.p1 RENAME TO p1x; DROP TABLE part.p1x; DROP TABLE part.p"
            )
            cur.execute("SELECT action, table_name FROM tidelake.ddl_log ORDER BY id")
            assert [("create", "p"), ("drop", "p")] == cur.fetchall()
    finally:
        with conn.cursor() as cur:
            cur.execute(pg_ddl.UNINSTALL_SQL)
        conn.close()
