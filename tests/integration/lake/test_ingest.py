"""The ingest on real Spark with the real Hudi bundle: what lands, what is skipped, and why."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from lakekit import Lake, ddl_event, event

from tidelake.events import Op
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.ledger import Ledger


def test_insert_update_delete_land_with_the_checkpoint_in_the_same_commit(lake: Lake) -> None:
    """Inserts, an update and a delete land; each commit holds the checkpoint it covers."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "new", "amount": "1.00"}),
            event("insert", 2, 11, 2, values={"status": "new", "amount": "2.00"}),
            event("insert", 3, 12, 3, values={"status": "new", "amount": "3.00"}),
            event("update", 2, 13, 4, values={"status": "paid", "amount": "2.50"}),
            event("delete", 3, 14, 5, values={"status": "new", "amount": "3.00"}),
        ]
    )
    lake.ingest()
    lake.stage([event("update", 1, 15, 6, values={"status": "shipped", "amount": "1.00"})])
    lake.ingest()

    expected_state = {"1": ("shipped", Decimal("1.00")), "2": ("paid", Decimal("2.50"))}
    assert expected_state == lake.state("shop.orders", "status", "amount")
    # The checkpoint also carries the source type each column was typed by.
    expected_checkpoint = TableCheckpoint(
        seq=6,
        position=event("update", 1, 15, 6).position.encode(),
        columns={"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"},
    )
    assert expected_checkpoint == lake.checkpoint()
    commits = lake.commits()
    expected_log = [
        {"seq_from": 0, "seq": 5, "events": 5, "upserts": 2, "deletes": 1},
        {"seq_from": 5, "seq": 6, "events": 1, "upserts": 1, "deletes": 0},
    ]
    assert expected_log == [{k: c[k] for k in expected_log[0]} for c in commits]
    assert all(c["committed_at_ms"] >= c["max_commit_ts_ms"] for c in commits)
    assert lake.rows() == lake.spark_rows()


def test_two_updates_in_one_transaction_and_one_millisecond_keep_the_later_position(
    lake: Lake,
) -> None:
    """Same commit time, same millisecond: the position (row index in the txn) decides."""
    same_ms = 1_714_929_186_500
    lake.stage(
        [
            event("insert", 1, (20, 0), 1, values={"status": "new"}, commit_ts_ms=same_ms),
            # Staged out of order on purpose: the later position must win, not the file order.
            event("update", 1, (21, 1), 2, values={"status": "second"}, commit_ts_ms=same_ms),
            event("update", 1, (21, 0), 3, values={"status": "first"}, commit_ts_ms=same_ms),
        ]
    )
    lake.ingest()
    expected = {"1": ("second",)}
    assert expected == lake.state()


def test_primary_key_change_deletes_the_old_key_both_as_ticdc_and_binlog_send_it(
    lake: Lake,
) -> None:
    """TiCDC's DELETE + INSERT and a binlog UPDATE whose key changed both move the row."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "a"}),
            event("insert", 2, 11, 2, values={"status": "b"}),
        ]
    )
    lake.ingest()
    lake.stage(
        [
            # TiCDC: the key update 1 -> 10 split in one commitTs.
            event("delete", 1, (30, 0), 3, values={"status": "a"}),
            event("insert", 10, (30, 1), 4, values={"status": "a"}),
            # Binlog: one UPDATE of 2 -> 20; ``before`` holds the old key.
            event("update", 20, (31, 0), 5, values={"status": "b"}, before={"id": "2"}),
        ]
    )
    lake.ingest()
    expected = {"10": ("a",), "20": ("b",)}
    assert expected == lake.state()


def test_delete_then_reinsert_in_one_batch_and_across_batches(lake: Lake) -> None:
    """A key deleted then inserted again is present with the re-inserted values."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "v1"}),
            event("delete", 1, 11, 2, values={"status": "v1"}),
            event("insert", 1, 12, 3, values={"status": "v2"}),
            event("insert", 2, 13, 4, values={"status": "w1"}),
        ]
    )
    lake.ingest()
    lake.stage([event("delete", 2, 14, 5, values={"status": "w1"})])
    lake.ingest()
    lake.stage([event("insert", 2, 15, 6, values={"status": "w2"})])
    lake.ingest()
    expected = {"1": ("v2",), "2": ("w2",)}
    assert expected == lake.state()


