"""``CREATE/DROP DATABASE`` in the catalog (lake/catalog.py), ordered by databases.json (the
ledger).

The Spark session is a recording stand-in: what is tested is our ordering logic, the real
catalog is exercised by tests/integration/lake/test_ddl.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tidelake.lake.catalog import (
    create_database,
    drop_database,
    register_databases,
)
from tidelake.lake.ledger import DatabaseState, Ledger


class _Spark:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def sql(self, text: str) -> None:
        self.statements.append(text)


def test_create_and_drop_apply_in_stream_order_and_replays_change_nothing(
    tmp_path: Path,
) -> None:
    """CREATE at 5, DROP at 9: a replayed CREATE at 5 after the DROP does nothing, and a new
    session registers only the databases that exist."""
    fake = _Spark()
    spark = cast(Any, fake)
    ledger = Ledger(tmp_path)
    assert create_database(spark, ledger, "shop", 5)
    assert create_database(spark, ledger, "empty", 6)
    assert drop_database(spark, ledger, "shop", 9)
    assert not create_database(spark, ledger, "shop", 5)
    expected = [
        "CREATE DATABASE IF NOT EXISTS `shop`",
        "CREATE DATABASE IF NOT EXISTS `empty`",
        "DROP DATABASE IF EXISTS `shop`",
    ]
    assert expected == fake.statements
    assert DatabaseState(seq=9, exists=False) == ledger.databases()["shop"]
    fresh = _Spark()
    assert ["empty"] == register_databases(cast(Any, fresh), Ledger(tmp_path))
    assert ["CREATE DATABASE IF NOT EXISTS `empty`"] == fresh.statements
