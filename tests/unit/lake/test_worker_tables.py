"""Several ingest workers on one lake: each writes only its own tables (``ingest.tables``).

A statement naming tables of two workers is applied by each for its own share; a rename
across two workers can be applied by neither and pauses the table; a worker's consumer
takes one subject filter or a set, never both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from tidelake.config import Config, load_config
from tidelake.errors import ConfigError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake import ddl
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.evolve import DdlBlocked, SchemaEvolver
from tidelake.lake.ledger import Ledger


def _config(tmp_path: Path, **env: str) -> Config:
    return load_config(None, environ={"TIDELAKE_HOME": str(tmp_path), **env})


def _evolver(config: Config) -> SchemaEvolver:
    """The evolver's ownership filter needs only the config (no Spark, no store)."""
    evolver = SchemaEvolver.__new__(SchemaEvolver)
    evolver.config = config
    return evolver


def _event(sql: str, table: str) -> ChangeEvent:
    return ChangeEvent(
        source="tidb", database="shop", table=table, op=Op.DDL, position=Position((1,)), ddl=sql
    )


def _ops(sql: str) -> list[ddl.Operation]:
    return ddl.parse_ddl(sql, "mysql", "shop")


def test_an_ingest_without_tables_owns_every_table(tmp_path: Path) -> None:
    """The default (one worker) writes anything; patterns are globs over table ids."""
    assert _config(tmp_path).ingest.owns("any.table")
    worker = _config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a*", "crm.*"]')
    assert [True, True, False] == [
        worker.ingest.owns(t) for t in ("shop.accounts", "crm.leads", "shop.orders")
    ]


def test_a_multi_table_drop_keeps_only_this_workers_share(tmp_path: Path) -> None:
    """DROP TABLE a, b in the worker owning a: only a's drop is applied there (b's owner
    gets the statement on b's subject and drops b)."""
    evolver = _evolver(_config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a"]'))
    kept = evolver._owned_ops("shop.b", _event("DROP TABLE a, b", "a"), _ops("DROP TABLE a, b"))
    assert [ddl.DropTable(ddl.TableName("shop", "a"))] == kept


def test_a_rename_across_two_workers_pauses_the_table(tmp_path: Path) -> None:
    """RENAME a TO b with a and b owned by different workers: neither can move the data,
    so the DDL blocks its table (a pause an operator sees), never half applied."""
    evolver = _evolver(_config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a"]'))
    with pytest.raises(DdlBlocked, match="crosses two workers"):
        evolver._owned_ops(
            "shop.a", _event("RENAME TABLE a TO b", "a"), _ops("RENAME TABLE a TO b")
        )


def test_a_rename_among_another_workers_tables_is_left_to_it(tmp_path: Path) -> None:
    """RENAME c TO d, both another worker's: nothing for this one."""
    evolver = _evolver(_config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a"]'))
    assert [] == evolver._owned_ops(
        "shop.c", _event("RENAME TABLE c TO d", "c"), _ops("RENAME TABLE c TO d")
    )


def test_a_database_ddl_stays_for_every_worker(tmp_path: Path) -> None:
    """DROP DATABASE names no table: every worker keeps it (and drops its own tables)."""
    evolver = _evolver(_config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a"]'))
    ops = _ops("DROP DATABASE shop")
    assert ops == evolver._owned_ops("shop.", _event("DROP DATABASE shop", ""), ops)


def test_a_consumer_takes_one_filter_or_a_set_never_both(tmp_path: Path) -> None:
    """filter_subject and filter_subjects together are refused; ``filters`` is what the
    consumer takes (every subject when neither is set)."""
    with pytest.raises(ConfigError, match="not both"):
        _config(
            tmp_path,
            TIDELAKE_BUS__CONSUMER__FILTER_SUBJECT="cdc.a.>",
            TIDELAKE_BUS__CONSUMER__FILTER_SUBJECTS='["cdc.b.>"]',
        )
    assert [">"] == _config(tmp_path).bus.consumer.filters
    two = _config(
        tmp_path,
        TIDELAKE_BUS__CONSUMER__FILTER_SUBJECTS='["cdc.a.>", "cdc.b.>"]',
        TIDELAKE_INGEST__TABLES='["a.*", "b.*"]',
    )
    assert ["cdc.a.>", "cdc.b.>"] == two.bus.consumer.filters


def test_a_worker_with_a_share_of_the_stream_names_its_tables(tmp_path: Path) -> None:
    """A consumer with a subject set and ``ingest.tables`` empty (every table) is refused:
    that ingest would apply a DROP DATABASE to the other workers' tables as well."""
    with pytest.raises(ConfigError, match=r"ingest\.tables"):
        _config(tmp_path, TIDELAKE_BUS__CONSUMER__FILTER_SUBJECTS='["cdc.a.>"]')


def test_subject_filters_are_refused_on_a_kafka_bus(tmp_path: Path) -> None:
    """The Kafka stager reads its partition whole: a worker's subjects need JetStream."""
    with pytest.raises(ConfigError, match=r"need bus\.kind: nats"):
        _config(
            tmp_path,
            TIDELAKE_BUS__KIND="kafka",
            TIDELAKE_BUS__CONSUMER__FILTER_SUBJECTS='["cdc.a.>"]',
        )


@dataclass
class LakeOfTwoWorkers:
    """The store's side of a DROP DATABASE: the lake holds shop.a (ours) and shop.b (the
    other worker's); what was removed is recorded. No Spark: the catalog calls are no-ops."""

    config: Config
    ledger: Ledger
    removed: list[str] = field(default_factory=list)

    @property
    def spark(self) -> LakeOfTwoWorkers:
        return self

    def sql(self, statement: str) -> None:
        """The catalog's ``DROP DATABASE``: nothing to check here."""

    def tables_of(self, database: str) -> list[str]:
        return [f"{database}.a", f"{database}.b"]

    def checkpoint(self, table_id: str) -> TableCheckpoint:
        return TableCheckpoint(seq=1, position="1", schema_version=1)

    def remove_table(self, table_id: str) -> None:
        self.removed.append(table_id)


def test_drop_database_drops_only_this_workers_tables(tmp_path: Path) -> None:
    """The worker owning shop.a drops shop.a and leaves shop.b, which is in the same lake
    directory, to its owner; the database's DROP is recorded in its own ledger."""
    config = _config(tmp_path, TIDELAKE_INGEST__TABLES='["shop.a"]')
    lake = LakeOfTwoWorkers(config, Ledger(tmp_path / "state"))
    event = replace(_event("DROP DATABASE shop", ""), seq=7)
    outcomes = SchemaEvolver(lake).apply("shop.", event)  # type: ignore[arg-type]
    assert ["shop.a"] == lake.removed
    assert [("shop.a", "drop database")] == [(o.table_id, o.action) for o in outcomes]
    assert lake.ledger.tombstone("shop.b") is None
