"""The PostgreSQL sink against a real PostgreSQL: typed tables made on first sight, the
position guard (older upserts, replays, deletes never resurrected), exact decimals, new
columns, refused values and a lost connection; the source's DDL applied in stream order
(columns added with the values existing rows take, renamed, dropped, retyped; tables
truncated, dropped, re-created, renamed; a database dropped), idempotently by position."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tidelake.capture.servers import PostgresServer
from tidelake.config import PostgresSinkConfig
from tidelake.lake import ddl
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


ITEMS = ddl.TableName("shop", "items")


def schema_change(
    n: int,
    *ops: ddl.Operation,
    seq: int | None = None,
    commit_ts_ms: int | None = None,
    table: str = "shop.items",
) -> RowChange:
    """A schema change of ``table`` at position ``n`` made of ``ops``."""
    return RowChange(
        table=table,
        kind="schema",
        key={},
        row=None,
        position=pos(n),
        seq=seq if seq is not None else n,
        commit_ts_ms=commit_ts_ms,
        operations=ops,
        statement=f"-- DDL at {n}",
    )


def column(name: str, source_type: str, default: ddl.Default = ddl.NULL_DEFAULT) -> ddl.AddColumn:
    """ADD COLUMN ``name`` to ``shop.items``."""
    return ddl.AddColumn(ITEMS, ddl.ColumnSpec(name, source_type, default))


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

    def columns(self, table: str = "shop.items") -> dict[str, str]:
        """column → ``format_type`` of a table, in column order."""
        schema, name = table.split(".")
        return dict(
            self.query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) "
                "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                "AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum",
                schema,
                name,
            )
        )

    def exists(self, table: str) -> bool:
        """Whether the sink holds ``table`` (``schema.name``)."""
        schema, name = table.split(".")
        return bool(
            self.query(
                "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'r'",
                schema,
                name,
            )
        )

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


# -- the source's DDL ----------------------------------------------------------------------


def test_an_added_column_gives_existing_rows_the_source_default(
    sink: PostgresSink, target: Target
) -> None:
    """Rows before the DDL, the DDL, rows after, in one batch: existing rows take the literal
    default converted as row values are, NULL, or the DDL's commit time (to the second, an
    instant for a TIMESTAMP, its UTC wall clock for a DATETIME); a row written afterwards
    without the column gets NULL (the default does not stay on the column)."""
    commit_ms = 1_717_000_000_250  # 2024-05-29 16:26:40.250 UTC
    add = schema_change(
        3,
        column("stock", "int unsigned", ddl.Default("value", "5")),
        column("note", "varchar(10)"),
        column("amount", "decimal(8,3)", ddl.Default("value", "1.250")),
        column("seen", "timestamp", ddl.Default("current_timestamp")),
        column("at", "datetime(3)", ddl.Default("current_timestamp")),
        column("day", "date", ddl.Default("current_timestamp")),
        column("flag", "varbinary(4)", ddl.Default("value", "\x00\xff")),
        commit_ts_ms=commit_ms,
    )
    after = RowChange(
        table="shop.items",
        kind="upsert",
        key={"id": 3},
        row={"id": 3, "name": "c", "stock": "9"},
        position=pos(4),
        seq=4,
        column_types={**TYPES, "stock": "int unsigned"},
    )
    sink.apply([upsert(1, 1, name="a"), upsert(2, 2, name="b"), add, after])
    assert target.columns() == {
        "id": "integer",
        "name": "text",
        "_tl_position": "text",
        "stock": "bigint",
        "note": "text",
        "amount": "numeric(8,3)",
        "seen": "timestamp with time zone",
        "at": "timestamp without time zone",
        "day": "date",
        "flag": "bytea",
    }
    got = target.query(
        "SELECT id, stock, note, amount::text, seen AT TIME ZONE 'UTC', at::text, day::text, "
        "flag FROM shop.items ORDER BY id"
    )
    at = "2024-05-29 16:26:40"
    assert [(*r[:4], str(r[4]), *r[5:7], r[7] and bytes(r[7])) for r in got] == [
        (1, 5, None, "1.250", at, at, "2024-05-29", b"\x00\xff"),
        (2, 5, None, "1.250", at, at, "2024-05-29", b"\x00\xff"),
        (3, 9, None, None, "None", None, None, None),
    ]
    assert target.query(
        "SELECT count(*) FROM pg_attrdef WHERE adrelid = 'shop.items'::regclass"
    ) == [(0,)]
    assert target.query(
        "SELECT table_name, source_table, ddl_position, cleared_position FROM shop._tidelake_schema"
    ) == [("items", "shop.items", pos(3), None)]


def test_a_default_the_sink_cannot_know_rejects_only_that_ddl(
    sink: PostgresSink, target: Target
) -> None:
    """A default computed per row (an expression), or one its column cannot hold exactly:
    ChangesRejected names the DDL's seq alone; nothing of the batch is written; without it
    the rest applies."""
    sink.apply([upsert(1, 1, name="a")])
    expression = schema_change(
        3, column("token", "varchar(36)", ddl.Default("expression", "uuid()")), seq=30
    )
    batch = [upsert(1, 2, name="a2"), expression, upsert(2, 4, name="b")]
    with pytest.raises(ChangesRejected) as raised:
        sink.apply(batch)
    assert raised.value.seqs == (30,)
    assert "computed per row" in raised.value.reason
    assert "token" not in target.columns()
    assert {k: r["name"] for k, r in target.rows().items()} == {1: "a"}
    sink.apply([c for c in batch if c.seq not in raised.value.seqs])
    assert {k: r["name"] for k, r in target.rows().items()} == {1: "a2", 2: "b"}

    rounded = schema_change(5, column("fee", "decimal(4,1)", ddl.Default("value", "1.25")))
    with pytest.raises(ChangesRejected) as raised:
        sink.apply([rounded])
    assert raised.value.seqs == (5,)
    assert "would round" in raised.value.reason
    no_time = schema_change(6, column("seen", "timestamp", ddl.Default("current_timestamp")))
    with pytest.raises(ChangesRejected, match="no commit time"):
        sink.apply([no_time])


def test_a_schema_name_postgres_refuses_rejects_its_changes(
    sink: PostgresSink, target: Target
) -> None:
    """A source database named as PostgreSQL reserves (``pg_…``): its changes are rejected
    with the server's message, the others of the batch apply."""
    bad = RowChange("pg_shop.items", "upsert", {"id": 1}, {"id": 1}, pos(2), 2, TYPES)
    with pytest.raises(ChangesRejected) as raised:
        sink.apply([upsert(1, 1, name="a"), bad])
    assert raised.value.seqs == (2,)
    assert "pg_shop" in raised.value.reason
    sink.apply([upsert(1, 1, name="a")])
    assert set(target.rows()) == {1}