def test_a_redelivered_batch_changes_nothing(lake: Lake) -> None:
    """The same range staged twice (and an overlapping restage) applies each event once."""
    batch = [
        event("insert", 1, 10, 1, values={"status": "new"}),
        event("update", 1, 11, 2, values={"status": "paid"}),
        event("insert", 2, 12, 3, values={"status": "new"}),
    ]
    lake.stage(batch)
    lake.ingest()
    timeline = Path(lake.path()) / ".hoodie" / "timeline"
    commits_before = sorted(p.name for p in timeline.glob("*.commit"))

    lake.stage(batch)  # restaged: the same manifest range again
    expected = 0
    assert expected == lake.ingest().commits
    # Without the cursor hint and the retention's record, the table checkpoint alone skips
    # two more copies (the ones above were retired: every table had passed them).
    lake.forget_progress()
    lake.stage(batch)
    lake.stage(batch)
    stats = lake.ingest()
    expected = (0, 6)
    assert expected == (stats.commits, stats.duplicates)
    assert commits_before == sorted(p.name for p in timeline.glob("*.commit"))

    # Restaged with one more message: only the new one applies.
    lake.stage([*batch, event("update", 2, 13, 4, values={"status": "paid"})])
    stats = lake.ingest()
    expected = (1, 3)
    assert expected == (stats.commits, stats.duplicates)
    expected = {"1": ("paid",), "2": ("paid",)}
    assert expected == lake.state()


