"""PostgreSQL capture never changes what the source accepts, and captures keyless tables only
as configured (docs/capture.md, "Tables without a primary key" and "What the capture changes
on the source").

PostgreSQL refuses UPDATE and DELETE on a table without a replica identity once a publication
that publishes them includes it ("cannot update table ... because it does not have a replica
identity and publishes updates": ``CheckCmdReplicaIdentity``, src/backend/executor/
execReplication.c); this test runs that statement on every table of the source, with the
capture running, tables created after it started included.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from capturekit import CaptureRun, decoded, fold, row_differences, stream_messages

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.pgoutput import parse_lsn
from tidelake.capture.servers import PostgresServer

pytestmark = pytest.mark.integration

SETUP = [
    "CREATE SCHEMA kl",
    "CREATE SCHEMA other",
    "CREATE TABLE kl.keyed (id int PRIMARY KEY, v text)",
    # Keyless, identity DEFAULT (= none): skipped, and kept out of the publication.
    "CREATE TABLE kl.nokey (a int, b text)",
    # Keyless with a configured key; the user set REPLICA IDENTITY FULL, as the docs say.
    "CREATE TABLE kl.cfg (a int NOT NULL, b text NOT NULL, n int)",
    "ALTER TABLE kl.cfg REPLICA IDENTITY FULL",
    # Keyless, full-row identity (keyless: full_row), REPLICA IDENTITY FULL set by the user.
    "CREATE TABLE kl.whole (a int NOT NULL, b text NOT NULL)",
    "ALTER TABLE kl.whole REPLICA IDENTITY FULL",
    # Not matched by capture.tables at all.
    "CREATE TABLE other.excluded (a int, b text)",
    "INSERT INTO kl.keyed VALUES (1, 'x'), (2, 'y')",
    "INSERT INTO kl.nokey VALUES (1, 'x'), (2, 'y')",
    "INSERT INTO kl.cfg VALUES (1, 'x', 0), (2, 'y', 0), (3, 'z', 0)",
    "INSERT INTO kl.whole VALUES (1, 'x'), (2, 'y'), (2, 'y')",
    "INSERT INTO other.excluded VALUES (1, 'x')",
]


def _sql(server: PostgresServer, *statements: str) -> list[Any]:
    conn = server.connect()
    conn.autocommit = True
    out: list[Any] = []
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                out = list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()
    return out


def _touch_every_table(server: PostgresServer, expected: int) -> None:
    """An UPDATE and a DELETE on every table of the source: raises if PostgreSQL refuses."""
    tables = [
        f"{s}.{t}"
        for s, t in _sql(
            server,
            "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('kl', 'other') "
            "ORDER BY 1, 2",
        )
    ]
    assert len(tables) == expected
    for table in tables:
        column = "v" if table == "kl.keyed" else "b"
        _sql(
            server,
            f"UPDATE {table} SET {column} = {column} || '!' WHERE false",
            f"UPDATE {table} SET {column} = {column} || '.'",
            f"DELETE FROM {table} WHERE false",
        )


def _published(server: PostgresServer, publication: str) -> set[str]:
    rows = _sql(
        server,
        f"SELECT schemaname || '.' || tablename FROM pg_publication_tables "
        f"WHERE pubname = '{publication}'",
    )
    return {str(r[0]) for r in rows}


def _heartbeat_skipped(run: CaptureRun, timeout_s: float = 30) -> set[str]:
    """The skipped tables of the capture's heartbeat, once it names both keyless tables."""
    path = Path(run.config.stage_root) / "_tidelake" / "capture.heartbeat.json"
    deadline = time.monotonic() + timeout_s
    skipped: set[str] = set()
    while time.monotonic() < deadline:
        if path.exists():
            skipped = set(orjson.loads(path.read_bytes()).get("skipped") or {})
            if len(skipped) >= 2:
                break
        time.sleep(0.5)
    return skipped