def test_columns_are_renamed_dropped_and_retyped(sink: PostgresSink, target: Target) -> None:
    """RENAME, DROP, MODIFY (widen, and CHANGE with a new name) keep the values; a replayed
    change from before the DDL does not bring back the columns it removed, and one never
    applied lands in the table's present shape."""
    types = {**TYPES, "qty": "int", "code": "smallint"}
    first = [
        RowChange(
            "shop.items",
            "upsert",
            {"id": i},
            {"id": i, "name": n, "price": "1.50", "qty": "3", "code": "7"},
            pos(i),
            i,
            types,
        )
        for i, n in ((1, "a"), (2, "b"))
    ]
    sink.apply(first)
    alter = schema_change(
        10,
        ddl.RenameColumn(ITEMS, "name", "title"),
        ddl.DropColumn(ITEMS, "qty"),
        ddl.ModifyColumn(ITEMS, "price", "decimal(12,3)"),
        ddl.ModifyColumn(ITEMS, "code", "bigint", new_name="ref"),
    )
    sink.apply([alter])
    assert target.columns() == {
        "id": "integer",
        "title": "text",
        "price": "numeric(12,3)",
        "ref": "bigint",
        "_tl_position": "text",
    }
    got = target.query("SELECT id, title, price::text, ref FROM shop.items ORDER BY id")
    assert got == [(1, "a", "1.500", 7), (2, "b", "1.500", 7)]
    # A replay of the first batch, and a change never applied from before the DDL (a dead
    # letter reprocessed): no column comes back.
    old = RowChange(
        "shop.items",
        "upsert",
        {"id": 3},
        {"id": 3, "name": "c", "price": "2.00", "qty": "1"},
        pos(5),
        5,
        types,
    )
    sink.apply([*first, old])
    assert set(target.columns()) == {"id", "title", "price", "ref", "_tl_position"}
    got = target.query("SELECT id, title, price::text, ref FROM shop.items ORDER BY id")
    # The late change is brought forward through the DDL (route.change.forward): its name
    # is the table's title now, its qty is gone; it never had a code.
    assert got == [(1, "a", "1.500", 7), (2, "b", "1.500", 7), (3, "c", "2.000", None)]
    new = RowChange(
        "shop.items",
        "upsert",
        {"id": 1},
        {"id": 1, "title": "a2", "price": "1.125", "ref": "8"},
        pos(11),
        11,
        {**TYPES, "title": "varchar(20)", "price": "decimal(12,3)", "ref": "bigint"},
    )
    sink.apply([new])
    assert target.query("SELECT title, price::text, ref FROM shop.items WHERE id = 1") == [
        ("a2", "1.125", 8)
    ]


