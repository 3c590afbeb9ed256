"""The demo's webhook receiver (pipeline/webhook_receiver.py) applies what a webhook route
sends (route/sinks/webhook.py), schema changes included, as a receiver keeping rows must."""

from __future__ import annotations

import time
from typing import Any

from tidelake.lake import ddl
from tidelake.pipeline.webhook_receiver import WebhookReceiver
from tidelake.route.change import RowChange
from tidelake.route.sinks.webhook import encode_batch, signature

KEY = "k3y"
ORDERS = ddl.TableName("shop", "orders")


def _row(seq: int, key: int, row: dict[str, Any] | None) -> RowChange:
    return RowChange(
        table="shop.orders",
        kind="upsert" if row is not None else "delete",
        key={"id": key},
        row=None if row is None else {"id": key, **row},
        position=f"{seq:020d}",
        seq=seq,
    )


def _schema(seq: int, *ops: ddl.Operation) -> RowChange:
    return RowChange(
        table="shop.orders",
        kind="schema",
        key={},
        row=None,
        position=f"{seq:020d}",
        seq=seq,
        operations=ops,
        statement="…",
    )


def _send(receiver: WebhookReceiver, *changes: RowChange) -> int:
    body = encode_batch("hook", "b", changes)
    stamp = str(int(time.time()))
    headers = {"Tidelake-Timestamp": stamp, "Tidelake-Signature": signature(KEY, stamp, body)}
    return receiver.receive(headers, body)


def _rows(receiver: WebhookReceiver, table: str = "shop.orders") -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in receiver.rows(table)}


def test_column_changes_reshape_older_rows_and_bring_late_ones_forward() -> None:
    receiver = WebhookReceiver(KEY)
    try:
        assert _send(receiver, _row(1, 1, {"total": "1.00", "tier": "a"})) == 200
        rename = ddl.RenameColumn(ORDERS, "total", "amount")
        add = ddl.AddColumn(ORDERS, ddl.ColumnSpec("note", "varchar(9)", ddl.Default("value", "n")))
        drop = ddl.DropColumn(ORDERS, "tier")
        assert _send(receiver, _schema(5, rename, add, drop), _row(6, 2, {"amount": "2.00"})) == 200
        # A dead letter of before the DDL, re-processed now: brought into today's shape.
        assert _send(receiver, _row(2, 3, {"total": "3.00", "tier": "b"})) == 200
        # The statement again (a redelivery): the rows do not change again.
        assert _send(receiver, _schema(5, add)) == 200
        assert _rows(receiver) == {
            1: {"id": 1, "amount": "1.00", "note": "n"},
            2: {"id": 2, "amount": "2.00"},
            3: {"id": 3, "amount": "3.00", "note": "n"},
        }
    finally:
        receiver.server_close()


def test_a_truncate_removes_older_rows_and_voids_late_ones() -> None:
    receiver = WebhookReceiver(KEY)
    try:
        _send(receiver, _row(1, 1, {"v": "a"}), _row(9, 2, {"v": "b"}))
        _send(receiver, _schema(5, ddl.TruncateTable(ORDERS)))
        _send(receiver, _row(3, 3, {"v": "late"}), _row(7, 4, {"v": "new"}))
        assert sorted(_rows(receiver)) == [2, 4]
        _send(receiver, _schema(10, ddl.RenameTable(ORDERS, ddl.TableName("shop", "old"))))
        assert _rows(receiver) == {}
        assert sorted(_rows(receiver, "shop.old")) == [2, 4]
        _send(receiver, _row(8, 5, {"v": "late, of the old name"}))
        assert _rows(receiver) == {}
    finally:
        receiver.server_close()
