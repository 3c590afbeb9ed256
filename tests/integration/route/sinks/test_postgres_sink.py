"""The PostgreSQL sink against a real PostgreSQL: typed tables made on first sight, the
position guard (older upserts, replays, deletes never resurrected), exact decimals, new
columns, refused values and a lost connection."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tidelake.capture.servers import PostgresServer
from tidelake.config import PostgresSinkConfig
from tidelake.route.change import ChangesRejected, RowChange, SinkUnavailable
from tidelake.route.sinks.postgres import PostgresSink

TYPES = {"id": "int", "name": "varchar(20)", "price": "decimal(10,2)"}
_databases = itertools.count(1)


def pos(n: int) -> str:
    """A position: fixed-width text whose string order is ``n``'s order."""
    return f"{n:020d}"


def upsert(id_: int, n: int, seq: int | None = None, **row: Any) -> RowChange:
    """An upsert of ``shop.items`` key ``id_`` at position ``n``."""
    return RowChange(
        table="shop.items",
        kind="upsert",
        key={"id": id_},
        row={"id": id_, **row},
        position=pos(n),
        seq=seq if seq is not None else n,
        column_types=TYPES,
    )


def delete(id_: int, n: int, seq: int | None = None) -> RowChange:
    """A delete of ``shop.items`` key ``id_`` at position ``n``."""
    return RowChange(
        table="shop.items",
        kind="delete",
        key={"id": id_},
        row=None,
        position=pos(n),
        seq=seq if seq is not None else n,
        column_types=TYPES,
    )