def test_a_type_change_postgres_refuses_rejects_only_its_ddl(
    sink: PostgresSink, target: Target
) -> None:
    """A MODIFY whose values PostgreSQL cannot convert: ChangesRejected names that seq with
    the server's message, nothing of the batch is written, the rest applies without it."""
    sink.apply([upsert(1, 1, name="abc")])
    retype = schema_change(3, ddl.ModifyColumn(ITEMS, "name", "int"), seq=30)
    batch = [upsert(2, 2, name="b"), retype, upsert(3, 4, name="c")]
    with pytest.raises(ChangesRejected) as raised:
        sink.apply(batch)
    assert raised.value.seqs == (30,)
    assert "invalid input syntax for type integer" in raised.value.reason
    assert "DDL" in raised.value.reason
    assert set(target.rows()) == {1}
    sink.apply([c for c in batch if c.seq not in raised.value.seqs])
    assert set(target.rows()) == {1, 2, 3}
    assert target.columns()["name"] == "text"


def test_dropping_a_key_column_is_rejected(sink: PostgresSink, target: Target) -> None:
    """The sink writes by key: a DROP of a primary-key column is refused, not applied."""
    sink.apply([upsert(1, 1, name="a")])
    with pytest.raises(ChangesRejected, match="primary-key column id"):
        sink.apply([schema_change(2, ddl.DropColumn(ITEMS, "id"))])
    assert "id" in target.columns()


def test_truncate_removes_older_rows_and_keeps_them_out(sink: PostgresSink, target: Target) -> None:
    """TRUNCATE at P: rows below P go (one a later change wrote stays), the tombstones below
    P go; then an older upsert or delete replayed is skipped and a newer upsert lands."""
    sink.apply([upsert(1, 1, name="a"), upsert(2, 2, name="b"), delete(3, 3)])
    sink.apply([upsert(4, 12, name="later")])  # written before the DDL reaches the sink
    sink.apply([schema_change(10, ddl.TruncateTable(ITEMS))])
    assert {k: r["name"] for k, r in target.rows().items()} == {4: "later"}
    assert target.query("SELECT * FROM shop._tidelake_deletes") == []
    sink.apply([upsert(1, 5, name="zombie"), delete(2, 6), upsert(2, 11, name="new")])
    assert {k: r["name"] for k, r in target.rows().items()} == {2: "new", 4: "later"}
    assert target.query("SELECT * FROM shop._tidelake_deletes") == []
    assert target.query(
        "SELECT ddl_position, cleared_position FROM shop._tidelake_schema "
        "WHERE table_name = 'items'"
    ) == [(pos(10), pos(10))]