def test_an_older_event_republished_after_the_delete_does_not_resurrect_the_row(
    lake: Lake,
) -> None:
    """A republished update (new stream sequence, old position) after the row's delete is
    below the table's position watermark: skipped and counted, the row stays deleted."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "new"}),
            event("update", 1, 11, 2, values={"status": "paid"}),
            event("insert", 2, 12, 3, values={"status": "keep"}),
        ]
    )
    lake.ingest()
    lake.stage([event("delete", 1, 13, 4, values={"status": "paid"})])
    lake.ingest()
    lake.stage([event("update", 1, 11, 5, values={"status": "paid"})])  # republished
    stats = lake.ingest()
    expected = (0, 1)
    assert expected == (stats.commits, stats.stale)
    expected = {"2": ("keep",)}
    assert expected == lake.state()
    skipped = Ledger(lake.config.lake_state_dir).skipped()
    expected = [("shop.orders", 1)]
    assert expected == [(s.table, s.stale) for s in skipped]


TYPES = {
    "id": "bigint",
    "d": "decimal(38,10)",
    "u": "bigint unsigned",
    "s": "varchar(64)",
    "dt": "datetime",
    "ts": "timestamp",
    "day": "date",
    "b": "varbinary(16)",
    "j": "json",
    "small": "tinyint(1)",
    "f": "double",
    "e": "enum('a','b')",
    "y": "year",
    "t": "time",
    "n": "varchar(8)",
}


def test_types_null_decimal_unsigned_unicode_datetime_timestamp_binary_json(lake: Lake) -> None:
    """Every value comes back typed and exact, the same through hudi-rs and through Spark."""
    full = {
        "d": "1234567890123456789012345678.0123456789",
        "u": "18446744073709551615",
        "s": "héllo wörld 日本語 🚀",
        "dt": "2024-05-05 12:34:56.123456",
        "ts": "2024-05-05 12:34:56",
        "day": "2024-02-29",
        "b": "\u0000\u0001\u00ffA",
        "j": '{"a": [1, 2, {"b": null}], "emoji": "🚀"}',
        "small": "-5",
        "f": "2.5",
        "e": "b",
        "y": "2024",
        "t": "-838:59:59",
        "n": None,
    }
    nulls = dict.fromkeys(full)
    lake.stage(
        [
            event("insert", 1, 10, 1, values=full, types=TYPES),
            event("insert", 2, 11, 2, values=nulls, types=TYPES),
        ]
    )
    lake.ingest()
    expected_first = {
        "id": 1,
        "d": Decimal("1234567890123456789012345678.0123456789"),
        "u": Decimal(2**64 - 1),
        "s": "héllo wörld 日本語 🚀",
        # DATETIME: the wall-clock text read as UTC (hudi-rs cannot read TIMESTAMP_NTZ).
        "dt": dt.datetime(2024, 5, 5, 12, 34, 56, 123456, tzinfo=dt.UTC),
        "ts": dt.datetime(2024, 5, 5, 12, 34, 56, tzinfo=dt.UTC),
        "day": dt.date(2024, 2, 29),
        "b": b"\x00\x01\xffA",
        "j": '{"a": [1, 2, {"b": null}], "emoji": "🚀"}',
        "small": -5,
        "f": 2.5,
        "e": "b",
        "y": 2024,
        "t": "-838:59:59",
        "n": None,
    }
    rows = lake.rows()
    spark_rows = lake.spark_rows()
    first = {k: rows[0][k] for k in expected_first}
    # pyarrow gives zone-aware UTC datetimes for TIMESTAMP; compare the instant.
    assert expected_first == first
    assert {"id": 2, **dict.fromkeys(k for k in expected_first if k != "id")} == {
        k: rows[1][k] for k in expected_first
    }
    assert expected_first == {k: spark_rows[0][k] for k in expected_first}
    assert rows[1]["_tl_op"] == "insert"


def test_composite_keys_update_and_delete_by_the_whole_key(lake: Lake) -> None:
    """A two-column key: rows sharing one column stay distinct; a delete hits one row."""
    types = {"order_id": "bigint", "line": "int", "qty": "int"}
    pk = ("order_id", "line")

    def line(op: str, order_id: int, line_no: int, qty: int, pos: int, seq: int):  # type: ignore[no-untyped-def]
        return event(
            op,
            {"order_id": str(order_id), "line": str(line_no)},
            pos,
            seq,
            table="shop.lines",
            values={"qty": str(qty)},
            types=types,
            pk=pk,
        )

    lake.stage(
        [
            line("insert", 1, 1, 5, 10, 1),
            line("insert", 1, 2, 6, 11, 2),
            line("insert", 2, 1, 7, 12, 3),
        ]
    )
    lake.ingest()
    lake.stage([line("update", 1, 2, 60, 13, 4), line("delete", 2, 1, 7, 14, 5)])
    lake.ingest()
    rows = sorted((r["order_id"], r["line"], r["qty"]) for r in lake.rows("shop.lines"))
    expected = [(1, 1, 5), (1, 2, 60)]
    assert expected == rows


def test_a_table_without_primary_key_is_refused_while_another_table_lands(lake: Lake) -> None:
    """No pk: that table pauses with a clear message; the other table of the batch lands."""
    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "ok"}),
            event("insert", 1, 11, 2, table="shop.audit", pk=(), values={"status": "x"}),
        ]
    )
    stats = lake.ingest()
    expected = {"1": ("ok",)}
    assert expected == lake.state()
    expected = ["shop.audit"]
    assert expected == list(stats.refused)
    # With no bus to dead-letter its rows, the keyless table pauses with the reason.
    assert stats.refused["shop.audit"].startswith("shop.audit: no primary key known")
    assert stats.refused == Ledger(lake.config.lake_state_dir).paused()
    assert not Path(lake.path("shop.audit")).exists()
    # The saved cursor hint stays behind the paused table's events: a restart reads them
    # again (and refuses again) while the other table skips what its checkpoint holds.
    assert not (Path(lake.config.lake_root) / "_tidelake" / "cursor.json").exists()
    again = lake.ingest()
    expected_again = (["shop.audit"], 0, 1)
    assert expected_again == (list(again.refused), again.commits, again.duplicates)


def test_add_column_evolves_the_schema_and_ddl_is_a_round_barrier(lake: Lake) -> None:
    """ALTER ADD COLUMN: later rows carry the column, older rows read NULL; manifests merge
    into one round up to the DDL and never past it: the rows before the DDL in one commit,
    the DDL in the next; schema_version counts the DDL."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "a"})])
    lake.stage(
        [
            event("insert", 2, 11, 2, values={"status": "b"}),
            ddl_event(
                "shop.orders", "ALTER TABLE orders ADD COLUMN note VARCHAR(32)", "ALTER", 12, 3
            ),
        ]
    )
    wider = {
        **{"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"},
        "note": "varchar(32)",
    }
    lake.stage([event("insert", 3, 13, 4, values={"status": "c", "note": "hi"}, types=wider)])
    lake.stage([event("update", 1, 14, 5, values={"status": "a2", "note": "set"}, types=wider)])
    stats = lake.ingest()

    expected = {"1": ("a2", "set"), "2": ("b", None), "3": ("c", "hi")}
    assert expected == lake.state("shop.orders", "status", "note")
    expected = [(0, 2, 0), (2, 3, 1), (3, 5, 0)]
    assert expected == [(c["seq_from"], c["seq"], c["ddl"]) for c in lake.commits()]
    expected = 2
    assert expected == stats.rounds
    checkpoint = lake.checkpoint()
    assert checkpoint is not None
    expected = 1
    assert expected == checkpoint.schema_version
    assert lake.rows() == lake.spark_rows()


