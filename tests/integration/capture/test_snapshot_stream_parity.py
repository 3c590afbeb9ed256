"""Snapshot and stream agree (issue 15, item 9): one source value, one captured value,
whichever path carried it.

For tidelake's own MariaDB (binlog) and PostgreSQL (pgoutput) capture, a table with a column
of every common type receives the same rows twice, through the same session: once before the
capture starts (they reach the stream through the initial snapshot, a ``SELECT``) and once
after it streams (through the binlog / pgoutput). Row ``k`` of the first batch and row
``k + ROWS`` of the second hold identical values, so their canal-json messages must carry the
same text and the same source type in every column. Each test runs once per first-start mode:
``capture.snapshot: initial`` (one consistent snapshot) and ``incremental`` (parallel chunk
reads on connections of their own, several rows to a message: capture/mysql_chunks.py,
capture/postgres_chunks.py), the first batch then read entirely by chunks before the second
is written. The values are drawn by a seeded random
generator from each type's edge values (padding, zero dates, unsigned extremes, NaN, negative
TIME, session time zones, JSON, arrays, enums, sets, bit strings) plus random ones.

The writers' sessions run in a non-UTC time zone, and so does the capture process (``TZ``),
so a TIMESTAMP / timestamptz rendering that depends on either shows up as a difference.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from capturekit import CaptureRun, mariadb_caught_up, stream_messages

from tidelake.bus.server import EmbeddedNats
from tidelake.capture.incremental import RESTART_GAP
from tidelake.capture.pgoutput import parse_lsn
from tidelake.capture.servers import MariaDBServer, PostgresServer
from tidelake.events import Position

pytestmark = pytest.mark.integration

#: Rows per path; every edge value of every column appears in both halves.
ROWS = 120
#: Rows that walk the edge values (more than any column has).
EDGE_ROWS = 40
SEED = 15
#: The first-start modes, each a path of its own for the first batch.
MODES = pytest.mark.parametrize("mode", ["initial", "incremental"])

Gen = Callable[[random.Random], Any]


class _pick:  # noqa: N801 -- reads as a verb in the column tables below
    """A column's values: its edge values and NULL, then random ones from ``gen``."""

    def __init__(self, *edges: Any, gen: Gen | None = None) -> None:
        self.edges = [*edges, None]
        self.gen = gen

    def __call__(self, rng: random.Random, index: int) -> Any:
        # The first rows walk every edge value, so each is written whatever the seed.
        if index < EDGE_ROWS:
            return self.edges[index % len(self.edges)]
        if self.gen is not None and rng.random() < 0.5:
            return self.gen(rng)
        return rng.choice(self.edges)


_TEXT = "ab é€😀 '\"\\\t\n%_"


def _text(rng: random.Random, most: int = 12) -> str:
    """Random text with blanks at either end, quotes, backslashes and non-BMP characters."""
    return "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, most)))


def _float64(rng: random.Random) -> float:
    while True:
        (value,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if value == value and abs(value) != float("inf"):
            return float(value)


def _float32(rng: random.Random) -> float:
    while True:
        (value,) = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))
        if value == value and abs(value) != float("inf"):
            return float(value)


def _decimal(precision: int, scale: int) -> Gen:
    def draw(rng: random.Random) -> str:
        digits = rng.randint(1, precision)
        unscaled = rng.randint(-(10**digits) + 1, 10**digits - 1)
        return str(Decimal(unscaled).scaleb(-scale))

    return draw


def _int(low: int, high: int) -> Gen:
    return lambda rng: rng.randint(low, high)


def _rows(columns: dict[str, tuple[str, _pick]]) -> list[dict[str, Any]]:
    """``ROWS`` rows; the first ones walk each column's edge values so every edge is there."""
    rng = random.Random(SEED)
    return [{name: values(rng, i) for name, (_, values) in columns.items()} for i in range(ROWS)]


