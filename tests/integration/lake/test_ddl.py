"""DDL mid-stream: schema evolution at the barrier, on real Spark with the Hudi bundle.

Every DDL kind (create, add column with and without default, drop, rename, widen, truncate,
rename table, drop table, an index) interleaved with rows across several tables; a DDL the
lake cannot apply pausing only its table until ``skip-ddl``; and a ``kill -9`` right after a
DDL's commit, before the next batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from lakekit import Lake, ddl_event, event, ingest_in_subprocess

from tidelake.api.records import LakeRecord
from tidelake.errors import IngestError
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.ledger import Ledger
from tidelake.verify.lake import read_table

REPO = Path(__file__).resolve().parents[3]

USERS = {"id": "bigint", "name": "varchar(32)", "age": "int"}
ITEMS = {"id": "bigint", "sku": "varchar(16)"}


def _schema(lake: Lake, table_id: str) -> dict[str, str]:
    """Source columns → Arrow type as hudi-rs reads them (lineage columns left out)."""
    schema: pa.Schema = read_table(lake.config.lake_root, table_id).schema
    return {f.name: str(f.type) for f in schema if not f.name.startswith("_tl_")}


def _rows(lake: Lake, table_id: str, *columns: str) -> dict[str, tuple[Any, ...]]:
    return {str(r["id"]): tuple(r.get(c) for c in columns) for r in lake.rows(table_id)}


def test_every_ddl_kind_interleaved_with_rows_across_tables_ends_equal_to_the_source(
    lake: Lake,
) -> None:
    """Rows and DDL of four tables in one stream: the lake ends with the source's rows and
    schema, read the same by hudi-rs and Spark, the catalog follows every change, and a
    full replay of the stream (cursor hint deleted) changes nothing."""
    orders_v2 = {**_ORDERS, "note": "varchar(32)"}
    orders_v3 = {**orders_v2, "amount": "decimal(12,2)"}
    orders_v4 = {**orders_v3, "flag": "int"}
    users_v2 = {"id": "bigint", "full_name": "varchar(32)", "age": "int"}
    users_v3 = {"id": "bigint", "full_name": "varchar(32)"}
    coupons = {"id": "bigint", "code": "varchar(16)"}
    seq = iter(range(1, 1000))

    def rows(*events: Any) -> None:
        lake.stage(list(events))

    def ddl(table: str, sql: str, kind: str) -> None:
        n = next(seq)
        lake.stage([ddl_event(table, sql, kind, 100 + n, n)])

    def ev(op: str, key: int, table: str, values: dict[str, str], types: dict[str, str]) -> Any:
        n = next(seq)
        return event(op, key, 100 + n, n, table=table, values=values, types=types)

    rows(
        ev("insert", 1, "shop.orders", {"status": "new", "amount": "10.00"}, _ORDERS),
        ev("insert", 2, "shop.orders", {"status": "new", "amount": "20.00"}, _ORDERS),
        ev("insert", 1, "shop.users", {"name": "Ada", "age": "36"}, USERS),
        ev("insert", 2, "shop.users", {"name": "Linus", "age": "28"}, USERS),
        ev("insert", 1, "shop.items", {"sku": "A"}, ITEMS),
        ev("insert", 2, "shop.items", {"sku": "B"}, ITEMS),
    )
    # ADD COLUMN with DEFAULT: existing rows read the default, as at the source.
    ddl("shop.orders", "ALTER TABLE `orders` ADD COLUMN `note` VARCHAR(32) DEFAULT 'none'", "ALTER")
    rows(
        ev(
            "insert", 3, "shop.orders", {"status": "new", "amount": "3.00", "note": "hi"}, orders_v2
        ),
        ev("update", 1, "shop.users", {"name": "Ada", "age": "37"}, USERS),
    )
    ddl("shop.orders", "ALTER TABLE orders MODIFY COLUMN amount DECIMAL(12,2)", "ALTER")
    rows(ev("update", 1, "shop.orders", {"status": "paid", "amount": "1234567890.12",
                                         "note": "none"}, orders_v3))  # fmt: skip
    ddl("shop.users", "ALTER TABLE users RENAME COLUMN name TO full_name", "ALTER")
    rows(ev("insert", 3, "shop.users", {"full_name": "Grace", "age": "45"}, users_v2))
    ddl("shop.users", "ALTER TABLE users DROP COLUMN age", "ALTER")
    rows(ev("insert", 4, "shop.users", {"full_name": "Zoë"}, users_v3))
    ddl(
        "shop.coupons",
        "CREATE TABLE `shop`.`coupons` (`id` BIGINT NOT NULL, code VARCHAR(16), PRIMARY KEY (id))",
        "CREATE",
    )
    ddl("shop.items", "TRUNCATE TABLE `shop`.`items`", "TRUNCATE")
    rows(ev("insert", 3, "shop.items", {"sku": "C"}, ITEMS))
    ddl("shop.customers", "RENAME TABLE `shop`.`users` TO `shop`.`customers`", "RENAME")
    rows(
        ev("update", 3, "shop.customers", {"full_name": "Grace H."}, users_v3),
        ev("insert", 5, "shop.customers", {"full_name": "Søren"}, users_v3),
        ev("insert", 1, "shop.coupons", {"code": "WELCOME"}, coupons),
    )
    ddl("shop.tmp", "CREATE TABLE shop.tmp (id BIGINT PRIMARY KEY, v TEXT)", "CREATE")
    rows(ev("insert", 1, "shop.tmp", {"v": "x"}, {"id": "bigint", "v": "text"}))
    ddl("shop.tmp", "DROP TABLE `shop`.`tmp`", "ERASE")
    ddl("shop.orders", "ALTER TABLE orders ADD COLUMN flag INT NULL", "ALTER")
    ddl("shop.orders", "CREATE INDEX idx_status ON orders (status)", "CINDEX")
    rows(ev("update", 2, "shop.orders", {"status": "packed", "amount": "20.00", "note": "none",
                                         "flag": "1"}, orders_v4))  # fmt: skip
    stats = lake.ingest()
    assert {} == stats.refused

    expected_orders = {
        "1": ("paid", Decimal("1234567890.12"), "none", None),
        "2": ("packed", Decimal("20.00"), "none", 1),
        "3": ("new", Decimal("3.00"), "hi", None),
    }
    assert expected_orders == _rows(lake, "shop.orders", "status", "amount", "note", "flag")
    expected_schema = {
        "id": "int64",
        "status": "string",
        "amount": "decimal128(12, 2)",
        "note": "string",
        "flag": "int32",
    }
    assert expected_schema == _schema(lake, "shop.orders")
    expected_customers = {"1": ("Ada",), "2": ("Linus",), "3": ("Grace H.",), "4": ("Zoë",),
                          "5": ("Søren",)}  # fmt: skip
    assert expected_customers == _rows(lake, "shop.customers", "full_name")
    assert {"id": "int64", "full_name": "string"} == _schema(lake, "shop.customers")
    assert {"3": ("C",)} == _rows(lake, "shop.items", "sku")
    assert {"1": ("WELCOME",)} == _rows(lake, "shop.coupons", "code")
    for gone in ("shop.users", "shop.tmp"):
        assert not Path(lake.path(gone)).exists(), gone
    for table in ("shop.orders", "shop.customers", "shop.items", "shop.coupons"):
        assert lake.rows(table) == lake.spark_rows(table), table

    # The catalog follows: new names and columns are queryable, old ones are gone.
    got = lake.spark.sql("SELECT full_name FROM shop.customers WHERE id = 3").collect()
    assert [("Grace H.",)] == [tuple(r) for r in got]
    got = lake.spark.sql("SELECT note, flag FROM shop.orders WHERE id = 2").collect()
    assert [("none", 1)] == [tuple(r) for r in got]
    assert not lake.spark.catalog.tableExists("shop.users")
    assert not lake.spark.catalog.tableExists("shop.tmp")

    checkpoint = lake.checkpoint("shop.orders")
    assert checkpoint is not None
    assert 4 == checkpoint.schema_version  # note, amount, flag, index

    # Replay everything: every event is a duplicate by the checkpoints and tombstones.
    commits_before = len(lake.commits())
    lake.forget_progress()
    again = lake.ingest()
    assert (0, {}) == (again.commits, again.refused)
    assert commits_before == len(lake.commits())
    assert expected_orders == _rows(lake, "shop.orders", "status", "amount", "note", "flag")
    assert not Path(lake.path("shop.users")).exists()


_ORDERS = {"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"}


def test_a_ddl_the_lake_cannot_apply_pauses_only_its_table_until_skip_ddl(lake: Lake) -> None:
    """A narrowing MODIFY pauses its table with the reason (paused.json, ddl_blocked.json)
    while another table goes on; ``skip-ddl`` records the DDL unapplied and the table
    catches up with the rows staged meanwhile."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"}),
            event("insert", 1, 11, 2, table="shop.items", values={"sku": "A"}, types=ITEMS),
        ]
    )
    narrowing = "ALTER TABLE orders MODIFY COLUMN amount DECIMAL(4,1)"
    lake.stage([ddl_event("shop.orders", narrowing, "ALTER", 12, 3)])
    lake.stage(
        [
            event("update", 1, 13, 4, values={"status": "paid", "amount": "2.00"}),
            event("insert", 2, 14, 5, table="shop.items", values={"sku": "B"}, types=ITEMS),
        ]
    )
    ingestor = lake.ingestor()
    stats = ingestor.run_once()
    assert ["shop.orders"] == list(stats.refused)
    assert "not a safe widening" in stats.refused["shop.orders"]
    assert "skip-ddl shop.orders" in stats.refused["shop.orders"]
    state = Path(lake.config.lake_root) / "_tidelake"
    ledger = Ledger(state)
    assert ["shop.orders"] == list(ledger.paused())
    blocked = ledger.blocked()
    assert 3 == blocked["shop.orders"].seq
    assert {"1": ("new",)} == lake.state()  # the row before the DDL landed, not after
    assert {"1": ("A",), "2": ("B",)} == _rows(lake, "shop.items", "sku")  # went on

    Ledger(state).request("shop.orders", "skip_ddl", seq=blocked["shop.orders"].seq)
    ingestor.run_once()
    assert {"1": ("paid",)} == lake.state()
    assert "decimal128(10, 2)" == _schema(lake, "shop.orders")["amount"]
    assert ({}, {}) == (ledger.blocked(), ledger.paused())
    skipped = [c for c in lake.commits() if c.get("ddl_action") == "skipped"]
    assert [3] == [c["seq"] for c in skipped]


