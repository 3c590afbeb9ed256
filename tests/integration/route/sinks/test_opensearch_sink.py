"""The OpenSearch sink against a real private single-node OpenSearch 2.19
(route/sinks/opensearch.py, pipeline/opensearch.py): upserts and tombstones through the
position guard, the alias that hides tombstones, mapping from column types, a value refused per
item, the source's DDL applied between the rows (truncate, drop, rename of tables and columns,
added and retyped columns), and an unreachable server.

Each test writes under an index prefix of its own on the module's one node.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tidelake.config import OpenSearchSinkConfig
from tidelake.lake import ddl
from tidelake.pipeline import opensearch as opensearch_server
from tidelake.pipeline.opensearch import OpenSearchServer
from tidelake.route.change import ChangesRejected, RowChange, SinkUnavailable
from tidelake.route.sinks.opensearch import OpenSearchSink, alias_name, index_name, schema_index

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not opensearch_server.available(),
        reason="OpenSearch is laid out by scripts/setup with TIDELAKE_SETUP_TESTS=1 (make test)",
    ),
]

TABLE = "shop.orders"
TYPES = {"id": "int(11)", "status": "varchar(20)", "amount": "decimal(10,2)", "paid": "boolean"}
_prefixes = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenSearchServer]:
    """One private OpenSearch node for the module."""
    with OpenSearchServer(tmp_path_factory.mktemp("opensearch")) as srv:
        yield srv


@pytest.fixture
def client(server: OpenSearchServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture
def prefix() -> str:
    return f"t{next(_prefixes)}-"


@pytest.fixture
def sink(server: OpenSearchServer, prefix: str) -> Iterator[OpenSearchSink]:
    s = OpenSearchSink(OpenSearchSinkConfig(kind="opensearch", url=server.url, index_prefix=prefix))
    yield s
    s.close()


def pos(n: int) -> str:
    """A position as events.Position encodes one: fixed-width decimal text."""
    return f"{n:020d}.00000000000000000000"


def up(key: int, position: int, seq: int | None = None, **row: Any) -> RowChange:
    return RowChange(
        TABLE,
        "upsert",
        {"id": key},
        {"id": key, **row},
        pos(position),
        seq or position,
        column_types=TYPES,
    )


def delete(key: int, position: int, seq: int | None = None) -> RowChange:
    return RowChange(TABLE, "delete", {"id": key}, None, pos(position), seq or position)


def doc(client: httpx.Client, prefix: str, key: int) -> dict[str, Any] | None:
    """The stored document (row or tombstone) of ``key``; None when there is none."""
    path = f"/{quote(index_name(prefix, TABLE), safe='')}/_doc/{key}"
    resp = client.get(path)
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    source: dict[str, Any] = resp.json()["_source"]
    return source


def live_ids(client: httpx.Client, prefix: str, table: str = TABLE) -> list[str]:
    """The ids the alias shows (live rows), after a refresh."""
    alias = quote(alias_name(prefix, table), safe="")
    client.post(f"/{alias}/_refresh").raise_for_status()
    resp = client.post(f"/{alias}/_search", json={"size": 100, "sort": [{"_id": "asc"}]})
    resp.raise_for_status()
    return [hit["_id"] for hit in resp.json()["hits"]["hits"]]


ORDERS = ddl.TableName("shop", "orders")


def schema(position: int, *ops: ddl.Operation, seq: int | None = None, **kw: Any) -> RowChange:
    """A schema change at ``position`` (its operations as ``route/select.py`` gives them)."""
    return RowChange(
        TABLE, "schema", {}, None, pos(position), seq or position, operations=ops, **kw
    )


def put(table: str, key: int, position: int, **row: Any) -> RowChange:
    return RowChange(table, "upsert", {"id": key}, {"id": key, **row}, pos(position), position)


def docs(client: httpx.Client, prefix: str, table: str = TABLE) -> dict[str, dict[str, Any]]:
    """Every document (rows and tombstones) of the table's concrete index; {} when none."""
    index = quote(index_name(prefix, table), safe="")
    if client.post(f"/{index}/_refresh").status_code == 404:
        return {}
    resp = client.post(f"/{index}/_search", json={"size": 1000})
    resp.raise_for_status()
    return {hit["_id"]: hit["_source"] for hit in resp.json()["hits"]["hits"]}


def fields(client: httpx.Client, prefix: str, table: str = TABLE) -> dict[str, Any]:
    index = quote(index_name(prefix, table), safe="")
    mapping = client.get(f"/{index}/_mapping").json()
    properties: dict[str, Any] = next(iter(mapping.values()))["mappings"]["properties"]
    return properties


