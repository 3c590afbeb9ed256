"""Debezium Server integration helpers: the source schemas, the properties, the stream read back.

The SQL here is what produced ``tests/fixtures/debezium_server/*`` (``capture_fixtures.py``)
and what the end-to-end test writes, so a fixture and the test speak of the same tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelake.bus.connection import connect
from tidelake.bus.provision import provision as provision_bus
from tidelake.bus.scan import scan_stream
from tidelake.bus.server import free_port
from tidelake.config import load_config
from tidelake.pipeline.debezium_server import DebeziumServer

#: What io.debezium.pipeline.ChangeEventSourceCoordinator logs once the snapshot is done
#: and the streaming source starts (seen in both the PostgreSQL and the MariaDB runs).
STREAMING_STARTED = "Starting streaming"


def long_text(seed: int, size: int = 6000) -> str:
    """Text that PostgreSQL cannot compress below its TOAST threshold (hex digests)."""
    out: list[str] = []
    n = 0
    while sum(len(s) for s in out) < size:
        out.append(hashlib.sha256(f"{seed}:{n}".encode()).hexdigest())
        n += 1
    return "".join(out)[:size]


# -- PostgreSQL --------------------------------------------------------------------------

PG_SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE public.all_types (
  id integer PRIMARY KEY,
  c_smallint smallint, c_integer integer, c_bigint bigint,
  c_numeric numeric(12,2), c_numeric_free numeric, c_real real, c_double double precision,
  c_boolean boolean, c_char char(5), c_varchar varchar(40), c_text text, c_bytea bytea,
  c_date date, c_time time, c_timetz timetz, c_timestamp3 timestamp(3), c_timestamp timestamp,
  c_timestamptz timestamptz, c_interval interval, c_uuid uuid, c_json json, c_jsonb jsonb,
  c_int_array integer[], c_text_array text[], c_inet inet, c_mood mood, c_money money
);
CREATE TABLE public.customers (id integer PRIMARY KEY, name text NOT NULL, balance numeric(12,2));
CREATE TABLE public.toasted (id integer PRIMARY KEY, n integer, note text);
ALTER TABLE public.toasted REPLICA IDENTITY DEFAULT;
CREATE TABLE public.composite (a integer, b varchar(10), v integer, PRIMARY KEY (b, a));
"""

PG_ALL_TYPES_COLUMNS = (
    "id, c_smallint, c_integer, c_bigint, c_numeric, c_numeric_free, c_real, c_double, c_boolean,"
    " c_char, c_varchar, c_text, c_bytea, c_date, c_time, c_timetz, c_timestamp3, c_timestamp,"
    " c_timestamptz, c_interval, c_uuid, c_json, c_jsonb, c_int_array, c_text_array, c_inet,"
    " c_mood, c_money"
)

PG_ALL_TYPES_ROWS = [
    f"INSERT INTO public.all_types ({PG_ALL_TYPES_COLUMNS}) VALUES (1, -32768, -2147483648,"
    " -9223372036854775808, -1234567890.12, 12345678901234567890.123456789012, 3.14159,"
    " 2.718281828459045, true, 'ab', 'héllo wörld', 'text with ''quotes''', '\\x00ff10',"
    " '2024-02-29', '13:45:56.123456', '13:45:56.5+02', '2024-02-29 13:45:56.789',"
    " '2024-02-29 13:45:56.123456', '2024-02-29 13:45:56.123456+02', '1 year 2 mons 3 days"
    " 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2, {\"x\": null}]}',"
    " '{\"b\": 2, \"a\": 1}', '{1,2,3}', '{\"x\",\"y z\",NULL}', '192.168.1.5/24', 'happy',"
    " 1234.56)",
    "INSERT INTO public.all_types (id) VALUES (2)",
    f"INSERT INTO public.all_types ({PG_ALL_TYPES_COLUMNS}) VALUES (3, 32767, 2147483647,"
    " 9223372036854775807, 9999999999.99, -0.000000000000000000001, -1.5e-10, 1e300, false,"
    " 'abcde', '', '', '\\x', '1970-01-01', '00:00:00', '23:59:59.999999-05',"
    " '1969-12-31 23:59:59.999', '0001-01-01 00:00:00', '1970-01-01 00:00:00+00',"
    " '-1 days -00:00:01', '00000000-0000-0000-0000-000000000000', '[]', '{}', '{}', '{}',"
    " '::1', 'sad', -0.01)",
]