def test_kill_9_right_after_a_ddl_commit_then_restart_applies_it_once(
    lake: Lake, tmp_path: Path
) -> None:
    """The ingest subprocess is SIGKILLed right after a DDL's commit (before the cursor hint
    and the next batch); the restart neither re-applies the DDL nor loses the batch after
    it, which lands under the new schema."""
    lake.stage([event("insert", i, 10 + i, i, values={"status": "new"}) for i in (1, 2)])
    lake.stage(
        [
            ddl_event(
                "shop.orders", "ALTER TABLE orders RENAME COLUMN status TO state", "ALTER", 20, 3
            )
        ]
    )
    renamed = {"id": "bigint", "state": "varchar(16)", "amount": "decimal(10,2)"}
    lake.stage([event("update", 1, 21, 4, values={"state": "paid"}, types=renamed)])

    log = tmp_path / "ingest.log"
    returncode = ingest_in_subprocess(lake, log, TEST_TIDELAKE_INGEST_CRASH_AT="after_ddl_commit")
    assert -signal.SIGKILL == returncode, log.read_text()[-3000:]
    checkpoint = lake.checkpoint()
    assert checkpoint is not None
    assert (3, 1) == (checkpoint.seq, checkpoint.schema_version)  # the DDL is committed
    assert not any(c.get("ddl") for c in lake.commits())  # ... and nothing after it ran

    stats = lake.ingest()  # the restart
    assert 1 == stats.commits
    expected = {"1": ("paid",), "2": ("new",)}
    assert expected == lake.state("shop.orders", "state")
    checkpoint = lake.checkpoint()
    assert checkpoint is not None
    assert (4, 1) == (checkpoint.seq, checkpoint.schema_version)
    assert lake.rows() == lake.spark_rows()