def test_a_ddl_alone_commits_the_checkpoint_with_the_new_schema_version(lake: Lake) -> None:
    """A DDL with no rows around it still moves the checkpoint (an empty Hudi commit)."""
    lake.stage([event("insert", 1, 10, 1, values={"status": "a"})])
    lake.ingest()
    lake.stage([ddl_event("shop.orders", "CREATE INDEX i ON orders (status)", "CINDEX", 11, 2)])
    lake.ingest()
    expected = TableCheckpoint(
        seq=2,
        position=ddl_event("shop.orders", "", "", 11, 2).position.encode(),
        schema_version=1,
        columns={"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"},
    )
    assert expected == lake.checkpoint()
    expected = {"1": ("a",)}
    assert expected == lake.state()


def test_merge_on_read_tables_read_the_same_through_hudi_rs_and_spark(
    lake_factory: Callable[..., Lake],
) -> None:
    """MERGE_ON_READ on request: upserts and deletes in log files, merged by both readers."""
    lake = lake_factory(TIDELAKE_LAKE__TABLE_TYPE="MERGE_ON_READ")
    lake.stage([event("insert", i, 10 + i, i, values={"status": "new"}) for i in range(1, 4)])
    lake.ingest()
    lake.stage(
        [
            event("update", 1, 20, 4, values={"status": "paid"}),
            event("delete", 2, 21, 5, values={"status": "new"}),
        ]
    )
    lake.ingest()
    expected = {"1": ("paid",), "3": ("new",)}
    assert expected == lake.state()
    assert lake.rows() == lake.spark_rows()
    props = (Path(lake.path()) / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.type=MERGE_ON_READ" in props


def test_catalog_names_every_lake_table(lake: Lake) -> None:
    """After registration, ``SELECT * FROM db.table`` reads the Hudi table."""
    from tidelake.lake.spark import register_lake_tables

    lake.stage(
        [
            event("insert", 1, 10, 1, values={"status": "a"}),
            event("insert", 1, 11, 2, table="shop.users", values={"status": "u"}),
        ]
    )
    lake.ingest()
    expected = ["shop.orders", "shop.users"]
    assert expected == register_lake_tables(lake.spark, lake.config.lake_root)
    rows = lake.spark.sql("SELECT id, status FROM shop.users").collect()
    expected = [(1, "u")]
    assert expected == [(r["id"], r["status"]) for r in rows]


def test_events_are_ordered_by_position_and_not_by_op(lake: Lake) -> None:
    """A delete staged with an older position than the stored row does not remove it."""
    lake.stage([event("insert", 1, 20, 1, values={"status": "new"})])
    lake.ingest()
    assert Op.INSERT.value == lake.rows()[0]["_tl_op"]
    # Same batch: an update at 22 after a delete at 21: the row is present, as updated.
    lake.stage(
        [
            event("update", 1, 22, 3, values={"status": "again"}),
            event("delete", 1, 21, 2, values={"status": "new"}),
        ]
    )
    lake.ingest()
    expected = {"1": ("again",)}
    assert expected == lake.state()