def _compare(
    messages: list[tuple[int, str, bytes]], table: str, names: Sequence[str], mode: str
) -> tuple[list[str], dict[int, dict[str, Any]]]:
    """Per column, every value that differs between row ``k`` (snapshot) and row ``k + ROWS``
    (stream), and the snapshot rows by id."""
    by_id: dict[int, dict[str, Any]] = {}
    for _, _, payload in messages:
        message = orjson.loads(payload)
        if message.get("table") != table or message.get("isDdl"):
            continue
        for row in message["data"]:  # an incremental chunk's message holds several rows
            by_id[int(row["id"])] = {"row": row, "types": message["mysqlType"],
                                     "position": message["_tidelake"]["position"]}  # fmt: skip
    assert sorted(by_id) == list(range(1, 2 * ROWS + 1))
    if mode == "incremental":
        # The first batch came through the chunk reads (their positions carry the restart
        # gap), not through the stream or an initial snapshot.
        assert all(
            max(Position.decode(by_id[k]["position"]).parts[1:]) >= RESTART_GAP
            for k in range(1, ROWS + 1)
        )
    differences = []
    for k in range(1, ROWS + 1):
        snap, stream = by_id[k], by_id[k + ROWS]
        for column in names:
            if snap["row"][column] != stream["row"][column]:
                differences.append(
                    f"{column}: snapshot {snap['row'][column]!r} stream {stream['row'][column]!r}"
                )
        if snap["types"] != stream["types"]:
            differences.append(f"types: snapshot {snap['types']} stream {stream['types']}")
    return sorted(set(differences)), {k: by_id[k]["row"] for k in by_id}


# -- MariaDB -------------------------------------------------------------------------------

_MY_COLUMNS: dict[str, tuple[str, _pick]] = {
    "ti": ("tinyint", _pick(-128, 127, 0, gen=_int(-128, 127))),
    "tiu": ("tinyint unsigned", _pick(0, 255, gen=_int(0, 255))),
    "b1": ("tinyint(1)", _pick(0, 1, -1, 127)),
    "si": ("smallint", _pick(-32768, 32767, gen=_int(-32768, 32767))),
    "siu": ("smallint unsigned", _pick(0, 65535)),
    "mi": ("mediumint", _pick(-8388608, 8388607)),
    "miu": ("mediumint unsigned", _pick(0, 16777215, gen=_int(0, 16777215))),
    "i": ("int", _pick(-(2**31), 2**31 - 1, gen=_int(-(2**31), 2**31 - 1))),
    "iu": ("int unsigned", _pick(0, 2**32 - 1, gen=_int(0, 2**32 - 1))),
    "bi": ("bigint", _pick(-(2**63), 2**63 - 1, gen=_int(-(2**63), 2**63 - 1))),
    "biu": ("bigint unsigned", _pick(0, 2**64 - 1, 2**63, gen=_int(0, 2**64 - 1))),
    "d": (
        "decimal(12,2)",
        _pick("0", "-0.01", "9999999999.99", "1.5", "-1.5", gen=_decimal(12, 2)),
    ),
    "dw": (
        "decimal(65,30)",
        _pick(
            "0",
            "-12345678901234567890123456789012345.123456789012345678901234567890",
            gen=_decimal(65, 30),
        ),
    ),
    "d0": ("decimal(10,0)", _pick("0", "-9999999999", "9999999999")),
    "f": (
        "float",
        _pick(0.0, -0.0, 1.1, 3.4028234e38, -1.17549435e-38, 1e-45, gen=_float32),
    ),
    "db": (
        "double",
        _pick(0.0, -0.0, 0.1, 1e308, -2.2250738585072014e-308, 5e-324, gen=_float64),
    ),
    "bt1": ("bit(1)", _pick(0, 1)),
    "bt12": ("bit(12)", _pick(0, 1, 4095, gen=_int(0, 4095))),
    "bt64": ("bit(64)", _pick(0, 2**64 - 1, 2**63, gen=_int(0, 2**64 - 1))),
    "c": ("char(5)", _pick("", "ab", "abcde", " a", "é", "a  ", gen=lambda r: _text(r, 5))),
    "vc": ("varchar(20)", _pick("", " ", "a  ", "x", gen=lambda r: _text(r, 20))),
    "bn": (
        "binary(4)",
        _pick(b"", b"ab", b"\x00", b"ab\x00\x00", b"\xff\xfe\x00\x01", b"  "),
    ),
    "vb": ("varbinary(8)", _pick(b"", b"\x00", b"a\x00", b"\x80\xff  ")),
    "tt": ("text", _pick("", "  ", gen=lambda r: _text(r, 40))),
    "bl": ("blob", _pick(b"", b"\x00\x01\x02", bytes(range(256)))),
    "lt": ("longtext", _pick("", "x" * 300)),
    "dt": ("date", _pick("2024-02-29", "1000-01-01", "9999-12-31", "0000-00-00")),
    "dtm": (
        "datetime",
        _pick(
            "2024-02-29 23:59:59",
            "1000-01-01 00:00:00",
            "9999-12-31 23:59:59",
            "0000-00-00 00:00:00",
        ),
    ),
    "dtm6": (
        "datetime(6)",
        _pick(
            "2024-02-29 23:59:59.999999", "2024-01-01 00:00:00.000001", "0000-00-00 00:00:00.000000"
        ),
    ),
    "ts": (
        "timestamp NULL DEFAULT NULL",
        _pick(
            "1970-01-01 05:30:01",
            "2038-01-19 08:44:07",
            "2024-03-10 02:30:00",
            "0000-00-00 00:00:00",
        ),
    ),
    "ts3": (
        "timestamp(3) NULL DEFAULT NULL",
        _pick("2024-03-10 02:30:00.125", "2000-01-01 00:00:00.001"),
    ),
    "tm": ("time", _pick("00:00:00", "-00:00:01", "838:59:59", "-838:59:59", "12:34:56")),
    "tm6": (
        "time(6)",
        _pick("00:00:00.000001", "-00:00:00.5", "-01:02:03.456789", "838:59:58.999999"),
    ),
    "yr": ("year", _pick(1901, 2155, 2024, 0)),
    "en": ("enum('a','b c','','x''y')", _pick("a", "b c", "", "x'y")),
    "st": ("set('a','b','c''d')", _pick("", "a", "a,b", "b,a", "c'd")),
    "js": (
        "json",
        _pick('{"b": 1, "a": [1, 2.50, null, true]}', "[]", '"x"', "1e2", '{"k":"é\\u00e9"}'),
    ),
}