def test_drop_table_then_create_it_again(sink: PostgresSink, target: Target) -> None:
    """DROP TABLE at P: the table goes; an older upsert replayed does not bring it back; a
    CREATE TABLE makes it as declared, and newer rows land."""
    sink.apply([upsert(1, 1, name="a"), delete(2, 2)])
    sink.apply([schema_change(10, ddl.DropTable(ITEMS))])
    assert not target.exists("shop.items")
    assert target.query("SELECT * FROM shop._tidelake_deletes") == []
    sink.apply([upsert(1, 5, name="zombie")])
    assert not target.exists("shop.items")
    create = schema_change(
        11,
        ddl.CreateTable(
            ITEMS,
            (ddl.ColumnSpec("id", "bigint"), ddl.ColumnSpec("label", "varchar(9)")),
            ("id",),
        ),
    )
    sink.apply([create, upsert(1, 6, name="zombie"), upsert(2, 12, label="x")])
    assert target.columns() == {"id": "bigint", "label": "text", "_tl_position": "text"}
    assert {k: r["label"] for k, r in target.rows().items()} == {2: "x"}
    # A drop whose table the sink no longer holds, replayed: nothing changes.
    sink.apply([schema_change(10, ddl.DropTable(ITEMS))])
    assert set(target.rows()) == {2}


def test_a_drop_applied_late_keeps_the_rows_written_after_it(
    sink: PostgresSink, target: Target
) -> None:
    """A DROP TABLE at P reaching the sink after rows above P (a dead letter reprocessed):
    the rows below P go, the table and the later rows stay; older rows stay out."""
    sink.apply([upsert(1, 1, name="a"), delete(2, 2), upsert(3, 12, name="later")])
    sink.apply([schema_change(10, ddl.DropTable(ITEMS))])
    assert {k: r["name"] for k, r in target.rows().items()} == {3: "later"}
    assert target.query("SELECT * FROM shop._tidelake_deletes") == []
    sink.apply([upsert(1, 5, name="zombie")])
    assert set(target.rows()) == {3}


def test_a_renamed_table_takes_its_rows_and_tombstones(sink: PostgresSink, target: Target) -> None:
    """RENAME TABLE items → goods: the stale goods the sink held is dropped first, items'
    rows and tombstones move; changes of either name from before the rename are skipped."""
    sink.apply([upsert(1, 1, name="a"), delete(2, 2)])
    stale = RowChange("shop.goods", "upsert", {"id": 9}, {"id": 9}, pos(3), 3, TYPES)
    sink.apply([stale])
    goods = ddl.TableName("shop", "goods")
    sink.apply([schema_change(10, ddl.RenameTable(ITEMS, goods))])
    assert not target.exists("shop.items")
    assert {k: r["name"] for k, r in target.rows("shop.goods").items()} == {1: "a"}
    assert target.query("SELECT table_name, key_text FROM shop._tidelake_deletes") == [
        ("goods", "2")
    ]
    sink.apply([upsert(1, 5, name="zombie"), stale])
    assert not target.exists("shop.items")
    assert set(target.rows("shop.goods")) == {1}
    newer = RowChange("shop.goods", "upsert", {"id": 1}, {"id": 1, "name": "g"}, pos(11), 11, TYPES)
    sink.apply([newer])
    assert target.rows("shop.goods")[1]["name"] == "g"
    assert target.query(
        "SELECT table_name, source_table, ddl_position, cleared_position "
        "FROM shop._tidelake_schema ORDER BY table_name"
    ) == [("goods", "shop.goods", pos(10), pos(10)), ("items", "shop.items", pos(10), pos(10))]