def _caught_up(server: PostgresServer, run: CaptureRun) -> None:
    lsn = parse_lsn(_sql(server, "SELECT pg_current_wal_insert_lsn()::text")[0][0])
    run.wait_until(lambda s: s["phase"] == "streaming" and int(s["lsn"]) >= lsn, 60)


def _source_rows(server: PostgresServer, table: str, key: list[str]) -> dict[Any, Any]:
    rows = _sql(server, f"SELECT row_to_json(t)::text FROM {table} t")
    out = {}
    for (text,) in rows:
        row = {k: None if v is None else str(v) for k, v in orjson.loads(text).items()}
        out[tuple(row[c] for c in key)] = row
    return out


def test_source_keeps_accepting_update_and_delete_and_keyless_tables_follow_config(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """With the capture running: UPDATE and DELETE work on every table (keyed, keyless,
    excluded, created after the capture started); the publication holds exactly the captured
    tables; skipped tables are in the saved state and the heartbeat with their reason; the
    configured-key table (key column updated, rows deleted) and the full-row table fold from
    the stream to the source (identical rows collapse into one, as documented)."""
    _sql(postgres, *SETUP)
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["kl.*"],
        capture={"slot": "tl_kl", "publication": "tl_kl", "heartbeat_s": 0.5,
                 "keys": {"kl.cfg": ["a", "b"]}, "keyless": "full_row"},
    ).start()  # fmt: skip
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 90)
        assert _published(postgres, "tl_kl") == {"kl.keyed", "kl.cfg", "kl.whole"}
        _touch_every_table(postgres, 5)
        # Tables created while the capture streams: a keyed one joins the publication, a
        # keyless one (no identity) stays out and is reported as skipped.
        _sql(
            postgres,
            "CREATE TABLE kl.late_keyed (id int PRIMARY KEY, b text)",
            "CREATE TABLE kl.late_nokey (a int, b text)",
            "INSERT INTO kl.late_nokey VALUES (1, 'x')",
        )
        deadline = time.monotonic() + 30
        while "kl.late_keyed" not in _published(postgres, "tl_kl"):
            assert time.monotonic() < deadline, run.process.log_tail(40)
            time.sleep(0.2)
        _sql(postgres, "INSERT INTO kl.late_keyed VALUES (1, 'x'), (2, 'y')")
        _touch_every_table(postgres, 7)
        assert _published(postgres, "tl_kl") == {"kl.keyed", "kl.cfg", "kl.whole", "kl.late_keyed"}
        # Changes to the configured-key table, the key column included, and to the full-row one.
        _sql(
            postgres,
            "UPDATE kl.cfg SET n = n + 5 WHERE a = 1",
            "UPDATE kl.cfg SET a = 10 WHERE a = 2",
            "DELETE FROM kl.cfg WHERE a = 3",
            "INSERT INTO kl.cfg VALUES (4, 'w', 1)",
            "UPDATE kl.whole SET b = 'changed' WHERE a = 1",
            "DELETE FROM kl.whole WHERE a = 2",
            "INSERT INTO kl.whole VALUES (7, 'q'), (8, 'd'), (8, 'd')",
        )
        _caught_up(postgres, run)
        state = run.position()
        assert state is not None
        skipped = state["skipped"]
        assert set(skipped) == {"kl.nokey", "kl.late_nokey"}
        assert "REPLICA IDENTITY FULL" in skipped["kl.nokey"]
        assert _heartbeat_skipped(run) == {"kl.nokey", "kl.late_nokey"}
        events = decoded(stream_messages(nats.url))
        tables = {e.table_id for e in events}
        assert "kl.nokey" not in tables
        assert "kl.late_nokey" not in tables
        for table, key in (("kl.cfg", ["a", "b"]), ("kl.whole", ["a", "b"]),
                           ("kl.keyed", ["id"]), ("kl.late_keyed", ["id"])):  # fmt: skip
            source = _source_rows(postgres, table, key)
            assert "" == row_differences(source, fold(events, table)), table
        # Identical rows are one lake row (docs/capture.md): 4 source rows, 3 distinct.
        assert len(_sql(postgres, "SELECT * FROM kl.whole")) == 4
        assert len(fold(events, "kl.whole")) == 3
    finally:
        run.process.stop()