class Target:
    """A fresh database of the test server, and a way to read it."""

    def __init__(self, server: PostgresServer, dbname: str) -> None:
        self.server = server
        self.dbname = dbname
        self.dsn = server.dsn.rsplit("/", 1)[0] + "/" + dbname

    def query(self, text: str, *args: Any) -> list[tuple[Any, ...]]:
        """Rows of one statement, on a connection of its own."""
        conn = self.server.connect(self.dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(text, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def rows(self, table: str = "shop.items") -> dict[Any, dict[str, Any]]:
        """key ``id`` → the row (columns as text, ``_tl_position`` included)."""
        schema, name = table.split(".")
        conn = self.server.connect(self.dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(f'SELECT * FROM "{schema}"."{name}"')
                names = [d[0] for d in cur.description]
                return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
        finally:
            conn.close()


@pytest.fixture
def target(postgres: PostgresServer) -> Iterator[Target]:
    """A new database per test, dropped afterwards."""
    dbname = f"sink{next(_databases)}"
    admin = postgres.connect()
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {dbname}")
        yield Target(postgres, dbname)
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
    finally:
        admin.close()


@pytest.fixture
def sink(target: Target) -> Iterator[PostgresSink]:
    """A sink writing into ``target``'s database."""
    s = PostgresSink(PostgresSinkConfig(kind="postgres", dsn=target.dsn))
    yield s
    s.close()


def test_inserts_updates_and_deletes_land_in_a_typed_table(
    sink: PostgresSink, target: Target
) -> None:
    """First sight creates schema and table, typed; later changes update and delete."""
    sink.apply([upsert(1, 1, name="a", price="1.50"), upsert(2, 2, name="b", price="2.00")])
    sink.apply([upsert(1, 3, name="a2", price="1.75"), delete(2, 4), upsert(3, 5, name="c")])
    rows = target.rows()
    assert set(rows) == {1, 3}
    assert rows[1]["name"] == "a2"
    assert str(rows[1]["price"]) == "1.75"
    assert rows[1]["_tl_position"] == pos(3)
    assert rows[3]["price"] is None
    types = dict(
        target.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'shop' AND table_name = 'items'"
        )
    )
    assert types == {
        "id": "integer",
        "name": "text",
        "price": "numeric",
        "_tl_position": "text",
    }
    pk = target.query(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'shop.items'::regclass AND i.indisprimary"
    )
    assert pk == [("id",)]
    assert target.query("SELECT table_name, key_text, position FROM shop._tidelake_deletes") == [
        ("items", "2", pos(4))
    ]


def test_an_older_upsert_is_ignored(sink: PostgresSink, target: Target) -> None:
    """A change below the row's position changes nothing."""
    sink.apply([upsert(1, 10, name="new")])
    sink.apply([upsert(1, 5, name="old")])
    assert target.rows()[1]["name"] == "new"
    assert target.rows()[1]["_tl_position"] == pos(10)


def test_a_replayed_batch_is_a_no_op(sink: PostgresSink, target: Target) -> None:
    """The same batch twice leaves the same table (xmin shows no row was even rewritten)."""
    batch = [upsert(1, 1, name="a"), upsert(2, 2, name="b"), delete(1, 3), upsert(2, 4, name="c")]
    sink.apply(batch)
    before = target.query("SELECT id, name, _tl_position, xmin::text FROM shop.items")
    sink.apply(batch)
    after = target.query("SELECT id, name, _tl_position, xmin::text FROM shop.items")
    assert before == after
    assert [(r[0], r[1]) for r in after] == [(2, "c")]


def test_a_delete_is_not_resurrected_by_an_older_upsert(sink: PostgresSink, target: Target) -> None:
    """After a delete, a replayed older upsert is skipped; a newer upsert lands."""
    sink.apply([upsert(1, 1, name="a")])
    sink.apply([delete(1, 5)])
    sink.apply([upsert(1, 3, name="zombie")])
    assert target.rows() == {}
    sink.apply([upsert(1, 6, name="back")])
    assert target.rows()[1]["name"] == "back"


def test_changes_of_one_key_in_a_batch_collapse_and_keep_the_tombstone(
    sink: PostgresSink, target: Target
) -> None:
    """upsert, delete, upsert of one key in one batch: the last upsert lands, and the delete
    between still guards the key against an upsert older than it."""
    sink.apply([upsert(1, 1, name="a"), delete(1, 2), upsert(1, 3, name="c")])
    assert target.rows()[1]["name"] == "c"
    assert target.query("SELECT position FROM shop._tidelake_deletes") == [(pos(2),)]
    sink.apply([delete(1, 4)])
    sink.apply([upsert(1, 3, name="c")])  # redelivered after the later delete
    assert target.rows() == {}


def test_a_delete_older_than_the_row_keeps_it(sink: PostgresSink, target: Target) -> None:
    """A delete below the row's position does not remove the row."""
    sink.apply([upsert(1, 10, name="a")])
    sink.apply([delete(1, 4)])
    assert target.rows()[1]["name"] == "a"


def test_decimals_and_other_types_stay_exact(sink: PostgresSink, target: Target) -> None:
    """Text of a decimal(38,9), a bigint unsigned maximum, a datetime with microseconds,
    bytes in canal-json's ISO-8859-1 form and JSON come back as they went."""
    types = {
        "id": "bigint unsigned",
        "amount": "decimal(38,9)",
        "at": "datetime(6)",
        "ts": "timestamp",
        "blob": "blob",
        "doc": "json",
        "ok": "boolean",
    }
    change = RowChange(
        table="shop.exact",
        kind="upsert",
        key={"id": "18446744073709551615"},
        row={
            "id": "18446744073709551615",
            "amount": "12345678901234567890.123456789",
            "at": "2024-01-02 03:04:05.123456",
            "ts": "2024-01-02 03:04:05",
            "blob": "\x00\xff\x80a",
            "doc": '{"a": [1, 2]}',
            "ok": "t",
        },
        position=pos(1),
        seq=1,
        column_types=types,
    )
    sink.apply([change])
    got = target.query(
        "SELECT id::text, amount::text, at::text, ts AT TIME ZONE 'UTC', blob, doc->'a', ok "
        "FROM shop.exact"
    )
    assert len(got) == 1
    id_, amount, at, ts, blob, doc, ok = got[0]
    assert id_ == "18446744073709551615"
    assert amount == "12345678901234567890.123456789"
    assert at == "2024-01-02 03:04:05.123456"
    assert str(ts) == "2024-01-02 03:04:05"
    assert bytes(blob) == b"\x00\xff\x80a"
    assert doc == [1, 2]
    assert ok is True


def test_a_new_column_is_added(sink: PostgresSink, target: Target) -> None:
    """A change bringing a column the table lacks adds it, typed; older rows keep NULL."""
    sink.apply([upsert(1, 1, name="a")])
    change = RowChange(
        table="shop.items",
        kind="upsert",
        key={"id": 2},
        row={"id": 2, "name": "b", "stock": "7"},
        position=pos(2),
        seq=2,
        column_types={**TYPES, "stock": "int unsigned"},
    )
    sink.apply([change])
    rows = target.rows()
    assert rows[2]["stock"] == 7
    assert rows[1]["stock"] is None
    assert target.query(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = 'shop' "
        "AND table_name = 'items' AND column_name = 'stock'"
    ) == [("bigint",)]
    sink.apply([upsert(1, 3, name="a2")])  # an older producer without the column
    assert target.rows()[1]["name"] == "a2"


def test_a_refused_value_rejects_only_its_change(sink: PostgresSink, target: Target) -> None:
    """ "abc" for an int column: ChangesRejected names that change's seq with PostgreSQL's
    message, nothing of the batch is written, and the rest applies when the route calls
    again without it."""
    bad = RowChange(
        table="shop.items",
        kind="upsert",
        key={"id": 3},
        row={"id": 3, "name": "c", "qty": "abc"},
        position=pos(3),
        seq=3,
        column_types={**TYPES, "qty": "int"},
    )
    batch = [upsert(1, 1, name="a"), upsert(2, 2, name="b"), bad, delete(1, 4)]
    with pytest.raises(ChangesRejected) as raised:
        sink.apply(batch)
    assert raised.value.seqs == (3,)
    assert "invalid input syntax for type integer" in raised.value.reason
    assert "abc" in raised.value.reason
    rest = [c for c in batch if c.seq not in raised.value.seqs]
    sink.apply(rest)
    assert {k: r["name"] for k, r in target.rows().items()} == {2: "b"}


def test_a_value_postgres_would_round_is_rejected(sink: PostgresSink, target: Target) -> None:
    """More decimal places than decimal(10,2) holds: rejected, not rounded."""
    sink.apply([upsert(1, 1, name="a", price="1.00")])
    with pytest.raises(ChangesRejected) as raised:
        sink.apply([upsert(2, 2, name="b", price="1.005"), upsert(1, 3, name="a2")])
    assert raised.value.seqs == (2,)
    assert "would round" in raised.value.reason
    sink.apply([upsert(1, 3, name="a2")])
    assert {k: str(r["price"]) for k, r in target.rows().items()} == {1: "1.00"}


def test_a_lost_connection_is_unavailable_then_recovers(sink: PostgresSink, target: Target) -> None:
    """The backend terminated from another session: SinkUnavailable, then the next apply
    connects again and writes."""
    sink.apply([upsert(1, 1, name="a")])
    killed = target.query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND application_name = 'tidelake-route'",
        target.dbname,
    )
    assert killed == [(True,)]
    with pytest.raises(SinkUnavailable):
        sink.apply([upsert(2, 2, name="b")])
    sink.apply([upsert(2, 2, name="b")])
    assert set(target.rows()) == {1, 2}


def test_target_schema_and_several_tables_in_one_batch(target: Target) -> None:
    """``target_schema`` gathers all tables; each table has its own tombstones."""
    s = PostgresSink(PostgresSinkConfig(kind="postgres", dsn=target.dsn, target_schema="mirror"))
    try:
        other = RowChange(
            table="crm.people",
            kind="delete",
            key={"id": 1},
            row=None,
            position=pos(2),
            seq=2,
            column_types={"id": "int"},
        )
        s.apply([upsert(1, 1, name="a"), other])
        s.apply([upsert(1, 3, name="b")])
    finally:
        s.close()
    assert target.rows("mirror.items")[1]["name"] == "b"
    assert target.rows("mirror.people") == {}
    assert target.query("SELECT table_name, key_text FROM mirror._tidelake_deletes") == [
        ("people", "1")
    ]
