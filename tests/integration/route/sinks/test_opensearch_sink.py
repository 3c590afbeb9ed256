"""The OpenSearch sink against a real private single-node OpenSearch 2.19
(route/sinks/opensearch.py, pipeline/opensearch.py): upserts and tombstones through the
position guard, the alias that hides tombstones, mapping from column types, a value refused per
item, and an unreachable server.

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
from tidelake.pipeline import opensearch as opensearch_server
from tidelake.pipeline.opensearch import OpenSearchServer
from tidelake.route.change import ChangesRejected, RowChange, SinkUnavailable
from tidelake.route.sinks.opensearch import OpenSearchSink, alias_name, index_name

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


def live_ids(client: httpx.Client, prefix: str) -> list[str]:
    """The ids the alias shows (live rows), after a refresh."""
    alias = quote(alias_name(prefix, TABLE), safe="")
    client.post(f"/{alias}/_refresh").raise_for_status()
    resp = client.post(f"/{alias}/_search", json={"size": 100, "sort": [{"_id": "asc"}]})
    resp.raise_for_status()
    return [hit["_id"] for hit in resp.json()["hits"]["hits"]]


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
