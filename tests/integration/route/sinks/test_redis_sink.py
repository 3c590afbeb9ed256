"""The Redis sink against a real private ``redis-server`` (route/sinks/redis.py,
pipeline/redis.py): the position guard in the server's script, tombstones, TTL, an unreachable
server, and what a SIGKILLed server with ``appendfsync always`` still has after a restart.

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
from tidelake.pipeline import redis as redis_server
from tidelake.pipeline.redis import RedisServer
from tidelake.route.change import ChangesRejected, RowChange, SinkUnavailable
from tidelake.route.sinks.redis import RedisSink, row_key, tombstone_key

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


def row(client: redislib.Redis, prefix: str, key: int) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(row_key(prefix, TABLE, str(key))).items()}


def tombstones(client: redislib.Redis, prefix: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in client.hgetall(tombstone_key(prefix, TABLE)).items()}


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
