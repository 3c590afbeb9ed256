"""Many tables of one schema, all changing at once, as TiCDC emits them (``demo --tables N``).

The shape of issue 21 ("1,000 active tables at 10 events/s each"): ``N`` tables
``shop.store_0001`` … ``shop.store_<N>``, one per store, each defined alike — ``id BIGINT``
primary key, ``amount DECIMAL(12,2)``, ``note VARCHAR(64)``, ``updated_at DATETIME``. The
k-th transaction goes to table k mod N, so at a steady publishing rate every table receives
rate/N events/s. A transaction changes one table: one or two inserts, an update, a row
updated twice, or a delete (seeded; every transaction kind has the same odds on every table,
so every table's share of the events is the same up to a few).

Encoded by ``workload/ticdc.py`` exactly as the order workload is. With ``create_tables`` the
stream opens with each table's CREATE TABLE, as a changefeed started before the tables sees
it; without (what the demo runs: a changefeed started on a database whose tables exist), the
lake learns each table's definition from :meth:`ManyTablesWorkload.table_definitions`
(``lake.tables`` in the config, as a source catalog would tell it: TiCDC's ``decimal`` carries
no precision). Each CREATE TABLE is a DDL barrier, a round of its own in the ingest, so a
thousand of them would measure table creation, not tables at work.

:meth:`ManyTablesWorkload.opening` gives each table its first row ahead of the stream: the
demo publishes it and waits until the lake has created every table, so that what it then
measures is tables at work (creating a Hudi table costs several commits' time, once).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from tidelake.workload.keys import LiveKeys
from tidelake.workload.ticdc import Key, Message, Row, TicdcEncoder

DATABASE = "shop"
#: Column name → MySQL type of every table, in table order.
SCHEMA: dict[str, str] = {
    "id": "bigint",
    "amount": "decimal(12,2)",
    "note": "varchar(64)",
    "updated_at": "datetime",
}
PRIMARY_KEY: tuple[str, ...] = ("id",)
_NOTES = (None, "cash", "card", "refund", "voucher", "Zoë's", "李雷", "Ólafur")


@dataclass
class ManyTablesSpec:
    """How many tables and events, and the seed that makes a run reproducible."""

    tables: int = 1_000
    events: int = 100_000
    seed: int = 7
    #: Open the stream with each table's CREATE TABLE (else: ``table_definitions``).
    create_tables: bool = True

    def __post_init__(self) -> None:
        if self.tables < 1:
            raise ValueError(f"tables must be at least 1, not {self.tables}")


def table_name(index: int, tables: int) -> str:
    """``store_0001``: 1-based, zero-padded to the width of the largest (at least 4)."""
    return f"store_{index:0{max(4, len(str(tables)))}d}"


class ManyTablesWorkload:
    """Generates the transactions round-robin over the tables and keeps the expected final
    state of every table, as canal-json text (what the demo verifies the lake against)."""

    def __init__(self, spec: ManyTablesSpec | None = None) -> None:
        self.spec = spec or ManyTablesSpec()
        self.tables = [table_name(i, self.spec.tables) for i in range(1, self.spec.tables + 1)]
        self.schemas: dict[str, dict[str, str]] = {t: dict(SCHEMA) for t in self.tables}
        self.primary_keys: dict[str, tuple[str, ...]] = dict.fromkeys(self.tables, PRIMARY_KEY)
        self.state: dict[str, dict[Key, Row]] = {t: {} for t in self.tables}
        #: Row messages per table so far.
        self.received: dict[str, int] = dict.fromkeys(self.tables, 0)
        self._rng = random.Random(self.spec.seed)
        self._encoder = TicdcEncoder(DATABASE)
        self._keys = {t: LiveKeys() for t in self.tables}
        self._next_id = dict.fromkeys(self.tables, 1)
        self._opened = False

    @property
    def emitted(self) -> int:
        return self._encoder.emitted

    def table_definitions(self) -> dict[str, dict[str, object]]:
        """``lake.tables`` of the config: each table's key and column types."""
        return {
            f"{DATABASE}.{t}": {"primary_key": list(PRIMARY_KEY), "columns": dict(SCHEMA)}
            for t in self.tables
        }

    # ---- changes ----------------------------------------------------------------------
    def _row(self, table: str, kind: str, row: Row, ts: int, old: Row | None = None) -> Message:
        self.received[table] += 1
        return self._encoder.row(table, kind, row, ts, SCHEMA, PRIMARY_KEY, old)

    def _values(self, row_id: int) -> Row:
        return {
            "id": str(row_id),
            # Text of a DECIMAL(12,2) as TiDB renders it: always two decimals.
            "amount": f"{Decimal(self._rng.randint(0, 10**8)) / 100:.2f}",
            "note": self._rng.choice(_NOTES),
            "updated_at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        }

    def _insert(self, table: str, ts: int) -> Message:
        row_id = self._next_id[table]
        self._next_id[table] = row_id + 1
        row = self._values(row_id)
        key = (str(row_id),)
        self.state[table][key] = row
        self._keys[table].add(key)
        return self._row(table, "INSERT", row, ts)

    def _update(self, table: str, key: Key, ts: int) -> Message:
        old = self.state[table][key]
        new = self._values(int(key[0]))
        self.state[table][key] = new
        return self._row(table, "UPDATE", new, ts, old)

    def _delete(self, table: str, key: Key, ts: int) -> Message:
        row = self.state[table].pop(key)
        self._keys[table].remove(key)
        return self._row(table, "DELETE", row, ts)

    # ---- transactions -----------------------------------------------------------------
    def _insert_one(self, table: str) -> list[Message]:
        return [self._insert(table, self._encoder.commit_ts())]

    def _insert_two(self, table: str) -> list[Message]:
        ts = self._encoder.commit_ts()
        return [self._insert(table, ts), self._insert(table, ts)]

    def _update_one(self, table: str) -> list[Message]:
        key = self._keys[table].choice(self._rng)
        if key is None:
            return self._insert_one(table)
        return [self._update(table, key, self._encoder.commit_ts())]

    def _update_twice(self, table: str) -> list[Message]:
        key = self._keys[table].choice(self._rng)
        if key is None:
            return self._insert_two(table)
        ts = self._encoder.commit_ts()
        return [self._update(table, key, ts), self._update(table, key, ts)]

    def _delete_one(self, table: str) -> list[Message]:
        key = self._keys[table].choice(self._rng)
        if key is None or len(self._keys[table]) < 2:  # keep a row to change
            return self._insert_one(table)
        return [self._delete(table, key, self._encoder.commit_ts())]

    def _create_tables(self) -> Iterator[list[Message]]:
        if self.spec.create_tables and not self._opened:
            for table in self.tables:
                sql = self._encoder.create_table_sql(table, SCHEMA, PRIMARY_KEY)
                yield [self._encoder.ddl(table, "CREATE", sql)]

    def opening(self) -> Iterator[list[Message]]:
        """Each table's CREATE TABLE (with ``create_tables``) and first row, a transaction
        each, before :meth:`transactions` (whose ``spec.events`` they are not part of)."""
        yield from self._create_tables()
        self._opened = True
        for table in self.tables:
            yield self._insert_one(table)

    def transactions(self) -> Iterator[list[Message]]:
        """Transactions, table after table in turn, until ``spec.events`` more messages."""
        # (weight, transaction kind): about 29% inserts, 48% updates, 23% deletes of the events.
        mix: list[tuple[int, Callable[[str], list[Message]]]] = [
            (24, self._insert_one),
            (4, self._insert_two),
            (42, self._update_one),
            (5, self._update_twice),
            (25, self._delete_one),
        ]
        kinds = [k for _, k in mix]
        weights = [w for w, _ in mix]
        end = self.emitted + self.spec.events
        yield from self._create_tables()
        turn = 0
        while self.emitted < end:
            table = self.tables[turn % len(self.tables)]
            turn += 1
            yield self._rng.choices(kinds, weights)[0](table)

    def expected_rows(self) -> dict[str, list[Row]]:
        """The final state per ``db.table``, sorted by key: every table the stream created or
        changed (a table no message reached does not exist in the lake)."""
        return {
            f"{DATABASE}.{t}": [rows[k] for k in sorted(rows, key=lambda k: int(k[0]))]
            for t, rows in self.state.items()
            if self.spec.create_tables or self.received[t]
        }
