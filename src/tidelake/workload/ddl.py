"""The order workload with schema changes mid-stream, as TiCDC emits them (``demo --with-ddl``).

:class:`DdlWorkload` runs :class:`~tidelake.workload.orders.OrderWorkload`'s transactions and,
at fixed fractions of the stream, emits canal-json DDL messages (``isDdl: true``, the
statement in ``sql``, the TiDB commitTs): add a column with a default and one without, widen
an integer and a decimal, rename and drop a column, create a table that then takes rows and
is renamed, and create a table, fill it and drop it. Each DDL changes the expected state the
way the source changes its tables (existing rows read an added column's default, a renamed
column keeps its values …), so the demo can check the lake's final rows **and** schema.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal

from tidelake.workload.keys import LiveKeys
from tidelake.workload.orders import DATABASE, OrderWorkload
from tidelake.workload.ticdc import Message, Row


@dataclass(frozen=True, slots=True)
class DdlStep:
    """One schema change: when (fraction of the stream) and what."""

    at: float
    table: str
    kind: str
    sql: str
    apply: Callable[[DdlWorkload], None]


def _add_loyalty(w: DdlWorkload) -> None:
    w.schemas["customers"]["loyalty"] = "int"
    w.fill["customers"]["loyalty"] = lambda: str(w.rng.randint(0, 5000))
    for row in w.state["customers"].values():
        row["loyalty"] = "0"  # the DEFAULT, as existing rows read it at the source


def _add_note(w: DdlWorkload) -> None:
    w.schemas["orders"]["note"] = "varchar(64)"
    w.fill["orders"]["note"] = lambda: w.rng.choice([None, "gift", "express", "fragile"])
    for row in w.state["orders"].values():
        row["note"] = None


def _widen_qty(w: DdlWorkload) -> None:
    w.schemas["order_items"]["qty"] = "bigint"


def _create_coupons(w: DdlWorkload) -> None:
    w.add_table("coupons", {"id": "bigint", "code": "varchar(16)", "discount": "decimal(5,2)"})


def _rename_total(w: DdlWorkload) -> None:
    w.rename_column("orders", "order_total", "total_amount", "decimal(12,2)")


def _drop_tier(w: DdlWorkload) -> None:
    w.schemas["customers"].pop("tier")
    w.dropped_columns["customers"].add("tier")
    for row in w.state["customers"].values():
        row.pop("tier", None)


def _widen_total(w: DdlWorkload) -> None:
    w.schemas["orders"]["total_amount"] = "decimal(14,2)"


def _create_import(w: DdlWorkload) -> None:
    w.add_table("import_tmp", {"id": "bigint", "payload": "text"})


def _drop_import(w: DdlWorkload) -> None:
    w.drop_table("import_tmp")


def _rename_coupons(w: DdlWorkload) -> None:
    w.rename_table("coupons", "promotions")


STEPS: tuple[DdlStep, ...] = (
    DdlStep(
        0.12,
        "customers",
        "ALTER",
        "ALTER TABLE `shop`.`customers` ADD COLUMN `loyalty` INT NOT NULL DEFAULT 0",
        _add_loyalty,
    ),
    DdlStep(
        0.2,
        "orders",
        "ALTER",
        "ALTER TABLE `shop`.`orders` ADD COLUMN `note` VARCHAR(64) NULL",
        _add_note,
    ),
    DdlStep(
        0.3,
        "order_items",
        "ALTER",
        "ALTER TABLE `shop`.`order_items` MODIFY COLUMN `qty` BIGINT",
        _widen_qty,
    ),
    DdlStep(
        0.38,
        "coupons",
        "CREATE",
        "CREATE TABLE `shop`.`coupons` (`id` BIGINT NOT NULL, `code` VARCHAR(16), "
        "`discount` DECIMAL(5,2), PRIMARY KEY (`id`))",
        _create_coupons,
    ),
    DdlStep(
        0.48,
        "orders",
        "ALTER",
        "ALTER TABLE `shop`.`orders` RENAME COLUMN `order_total` TO `total_amount`",
        _rename_total,
    ),
    DdlStep(
        0.56,
        "customers",
        "ALTER",
        "ALTER TABLE `shop`.`customers` DROP COLUMN `tier`",
        _drop_tier,
    ),
    DdlStep(
        0.64,
        "orders",
        "ALTER",
        "ALTER TABLE `shop`.`orders` MODIFY COLUMN `total_amount` DECIMAL(14,2)",
        _widen_total,
    ),
    DdlStep(
        0.7,
        "import_tmp",
        "CREATE",
        "CREATE TABLE `shop`.`import_tmp` (`id` BIGINT PRIMARY KEY, `payload` TEXT)",
        _create_import,
    ),
    DdlStep(0.8, "import_tmp", "ERASE", "DROP TABLE `shop`.`import_tmp`", _drop_import),
    DdlStep(
        0.88,
        "promotions",
        "RENAME",
        "RENAME TABLE `shop`.`coupons` TO `shop`.`promotions`",
        _rename_coupons,
    ),
)


class DdlWorkload(OrderWorkload):
    """The order workload plus :data:`STEPS`; expected rows and schemas follow every DDL."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rng = self._rng
        #: Value makers of columns added by DDL, per table (rows written after the DDL).
        self.fill: dict[str, dict[str, Callable[[], str | None]]] = {t: {} for t in self.schemas}
        self.renamed: dict[str, dict[str, str]] = {t: {} for t in self.schemas}
        self.dropped_columns: dict[str, set[str]] = {t: set() for t in self.schemas}
        #: Tables dropped (or renamed away): the lake must not hold them.
        self.dropped_tables: list[str] = []
        self.ddl_emitted = 0
        self._next_extra_id: dict[str, int] = {}

    # ---- schema changes ---------------------------------------------------------------
    def add_table(self, table: str, columns: dict[str, str]) -> None:
        self.schemas[table] = dict(columns)
        self.primary_keys[table] = ("id",)
        self.state[table] = {}
        self._keys[table] = LiveKeys()
        self.fill[table], self.renamed[table], self.dropped_columns[table] = {}, {}, set()
        self._next_extra_id[table] = 1

    def drop_table(self, table: str) -> None:
        del self.schemas[table], self.state[table], self.primary_keys[table]
        del self._keys[table]
        self.dropped_tables.append(f"{DATABASE}.{table}")

    def rename_table(self, old: str, new: str) -> None:
        self.schemas[new] = self.schemas.pop(old)
        self.state[new] = self.state.pop(old)
        self.primary_keys[new] = self.primary_keys.pop(old)
        self._keys[new] = self._keys.pop(old)
        self.fill[new] = self.fill.pop(old)
        self.renamed[new] = self.renamed.pop(old)
        self.dropped_columns[new] = self.dropped_columns.pop(old)
        self._next_extra_id[new] = self._next_extra_id.pop(old)
        self.dropped_tables.append(f"{DATABASE}.{old}")

    def rename_column(self, table: str, old: str, new: str, source_type: str) -> None:
        types = self.schemas[table]
        self.schemas[table] = {(new if c == old else c): t for c, t in types.items()}
        self.schemas[table][new] = source_type
        self.renamed[table][old] = new
        for key, row in self.state[table].items():
            self.state[table][key] = {(new if c == old else c): v for c, v in row.items()}

    def _shape(self, table: str, row: Row) -> Row:
        """A row the base workload built, in the table's current schema."""
        out = dict(row)
        for old, new in self.renamed.get(table, {}).items():
            if old in out:
                out[new] = out.pop(old)
        for name in self.dropped_columns.get(table, ()):
            out.pop(name, None)
        for name, make in self.fill.get(table, {}).items():
            if name not in row:
                out[name] = make()
        return {c: out.get(c) for c in self.schemas[table]}

    def _insert(self, table: str, row: Row, ts: int) -> Message:
        return super()._insert(table, self._shape(table, row), ts)

    def _update(self, table: str, new: Row, ts: int) -> Message:
        return super()._update(table, self._shape(table, new), ts)

    # ---- messages ---------------------------------------------------------------------
    def _ddl_message(self, step: DdlStep) -> Message:
        self.ddl_emitted += 1
        return self._ddl(step.table, step.kind, step.sql)

    def _extra_table_txn(self) -> list[Message]:
        """Rows of the tables the DDL created: inserts, and updates of earlier ones."""
        live = [t for t in ("coupons", "promotions", "import_tmp") if t in self.schemas]
        if not live:
            return []
        table = self.rng.choice(live)
        ts = self._commit_ts()
        held = self._pick(table)
        if held is not None and self.rng.random() < 0.4:
            new = dict(held)
            if "discount" in new:
                new["discount"] = f"{Decimal(self.rng.randint(1, 9999)) / 100:.2f}"
            else:
                new["payload"] = f"p{self.rng.randint(1, 10**6)}"
            return [self._update(table, new, ts)]
        next_id = self._next_extra_id[table]
        self._next_extra_id[table] = next_id + 1
        row: Row = {"id": str(next_id)}
        if "discount" in self.schemas[table]:
            row |= {"code": f"C{next_id:05d}", "discount": f"{self.rng.randint(1, 50)}.00"}
        else:
            row["payload"] = f"p{next_id}"
        return [self._insert(table, row, ts)]

    def transactions(self) -> Iterator[list[Message]]:
        """The order workload's transactions, the DDL steps at their fractions, and rows of
        the tables the DDL created mixed in."""
        steps = list(STEPS)
        total = max(1, self.spec.events)
        for txn in super().transactions():
            yield txn
            while steps and self.emitted >= steps[0].at * total:
                step = steps.pop(0)
                step.apply(self)
                yield [self._ddl_message(step)]
            if self.rng.random() < 0.08:
                extra = self._extra_table_txn()
                if extra:
                    yield extra
        for step in steps:  # a stream too short to reach them still applies them
            step.apply(self)
            yield [self._ddl_message(step)]

    def expected_schemas(self) -> dict[str, dict[str, str]]:
        """Column → source type of every table the lake must hold, as ``db.table``."""
        return {f"{DATABASE}.{t}": dict(c) for t, c in self.schemas.items()}