def test_a_publication_the_user_made_is_used_as_it_is(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """A publication the capture did not create is never altered: its captured tables are
    streamed, a matched table outside it and a keyless table in it are reported as skipped
    with the reason (the keyless one's UPDATEs were refused by PostgreSQL before tidelake
    started: the user's publication, not the capture, did that)."""
    _sql(
        postgres,
        "CREATE SCHEMA up",
        "CREATE TABLE up.inpub (id int PRIMARY KEY, v text)",
        "CREATE TABLE up.outside (id int PRIMARY KEY, v text)",
        "CREATE TABLE up.nokey (a int, b text)",
        "CREATE PUBLICATION users_pub FOR TABLE up.inpub, up.nokey",
    )
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, ["up.*"],
        capture={"slot": "tl_up", "publication": "users_pub", "heartbeat_s": 0.5},
    ).start()  # fmt: skip
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        _sql(
            postgres,
            "INSERT INTO up.inpub VALUES (1, 'x')",
            "INSERT INTO up.outside VALUES (1, 'y')",
        )
        time.sleep(2.5)  # one publication sync at least
        _caught_up(postgres, run)
        assert _published(postgres, "users_pub") == {"up.inpub", "up.nokey"}
        state = run.position()
        assert state is not None
        assert set(state["skipped"]) == {"up.outside", "up.nokey"}
        assert "ALTER PUBLICATION users_pub ADD TABLE" in state["skipped"]["up.outside"]
        assert "no primary key" in state["skipped"]["up.nokey"]
        tables = {e.table_id for e in decoded(stream_messages(nats.url))}
        assert tables == {"up.inpub"}
    finally:
        run.process.stop()


def test_the_capture_runs_as_a_role_that_is_not_superuser(
    postgres: PostgresServer, nats: EmbeddedNats, tmp_path: Path
) -> None:
    """The privileges docs/capture.md lists are enough: LOGIN REPLICATION, CREATE on the
    database, owning the captured tables (ALTER PUBLICATION ... ADD TABLE needs it) and SELECT;
    a matched table the role does not own is skipped with PostgreSQL's reason, and its
    changes keep working."""
    _sql(
        postgres,
        "CREATE ROLE tl_capture LOGIN REPLICATION",
        "GRANT CREATE ON DATABASE postgres TO tl_capture",
        "CREATE SCHEMA np",
        "GRANT USAGE ON SCHEMA np TO tl_capture",
        "CREATE TABLE np.mine (id int PRIMARY KEY, v text)",
        "ALTER TABLE np.mine OWNER TO tl_capture",
        "CREATE TABLE np.theirs (id int PRIMARY KEY, v text)",
        "GRANT SELECT ON np.theirs TO tl_capture",
        "INSERT INTO np.mine VALUES (1, 'a')",
        "INSERT INTO np.theirs VALUES (1, 'b')",
    )
    dsn = postgres.dsn.replace(f"//{postgres.user}@", "//tl_capture@")
    run = CaptureRun(
        tmp_path / "capture", nats.url, dsn, ["np.*"],
        capture={"slot": "tl_np", "publication": "tl_np", "heartbeat_s": 0.5},
    ).start()  # fmt: skip
    try:
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
        _sql(
            postgres,
            "UPDATE np.mine SET v = 'a2'",
            "UPDATE np.theirs SET v = 'b2'",
            "DELETE FROM np.theirs",
        )
        _caught_up(postgres, run)
        assert _published(postgres, "tl_np") == {"np.mine"}
        state = run.position()
        assert state is not None
        assert "must be owner of table theirs" in state["skipped"]["np.theirs"]
        events = decoded(stream_messages(nats.url))
        assert {e.table_id for e in events} == {"np.mine"}
        assert "" == row_differences(
            _source_rows(postgres, "np.mine", ["id"]), fold(events, "np.mine")
        )
    finally:
        run.process.stop()