def record(client: httpx.Client, prefix: str, table: str = TABLE) -> dict[str, Any] | None:
    resp = client.get(f"/{quote(schema_index(prefix), safe='')}/_doc/{quote(table, safe='')}")
    if resp.status_code == 404:
        return None
    source: dict[str, Any] = resp.json()["_source"]
    return source


def test_upserts_and_deletes_land(sink: OpenSearchSink, client: httpx.Client, prefix: str) -> None:
    sink.apply(
        [
            up(1, 10, status="paid", amount="12.50", paid="t"),
            up(2, 11, status="new", amount="0.10", paid="f"),
            up(3, 12, status="new"),
            delete(3, 13),
        ]
    )
    assert {
        "id": 1,
        "status": "paid",
        "amount": "12.50",
        "paid": True,
        "_tl_position": pos(10),
    } == doc(client, prefix, 1)
    assert {"_tl_deleted": True, "_tl_position": pos(13)} == doc(client, prefix, 3)
    assert ["1", "2"] == live_ids(client, prefix)
    mapping = client.get(f"/{quote(index_name(prefix, TABLE), safe='')}/_mapping").json()
    fields = next(iter(mapping.values()))["mappings"]["properties"]
    assert "long" == fields["id"]["type"]
    assert "keyword" == fields["amount"]["type"]
    assert "double" == fields["amount"]["fields"]["number"]["type"]
    assert "boolean" == fields["paid"]["type"]
    assert "keyword" == fields["_tl_position"]["type"]
    # The exact decimal text is stored; its double sub-field answers a range query.
    resp = client.post(
        f"/{quote(alias_name(prefix, TABLE), safe='')}/_search",
        json={"query": {"range": {"amount.number": {"gt": 1}}}},
    )
    assert ["1"] == [hit["_id"] for hit in resp.json()["hits"]["hits"]]


def test_an_older_upsert_is_ignored_and_a_replay_changes_nothing(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    batch = [up(1, 10, status="paid"), up(1, 12, status="shipped")]
    sink.apply(batch)
    sink.apply([up(1, 11, status="older")])
    sink.apply([up(1, 12, status="same position")])
    assert {"id": 1, "status": "shipped", "_tl_position": pos(12)} == doc(client, prefix, 1)
    sink.apply(batch)  # a redelivery
    assert {"id": 1, "status": "shipped", "_tl_position": pos(12)} == doc(client, prefix, 1)
    sink.apply([up(1, 13, status="done")])
    assert "done" == (doc(client, prefix, 1) or {})["status"]


def test_a_delete_then_an_older_upsert_does_not_resurrect(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="paid"), up(2, 11, status="new")])
    sink.apply([delete(1, 12)])
    sink.apply([up(1, 10, status="paid"), up(1, 12, status="same as delete"), delete(1, 11)])
    assert {"_tl_deleted": True, "_tl_position": pos(12)} == doc(client, prefix, 1)
    assert ["2"] == live_ids(client, prefix)
    sink.apply([up(1, 14, status="back")])
    assert {"id": 1, "status": "back", "_tl_position": pos(14)} == doc(client, prefix, 1)
    assert ["1", "2"] == live_ids(client, prefix)


def test_a_new_column_is_mapped_on_first_sight(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="new")])
    change = RowChange(
        TABLE,
        "upsert",
        {"id": 1},
        {"id": 1, "status": "new", "placed": "2024-05-06 07:08:09.123456"},
        pos(11),
        11,
        column_types={**TYPES, "placed": "datetime(6)"},
    )
    sink.apply([change])
    stored = doc(client, prefix, 1) or {}
    assert "2024-05-06 07:08:09.123456" == stored["placed"]
    mapping = client.get(f"/{quote(index_name(prefix, TABLE), safe='')}/_mapping").json()
    assert "date" == next(iter(mapping.values()))["mappings"]["properties"]["placed"]["type"]