def test_a_rename_into_another_schema_moves_the_table(sink: PostgresSink, target: Target) -> None:
    """RENAME TABLE shop.items TO archive.old_items: the table moves to the other schema."""
    sink.apply([upsert(1, 1, name="a"), delete(2, 2)])
    moved = ddl.TableName("archive", "old_items")
    sink.apply([schema_change(10, ddl.RenameTable(ITEMS, moved))])
    assert not target.exists("shop.items")
    assert {k: r["name"] for k, r in target.rows("archive.old_items").items()} == {1: "a"}
    assert target.query("SELECT table_name, key_text FROM archive._tidelake_deletes") == [
        ("old_items", "2")
    ]
    assert target.query("SELECT * FROM shop._tidelake_deletes") == []


def test_drop_database_drops_its_tables_only(target: Target) -> None:
    """With ``target_schema`` gathering databases, DROP DATABASE shop drops shop's tables
    (known from ``_tidelake_schema``) and keeps crm's; without, every table of schema shop."""
    s = PostgresSinkConfig(kind="postgres", dsn=target.dsn, target_schema="mirror")
    merged = PostgresSink(s)
    plain = PostgresSink(PostgresSinkConfig(kind="postgres", dsn=target.dsn))
    try:
        person = RowChange("crm.people", "upsert", {"id": 1}, {"id": 1}, pos(2), 2, {"id": "int"})
        merged.apply([upsert(1, 1, name="a"), person])
        merged.apply([schema_change(10, ddl.DropDatabase("shop"), table="shop.")])
        assert not target.exists("mirror.items")
        assert set(target.rows("mirror.people")) == {1}
        merged.apply([upsert(1, 5, name="zombie")])
        assert not target.exists("mirror.items")

        plain.apply([upsert(1, 1, name="a")])
        plain.apply([RowChange("shop.orders", "upsert", {"id": 1}, {"id": 1}, pos(2), 2, {})])
        plain.apply([schema_change(10, ddl.DropDatabase("shop"), table="shop.")])
        assert not target.exists("shop.items")
        assert not target.exists("shop.orders")
    finally:
        merged.close()
        plain.close()


def test_create_table_like_copies_the_sinks_table(sink: PostgresSink, target: Target) -> None:
    """CREATE TABLE copy LIKE items: the sink's items' columns and key, no rows."""
    sink.apply([upsert(1, 1, name="a")])
    copy = ddl.TableName("shop", "copy")
    like = ddl.CreateTable(copy, (), (), like=ITEMS)
    sink.apply([schema_change(2, like)])
    assert target.columns("shop.copy") == target.columns()
    sink.apply([RowChange("shop.copy", "upsert", {"id": 1}, {"id": 1}, pos(3), 3, TYPES)])
    assert set(target.rows("shop.copy")) == {1}


def test_a_batch_with_ddl_replayed_twice_changes_nothing(
    sink: PostgresSink, target: Target
) -> None:
    """Rows and DDL of every kind in one batch, applied three times: the same tables, rows,
    tombstones and positions (xmin shows nothing was even rewritten)."""
    batch = [
        upsert(1, 1, name="a", price="1.00"),
        upsert(2, 2, name="b"),
        delete(3, 3),
        schema_change(4, column("stock", "int", ddl.Default("value", "5"))),
        upsert(4, 5, name="d", stock="1"),
        schema_change(6, ddl.RenameColumn(ITEMS, "name", "title")),
        upsert(1, 7, title="a2"),
        schema_change(8, ddl.TruncateTable(ITEMS)),
        RowChange("shop.items", "upsert", {"id": 5}, {"id": 5, "title": "e"}, pos(9), 9, TYPES),
        delete(6, 10),
        schema_change(11, ddl.ModifyColumn(ITEMS, "price", "decimal(12,4)")),
        schema_change(12, ddl.RenameTable(ITEMS, ddl.TableName("shop", "goods"))),
        RowChange("shop.goods", "upsert", {"id": 7}, {"id": 7}, pos(13), 13, TYPES),
    ]

    def state() -> list[Any]:
        return [
            target.query(
                "SELECT id, title, stock, price::text, _tl_position, xmin::text FROM shop.goods "
                "ORDER BY id"
            ),
            target.columns("shop.goods"),
            target.exists("shop.items"),
            target.query("SELECT *, xmin::text FROM shop._tidelake_deletes ORDER BY 1, 2"),
            target.query("SELECT *, xmin::text FROM shop._tidelake_schema ORDER BY 1"),
        ]

    sink.apply(batch)
    first = state()
    assert [(r[0], r[1], r[2]) for r in first[0]] == [(5, "e", None), (7, None, None)]
    assert first[1]["price"] == "numeric(12,4)"
    assert first[2] is False
    assert [(r[0], r[1]) for r in first[3]] == [("goods", "6")]
    sink.apply(batch)
    assert state() == first
    sink.apply(batch)
    assert state() == first


