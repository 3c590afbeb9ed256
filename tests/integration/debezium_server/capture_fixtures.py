"""Regenerate ``tests/fixtures/debezium_server/*`` from a run of the real Debezium Server.

    .venv/bin/python tests/integration/debezium_server/capture_fixtures.py [postgres|mariadb]

Starts a private nats-server (tidelake's CDC stream provisioned), a private PostgreSQL and/or
MariaDB, writes the snapshot rows of ``dbzkit``, starts two Debezium Servers per source (JSON
converter with ``schemas.enable=true`` and ``=false``, each with its own topic prefix), writes
the streaming changes, and stores what the NATS JetStream sink published: ``messages.jsonl``
holds each message's data exactly (one per line; the JSON converter writes no newline),
``envelope.jsonl`` the stream sequence, subject and headers of the same line.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from tidelake.bus.server import EmbeddedNats, nats_server_binary
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.pipeline.debezium_server import (
    DebeziumServer,
    dist_dir,
    java_binary,
    render_properties,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dbzkit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "debezium_server"


def _versions() -> str:
    def first_line(argv: list[str]) -> str:
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        return (res.stdout + res.stderr).strip().splitlines()[0]

    runner = next(dist_dir().glob("debezium-server-*runner.jar")).name
    pg = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))[-1]
    return "\n".join(
        [
            f"- Debezium Server: `{runner}` (Maven Central `io.debezium:debezium-server-dist`)",
            f"- Java: {first_line([str(java_binary()), '-version'])}",
            f"- PostgreSQL: {first_line([str(pg), '--version'])}",
            f"- MariaDB: {first_line(['/usr/sbin/mariadbd', '--version'])}",
            f"- {first_line([str(nats_server_binary()), '--version'])}",
        ]
    )


def _sql_block(statements: list[str]) -> str:
    return "```sql\n" + ";\n".join(s.strip() for s in statements) + ";\n```"


def write_readme(name: str) -> None:
    """The fixture directory's README: what produced it, exactly."""
    source = "postgres" if name.startswith("postgres") else "mariadb"
    schemas = name.endswith("-schemas")
    if source == "postgres":
        schema = [dbzkit.PG_SCHEMA]
        snapshot, streaming = dbzkit.PG_SNAPSHOT_SQL, dbzkit.PG_STREAMING_SQL
        notes = (
            "`%(note1)s` / `%(note2)s` are `dbzkit.long_text(1)` / `long_text(2)`: 6,000 hex"
            " characters, stored out of line (TOAST)."
        )
    else:
        schema = dbzkit.MARIADB_SCHEMA
        snapshot, streaming = dbzkit.MARIADB_SNAPSHOT_SQL, dbzkit.MARIADB_STREAMING_SQL
        notes = "The server runs with `--default-time-zone=+00:00` (tidelake.capture.servers)."
    text = f"""# Debezium Server output: {name}

Real messages published by Debezium Server's `nats-jetstream` sink into tidelake's CDC stream,
captured by `tests/integration/debezium_server/capture_fixtures.py {source}` (regenerate with
that command; values such as LSNs, binlog positions and timestamps change on every run).
Facts drawn from these files: `docs/debezium-server.md` and `../README.md`.

JSON converter: `schemas.enable={str(schemas).lower()}` for key and value (the key is never
published: the sink sends the record value only).

## Files
- `messages.jsonl`: the data of each message, byte for byte, one message a line, in stream order.
- `envelope.jsonl`: the same line's JetStream stream sequence, subject and headers.
- `application.properties`: the properties the server ran with (ports were free ones).

## Versions
{_versions()}

## SQL
Before Debezium Server started (schema, then the snapshot rows):

{_sql_block(schema + snapshot)}

After it logged that streaming started, one statement a transaction (autocommit):

{_sql_block(streaming)}

{notes}
"""
    (FIXTURES / name / "README.md").write_text(text)


def _write(name: str, server: DebeziumServer, nats_url: str, prefix: str) -> int:
    msgs = dbzkit.read_stream(nats_url, prefix)
    out = FIXTURES / name
    out.mkdir(parents=True, exist_ok=True)
    with (out / "messages.jsonl").open("wb") as f:
        for m in msgs:
            if b"\n" in m.data:
                raise AssertionError(f"a message holds a newline: {m.data[:200]!r}")
            f.write(m.data + b"\n")
    with (out / "envelope.jsonl").open("wb") as f:
        for m in msgs:
            f.write(
                orjson.dumps({"seq": m.seq, "subject": m.subject, "headers": m.headers}) + b"\n"
            )
    (out / "application.properties").write_text(render_properties(server.properties))
    write_readme(name)
    return len(msgs)


