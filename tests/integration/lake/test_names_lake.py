"""Names in the real lake (issue 23, deliver 5): tables whose names differ only in case are
two catalog tables that each answer with their own rows, and a table created under an older
Hudi table name keeps it (Hudi refuses a write naming another)."""

from __future__ import annotations

from pathlib import Path

import javaproperties
import pytest
from lakekit import Lake, event

from tidelake.lake.catalog import catalog_identifier

pytestmark = pytest.mark.integration


def _catalog_rows(lake: Lake, database: str, table: str) -> list[tuple[str, str]]:
    name = f"{catalog_identifier(database)}.{catalog_identifier(table)}"
    rows = lake.spark.sql(f"SELECT id, status FROM {name} ORDER BY id").collect()
    return [(str(r["id"]), str(r["status"])) for r in rows]


def test_tables_differing_only_in_case_answer_with_their_own_rows(lake: Lake) -> None:
    """Probe: `Shop.Orders` and `shop.orders` became two tables but a query of one returned
    the other (Spark's catalog ignores case). Now each catalog name reads its own table."""
    values = {"amount": "1.00"}
    lake.stage(
        [
            event("insert", 1, 1, 1, table="Shop.Orders", values={"status": "upper", **values}),
            event("insert", 1, 2, 2, table="shop.orders", values={"status": "lower", **values}),
            event("insert", 2, 3, 3, table="shop.orders", values={"status": "lower2", **values}),
        ]
    )
    lake.ingest()
    expected = ([("1", "upper")], [("1", "lower"), ("2", "lower2")], True)
    actual = (
        _catalog_rows(lake, "Shop", "Orders"),
        _catalog_rows(lake, "shop", "orders"),
        lake.path("Shop.Orders") != lake.path("shop.orders"),
    )
    assert expected == actual


def test_an_existing_table_keeps_its_hudi_table_name(lake: Lake) -> None:
    """A table made before names.py (its Hudi name of the older rule) takes later writes: the
    store writes with the name held in hoodie.properties."""
    values = {"status": "new", "amount": "1.00"}
    lake.stage([event("insert", 1, 1, 1, table="a_b.c", values=values)])
    lake.ingest()
    props_file = Path(lake.path("a_b.c")) / ".hoodie" / "hoodie.properties"
    created = javaproperties.loads(props_file.read_text(encoding="latin-1"))["hoodie.table.name"]
    # Rename the table to the older rule's name, as an earlier version would have made it:
    # Hudi's table config rewrite keeps the checksum consistent with the name.
    jvm = lake.spark.sparkContext._jvm
    assert jvm is not None
    from tidelake.lake.store import _meta_client

    client = _meta_client(lake.spark, lake.path("a_b.c"))
    props = jvm.java.util.Properties()
    props.setProperty("hoodie.table.name", "a_b_c")
    jvm.org.apache.hudi.common.table.HoodieTableConfig.update(
        client.getStorage(), client.getMetaPath(), props
    )
    lake.stage([event("update", 1, 2, 2, table="a_b.c", values={**values, "status": "paid"})])
    stats = lake.ingest()
    held = javaproperties.loads(props_file.read_text(encoding="latin-1"))["hoodie.table.name"]
    expected = ("a_5f_b__c", "a_b_c", {}, ["paid"])
    actual = (created, held, stats.refused, [r["status"] for r in lake.rows("a_b.c")])
    assert expected == actual