PG_SNAPSHOT_SQL = [
    *PG_ALL_TYPES_ROWS,
    "INSERT INTO public.customers SELECT g, 'customer ' || g, g * 1.25"
    " FROM generate_series(1, 5) g",
    "INSERT INTO public.toasted VALUES (1, 0, %(note1)s)",
    "INSERT INTO public.composite VALUES (1, 'x', 10), (2, 'x', 20), (1, 'y', 30)",
]

PG_STREAMING_SQL = [
    # insert, update, delete of an all-types row (the update changes every column)
    f"INSERT INTO public.all_types ({PG_ALL_TYPES_COLUMNS}) SELECT 4, c_smallint, c_integer,"
    " c_bigint, c_numeric, c_numeric_free, c_real, c_double, c_boolean, c_char, c_varchar,"
    " c_text, c_bytea, c_date, c_time, c_timetz, c_timestamp3, c_timestamp, c_timestamptz,"
    " c_interval, c_uuid, c_json, c_jsonb, c_int_array, c_text_array, c_inet, c_mood, c_money"
    " FROM public.all_types WHERE id = 1",
    "UPDATE public.all_types SET c_numeric = 0.07, c_numeric_free = 1e-30, c_real = 'NaN',"
    " c_double = '-Infinity', c_text = 'updated', c_mood = 'ok' WHERE id = 4",
    "DELETE FROM public.all_types WHERE id = 3",
    "INSERT INTO public.customers VALUES (6, 'six', 6.60)",
    "UPDATE public.customers SET balance = 99.99, name = 'two' WHERE id = 2",
    "DELETE FROM public.customers WHERE id = 3",
    # a primary-key change: Debezium emits a delete of the old key and a create of the new one
    "UPDATE public.customers SET id = 105 WHERE id = 5",
    # the TOASTed column is not touched: REPLICA IDENTITY DEFAULT sends no value for it
    "UPDATE public.toasted SET n = n + 1 WHERE id = 1",
    "INSERT INTO public.toasted VALUES (2, 0, %(note2)s)",
    "UPDATE public.toasted SET n = 7 WHERE id = 2",
    "UPDATE public.toasted SET note = 'short now' WHERE id = 2",
    "DELETE FROM public.toasted WHERE id = 1",
    "UPDATE public.composite SET v = 11 WHERE a = 1 AND b = 'x'",
    "UPDATE public.composite SET b = 'z' WHERE a = 2 AND b = 'x'",
    "DELETE FROM public.composite WHERE a = 1 AND b = 'y'",
]


def pg_properties(
    *, pg_port: int, nats_url: str, prefix: str, slot: str, schemas: bool, http_port: int
) -> dict[str, object]:
    """Debezium Server properties: PostgreSQL (pgoutput) → NATS JetStream, JsonConverter."""
    return {
        "debezium.sink.type": "nats-jetstream",
        "debezium.sink.nats-jetstream.url": nats_url,
        # tidelake provisions its CDC stream (subjects cdc.>); the sink must not make another
        "debezium.sink.nats-jetstream.create-stream": False,
        "debezium.source.connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "debezium.source.offset.storage.file.filename": "data/offsets.dat",
        "debezium.source.offset.flush.interval.ms": 0,
        "debezium.source.database.hostname": "127.0.0.1",
        "debezium.source.database.port": pg_port,
        "debezium.source.database.user": "postgres",
        "debezium.source.database.password": "postgres",
        "debezium.source.database.dbname": "postgres",
        "debezium.source.topic.prefix": prefix,
        "debezium.source.plugin.name": "pgoutput",
        "debezium.source.slot.name": slot,
        "debezium.source.publication.name": f"{slot}_pub",
        "debezium.source.publication.autocreate.mode": "all_tables",
        "debezium.source.schema.include.list": "public",
        "debezium.format.value": "json",
        "debezium.format.key": "json",
        "debezium.format.value.schemas.enable": schemas,
        "debezium.format.key.schemas.enable": schemas,
        "quarkus.http.port": http_port,
        "quarkus.log.console.json": False,
    }


