"""The table store's own reading of a local lake (``lake/store.py``): ``hoodie.properties`` as
the Java properties file Hudi writes, the stored record key, and the one table discovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tidelake.config import load_config
from tidelake.lake.hudi import table_path
from tidelake.lake.store import TableStore, discover_tables, hoodie_properties

#: As Hudi 1.1 writes it: a comment, a timestamp line, ``:`` escaped in values.
PROPERTIES = """#Updated at 2026-01-01T00:00:00.000Z
#Thu Jan 01 00:00:00 UTC 2026
hoodie.table.name=shop_orders
hoodie.table.recordkey.fields=order_id,line
hoodie.table.create.schema={"type"\\:"record","name"\\:"shop_orders"}
hoodie.table.metadata.partitions=
"""


def _table(root: Path, database: str, table: str) -> Path:
    path = Path(table_path(str(root), database, table))
    (path / ".hoodie").mkdir(parents=True)
    (path / ".hoodie" / "hoodie.properties").write_text(PROPERTIES, encoding="latin-1")
    return path


def test_hoodie_properties_are_read_as_java_properties(tmp_path: Path) -> None:
    """Comments are skipped, escapes undone, an empty value stays empty."""
    props = hoodie_properties(None, str(_table(tmp_path, "shop", "orders")))
    expected = {
        "hoodie.table.name": "shop_orders",
        "hoodie.table.recordkey.fields": "order_id,line",
        "hoodie.table.create.schema": '{"type":"record","name":"shop_orders"}',
        "hoodie.table.metadata.partitions": "",
    }
    assert expected == dict(props)


def test_the_stored_record_key_keeps_its_order(tmp_path: Path) -> None:
    """A composite record key is read back in the order the table was created with."""
    config = load_config(None, environ={"TIDELAKE_HOME": str(tmp_path)})
    store = TableStore(config, cast(Any, None))  # a local lake: no Spark needed
    path = _table(Path(config.lake_root), "shop", "orders")
    assert ("order_id", "line") == store.stored_primary_key(str(path))


def test_discovery_finds_every_table_and_skips_the_state_directory(tmp_path: Path) -> None:
    """Tables of every database, sorted by path; the state directory ``<lake>/_tidelake`` is
    never a database, while a source database named ``_tidelake`` is (at ``%5Ftidelake``)."""
    _table(tmp_path, "shop", "orders")
    _table(tmp_path, "tmp db", "a")
    _table(tmp_path, "_tidelake", "t")
    state = tmp_path / "_tidelake" / "warmup" / ".hoodie"
    state.mkdir(parents=True)
    (state / "hoodie.properties").write_text(PROPERTIES, encoding="latin-1")
    expected = ["_tidelake.t", "shop.orders", "tmp db.a"]
    assert expected == [t.table_id for t in discover_tables(None, str(tmp_path))]
