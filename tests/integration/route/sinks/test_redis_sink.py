"""The Redis sink against a real private ``redis-server`` (route/sinks/redis.py,
pipeline/redis.py): the position guard in the server's script, tombstones, TTL, the source's
DDL applied between the rows (truncate, drop, rename of tables and columns, added columns), an
unreachable server, and what a SIGKILLed server with ``appendfsync always`` still has after a
restart.

Each test writes under a key prefix of its own on the module's one server.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redislib

from tidelake.config import RedisSinkConfig
from tidelake.lake import ddl
from tidelake.pipeline import redis as redis_server
from tidelake.pipeline.redis import RedisServer
from tidelake.route.change import ChangesRejected, RowChange, SinkUnavailable
from tidelake.route.sinks.redis import RedisSink, row_key, schema_key, tombstone_key

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not redis_server.available(),
        reason="redis-server is installed by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

TABLE = "shop.orders"
_prefixes = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One private redis-server (AOF, appendfsync always) for the module."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as srv:
        yield srv


@pytest.fixture
def client(server: RedisServer) -> Iterator[redislib.Redis]:
    """A plain client of the server, answering text."""
    c = redislib.Redis.from_url(server.url, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def prefix() -> str:
    return f"t{next(_prefixes)}"


def _sink(server: RedisServer, prefix: str, **kwargs: Any) -> RedisSink:
    return RedisSink(RedisSinkConfig(kind="redis", url=server.url, key_prefix=prefix, **kwargs))


@pytest.fixture
def sink(server: RedisServer, prefix: str) -> Iterator[RedisSink]:
    s = _sink(server, prefix)
    yield s
    s.close()


def pos(n: int) -> str:
    """A position as events.Position encodes one: fixed-width decimal text."""
    return f"{n:020d}.00000000000000000000"


def up(key: int, position: int, seq: int | None = None, **row: Any) -> RowChange:
    """An upsert of ``shop.orders`` row ``key``."""
    return RowChange(
        TABLE, "upsert", {"id": key}, {"id": key, **row}, pos(position), seq or position
    )


def delete(key: int, position: int, seq: int | None = None) -> RowChange:
    return RowChange(TABLE, "delete", {"id": key}, None, pos(position), seq or position)


def schema(position: int, *ops: ddl.Operation, seq: int | None = None, **kw: Any) -> RowChange:
    """A schema change at ``position`` (its operations as ``route/select.py`` gives them)."""
    return RowChange(
        TABLE, "schema", {}, None, pos(position), seq or position, operations=ops, **kw
    )


ORDERS = ddl.TableName("shop", "orders")


def row(client: redislib.Redis, prefix: str, key: int, table: str = TABLE) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(row_key(prefix, table, str(key))).items()}


def tombstones(client: redislib.Redis, prefix: str, table: str = TABLE) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(tombstone_key(prefix, table)).items()}


def rows_of(client: redislib.Redis, prefix: str, table: str) -> list[str]:
    """The keys of the table's row hashes (not its tombstone or schema hash)."""
    own = {tombstone_key(prefix, table), schema_key(prefix, table)}
    return sorted(k for k in client.keys(row_key(prefix, table, "*")) if k not in own)


def everything(client: redislib.Redis, prefix: str) -> dict[str, dict[str, str]]:
    """Every hash the sink holds under ``prefix``."""
    return {str(k): client.hgetall(k) for k in client.keys(f"{prefix}:*")}


def test_upsert_then_an_older_upsert_is_ignored(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="paid", amount="12.50", note=None, n=3, ok=True)])
    expected = {"_tl_position": pos(10), "id": "1", "status": "paid", "amount": "12.50"}
    assert {**expected, "n": "3", "ok": "true"} == row(client, prefix, 1)
    sink.apply([up(1, 9, status="new")])
    sink.apply([up(1, 10, status="same position")])
    assert "paid" == row(client, prefix, 1)["status"]
    sink.apply([up(1, 11, status="shipped")])
    assert {"_tl_position": pos(11), "id": "1", "status": "shipped"} == row(client, prefix, 1)