# -- MariaDB -----------------------------------------------------------------------------

MARIADB_SCHEMA = [
    "CREATE DATABASE shop",
    "CREATE TABLE shop.all_types (id INT PRIMARY KEY, c_tinyint TINYINT, c_bool TINYINT(1),"
    " c_smallint SMALLINT, c_mediumint MEDIUMINT, c_int INT, c_int_u INT UNSIGNED, c_bigint BIGINT,"
    " c_bigint_u BIGINT UNSIGNED, c_dec DECIMAL(12,2), c_dec_wide DECIMAL(65,30), c_float FLOAT,"
    " c_double DOUBLE, c_bit1 BIT(1), c_bit12 BIT(12), c_char CHAR(5), c_varchar VARCHAR(40),"
    " c_text TEXT, c_binary BINARY(4), c_varbinary VARBINARY(16), c_blob BLOB, c_date DATE,"
    " c_datetime DATETIME(6), c_datetime0 DATETIME, c_timestamp TIMESTAMP(3) NULL DEFAULT NULL,"
    " c_time TIME(6), c_year YEAR, c_enum ENUM('small','medium','large'), c_set SET('a','b','c'),"
    " c_json JSON)",
    "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL,"
    " balance DECIMAL(12,2))",
    "CREATE TABLE shop.composite (a INT, b VARCHAR(10), v INT, PRIMARY KEY (b, a))",
]

MARIADB_ALL_TYPES_ROWS = [
    "INSERT INTO shop.all_types VALUES (1, -128, 1, -32768, -8388608, -2147483648, 4294967295,"
    " -9223372036854775808, 18446744073709551615, -1234567890.12,"
    " 12345678901234567890123456789012345.123456789012345678901234567890, 3.14159,"
    " 2.718281828459045, b'1', b'101010101010', 'ab', 'héllo wörld', 'text with ''quotes''',"
    " X'00FF10', X'00FF', X'DEADBEEF', '2024-02-29', '2024-02-29 13:45:56.123456',"
    " '2024-02-29 13:45:56', '2024-02-29 13:45:56.789', '-838:59:59.000000', 2024, 'medium',"
    " 'a,c', '{\"k\": [1, 2, {\"x\": null}]}')",
    "INSERT INTO shop.all_types (id) VALUES (2)",
    "INSERT INTO shop.all_types VALUES (3, 127, 0, 32767, 8388607, 2147483647, 0,"
    " 9223372036854775807, 0, 9999999999.99, -0.000000000000000000000000000001, -1.5e-10, 1e300,"
    " b'0', b'0', 'abcde', '', '', X'', X'', X'', '1000-01-01', '9999-12-31 23:59:59.999999',"
    " '1970-01-01 00:00:00', '1970-01-01 00:00:01.000', '00:00:00.000001', 1901, 'small', '',"
    " '[]')",
]

MARIADB_SNAPSHOT_SQL = [
    *MARIADB_ALL_TYPES_ROWS,
    "INSERT INTO shop.customers VALUES (1, 'c1', 1.25), (2, 'c2', 2.50), (3, 'c3', 3.75),"
    " (4, 'c4', 5.00), (5, 'c5', 6.25)",
    "INSERT INTO shop.composite VALUES (1, 'x', 10), (2, 'x', 20), (1, 'y', 30)",
]

MARIADB_STREAMING_SQL = [
    "INSERT INTO shop.all_types SELECT 4, c_tinyint, c_bool, c_smallint, c_mediumint, c_int,"
    " c_int_u, c_bigint, c_bigint_u, c_dec, c_dec_wide, c_float, c_double, c_bit1, c_bit12,"
    " c_char, c_varchar, c_text, c_binary, c_varbinary, c_blob, c_date, c_datetime, c_datetime0,"
    " c_timestamp, c_time, c_year, c_enum, c_set, c_json FROM shop.all_types WHERE id = 1",
    "UPDATE shop.all_types SET c_dec = 0.07, c_text = 'updated', c_enum = 'large',"
    " c_set = 'a,b,c', c_bit12 = b'1' WHERE id = 4",
    "DELETE FROM shop.all_types WHERE id = 3",
    "INSERT INTO shop.customers VALUES (6, 'six', 6.60)",
    "UPDATE shop.customers SET balance = 99.99, name = 'two' WHERE id = 2",
    "DELETE FROM shop.customers WHERE id = 3",
    "UPDATE shop.customers SET id = 105 WHERE id = 5",
    "UPDATE shop.composite SET v = 11 WHERE a = 1 AND b = 'x'",
    "UPDATE shop.composite SET b = 'z' WHERE a = 2 AND b = 'x'",
    "DELETE FROM shop.composite WHERE a = 1 AND b = 'y'",
]


