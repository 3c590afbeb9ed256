"""JVM-free reads of the lake through hudi-rs: what ``verify`` and the demo compare.

hudi-rs (the ``hudi`` package, 0.5.0) reads table version 9 as Hudi 1.1.1 writes it; the
version is pinned in lake/hudi.py so the two stay compatible.
"""

from __future__ import annotations

import pyarrow as pa
from hudi import HudiTableBuilder

from tidelake.lake.hudi import is_hudi_table, split_table_id, table_path

#: Hudi's meta columns (and its delete marker) are not part of a table's data.
META_PREFIX = "_hoodie_"


def read_table(lake_root: str, table_id: str) -> pa.Table:
    """The latest snapshot of ``db.table`` without ``_hoodie_*`` columns.

    A table that has not been written yet reads as an empty table with no columns.
    """
    database, table = split_table_id(table_id)
    path = table_path(lake_root, database, table)
    if not is_hudi_table(path):
        return pa.table({})
    hudi_table = HudiTableBuilder.from_base_uri(path).build()
    batches = hudi_table.read()
    data = pa.Table.from_batches(batches) if batches else hudi_table.get_schema().empty_table()
    keep = [name for name in data.column_names if not name.startswith(META_PREFIX)]
    return data.select(keep)
