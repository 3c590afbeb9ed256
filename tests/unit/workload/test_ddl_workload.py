"""The ``demo --with-ddl`` workload: DDL messages mid-stream and the state they lead to."""

from __future__ import annotations

import orjson

from tidelake.events import Op
from tidelake.formats import canal_json
from tidelake.lake.ddl import parse_ddl
from tidelake.workload.ddl import STEPS, DdlWorkload
from tidelake.workload.orders import WorkloadSpec


def test_every_ddl_step_is_emitted_as_ticdc_canal_json_in_stream_order() -> None:
    """Each step becomes one canal-json DDL message (isDdl, sql, _tidb.commitTs) that decodes
    and parses into operations the lake applies (nothing Unsupported), in step order."""
    workload = DdlWorkload(WorkloadSpec(events=2000, seed=3))
    ddl_sql = []
    for seq, msg in enumerate((m for txn in workload.transactions() for m in txn), start=1):
        decoded = canal_json.decode_object(orjson.loads(msg.payload), seq=seq)
        for event in decoded.events:
            if event.op is Op.DDL:
                assert event.ddl is not None
                ddl_sql.append(event.ddl)
                ops = parse_ddl(event.ddl, "mysql", event.database)
                assert all(type(op).__name__ != "Unsupported" for op in ops), ops
    fresh = DdlWorkload(WorkloadSpec(events=2000, seed=3))
    creates = [fresh.create_table_sql(t) for t in ("customers", "orders", "order_items")]
    assert creates == ddl_sql[:3]  # the stream opens with each table's CREATE TABLE
    assert [s.sql for s in STEPS] == ddl_sql[3:]
    assert len(STEPS) == workload.ddl_emitted


def test_expected_state_follows_the_schema_changes() -> None:
    """Final schemas hold the added, renamed and widened columns and lack the dropped one;
    every expected row has exactly its table's columns; dropped tables are listed."""
    workload = DdlWorkload(WorkloadSpec(events=3000, seed=7))
    for _ in workload.transactions():
        pass
    schemas = workload.expected_schemas()
    expected = ["shop.customers", "shop.order_items", "shop.orders", "shop.promotions"]
    assert expected == sorted(schemas)
    assert "tier" not in schemas["shop.customers"]
    assert "int" == schemas["shop.customers"]["loyalty"]
    assert "decimal(14,2)" == schemas["shop.orders"]["total_amount"]
    assert "order_total" not in schemas["shop.orders"]
    assert "bigint" == schemas["shop.order_items"]["qty"]
    assert ["shop.import_tmp", "shop.coupons"] == workload.dropped_tables
    for table, rows in workload.expected_rows().items():
        assert rows, table
        assert all(list(row) == list(schemas[table]) for row in rows), table