def test_a_bad_value_is_rejected_per_item(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    with pytest.raises(ChangesRejected) as caught:
        sink.apply([up(1, 10, status="ok"), up(2, 11, status="ok", amount="abc"), up(3, 12)])
    assert (11,) == caught.value.seqs
    assert "amount" in caught.value.reason
    assert ["1", "3"] == live_ids(client, prefix)
    # The route applies the rest again: harmless.
    sink.apply([up(1, 10, status="ok"), up(3, 12)])
    assert ["1", "3"] == live_ids(client, prefix)


def test_a_column_that_is_no_field_is_rejected_before_writing(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    with pytest.raises(ChangesRejected) as caught:
        sink.apply([up(1, 10, status="ok"), up(2, 11, **{"a.b": 1})])
    assert (11,) == caught.value.seqs


# --- the source's DDL -------------------------------------------------------------------------


def test_truncate_then_a_replayed_older_upsert_stays_gone_and_a_newer_one_lands(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a"), up(2, 11, status="b"), delete(3, 12)])
    sink.apply([up(4, 13), schema(20, ddl.TruncateTable(ORDERS)), up(5, 21, status="after")])
    assert ["5"] == list(docs(client, prefix))  # the tombstone below the truncate went too
    assert {"table": TABLE, "applied": f"{pos(20)}#0000", "cleared": pos(20)} == record(
        client, prefix
    )
    assert "long" == fields(client, prefix)["id"]["type"]  # the index and its mapping stay
    # A replay from before the truncate: rows stay gone, deletes leave no tombstone.
    sink.apply([up(1, 10, status="a"), up(2, 15, status="late"), delete(7, 19)])
    assert ["5"] == list(docs(client, prefix))
    # A new sink (no cached position) refuses them the same.
    again = OpenSearchSink(sink.config)
    try:
        again.apply([up(1, 10, status="a"), up(2, 15, status="late")])
        assert ["5"] == list(docs(client, prefix))
        again.apply([up(1, 22, status="new")])
    finally:
        again.close()
    assert {"id": 1, "status": "new", "_tl_position": pos(22)} == doc(client, prefix, 1)
    assert ["1", "5"] == live_ids(client, prefix)


def test_drop_table_deletes_the_index_and_a_recreated_table_gets_its_new_types(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a"), put("shop.items", 1, 11), schema(20, ddl.DropTable(ORDERS))])
    index = quote(index_name(prefix, TABLE), safe="")
    assert 404 == client.get(f"/{index}").status_code
    assert ["1"] == live_ids(client, prefix, "shop.items")
    sink.apply([up(1, 10, status="a"), up(2, 19)])  # a replay: nothing comes back
    assert 404 == client.get(f"/{index}").status_code
    create = ddl.CreateTable(
        ORDERS, (ddl.ColumnSpec("id", "varchar(10)"), ddl.ColumnSpec("n", "int")), ("id",)
    )
    row = RowChange(TABLE, "upsert", {"id": "a"}, {"id": "a", "n": "3"}, pos(31), 31)
    sink.apply([schema(30, create), row])
    assert "keyword" == fields(client, prefix)["id"]["type"]
    assert "long" == fields(client, prefix)["n"]["type"]
    assert ["a"] == live_ids(client, prefix)


def test_create_table_maps_the_declared_columns_and_a_replay_does_not_bring_it_back(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    columns = (ddl.ColumnSpec("id", "bigint"), ddl.ColumnSpec("at", "datetime(3)"))
    create = schema(10, ddl.CreateTable(ORDERS, columns, ("id",)))
    sink.apply([create])
    assert [] == live_ids(client, prefix)  # the alias exists, empty
    assert "date" == fields(client, prefix)["at"]["type"]
    sink.apply([schema(20, ddl.DropTable(ORDERS))])
    sink.apply([create])
    assert 404 == client.get(f"/{quote(index_name(prefix, TABLE), safe='')}").status_code


def test_drop_database_drops_each_of_its_tables(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    gone, keep = ["shop.orders", "shop.Items"], ["shopping.orders", "`shop.x`.t"]
    sink.apply([put(t, 1, i + 1) for i, t in enumerate(gone + keep)])
    sink.apply([schema(50, ddl.DropDatabase("shop"))])
    for table in gone:
        assert {} == docs(client, prefix, table)
        assert pos(50) == (record(client, prefix, table) or {})["cleared"]
    for table in keep:
        assert ["1"] == live_ids(client, prefix, table)
        assert record(client, prefix, table) is None


def test_drop_and_rename_column_rewrite_the_rows_below_the_change(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a", amount="1.50"), up(2, 11, amount="2.00"), delete(3, 12)])
    sink.apply(
        [
            up(4, 13, status="d"),
            schema(20, ddl.DropColumn(ORDERS, "amount"), ddl.RenameColumn(ORDERS, "status", "st")),
            RowChange(TABLE, "upsert", {"id": 5}, {"id": 5, "st": "after"}, pos(21), 21),
            up(6, 30, st="newer"),
        ]
    )
    # Rewritten documents keep their own position, marked with the change's.
    mark = {"_tl_schema": pos(20)}
    assert {
        "1": {"id": 1, "st": "a", "_tl_position": pos(10), **mark},
        "2": {"id": 2, "_tl_position": pos(11), **mark},
        "3": {"_tl_deleted": True, "_tl_position": pos(12)},
        "4": {"id": 4, "st": "d", "_tl_position": pos(13), **mark},
        "5": {"id": 5, "st": "after", "_tl_position": pos(21)},
        "6": {"id": 6, "st": "newer", "_tl_position": pos(30)},
    } == docs(client, prefix)
    assert fields(client, prefix)["st"] == fields(client, prefix)["status"]  # mapped as it was
    sink.apply([up(1, 10, status="a", amount="1.50")])  # a replay: nothing changes
    assert {"id": 1, "st": "a", "_tl_position": pos(10), **mark} == doc(client, prefix, 1)
    # A change newer than the row but older than the DDL, delivered after it (a redelivery
    # after a kill comes after newer messages): it lands, in the present shape.
    sink.apply([up(1, 15, status="late update"), delete(2, 16)])
    assert {"id": 1, "st": "late update", "_tl_position": pos(15)} == doc(client, prefix, 1)
    assert {"_tl_deleted": True, "_tl_position": pos(16)} == doc(client, prefix, 2)
    # A change of before the DDL never applied (a dead letter re-processed now) lands in the
    # table's present shape: brought forward through the logged steps.
    sink.apply([up(7, 14, status="late", amount="9.99")])
    assert {"id": 7, "st": "late", "_tl_position": pos(14)} == doc(client, prefix, 7)


def test_add_column_gives_existing_rows_the_default(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="a"), up(2, 11), delete(3, 12)])
    spec = ddl.ColumnSpec
    sink.apply(
        [
            schema(
                20,
                ddl.AddColumn(ORDERS, spec("flag", "boolean", ddl.Default("value", "1"))),
                ddl.AddColumn(ORDERS, spec("nothing", "int", ddl.NULL_DEFAULT)),
                ddl.AddColumn(ORDERS, spec("at", "datetime(3)", ddl.Default("current_timestamp"))),
                commit_ts_ms=1714979289123,  # 2024-05-06 07:08:09.123 UTC
            )
        ]
    )
    at = "2024-05-06 07:08:09.000"  # to the second, as the lake (route/schema.py)
    assert {
        "id": 1, "status": "a", "flag": True, "at": at, "_tl_position": pos(10),
        "_tl_schema": pos(20),
    } == doc(client, prefix, 1)  # fmt: skip
    assert {"_tl_deleted": True, "_tl_position": pos(12)} == doc(client, prefix, 3)
    mapped = fields(client, prefix)
    assert ("boolean", "long", "date") == tuple(
        mapped[c]["type"] for c in ("flag", "nothing", "at")
    )
    assert ["1", "2"] == live_ids(client, prefix)  # refreshed: the date field answers ranges
    resp = client.post(
        f"/{quote(alias_name(prefix, TABLE), safe='')}/_search",
        json={"query": {"range": {"at": {"gte": "2024-05-06 07:08:09"}}}},
    )
    assert 2 == len(resp.json()["hits"]["hits"])


def test_modify_column_rescales_a_decimal_and_refuses_a_new_field_type(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, amount="1.5", status="a"), up(2, 11, amount="2.125")])
    widen = ddl.ModifyColumn(ORDERS, "amount", "decimal(12,2)", new_name="total")
    sink.apply([schema(20, widen, ddl.ModifyColumn(ORDERS, "status", "text"))])
    assert {
        "id": 1, "total": "1.50", "status": "a", "_tl_position": pos(10), "_tl_schema": pos(20)
    } == doc(client, prefix, 1)  # fmt: skip
    assert "2.13" == (doc(client, prefix, 2) or {})["total"]
    retype = ddl.ModifyColumn(ORDERS, "id", "varchar(20)")
    with pytest.raises(ChangesRejected) as caught:
        sink.apply([schema(30, retype, seq=300), up(3, 31, status="applied")])
    assert (300,) == caught.value.seqs
    assert "cannot re-type a field" in caught.value.reason
    assert "long" == fields(client, prefix)["id"]["type"]
    sink.apply([up(3, 31, status="applied")])  # the route applies the rest
    assert ["1", "2", "3"] == live_ids(client, prefix)


def test_rename_table_moves_the_rows_and_drops_what_the_new_name_held(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    new = "shop.orders_v2"
    stale = put(new, 9, 5, v="stale")
    sink.apply([stale, up(1, 10, status="a", amount="1.10"), up(2, 11), delete(3, 12)])
    rename = ddl.RenameTable(ORDERS, ddl.TableName("shop", "orders_v2"))
    sink.apply([schema(20, rename), put(new, 2, 21, status="c")])
    assert 404 == client.get(f"/{quote(index_name(prefix, TABLE), safe='')}").status_code
    assert {
        "1": {"id": 1, "status": "a", "amount": "1.10", "_tl_position": pos(10)},
        "2": {"id": 2, "status": "c", "_tl_position": pos(21)},
    } == docs(client, prefix, new)
    assert "keyword" == fields(client, prefix, new)["amount"]["type"]
    assert "v" not in fields(client, prefix, new)  # the stale index went with its rows
    for table in (TABLE, new):
        assert pos(20) == (record(client, prefix, table) or {})["cleared"]
    sink.apply([up(1, 10, status="a"), stale, schema(20, rename)])  # a replay
    assert 404 == client.get(f"/{quote(index_name(prefix, TABLE), safe='')}").status_code
    assert ["1", "2"] == live_ids(client, prefix, new)


def test_replaying_a_batch_with_ddl_changes_nothing(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    add = ddl.AddColumn(ORDERS, ddl.ColumnSpec("n", "int", ddl.Default("value", "1")))
    batch = [
        up(1, 10, status="x"),
        up(2, 11, status="y"),
        schema(12, ddl.RenameColumn(ORDERS, "status", "s"), add),
        RowChange(TABLE, "upsert", {"id": 3}, {"id": 3, "s": "z", "n": 3}, pos(13), 13),
        delete(2, 14),
        schema(15, ddl.TruncateTable(ORDERS)),
        RowChange(TABLE, "upsert", {"id": 4}, {"id": 4, "s": "w", "n": 4}, pos(16), 16),
        schema(17, ddl.DropColumn(ORDERS, "s")),
    ]
    sink.apply(batch)
    before = (docs(client, prefix), fields(client, prefix), record(client, prefix))
    assert {"4": {"id": 4, "n": 4, "_tl_position": pos(16), "_tl_schema": pos(17)}} == before[0]
    sink.apply(batch)
    sink.apply(batch[2:])
    assert before == (docs(client, prefix), fields(client, prefix), record(client, prefix))


def test_a_refused_schema_change_dead_letters_only_its_seq(
    sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    per_row = ddl.AddColumn(
        ORDERS, ddl.ColumnSpec("u", "varchar(36)", ddl.Default("expression", "(uuid())"))
    )
    batch = [up(1, 10), schema(11, per_row, seq=111), up(2, 12)]
    with pytest.raises(ChangesRejected) as caught:
        sink.apply(batch)
    assert (111,) == caught.value.seqs
    assert "computed per row" in caught.value.reason
    assert {} == docs(client, prefix)  # refused before anything is written
    zero = ddl.AddColumn(ORDERS, ddl.ColumnSpec("d", "date", ddl.Default("value", "0000-00-00")))
    sink.apply([batch[0], batch[2]])
    with pytest.raises(ChangesRejected) as caught:
        sink.apply([schema(20, zero, seq=200), up(3, 21)])
    assert (200,) == caught.value.seqs
    assert "0000-00-00" in caught.value.reason
    assert ["1", "2"] == live_ids(client, prefix)


def test_a_truncate_by_another_writer_removes_what_this_batch_wrote_below_it(
    server: OpenSearchServer, sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    """The guard takes the cleared position as a parameter: a batch racing another writer's
    truncate is checked again after it is written."""
    sink.apply([up(1, 10)])  # this sink knows the table: nothing cleared
    other = OpenSearchSink(sink.config)
    try:
        other.apply([schema(20, ddl.TruncateTable(ORDERS))])
    finally:
        other.close()
    sink.apply([up(2, 15), up(3, 25)])
    assert ["3"] == live_ids(client, prefix)


def test_an_unreachable_server_is_unavailable(
    server: OpenSearchServer, sink: OpenSearchSink, client: httpx.Client, prefix: str
) -> None:
    sink.apply([up(1, 10, status="paid")])
    server.kill()
    try:
        with pytest.raises(SinkUnavailable):
            sink.apply([up(1, 11, status="shipped")])
    finally:
        server.start()
    # Acknowledged before the kill: still there (the translog was fsynced per request).
    assert "paid" == (doc(client, prefix, 1) or {})["status"]
    sink.apply([up(1, 11, status="shipped")])
    assert "shipped" == (doc(client, prefix, 1) or {})["status"]


def test_a_port_with_nothing_behind_it_is_unavailable(tmp_path: Path) -> None:
    from tidelake.runtime.processes import free_port

    s = OpenSearchSink(
        OpenSearchSinkConfig(kind="opensearch", url=f"http://127.0.0.1:{free_port()}", timeout_s=2)
    )
    with pytest.raises(SinkUnavailable):
        s.apply([up(1, 10)])
    s.close()