def test_a_crash_mid_batch_leaves_nothing_half_applied(
    sink: PostgresSink, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies right after the batch's DDL ran: SinkUnavailable, and neither the
    rows before it nor the DDL are in the table; the batch applied again lands whole."""
    sink.apply([upsert(1, 1, name="a")])
    batch = [
        upsert(2, 2, name="b"),
        schema_change(3, column("stock", "int", ddl.Default("value", "5"))),
        upsert(3, 4, name="c", stock="1"),
    ]
    add_column = sink._add_column

    def then_die(*args: Any) -> None:
        add_column(*args)
        target.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = 'tidelake-route'",
            target.dbname,
        )

    monkeypatch.setattr(sink, "_add_column", then_die)
    with pytest.raises(SinkUnavailable):
        sink.apply(batch)
    assert "stock" not in target.columns()
    assert set(target.rows()) == {1}
    assert target.query("SELECT * FROM shop._tidelake_schema WHERE ddl_position IS NOT NULL") == []
    monkeypatch.undo()
    sink.apply(batch)
    assert {k: r["stock"] for k, r in target.rows().items()} == {1: 5, 2: 5, 3: 1}


def test_a_narrowing_type_change_that_would_round_is_rejected(
    sink: PostgresSink, target: Target
) -> None:
    """PostgreSQL casts numeric(10,2) to numeric(10,1) by rounding, without an error: the
    sink refuses the change instead (nothing altered), and takes it when every stored value
    fits."""
    sink.apply([upsert(1, 1, name="a", price="1.25")])
    with pytest.raises(ChangesRejected, match=r"would change the stored value '1\.25'") as raised:
        sink.apply([schema_change(2, ddl.ModifyColumn(ITEMS, "price", "decimal(10,1)"), seq=20)])
    assert raised.value.seqs == (20,)
    assert target.query("SELECT price::text FROM shop.items") == [("1.25",)]
    sink.apply([upsert(1, 3, name="a", price="1.20")])
    sink.apply([schema_change(4, ddl.ModifyColumn(ITEMS, "price", "decimal(10,1)"))])
    assert target.columns()["price"] == "numeric(10,1)"
    assert target.query("SELECT price::text FROM shop.items") == [("1.2",)]


def test_a_late_change_takes_the_value_an_added_column_gave_existing_rows(
    sink: PostgresSink, target: Target
) -> None:
    """A change of before ADD COLUMN … DEFAULT, never applied (a dead letter re-processed
    after the DDL): the row lands with the default, as the source holds it."""
    sink.apply([upsert(1, 1, name="a")])
    sink.apply([schema_change(5, column("stock", "int", ddl.Default("value", "7")))])
    sink.apply([upsert(2, 2, name="late")])
    assert target.query("SELECT id, name, stock FROM shop.items ORDER BY id") == [
        (1, "a", 7),
        (2, "late", 7),
    ]