def _run_pair(
    tmp: Path,
    nats_url: str,
    names_props: list[tuple[str, str, dict[str, Any]]],
    snapshot_done: int,
    streaming: Any,
) -> None:
    servers = []
    for name, _prefix, props in names_props:
        servers.append(DebeziumServer(tmp / name, props).start())
    try:
        for s in servers:
            s.wait_for_log(dbzkit.STREAMING_STARTED, timeout_s=240)
        for _name, prefix, _ in names_props:
            dbzkit.wait_quiet(nats_url, prefix, snapshot_done, quiet_s=3, timeout_s=120)
        want = streaming()
        for (name, prefix, _), s in zip(names_props, servers, strict=True):
            dbzkit.wait_quiet(nats_url, prefix, snapshot_done + want, quiet_s=5, timeout_s=120)
            n = _write(name, s, nats_url, prefix)
            print(f"{name}: {n} messages", flush=True)
    finally:
        for s in servers:
            s.stop()


def postgres(tmp: Path, nats_url: str) -> None:
    pg = PostgresServer(tmp / "pg").start()
    try:
        conn = pg.connect()
        notes = {"note1": dbzkit.long_text(1), "note2": dbzkit.long_text(2)}
        with conn.cursor() as cur:
            cur.execute(dbzkit.PG_SCHEMA)
            for sql in dbzkit.PG_SNAPSHOT_SQL:
                cur.execute(sql, notes)

        def streaming() -> int:
            with conn.cursor() as cur:
                for sql in dbzkit.PG_STREAMING_SQL:
                    cur.execute(sql, notes)
            # rows changed: a key change is two messages (delete + create), no tombstones
            # reach NATS (the sink skips null values)
            return len(dbzkit.PG_STREAMING_SQL) + 2

        pairs = []
        for name, schemas in (("postgres-schemas", True), ("postgres-plain", False)):
            prefix = f"cdc.{name.replace('-', '_')}"
            props = dbzkit.pg_properties(
                pg_port=pg.port,
                nats_url=nats_url,
                prefix=prefix,
                slot=name.replace("-", "_"),
                schemas=schemas,
                http_port=dbzkit.http_port(),
            )
            pairs.append((name, prefix, props))
        _run_pair(tmp, nats_url, pairs, 3 + 5 + 1 + 3, streaming)
    finally:
        pg.remove()


def mariadb(tmp: Path, nats_url: str) -> None:
    db = MariaDBServer(tmp / "mariadb")
    db.start()
    try:
        conn = db.connect()
        with conn.cursor() as cur:
            for sql in dbzkit.MARIADB_SCHEMA + dbzkit.MARIADB_SNAPSHOT_SQL:
                cur.execute(sql)

        def streaming() -> int:
            with conn.cursor() as cur:
                for sql in dbzkit.MARIADB_STREAMING_SQL:
                    cur.execute(sql)
            return len(dbzkit.MARIADB_STREAMING_SQL) + 2

        pairs = []
        for i, (name, schemas) in enumerate((("mariadb-schemas", True), ("mariadb-plain", False))):
            prefix = f"cdc.{name.replace('-', '_')}"
            props = dbzkit.mariadb_properties(
                port=db.port,
                nats_url=nats_url,
                prefix=prefix,
                server_id=5400 + i,
                schemas=schemas,
                http_port=dbzkit.http_port(),
            )
            pairs.append((name, prefix, props))
        # snapshot: 3 + 5 + 3 rows, plus the schema-change messages on the prefix subject
        _run_pair(tmp, nats_url, pairs, 11, streaming)
    finally:
        db.stop()


def main(argv: list[str]) -> None:
    if argv[:1] == ["readme"]:
        for name in argv[1:]:
            write_readme(name)
        return
    which = argv or ["postgres", "mariadb"]
    # kept after the run: the Debezium Server logs are the first thing to read when it fails
    tmp = Path(tempfile.mkdtemp(prefix="tidelake-dbz-"))
    print(f"working directory: {tmp}", flush=True)
    if True:
        with EmbeddedNats(tmp / "nats").start() as nats:
            dbzkit.provision(nats.url)
            if "postgres" in which:
                postgres(tmp, nats.url)
            if "mariadb" in which:
                mariadb(tmp, nats.url)


if __name__ == "__main__":
    main(sys.argv[1:])