def test_a_table_evolved_with_schema_on_read_is_read_through_spark_not_hudi_rs(
    lake: Lake,
) -> None:
    """Hudi's schema-on-read RENAME COLUMN (done by hand, never by tidelake) makes hudi-rs
    0.5.0 read the column as NULL: read_table refuses without a session and reads it right
    through Spark with one."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"})])
    lake.ingest()
    settings = {
        "hoodie.schema.on.read.enable": "true",
        "hoodie.datasource.write.schema.allow.auto.evolution.column.drop": "true",
    }
    try:
        for key, value in settings.items():
            lake.spark.conf.set(key, value)
        lake.spark.sql("ALTER TABLE shop.orders RENAME COLUMN status TO state")
    finally:
        for key in settings:
            lake.spark.conf.unset(key)
    with pytest.raises(IngestError, match="schema-on-read"):
        read_table(lake.config.lake_root, "shop.orders")
    data = read_table(lake.config.lake_root, "shop.orders", spark=lake.spark).to_pylist()
    assert [("1", "new")] == [(str(r["id"]), r["state"]) for r in data]


def _tidb_ddl(table: str, sql: str, canal_type: str, seq: int) -> ChangeEvent:
    """A DDL as TiCDC's canal-json carries it: ``sql`` is the TiDB parser's restored text
    (pingcap/tiflow cdc/owner/ddl_sink.go, addSpecialComment), ``type`` from
    pkg/sink/codec/canal/canal_entry.go convertDdlEventType; database DDL has table ""."""
    database, _, name = table.partition(".")
    return ChangeEvent(
        source="tidb",
        database=database,
        table=name,
        op=Op.DDL,
        position=Position((100 + seq, 0)),
        ddl=sql,
        ddl_type=canal_type,
        seq=seq,
        commit_ts_ms=1_714_929_186_000 + seq,
    )


def test_tidb_restored_ddl_lands_with_defaults_and_no_ops_pass(lake: Lake) -> None:
    """TiDB-restored DDL through the real ingest: a CREATE with TiDB feature comments, ADD
    COLUMN with introducer, negative, decimal and bit DEFAULTs back-filled into the existing
    rows, and TiFlash replica, index, placement-stripped and empty statements recorded
    without a pause; CREATE DATABASE makes an empty database in the catalog and DROP
    DATABASE removes it, also against a full replay."""
    db = "tidb_empty_db"
    lake.stage([_tidb_ddl(f"{db}.", f"CREATE DATABASE `{db}`", "QUERY", 1)])
    lake.stage(
        [
            _tidb_ddl(
                "shop.orders",
                "CREATE TABLE `orders` (`id` BIGINT PRIMARY KEY /*T![clustered_index] CLUSTERED */,"
                "`status` VARCHAR(16) DEFAULT _UTF8MB4'',`amount` DECIMAL(10,2)) ENGINE = InnoDB "
                "DEFAULT CHARACTER SET = UTF8MB4 DEFAULT COLLATE = UTF8MB4_BIN "
                "/*T! SHARD_ROW_ID_BITS = 4 */",
                "CREATE",
                2,
            )
        ]
    )
    lake.stage(
        [
            event("insert", 1, 103, 3, values={"status": "new", "amount": "1.00"}),
            event("insert", 2, 104, 4, values={"status": "paid", "amount": "2.00"}),
        ]
    )
    steps = [
        ("ALTER TABLE `orders` ADD COLUMN `note` VARCHAR(32) DEFAULT _UTF8MB4'new'", "ALTER"),
        ("ALTER TABLE `orders` ADD COLUMN `qty` INT NOT NULL DEFAULT -1", "ALTER"),
        ("ALTER TABLE `orders` ADD COLUMN `price` DECIMAL(12,2) DEFAULT 1.50", "ALTER"),
        ("ALTER TABLE `orders` ADD COLUMN `flag` BIT(1) DEFAULT b'1'", "ALTER"),
        ("ALTER TABLE `orders` SET TIFLASH REPLICA 1", "QUERY"),
        ("ALTER TABLE `orders` ADD INDEX `idx_status`(`status`)", "CINDEX"),
        ("ALTER TABLE `orders`", "QUERY"),  # PLACEMENT POLICY=p1, skipped by the restore
        ("", "QUERY"),  # ALTER PLACEMENT POLICY …: restored to nothing
        ("ALTER TABLE `orders` ALTER INDEX `idx_status` INVISIBLE", "ALTER"),
    ]
    for n, (sql, canal_type) in enumerate(steps, start=5):
        lake.stage([_tidb_ddl("shop.orders", sql, canal_type, n)])
    stats = lake.ingest()
    assert {} == stats.refused
    expected = {
        "1": ("new", "new", -1, Decimal("1.50"), True),  # BIT(1) is a boolean in the lake
        "2": ("paid", "new", -1, Decimal("1.50"), True),
    }
    assert expected == lake.state("shop.orders", "status", "note", "qty", "price", "flag")
    checkpoint = lake.checkpoint("shop.orders")
    assert checkpoint is not None
    assert 5 + len(steps) - 1 == checkpoint.seq
    assert lake.spark.catalog.databaseExists(db)
    assert [] == lake.spark.catalog.listTables(db)

    last = 5 + len(steps)
    lake.stage([_tidb_ddl(f"{db}.", f"DROP DATABASE `{db}`", "QUERY", last)])
    assert {} == lake.ingest().refused
    assert not lake.spark.catalog.databaseExists(db)
    # A replay of the whole stream (cursor hint gone) does not bring the database back.
    lake.forget_progress()
    assert {} == lake.ingest().refused
    assert not lake.spark.catalog.databaseExists(db)
    assert expected == lake.state("shop.orders", "status", "note", "qty", "price", "flag")


def test_after_skip_ddl_and_a_catch_up_by_a_new_ingest_status_shows_the_table_unpaused(
    lake: Lake,
) -> None:
    """``tidelake table skip-ddl`` then a catch-up by another ingest process (``ingest
    --once`` is one per call): status (LakeRecord, what ``tidelake status`` reads) no longer
    lists the table as paused, and the skip request and the blocked DDL are cleared once the
    checkpoint has passed the DDL; a later unmappable DDL pauses the table again."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"})])
    lake.stage([_tidb_ddl("shop.orders", "ALTER TABLE `orders` TRUNCATE PARTITION `p0`",
                          "ALTER", 2)])  # fmt: skip
    lake.stage([event("update", 1, 113, 3, values={"status": "paid", "amount": "2.00"})])
    stats = lake.ingest()
    assert ["shop.orders"] == list(stats.refused)
    state = Path(lake.config.lake_root) / "_tidelake"
    record = LakeRecord(state)
    record.refresh()
    assert ["shop.orders"] == list(record.paused)
    assert 2 == Ledger(state).blocked()["shop.orders"].seq

    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "table", "skip-ddl", "shop.orders"],
        env={k: v for k, v in {**os.environ, **lake.env}.items() if k != "TIDELAKE_CONFIG"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == proc.returncode, proc.stderr
    assert {} == lake.ingest().refused  # a new Ingestor, as a new `ingest --once` process
    assert {"1": ("paid",)} == lake.state()
    record.refresh()
    assert ({}, {}, {}) == (record.paused, record.requests, Ledger(state).blocked())

    lake.stage([_tidb_ddl("shop.orders", "RECOVER TABLE `orders`", "QUERY", 4)])
    assert ["shop.orders"] == list(lake.ingest().refused)
    record.refresh()
    assert ["shop.orders"] == list(record.paused)


def test_a_create_table_killed_before_its_commit_keeps_the_declared_types(lake: Lake) -> None:
    """A kill after Hudi wrote the table's properties but before the CREATE's commit completed
    leaves a table directory without any checkpoint (a short `make chaos` run): the CREATE,
    read again, creates the table as declared, so a bare 'decimal' row value is typed by the
    declared DECIMAL(12,2) instead of being dead-lettered as untypable."""
    create = "CREATE TABLE `shop`.`amounts` (`id` BIGINT, `total` DECIMAL(12,2), PRIMARY KEY(`id`))"
    lake.stage([ddl_event("shop.amounts", create, "CREATE", 10, 1)])
    lake.ingest()
    timeline = Path(lake.path("shop.amounts")) / ".hoodie" / "timeline"
    for completed in timeline.glob("*_*.commit"):
        completed.unlink()  # as if the process died before the commit completed
    lake.forget_progress()
    lake.stage([ddl_event("shop.amounts", create, "CREATE", 10, 1)])
    lake.stage(
        [
            event(
                "insert",
                1,
                11,
                2,
                table="shop.amounts",
                values={"total": "12.34"},
                types={"id": "bigint", "total": "decimal"},
            )
        ]
    )
    stats = lake.ingest()
    assert {} == stats.refused
    checkpoint = lake.checkpoint("shop.amounts")
    assert checkpoint is not None
    assert {"id": "bigint", "total": "decimal(12,2)"} == dict(checkpoint.columns)
    assert {"1": (Decimal("12.34"),)} == lake.state("shop.amounts", "total")