def mariadb_properties(
    *,
    port: int,
    nats_url: str,
    prefix: str,
    server_id: int,
    schemas: bool,
    http_port: int,
    user: str = "tidelake",
    password: str = "tidelake",
) -> dict[str, object]:
    """Debezium Server properties: MariaDB (Debezium's MariaDB connector) → NATS JetStream."""
    return {
        "debezium.sink.type": "nats-jetstream",
        "debezium.sink.nats-jetstream.url": nats_url,
        "debezium.sink.nats-jetstream.create-stream": False,
        "debezium.source.connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "debezium.source.offset.storage.file.filename": "data/offsets.dat",
        "debezium.source.offset.flush.interval.ms": 0,
        "debezium.source.schema.history.internal": (
            "io.debezium.storage.file.history.FileSchemaHistory"
        ),
        "debezium.source.schema.history.internal.file.filename": "data/schema_history.dat",
        "debezium.source.database.hostname": "127.0.0.1",
        "debezium.source.database.port": port,
        "debezium.source.database.user": user,
        "debezium.source.database.password": password,
        "debezium.source.database.server.id": server_id,
        "debezium.source.topic.prefix": prefix,
        "debezium.source.database.include.list": "shop",
        "debezium.format.value": "json",
        "debezium.format.key": "json",
        "debezium.format.value.schemas.enable": schemas,
        "debezium.format.key.schemas.enable": schemas,
        "quarkus.http.port": http_port,
        "quarkus.log.console.json": False,
    }


# -- the bus -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamMessage:
    """One message of the CDC stream as JetStream stores it."""

    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


def provision(url: str) -> None:
    """Create tidelake's CDC and DLQ streams (the sink publishes into the CDC stream)."""
    asyncio.run(provision_bus(load_config(None, environ={}).bus, url))


async def _read(url: str) -> list[StreamMessage]:
    cfg = load_config(None, environ={})
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(cfg.bus.stream.name)
        total = int(info.state.messages)
        if total == 0:
            return []
        msgs = await scan_stream(js, "cdc.>", total)
        return [
            StreamMessage(
                int(m.metadata.sequence.stream), m.subject, dict(m.headers or {}), bytes(m.data)
            )
            for m in msgs
        ]
    finally:
        await nc.close()


def read_stream(url: str, prefix: str = "") -> list[StreamMessage]:
    """Every message of the CDC stream whose subject is ``prefix`` or under it, in order."""
    msgs = asyncio.run(_read(url))
    if not prefix:
        return msgs
    return [m for m in msgs if m.subject == prefix or m.subject.startswith(prefix + ".")]


def wait_quiet(url: str, prefix: str, min_count: int, quiet_s: float, timeout_s: float) -> int:
    """Wait until at least ``min_count`` messages are there and no new one came for
    ``quiet_s``; the count reached."""
    deadline = time.monotonic() + timeout_s
    last = -1
    since = time.monotonic()
    while time.monotonic() < deadline:
        n = len(read_stream(url, prefix))
        if n != last:
            last, since = n, time.monotonic()
        elif n >= min_count and time.monotonic() - since >= quiet_s:
            return n
        time.sleep(0.5)
    raise AssertionError(f"{prefix}: {last} messages, wanted at least {min_count} in {timeout_s}s")


def debezium(workdir: Path, props: dict[str, Any]) -> DebeziumServer:
    """A Debezium Server with its own working directory (offsets and history live there)."""
    return DebeziumServer(workdir, props)


def http_port() -> int:
    """A free port for Quarkus' HTTP server (each Debezium Server opens one)."""
    return free_port()