def test_delete_then_a_replayed_older_upsert_does_not_resurrect(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="paid"), up(2, 11, status="new")])
    sink.apply([delete(1, 12)])
    assert {} == row(client, prefix, 1)
    assert {"1": pos(12)} == tombstones(client, prefix)
    # A replay from an older sequence: the upsert before the delete, and older ones.
    sink.apply([up(1, 10, status="paid"), up(1, 12, status="same as delete"), delete(1, 11)])
    assert {} == row(client, prefix, 1)
    assert {"1": pos(12)} == tombstones(client, prefix)
    assert "new" == row(client, prefix, 2)["status"]


def test_a_newer_upsert_after_a_delete_lands_and_clears_the_tombstone(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="paid"), delete(1, 11), up(2, 12), delete(2, 13)])
    assert {"1": pos(11), "2": pos(13)} == tombstones(client, prefix)
    sink.apply([up(1, 14, status="again")])
    assert {"_tl_position": pos(14), "id": "1", "status": "again"} == row(client, prefix, 1)
    assert {"2": pos(13)} == tombstones(client, prefix)


def test_a_delete_of_an_unknown_key_still_guards_it(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([delete(5, 20)])
    sink.apply([up(5, 19, status="late")])
    assert {} == row(client, prefix, 5)
    assert {"5": pos(20)} == tombstones(client, prefix)


def test_redelivery_of_a_batch_is_a_no_op(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    batch = [up(1, 10, status="a"), up(2, 11, status="b"), delete(1, 12), up(3, 13, status="c")]
    sink.apply(batch)
    before = {k: client.hgetall(k) for k in client.keys(f"{prefix}:*")}
    sink.apply(batch)
    sink.apply(batch[1:3])
    assert before == {k: client.hgetall(k) for k in client.keys(f"{prefix}:*")}
    assert {f"{prefix}:shop.orders:2", f"{prefix}:shop.orders:3"} | {
        tombstone_key(prefix, TABLE)
    } == set(before)


def test_out_of_order_changes_within_one_batch(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply(
        [
            up(1, 30, status="newest"),
            up(1, 10, status="old"),
            up(1, 20, status="middle"),
            delete(2, 25),
            up(2, 24, status="before its delete"),
            up(3, 5, status="first"),
            up(3, 7, status="second"),
        ]
    )
    assert "newest" == row(client, prefix, 1)["status"]
    assert {} == row(client, prefix, 2)
    assert "second" == row(client, prefix, 3)["status"]


def test_tables_and_keys_with_colons_and_composite_keys(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    a = RowChange("db:x.t", "upsert", {"k": "a:b"}, {"k": "a:b", "v": "1"}, pos(1), 1)
    b = RowChange("db:x.t", "upsert", {"k": "a", "j": "b"}, {"k": "a", "j": "b"}, pos(2), 2)
    sink.apply([a, b])
    assert "1" == client.hget(f"{prefix}:db%3Ax.t:a%3Ab", "v")
    assert "b" == client.hget(f"{prefix}:db%3Ax.t:b%1Fa", "j")


def test_ttl_is_set_when_configured(
    server: RedisServer, client: redislib.Redis, prefix: str
) -> None:
    with_ttl = _sink(server, prefix, ttl_s=100)
    try:
        with_ttl.apply([up(1, 10)])
        ttl = client.ttl(row_key(prefix, TABLE, "1"))
        assert 90 <= ttl <= 100
        with_ttl.apply([up(1, 9)])  # refused: the TTL is not renewed either
        assert client.ttl(row_key(prefix, TABLE, "1")) <= ttl
        with_ttl.apply([delete(1, 11)])
        assert -1 == client.ttl(tombstone_key(prefix, TABLE))  # tombstones never expire
    finally:
        with_ttl.close()
    plain = _sink(server, prefix)
    try:
        plain.apply([up(2, 20)])
        assert -1 == client.ttl(row_key(prefix, TABLE, "2"))
    finally:
        plain.close()


def test_a_key_of_another_type_is_rejected_and_the_rest_applied(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    client.set(row_key(prefix, TABLE, "2"), "someone else's string")
    with pytest.raises(ChangesRejected) as info:
        sink.apply([up(1, 10, seq=100), up(2, 11, seq=101), up(3, 12, seq=102)])
    assert (101,) == info.value.seqs
    assert "1" == row(client, prefix, 1)["id"]
    assert "3" == row(client, prefix, 3)["id"]
    assert "someone else's string" == client.get(row_key(prefix, TABLE, "2"))


# --- the source's DDL -------------------------------------------------------------------------


def test_truncate_then_a_replayed_older_upsert_stays_gone_and_a_newer_one_lands(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a"), up(2, 11, status="b"), delete(3, 12), up(4, 13)])
    sink.apply([up(5, 14), schema(20, ddl.TruncateTable(ORDERS)), up(6, 21, status="after")])
    assert {} == row(client, prefix, 1) == row(client, prefix, 5)
    assert {} == tombstones(client, prefix)  # a delete below the truncate: the truncate guards
    assert {"applied": f"{pos(20)}#0000", "cleared": pos(20)} == client.hgetall(
        schema_key(prefix, TABLE)
    )
    assert "after" == row(client, prefix, 6)["status"]
    # A replay from before the truncate: its rows stay gone, deletes leave no tombstone.
    sink.apply([up(1, 10, status="a"), up(2, 15, status="late"), delete(7, 19)])
    assert {} == row(client, prefix, 1) == row(client, prefix, 2)
    assert {} == tombstones(client, prefix)
    sink.apply([up(1, 22, status="new"), delete(6, 23)])
    assert {"_tl_position": pos(22), "id": "1", "status": "new"} == row(client, prefix, 1)
    assert {"6": pos(23)} == tombstones(client, prefix)


def test_drop_table_then_its_rows_come_back_only_newer(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    other = RowChange("shop.items", "upsert", {"id": 1}, {"id": 1}, pos(11), 11)
    sink.apply([up(1, 10), other, schema(20, ddl.DropTable(ORDERS))])
    assert {} == row(client, prefix, 1)
    assert "1" == row(client, prefix, 1, "shop.items")["id"]
    sink.apply([up(1, 10), up(2, 19)])
    assert [] == rows_of(client, prefix, TABLE)
    sink.apply([up(1, 30, status="re-created")])
    assert "re-created" == row(client, prefix, 1)["status"]


def test_drop_database_clears_each_of_its_tables(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    def change(table: str, n: int) -> RowChange:
        return RowChange(table, "upsert", {"id": n}, {"id": n}, pos(n), n)

    keep = ["shopping.orders", "`shop.x`.t", "other.t"]
    gone = ["shop.orders", "shop.items", "shop.`a.b`"]
    sink.apply([change(t, i + 1) for i, t in enumerate(gone + keep)])
    sink.apply([schema(50, ddl.DropDatabase("shop"))])
    for i, table in enumerate(gone):
        assert {} == row(client, prefix, i + 1, table)
        assert pos(50) == client.hget(schema_key(prefix, table), "cleared")
    for i, table in enumerate(keep, start=len(gone)):
        assert str(i + 1) == row(client, prefix, i + 1, table)["id"]
        assert not client.exists(schema_key(prefix, table))


def test_drop_and_rename_column_rewrite_the_rows_below_the_change(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a", note="x"), up(2, 11, status="b"), up(3, 12, note="y")])
    sink.apply(
        [
            up(4, 13, status="d", note="z"),
            schema(20, ddl.DropColumn(ORDERS, "note"), ddl.RenameColumn(ORDERS, "status", "state")),
            up(5, 21, state="after"),
        ]
    )
    # Rewritten rows keep their own position, marked with the change's.
    mark = {"_tl_schema": pos(20)}
    assert {"_tl_position": pos(10), "id": "1", "state": "a", **mark} == row(client, prefix, 1)
    assert {"_tl_position": pos(11), "id": "2", "state": "b", **mark} == row(client, prefix, 2)
    assert {"_tl_position": pos(12), "id": "3", **mark} == row(client, prefix, 3)
    assert {"_tl_position": pos(13), "id": "4", "state": "d", **mark} == row(client, prefix, 4)
    assert {"_tl_position": pos(21), "id": "5", "state": "after"} == row(client, prefix, 5)
    # A replay of a change the row has already changes nothing.
    sink.apply([up(1, 10, status="a", note="x")])
    assert {"_tl_position": pos(10), "id": "1", "state": "a", **mark} == row(client, prefix, 1)
    # A change of before the DDL never applied (a dead letter re-processed now) lands in the
    # table's present shape: brought forward through the logged steps.
    sink.apply([up(6, 14, status="late", note="gone")])
    assert {"_tl_position": pos(14), "id": "6", "state": "late"} == row(client, prefix, 6)


def test_a_change_redelivered_after_a_later_ddl_still_lands(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    """After a kill -9, JetStream redelivers the unacknowledged batch *after* newer messages
    the restarted route already applied, a DDL among them: an update and a delete of that
    batch must still land (the rewrite keeps the rows' own positions), in the new shape."""
    sink.apply([up(1, 10, status="a"), up(2, 11, status="b")])
    sink.apply([schema(30, ddl.RenameColumn(ORDERS, "status", "state"))])  # the newer batch
    sink.apply([up(1, 20, status="updated"), delete(2, 21)])  # the redelivered one
    assert {"_tl_position": pos(20), "id": "1", "state": "updated"} == row(client, prefix, 1)
    assert {} == row(client, prefix, 2)


def test_a_column_change_leaves_a_row_a_newer_change_wrote(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    """A row above the change (written by a replay past it, say) already has the new shape."""
    sink.apply([up(1, 10, status="a"), up(2, 30, state="new shape")])
    sink.apply([schema(20, ddl.RenameColumn(ORDERS, "status", "state"))])
    assert {"_tl_position": pos(10), "id": "1", "state": "a", "_tl_schema": pos(20)} == row(
        client, prefix, 1
    )
    assert {"_tl_position": pos(30), "id": "2", "state": "new shape"} == row(client, prefix, 2)


def test_add_column_gives_existing_rows_the_default(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a"), up(2, 11)])
    spec = ddl.ColumnSpec
    sink.apply(
        [
            schema(
                20,
                ddl.AddColumn(ORDERS, spec("note", "varchar(9)", ddl.Default("value", "n/a"))),
                ddl.AddColumn(ORDERS, spec("nothing", "int", ddl.NULL_DEFAULT)),
                ddl.AddColumn(ORDERS, spec("at", "datetime(3)", ddl.Default("current_timestamp"))),
                commit_ts_ms=1714979289123,  # 2024-05-06 07:08:09.123 UTC
            )
        ]
    )
    at = "2024-05-06 07:08:09.000"  # to the second, as the lake (route/schema.py)
    mark = {"_tl_schema": pos(20)}
    assert {"_tl_position": pos(10), "id": "1", "status": "a", "note": "n/a", "at": at, **mark} == (
        row(client, prefix, 1)
    )
    assert {"_tl_position": pos(11), "id": "2", "note": "n/a", "at": at, **mark} == row(
        client, prefix, 2
    )


def test_current_timestamp_is_the_commit_time_in_the_source_zone(
    server: RedisServer, client: redislib.Redis, prefix: str
) -> None:
    config = RedisSinkConfig(kind="redis", url=server.url, key_prefix=prefix)
    paris = RedisSink(config, source_timezone="Europe/Paris")
    try:
        paris.apply([up(1, 10)])
        add = ddl.AddColumn(
            ORDERS, ddl.ColumnSpec("at", "timestamp", ddl.Default("current_timestamp"))
        )
        paris.apply([schema(20, add, commit_ts_ms=1714979289123)])
        assert "2024-05-06 09:08:09" == row(client, prefix, 1)["at"]
    finally:
        paris.close()


def test_modify_column_to_a_decimal_gives_its_values_the_scale(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    sink.apply([up(1, 10, price="1.5", label="x"), up(2, 11, price="2.125"), up(3, 12)])
    modify = ddl.ModifyColumn(ORDERS, "price", "decimal(12,2)", new_name="cost")
    sink.apply([schema(20, modify, ddl.ModifyColumn(ORDERS, "label", "text"))])
    assert {
        "_tl_position": pos(10), "id": "1", "cost": "1.50", "label": "x", "_tl_schema": pos(20)
    } == row(client, prefix, 1)  # fmt: skip
    assert "2.13" == row(client, prefix, 2)["cost"]
    assert {"_tl_position": pos(12), "id": "3"} == row(client, prefix, 3)  # nothing to change


def test_rename_table_moves_the_rows_and_drops_what_the_new_name_held(
    server: RedisServer, client: redislib.Redis, prefix: str
) -> None:
    new = "shop.orders_v2"
    sink = _sink(server, prefix, ttl_s=1000)
    try:
        stale = RowChange(new, "upsert", {"id": 9}, {"id": 9, "v": "stale"}, pos(5), 5)
        sink.apply([stale, up(1, 10, status="a"), up(2, 11, status="b"), delete(3, 12)])
        rename = ddl.RenameTable(ORDERS, ddl.TableName("shop", "orders_v2"))
        after = RowChange(new, "upsert", {"id": 2}, {"id": 2, "status": "c"}, pos(21), 21)
        sink.apply([schema(20, rename), after])
        assert {} == row(client, prefix, 1) == row(client, prefix, 9, new)
        assert {"_tl_position": pos(10), "id": "1", "status": "a"} == row(client, prefix, 1, new)
        assert "c" == row(client, prefix, 2, new)["status"]
        assert 900 < client.ttl(row_key(prefix, new, "1")) <= 1000  # moved with its TTL
        assert [] == rows_of(client, prefix, TABLE)
        assert {} == tombstones(client, prefix)
        for table in (TABLE, new):
            assert pos(20) == client.hget(schema_key(prefix, table), "cleared")
        # Replays: the old name's rows and the new name's stale row stay gone.
        sink.apply([up(1, 10, status="a"), stale, schema(20, rename)])
        assert [] == rows_of(client, prefix, TABLE)
        assert {} == row(client, prefix, 9, new)
        assert "a" == row(client, prefix, 1, new)["status"]
    finally:
        sink.close()


def test_swapping_two_tables_by_renames(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    a, b, tmp = (ddl.TableName("shop", n) for n in ("a", "b", "tmp"))

    def put(table: ddl.TableName, n: int) -> RowChange:
        return RowChange(table.table_id, "upsert", {"id": n}, {"id": n}, pos(n), n)

    swap = schema(20, ddl.RenameTable(a, tmp), ddl.RenameTable(b, a), ddl.RenameTable(tmp, b))
    sink.apply([put(a, 1), put(b, 2), swap])
    sink.apply([put(a, 1), put(b, 2), swap])  # a replay
    assert {"_tl_position": pos(1), "id": "1"} == row(client, prefix, 1, b.table_id)
    assert {"_tl_position": pos(2), "id": "2"} == row(client, prefix, 2, a.table_id)
    assert {} == row(client, prefix, 1, a.table_id) == row(client, prefix, 2, b.table_id)
    assert [] == rows_of(client, prefix, tmp.table_id)


def test_replaying_a_batch_with_ddl_changes_nothing(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    add = ddl.AddColumn(ORDERS, ddl.ColumnSpec("a", "int", ddl.Default("value", "1")))
    batch = [
        up(1, 10, status="x"),
        up(2, 11, status="y"),
        schema(12, ddl.RenameColumn(ORDERS, "status", "a"), add),
        up(3, 13, a="3"),
        delete(2, 14),
        schema(15, ddl.TruncateTable(ORDERS)),
        up(4, 16, a="4"),
        schema(17, ddl.DropColumn(ORDERS, "a")),
    ]
    sink.apply(batch)
    before = everything(client, prefix)
    assert {"_tl_position": pos(16), "id": "4", "_tl_schema": pos(17)} == row(client, prefix, 4)
    sink.apply(batch)
    sink.apply(batch[2:])
    assert before == everything(client, prefix)


def test_a_column_change_killed_halfway_is_finished_once(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    """``RENAME a TO b, ADD a``, applied again as if killed before ``applied`` was set: the
    rows rewritten already are not rewritten twice (b would get the added a's value)."""
    add = ddl.AddColumn(ORDERS, ddl.ColumnSpec("a", "int", ddl.Default("value", "0")))
    change = schema(20, ddl.RenameColumn(ORDERS, "a", "b"), add)
    sink.apply([up(1, 10, a="7"), up(2, 11, a="8")])
    sink.apply([change])
    client.hdel(schema_key(prefix, TABLE), "applied")
    client.hset(row_key(prefix, TABLE, "2"), mapping={"_tl_position": pos(11), "a": "8"})
    client.hdel(row_key(prefix, TABLE, "2"), "b", "_tl_schema")  # as if not reached before
    sink.apply([change])
    mark = {"_tl_schema": pos(20)}
    assert {"_tl_position": pos(10), "id": "1", "a": "0", "b": "7", **mark} == row(
        client, prefix, 1
    )
    assert {"_tl_position": pos(11), "id": "2", "a": "0", "b": "8", **mark} == row(
        client, prefix, 2
    )


def test_a_refused_schema_change_dead_letters_only_its_seq(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    per_row = ddl.AddColumn(
        ORDERS, ddl.ColumnSpec("u", "varchar(36)", ddl.Default("expression", "(uuid())"))
    )
    batch = [up(1, 10), schema(11, per_row, seq=111), up(2, 12)]
    with pytest.raises(ChangesRejected) as info:
        sink.apply(batch)
    assert (111,) == info.value.seqs
    assert "computed per row" in info.value.reason
    assert {} == everything(client, prefix)  # refused before anything is written
    sink.apply([batch[0], batch[2]])  # the route applies the rest
    assert {"_tl_position": pos(10), "id": "1"} == row(client, prefix, 1)


def test_a_rename_onto_a_key_of_another_type_dead_letters_the_rename(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    new = ddl.TableName("shop", "v2")
    client.set(row_key(prefix, new.table_id, "1"), "someone else's")
    with pytest.raises(ChangesRejected) as info:
        sink.apply([up(1, 10), schema(20, ddl.RenameTable(ORDERS, new), seq=200), up(2, 21)])
    assert (200,) == info.value.seqs
    assert "another Redis type" in info.value.reason
    assert "1" == row(client, prefix, 1)["id"]


def test_a_schema_hash_of_another_type_dead_letters_the_table_s_changes(
    sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    client.set(schema_key(prefix, TABLE), "someone else's")
    other = RowChange("shop.items", "upsert", {"id": 1}, {"id": 1}, pos(9), 9)
    with pytest.raises(ChangesRejected) as info:
        sink.apply([other, schema(20, ddl.TruncateTable(ORDERS), seq=200), up(1, 21)])
    assert (200,) == info.value.seqs
    assert "another Redis type" in info.value.reason
    with pytest.raises(ChangesRejected) as info:
        sink.apply([other, up(1, 21)])
    assert (21,) == info.value.seqs
    assert "1" == row(client, prefix, 1, "shop.items")["id"]


def test_password(tmp_path: Path) -> None:
    with RedisServer(tmp_path, password="s3cret") as locked:
        config = RedisSinkConfig(kind="redis", url=locked.url, key_prefix="p")
        anonymous = RedisSink(config)
        with pytest.raises(SinkUnavailable):
            anonymous.apply([up(1, 1)])
        anonymous.close()
        secret_file = tmp_path / "password"
        secret_file.write_text("s3cret\n")
        with_file = RedisSink(config.model_copy(update={"password_file": secret_file}))
        with_file.apply([up(1, 1)])
        with_file.close()


def test_kill_then_restart_keeps_what_was_applied(
    server: RedisServer, sink: RedisSink, client: redislib.Redis, prefix: str
) -> None:
    """Last in the module: it SIGKILLs the module's server (and restarts it)."""
    sink.apply([up(1, 10, status="paid"), up(2, 11, status="new")])
    sink.apply([delete(2, 12)])
    server.kill()
    try:
        with pytest.raises(SinkUnavailable):
            sink.apply([up(3, 13)])
    finally:
        server.start()
    assert {"_tl_position": pos(10), "id": "1", "status": "paid"} == row(client, prefix, 1)
    assert {} == row(client, prefix, 2)
    assert {"2": pos(12)} == tombstones(client, prefix)
    # The same sink object reconnects; the batch the server never took applies now.
    sink.apply([up(3, 13), up(2, 11, status="replayed")])
    assert "3" == row(client, prefix, 3)["id"]
    assert {} == row(client, prefix, 2)