def _my_write(server: MariaDBServer, table: str, rows: list[dict[str, Any]], first_id: int) -> None:
    names = list(_MY_COLUMNS)
    conn = server.connect()
    with conn.cursor() as cur:
        # Zero dates and a session zone that is neither UTC nor the capture's.
        cur.execute("SET SESSION sql_mode = '', time_zone = '+05:30'")
        for k, row in enumerate(rows):
            cur.execute(
                f"INSERT INTO {table} (id, {', '.join(names)}) "
                f"VALUES (%s, {', '.join(['%s'] * len(names))})",
                (first_id + k, *[row[n] for n in names]),
            )
    conn.close()


@MODES
def test_mariadb_snapshot_and_binlog_carry_the_same_values(
    mariadb: MariaDBServer,
    nats: EmbeddedNats,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """Every column type written before the capture (snapshot) and after (binlog) arrives as
    the same canal-json text with the same ``mysqlType``; BINARY(n) keeps its zero padding,
    CHAR(n) loses its trailing blanks (as MariaDB's SELECT does), TIMESTAMP is in UTC."""
    db = f"parity_{mode}"
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cols = ", ".join(f"{n} {t}" for n, (t, _) in _MY_COLUMNS.items())
        cur.execute(f"CREATE TABLE {db}.t (id int PRIMARY KEY, {cols})")
    conn.close()
    rows = _rows(_MY_COLUMNS)
    known = _known_row(rows, {"bn": b"ab", "c": "ab ", "ts": "2024-03-10 02:30:00"})
    _my_write(mariadb, f"{db}.t", rows, 1)
    monkeypatch.setenv("TZ", "America/New_York")
    run = CaptureRun(
        tmp_path / "capture", nats.url, f"mysql://{mariadb.user}@127.0.0.1:{mariadb.port}/",
        [f"{db}.*"], password=mariadb.password, capture={"chunk_rows": 50, "snapshot": mode},
    ).start()  # fmt: skip
    _first_batch_read(run, f"{db}.t", mode)
    _my_write(mariadb, f"{db}.t", rows, ROWS + 1)
    mariadb_caught_up(mariadb, run)
    differences, by_id = _compare(stream_messages(nats.url), "t", list(_MY_COLUMNS), mode)
    run.process.stop()
    assert [] == differences
    assert {"bn": "ab\x00\x00", "c": "ab", "ts": "2024-03-09 21:00:00"} == {
        c: by_id[known + ROWS][c] for c in ("bn", "c", "ts")
    }


def _first_batch_read(run: CaptureRun, table: str, mode: str) -> None:
    """Until the first batch has reached the stream: the initial snapshot handed off to
    streaming, or the incremental snapshot of ``table`` is done."""
    if mode == "initial":
        run.wait_until(lambda s: s["phase"] == "streaming", 60)
    else:
        run.wait_until(
            lambda s: (
                (((s.get("incremental") or {}).get("tables") or {}).get(table) or {}).get("state")
                == "done"
            ),
            60,
        )


def _known_row(rows: list[dict[str, Any]], values: dict[str, Any]) -> int:
    """Overwrite the last row (of both halves) with known values, returning its id."""
    rows[-1].update(values)
    return len(rows)


# -- PostgreSQL ----------------------------------------------------------------------------

_PG_COLUMNS: dict[str, tuple[str, _pick]] = {
    "si": ("smallint", _pick(-32768, 32767, gen=_int(-32768, 32767))),
    "i": ("integer", _pick(-(2**31), 2**31 - 1)),
    "bi": ("bigint", _pick(-(2**63), 2**63 - 1, gen=_int(-(2**63), 2**63 - 1))),
    "n": ("numeric(12,2)", _pick("0", "-0.01", "9999999999.99", "1.5", gen=_decimal(12, 2))),
    "nu": (
        "numeric",
        _pick(
            "NaN",
            "Infinity",
            "-Infinity",
            "0.000",
            "-0",
            "123456789012345678901234567890.123456789",
            "1e-20",
            gen=_decimal(40, 20),
        ),
    ),
    "r": (
        "real",
        _pick("NaN", "Infinity", "-Infinity", "-0", "1.1", "3.4028235e38", "1e-45", gen=_float32),
    ),
    "dp": ("double precision", _pick("NaN", "-0", "0.1", "1e308", "5e-324", gen=_float64)),
    "b": ("boolean", _pick(True, False)),
    "c": ("character(5)", _pick("", "ab", "abcde", " a", "é", "a  ", gen=lambda r: _text(r, 5))),
    "c1": ("character", _pick("", "x", " ")),
    "vc": ("character varying(20)", _pick("", " ", "a  ", gen=lambda r: _text(r, 20))),
    "t": ("text", _pick("", "  ", gen=lambda r: _text(r, 40))),
    "by": ("bytea", _pick(b"", b"\x00", b"ab\x00", bytes(range(256)))),
    "d": ("date", _pick("2024-02-29", "infinity", "-infinity", "0001-01-01 BC", "5874897-12-31")),
    "ts": (
        "timestamp without time zone",
        _pick("2024-02-29 23:59:59.999999", "infinity", "1999-01-08 04:05:06 BC"),
    ),
    "ts3": (
        "timestamp(3) without time zone",
        _pick("2024-05-05 12:00:00.125", "2024-05-05 12:00:00"),
    ),
    "tz": (
        "timestamp with time zone",
        _pick(
            "2024-03-10 02:30:00 America/New_York",
            "2024-03-10 02:30:00",
            "-infinity",
            "2000-01-01 00:00:00.5+14",
        ),
    ),
    "tm": ("time without time zone", _pick("00:00:00", "24:00:00", "12:34:56.789")),
    "ttz": ("time with time zone", _pick("12:00:00+05:30", "00:00:00-15:59")),
    "iv": (
        "interval",
        _pick("1 year 2 mons -3 days 04:05:06.789", "0", "-1 second", "178000000 years"),
    ),
    "u": ("uuid", _pick("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
    "js": ("json", _pick('{"b": 1,  "a": [1, 2.50]}', "[]", '"\\u00e9"')),
    "jb": ("jsonb", _pick('{"b": 1,  "a": [1, 2.50]}', "[]", '"\\u00e9"', "1e2")),
    "ia": ("integer[]", _pick("{}", "{1,NULL,3}", "{{1,2},{3,4}}")),
    "ta": ("text[]", _pick("{}", '{"a b","",NULL,"\\"","NULL"}', "{x}")),
    "ca": ("character(3)[]", _pick("{a,bb,ccc}", '{""}')),
    "na": (
        "numeric(5,2)[]",
        _pick(
            "{1.5,-0.01,NaN}",
        ),
    ),
    "en": ("parity.mood", _pick("sad", "ok", "very happy")),
    "ip": ("inet", _pick("10.0.0.1", "10.0.0.0/8", "::1", "192.168.1.5/24")),
    "cd": ("cidr", _pick("10.0.0.0/8", "::/0")),
    "mc": ("macaddr", _pick("08:00:2b:01:02:03")),
    "bs": ("bit(5)", _pick("10101", "00000")),
    "vbs": ("bit varying(8)", _pick("", "1", "10101010")),
    "mo": ("money", _pick("1.50", "-0.01")),
    "pt": ("point", _pick("(1,2)", "(-1.5,1e10)")),
    "rg": ("int4range", _pick("[1,5)", "empty", "(,3]")),
    "dom": ("parity.short_code", _pick("ab", "")),
}


def _pg_write(
    server: PostgresServer, table: str, rows: list[dict[str, Any]], first_id: int
) -> None:
    names = list(_PG_COLUMNS)
    conn = server.connect()
    with conn.cursor() as cur:
        # Session settings that change how input is read and output is shown: the capture
        # must not depend on the writer's.
        cur.execute("SET TIME ZONE 'Asia/Kolkata'")
        cur.execute("SET extra_float_digits = 0")
        cur.execute("SET bytea_output = escape")
        for k, row in enumerate(rows):
            values = ", ".join(f"(%s)::{_PG_COLUMNS[n][0]}" for n in names)
            params = [row[n] if not isinstance(row[n], float) else repr(row[n]) for n in names]
            cur.execute(
                f"INSERT INTO {table} (id, {', '.join(names)}) VALUES (%s, {values})",
                (first_id + k, *params),
            )
    conn.close()


@MODES
def test_postgres_snapshot_and_pgoutput_carry_the_same_values(
    postgres: PostgresServer,
    nats: EmbeddedNats,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """Every column type written before the capture (exported snapshot) and after (pgoutput)
    arrives as the same canal-json text with the same type: ``character(n)`` blank-padded on
    both paths (issue 15: the snapshot's ``::text`` cast dropped the padding), ``inet`` as
    its output text, timestamptz in UTC whatever the writer's zone."""
    schema = f"parity_{mode}"
    conn = postgres.connect()
    with conn.cursor() as cur:
        # The column types live in schema parity, made by whichever mode runs first.
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'parity'")
        if cur.fetchone() is None:
            cur.execute("CREATE SCHEMA parity")
            cur.execute("CREATE TYPE parity.mood AS ENUM ('sad', 'ok', 'very happy')")
            cur.execute("CREATE DOMAIN parity.short_code AS character(3)")
        cur.execute(f"CREATE SCHEMA {schema}")
        cur.execute("SET search_path = parity")
        cols = ", ".join(f"{n} {t}" for n, (t, _) in _PG_COLUMNS.items())
        cur.execute(f"CREATE TABLE {schema}.t (id integer PRIMARY KEY, {cols})")
    conn.close()
    rows = _rows(_PG_COLUMNS)
    known = _known_row(rows, {"c": "ab", "ip": "10.0.0.1", "tz": "2024-03-10 02:30:00",
                              "b": True})  # fmt: skip
    _pg_write(postgres, f"{schema}.t", rows, 1)
    monkeypatch.setenv("TZ", "America/New_York")
    run = CaptureRun(
        tmp_path / "capture", nats.url, postgres.dsn, [f"{schema}.*"],
        capture={"chunk_rows": 50, "snapshot": mode, "slot": f"tl_{schema}",
                 "publication": f"tl_{schema}", "heartbeat_s": 0.5},
    ).start()  # fmt: skip
    _first_batch_read(run, f"{schema}.t", mode)
    _pg_write(postgres, f"{schema}.t", rows, ROWS + 1)
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        lsn = parse_lsn(cur.fetchone()[0])
    conn.close()
    run.wait_until(lambda s: s["phase"] == "streaming" and int(s["lsn"]) >= lsn, 60)
    time.sleep(0.2)
    differences, by_id = _compare(stream_messages(nats.url), "t", list(_PG_COLUMNS), mode)
    run.process.stop()
    assert [] == differences
    assert {"c": "ab   ", "ip": "10.0.0.1", "tz": "2024-03-09 21:00:00+00", "b": "t"} == {
        c: by_id[known][c] for c in ("c", "ip", "tz", "b")
    }
