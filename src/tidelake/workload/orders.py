"""An order system's change stream, as TiCDC (canal-json with the TiDB extension) emits it.

Three tables — ``shop.customers``, ``shop.orders``, ``shop.order_items`` (composite key) —
changed by a seeded random mix of transactions: new orders with their items, status and
total updates, rows updated twice in one transaction, two transactions in the same
millisecond, deletes, primary-key changes (which TiCDC splits into DELETE + INSERT).

The generator keeps the exact expected final state of every table as canal-json text values,
so the demo and the tests can compare the lake row by row against it.

As TiCDC with default settings writes them: the stream opens with each table's CREATE TABLE
(TiDB-restored SQL), and row messages name types without parameters (``decimal``, not
``decimal(12,2)``): the lake types values by the table's DDL, as it must for the real
producer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from tidelake.workload.keys import LiveKeys
from tidelake.workload.ticdc import Key, Message, Row, TicdcEncoder

DATABASE = "shop"

#: Column name → MySQL type, in table order (what canal-json's ``mysqlType`` carries).
SCHEMAS: dict[str, dict[str, str]] = {
    "customers": {
        "id": "bigint",
        "name": "varchar(64)",
        "email": "varchar(128)",
        "tier": "varchar(16)",
        "created_at": "datetime",
    },
    "orders": {
        "id": "bigint",
        "customer_id": "bigint",
        "order_total": "decimal(12,2)",
        "status": "varchar(16)",
        "order_date": "date",
        "updated_at": "datetime",
    },
    "order_items": {
        "order_id": "bigint",
        "line_no": "int",
        "sku": "varchar(32)",
        "qty": "int",
        "price": "decimal(10,2)",
    },
}
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "customers": ("id",),
    "orders": ("id",),
    "order_items": ("order_id", "line_no"),
}
_STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
_TIERS = ("bronze", "silver", "gold", "platinum")
_NAMES = ("Ada", "Grace", "Linus", "Zoë", "Jürgen", "Chloé", "Søren", "Mårten", "李雷", "Ólafur")


@dataclass
class WorkloadSpec:
    """How many events, and the seed that makes a run reproducible."""

    events: int = 50_000
    seed: int = 7
    customers: int = 500
    #: Open the stream with each table's CREATE TABLE, as a changefeed started before the
    #: tables sees it (the SQL workload creates its tables itself: workload/sql.py).
    create_tables: bool = True


@dataclass
class OrderWorkload:
    """Generates transactions and tracks the expected final state of every table."""

    spec: WorkloadSpec = field(default_factory=WorkloadSpec)
    state: dict[str, dict[Key, Row]] = field(default_factory=lambda: {t: {} for t in SCHEMAS})

    def __post_init__(self) -> None:
        #: Column types and keys per table: the DDL workload (workload/ddl.py) changes them.
        self.schemas: dict[str, dict[str, str]] = {t: dict(c) for t, c in SCHEMAS.items()}
        self.primary_keys: dict[str, tuple[str, ...]] = dict(PRIMARY_KEYS)
        self._rng = random.Random(self.spec.seed)
        self._encoder = TicdcEncoder(DATABASE)
        self._next_order = 1
        self._next_customer = 1
        self._order_lines: dict[str, int] = {}
        # Live keys per table, for random picks.
        self._keys: dict[str, LiveKeys] = {t: LiveKeys() for t in SCHEMAS}

    # ---- canal-json (workload/ticdc.py) ---------------------------------------------
    def _commit_ts(self, same_ms: bool = False) -> int:
        return self._encoder.commit_ts(same_ms)

    def _message(
        self, table: str, kind: str, row: Row, commit_ts: int, old: Row | None = None
    ) -> Message:
        types, key = self.schemas[table], self.primary_keys[table]
        return self._encoder.row(table, kind, row, commit_ts, types, key, old)

    def _ddl(self, table: str, kind: str, sql: str) -> Message:
        return self._encoder.ddl(table, kind, sql)

    def create_table_sql(self, table: str) -> str:
        """``CREATE TABLE`` as TiCDC sends it (``TicdcEncoder.create_table_sql``)."""
        return self._encoder.create_table_sql(table, self.schemas[table], self.primary_keys[table])

    def _key(self, table: str, row: Row) -> Key:
        return tuple(str(row[c]) for c in self.primary_keys[table])

    def _insert(self, table: str, row: Row, ts: int) -> Message:
        key = self._key(table, row)
        self.state[table][key] = row
        self._keys[table].add(key)
        return self._message(table, "INSERT", row, ts)

    def _update(self, table: str, new: Row, ts: int) -> Message:
        key = self._key(table, new)
        old = self.state[table][key]
        self.state[table][key] = new
        return self._message(table, "UPDATE", new, ts, old=old)

    def _delete(self, table: str, row: Row, ts: int) -> Message:
        key = self._key(table, row)
        del self.state[table][key]
        self._keys[table].remove(key)
        return self._message(table, "DELETE", row, ts)

    # ---- values ---------------------------------------------------------------------
    def _now_text(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())

    def _money(self, low: int, high: int) -> str:
        """Text of a DECIMAL(p,2) as TiDB renders it: always two decimals."""
        return f"{Decimal(self._rng.randint(low * 100, high * 100)) / 100:.2f}"

    def _pick(self, table: str) -> Row | None:
        key = self._keys[table].choice(self._rng)
        return None if key is None else self.state[table][key]

    # ---- transactions ---------------------------------------------------------------
    def _new_customer(self) -> list[Message]:
        ts = self._commit_ts()
        cid = self._next_customer
        self._next_customer += 1
        row: Row = {
            "id": str(cid),
            "name": f"{self._rng.choice(_NAMES)} {cid}",
            "email": f"c{cid}@example.com" if self._rng.random() > 0.1 else None,
            "tier": self._rng.choice(_TIERS),
            "created_at": self._now_text(),
        }
        return [self._insert("customers", row, ts)]

    def _new_order(self) -> list[Message]:
        ts = self._commit_ts()
        oid = self._next_order
        self._next_order += 1
        cid = self._rng.randint(1, max(1, self._next_customer - 1))
        lines = self._rng.randint(1, 3)
        msgs = []
        total = Decimal(0)
        for line in range(1, lines + 1):
            price = self._money(1, 200)
            qty = self._rng.randint(1, 5)
            total += Decimal(price) * qty
            item: Row = {
                "order_id": str(oid),
                "line_no": str(line),
                "sku": f"SKU-{self._rng.randint(1, 9999):04d}",
                "qty": str(qty),
                "price": price,
            }
            msgs.append(self._insert("order_items", item, ts))
        self._order_lines[str(oid)] = lines
        order: Row = {
            "id": str(oid),
            "customer_id": str(cid),
            "order_total": f"{total:.2f}",
            "status": "new",
            "order_date": time.strftime("%Y-%m-%d", time.gmtime()),
            "updated_at": self._now_text(),
        }
        msgs.insert(0, self._insert("orders", order, ts))
        return msgs

    def _status_change(self, order: Row, ts: int) -> Message:
        new = dict(order)
        new["status"] = self._rng.choice(_STATUSES)
        new["order_total"] = self._money(5, 900)
        new["updated_at"] = self._now_text()
        return self._update("orders", new, ts)

    def _update_order(self) -> list[Message]:
        order = self._pick("orders")
        if order is None:
            return self._new_order()
        return [self._status_change(order, self._commit_ts())]

    def _update_twice_in_txn(self) -> list[Message]:
        order = self._pick("orders")
        if order is None:
            return self._new_order()
        ts = self._commit_ts()
        first = self._status_change(order, ts)
        second = self._status_change(self.state["orders"][self._key("orders", order)], ts)
        return [first, second]

    def _two_txns_same_ms(self) -> list[Message]:
        order = self._pick("orders")
        if order is None:
            return self._new_order()
        first = self._status_change(order, self._commit_ts())
        again = self.state["orders"][self._key("orders", order)]
        second = self._status_change(again, self._commit_ts(same_ms=True))
        return [first, second]

    def _delete_order(self) -> list[Message]:
        order = self._pick("orders")
        if order is None:
            return self._new_order()
        ts = self._commit_ts()
        oid = str(order["id"])
        msgs = [self._delete("orders", order, ts)]
        for line in range(1, self._order_lines.pop(oid, 0) + 1):
            item = self.state["order_items"].get((oid, str(line)))
            if item is not None:
                msgs.append(self._delete("order_items", item, ts))
        return msgs

    def _change_order_key(self) -> list[Message]:
        """Renumber an order: TiCDC splits a primary-key UPDATE into DELETE + INSERT."""
        order = self._pick("orders")
        if order is None:
            return self._new_order()
        ts = self._commit_ts()
        new_id = self._next_order
        self._next_order += 1
        moved = dict(order)
        moved["id"] = str(new_id)
        moved["updated_at"] = self._now_text()
        msgs = [self._delete("orders", order, ts), self._insert("orders", moved, ts)]
        oid = str(order["id"])
        lines = self._order_lines.pop(oid, 0)
        self._order_lines[str(new_id)] = lines
        for line in range(1, lines + 1):
            item = self.state["order_items"].get((oid, str(line)))
            if item is None:
                continue
            msgs.append(self._delete("order_items", item, ts))
            moved_item = dict(item)
            moved_item["order_id"] = str(new_id)
            msgs.append(self._insert("order_items", moved_item, ts))
        return msgs

    def _update_customer(self) -> list[Message]:
        cust = self._pick("customers")
        if cust is None:
            return self._new_customer()
        new = dict(cust)
        new["tier"] = self._rng.choice(_TIERS)
        tag = self._rng.randint(1, 99)
        new["email"] = None if self._rng.random() < 0.05 else f"c{cust['id']}+{tag}@example.com"
        return [self._update("customers", new, self._commit_ts())]

    def _update_item(self) -> list[Message]:
        item = self._pick("order_items")
        if item is None:
            return self._new_order()
        new = dict(item)
        new["qty"] = str(self._rng.randint(1, 9))
        return [self._update("order_items", new, self._commit_ts())]

    def transactions(self) -> Iterator[list[Message]]:
        """Transactions until ``spec.events`` messages have been produced."""
        # (weight, transaction kind): roughly 35% inserts, 50% updates, 12% deletes.
        mix = [
            (20, self._new_order),
            (4, self._new_customer),
            (30, self._update_order),
            (6, self._update_twice_in_txn),
            (5, self._two_txns_same_ms),
            (8, self._update_item),
            (8, self._update_customer),
            (8, self._delete_order),
            (2, self._change_order_key),
        ]
        kinds = [k for _, k in mix]
        weights = [w for w, _ in mix]
        if self.spec.create_tables:
            for table in SCHEMAS:
                yield [self._ddl(table, "CREATE", self.create_table_sql(table))]
        for _ in range(min(self.spec.customers, max(1, self.spec.events // 20))):
            if self.emitted >= self.spec.events:
                return
            yield self._new_customer()
        while self.emitted < self.spec.events:
            yield self._rng.choices(kinds, weights)[0]()

    @property
    def emitted(self) -> int:
        return self._encoder.emitted

    def expected_rows(self) -> dict[str, list[Row]]:
        """The final state per ``db.table``, as canal-json text, sorted by key."""
        return {
            f"{DATABASE}.{t}": [rows[k] for k in sorted(rows, key=_sort_key)]
            for t, rows in self.state.items()
        }


def _sort_key(key: Key) -> tuple[int, ...]:
    return tuple(int(k) for k in key)
