"""A view's incremental step against the size of its base table (``--part views``).

The issue asks that a view's update cost grow with the changed keys, not the table size.
One lake per size holds ``shop.orders`` (``id`` key, ``customer_id``, ``amount``, ``status``,
``order_date``), loaded through the production path: events staged as the stager stages them
(``stage/manifest.py`` + ``LocalStorage``, as the lake tests' ``lakekit`` does) and applied by
:class:`~tidelake.lake.ingest.Ingestor`, so the table keeps Hudi's change log exactly as
production makes it (the view is configured before the table exists). Every size is loaded in
the same number of commits, so both timelines are equally long; the customer count is fixed,
so the view holds the same number of groups at every size.

The view ``SELECT customer_id, COUNT(*), SUM(amount), MAX(order_date) ... GROUP BY
customer_id`` is built by its first step (a rebuild). Then, per K changed keys, rounds of:
stage and ingest K changes (mostly updates of ``amount``, some inserts of new, latest orders,
a few deletes), then time :meth:`ViewMaintainer.step` alone. The two lakes take turns round
by round (one Spark session), so a change of machine load hits both sizes alike; one untimed
round each first warms the step's code paths up. Each size is then verified, times a full
``rebuild`` and is verified again: a view that differs from its recomputation fails the part.

A second view joins a second table, ``shop.customers`` (``id`` key, ``name``, ``region``,
``tier``; the customer count, loaded in the same commits as the orders, also configured before
it exists): ``SELECT c.id AS customer_id, c.region, COUNT(o.id), SUM(o.amount),
MAX(o.order_date) FROM shop.customers c LEFT JOIN shop.orders o ON o.customer_id = c.id GROUP
BY c.id, c.region``. Each round also moves a few customers to another region (``customer_share``
of K), so both sides of the join change; the join view's step is timed on its own, right after
the aggregate view's, in the same rounds, and verified and rebuilt the same way.

The bench uses tidelake's public interface only (``step``, ``rebuild``, ``verify`` and their
results). ``tools/view_step_phases.py`` runs the same workload with a :class:`StepProbe` that
also times the maintainer's pieces (exclusive seconds: the change-log read, the recomputation
of groups whose MAX went away, the merge, the view-table write, ...) to show which of them
grows with the table.
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelake.config import Config, load_config
from tidelake.events import ChangeEvent, Op, Position
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import Manifest, TableFile, table_file_path, write_manifest
from tidelake_bench.stats import ratio

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Log = Callable[[str], None]

DATABASE, TABLE, CUSTOMERS_TABLE = "shop", "orders", "customers"
VIEW = "view"
SQL = (
    "SELECT customer_id, COUNT(*) AS orders, SUM(amount) AS spend, "
    "MAX(order_date) AS last_order FROM shop.orders GROUP BY customer_id"
)
#: The join view: every customer with its orders (none: 0 orders, NULL spend).
JOIN_VIEW = "by_customer"
JOIN_SQL = (
    "SELECT c.id AS customer_id, c.region, COUNT(o.id) AS orders, SUM(o.amount) AS spend, "
    "MAX(o.order_date) AS last_order FROM shop.customers c LEFT JOIN shop.orders o "
    "ON o.customer_id = c.id GROUP BY c.id, c.region"
)
TYPES = {
    "id": "bigint",
    "customer_id": "bigint",
    "amount": "decimal(12,2)",
    "status": "varchar(16)",
    "order_date": "date",
}
CUSTOMER_TYPES = {
    "id": "bigint",
    "name": "varchar(64)",
    "region": "varchar(16)",
    "tier": "varchar(8)",
}
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
REGIONS = ("north", "south", "east", "west", "central")
TIERS = ("bronze", "silver", "gold")
FIRST_DATE = dt.date(2020, 1, 1)
#: Base orders' dates spread over this many days from FIRST_DATE; new orders come after.
DATE_DAYS = 1_500
_COMMIT_MS = 1_714_929_186_000


class ViewBenchError(RuntimeError):
    """The view came out wrong, or a step did not do what the bench times."""


@dataclass(frozen=True)
class ViewsPlan:
    """Sizes of the views part."""

    #: Base-table rows, small then large.
    table_rows: tuple[int, int] = (100_000, 1_000_000)
    customers: int = 5_000
    #: Changed keys per round.
    keys: tuple[int, ...] = (100, 1_000)
    #: Timed rounds per K (the median is reported).
    rounds: int = 3
    #: Commits the load takes at every size (its batches are rows / load_commits).
    load_commits: int = 10
    #: Share of a round's changes that insert new orders, and that delete; the rest update.
    insert_share: float = 0.10
    delete_share: float = 0.05
    #: Customers moved to another region per round, as a share of K (at least one): the
    #: join view's other side changes too.
    customer_share: float = 0.02
    seed: int = 7


# -- the workload (pure)


def base_row(order_id: int, customers: int) -> dict[str, Any]:
    """Base order ``order_id`` (1-based), a function of its id alone."""
    return {
        "id": order_id,
        "customer_id": (order_id * 7_919) % customers + 1,
        "amount": Decimal((order_id * 37) % 100_000).scaleb(-2),
        "status": STATUSES[order_id % len(STATUSES)],
        "order_date": FIRST_DATE + dt.timedelta(days=_mix(order_id) % DATE_DAYS),
    }


def customer_row(customer_id: int) -> dict[str, Any]:
    """Base customer ``customer_id`` (1-based), a function of its id alone."""
    return {
        "id": customer_id,
        "name": f"customer {customer_id:05d}",
        "region": REGIONS[_mix(customer_id) % len(REGIONS)],
        "tier": TIERS[customer_id % len(TIERS)],
    }


def _mix(value: int) -> int:
    """Knuth's multiplicative hash: a customer's orders get scattered dates (a customer's
    ids step by ``customers``, which a plain ``id * c % days`` maps to a few dates only)."""
    return (value * 2_654_435_761) % 2**32 >> 8


def canal_values(row: dict[str, Any]) -> dict[str, str | None]:
    """A row as canal-json text, as the stager stages it."""
    out: dict[str, str | None] = {}
    for name, value in row.items():
        if value is None:
            out[name] = None
        elif isinstance(value, Decimal):
            out[name] = f"{value:.2f}"
        elif isinstance(value, dt.date):
            out[name] = value.isoformat()
        else:
            out[name] = str(value)
    return out


def round_mix(keys: int, insert_share: float, delete_share: float) -> tuple[int, int, int]:
    """``(updates, inserts, deletes)`` of a round of ``keys`` changes: at least one of each
    kind from 20 keys up, and always ``keys`` in all."""
    inserts = round(keys * insert_share)
    deletes = round(keys * delete_share)
    if keys >= 20:
        inserts, deletes = max(inserts, 1), max(deletes, 1)
    return keys - inserts - deletes, inserts, deletes


@dataclass
class Orders:
    """The live orders of one lake: base rows by id, plus changed and inserted ones."""

    rows: int
    customers: int
    seed: int = 7
    _rng: random.Random = field(init=False)
    _live: list[int] = field(init=False)
    _changed: dict[int, dict[str, Any]] = field(init=False, default_factory=dict)
    _next_id: int = field(init=False)
    _rounds: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._live = list(range(1, self.rows + 1))
        self._next_id = self.rows + 1

    def __len__(self) -> int:
        return len(self._live)

    def row(self, order_id: int) -> dict[str, Any]:
        return self._changed.get(order_id) or base_row(order_id, self.customers)

    def changes(
        self, keys: int, insert_share: float, delete_share: float
    ) -> list[tuple[Op, dict[str, Any]]]:
        """One round: ``keys`` distinct orders changed. Updates set a new ``amount``; inserts
        are new orders dated after every existing one; deletes remove live orders."""
        updates, inserts, deletes = round_mix(keys, insert_share, delete_share)
        if updates + deletes > len(self._live):
            raise ValueError(f"{updates + deletes} changes of {len(self._live)} live orders")
        self._rounds += 1
        picked = self._rng.sample(range(len(self._live)), updates + deletes)
        out: list[tuple[Op, dict[str, Any]]] = []
        for index in picked[:updates]:
            row = dict(self.row(self._live[index]))
            row["amount"] = Decimal(self._rng.randrange(1, 100_000)).scaleb(-2)
            self._changed[row["id"]] = row
            out.append((Op.UPDATE, row))
        gone = sorted(picked[updates:], reverse=True)  # pop from the end first
        for index in gone:
            order_id = self._live[index]
            out.append((Op.DELETE, self.row(order_id)))
            self._live[index] = self._live[-1]
            self._live.pop()
            self._changed.pop(order_id, None)
        for _ in range(inserts):
            row = {
                "id": self._next_id,
                "customer_id": self._rng.randrange(1, self.customers + 1),
                "amount": Decimal(self._rng.randrange(1, 100_000)).scaleb(-2),
                "status": "new",
                "order_date": FIRST_DATE + dt.timedelta(days=DATE_DAYS + self._rounds),
            }
            self._changed[self._next_id] = row
            self._live.append(self._next_id)
            self._next_id += 1
            out.append((Op.INSERT, row))
        return out


def customer_changes(keys: int, share: float) -> int:
    """Customers changed in a round of ``keys`` order changes: at least one."""
    return max(1, round(keys * share))


@dataclass
class Customers:
    """The customers of one lake: base rows by id, plus those moved to another region."""

    count: int
    seed: int = 7
    _rng: random.Random = field(init=False)
    _changed: dict[int, dict[str, Any]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        # Its own generator: the orders' changes stay those of the aggregate-only bench.
        self._rng = random.Random(self.seed * 1_000_003 + 1)

    def row(self, customer_id: int) -> dict[str, Any]:
        return self._changed.get(customer_id) or customer_row(customer_id)

    def changes(self, customers: int) -> list[tuple[Op, dict[str, Any]]]:
        """``customers`` distinct customers, each moved to another region (an update)."""
        out: list[tuple[Op, dict[str, Any]]] = []
        for customer_id in self._rng.sample(range(1, self.count + 1), customers):
            row = dict(self.row(customer_id))
            row["region"] = self._rng.choice([r for r in REGIONS if r != row["region"]])
            self._changed[customer_id] = row
            out.append((Op.UPDATE, row))
        return out


# -- timing the step's pieces (pure)


class PhaseClock:
    """Exclusive seconds per phase of nested timed calls: a phase's time excludes the
    timed calls made inside it, so the phases add up to the time of the outermost call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0.0)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total = time.perf_counter() - started
                inner = self._stack.pop()
                self.seconds[phase] += total - inner
                if self._stack:
                    self._stack[-1] += total

        return timed

    def take(self) -> dict[str, float]:
        """The seconds so far (rounded), and start again."""
        out = {k: round(v, 3) for k, v in sorted(self.seconds.items())}
        self.seconds.clear()
        return out


@contextmanager
def patched(targets: list[tuple[Any, str, str]], clock: PhaseClock) -> Iterator[None]:
    """``(owner, attribute, phase)``: each attribute replaced by its timed self meanwhile."""
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in targets]
    try:
        for owner, name, phase in targets:
            setattr(owner, name, clock.wrap(phase, getattr(owner, name)))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


class StepProbe:
    """What a diagnosis measures around each timed step and the rebuild, besides the public
    results: seconds per phase (a :class:`PhaseClock` over patched pieces) and the
    recomputed groups whose extreme the change kept (a :class:`KeptCounter`). The bench
    itself runs without one (it uses tidelake's public interface only);
    ``tools/view_step_phases.py`` passes one that times the maintainer's pieces."""

    def __init__(
        self,
        targets: Callable[[], list[tuple[Any, str, str]]],
        merge_owner: Any = None,
        merge_name: str = "",
    ) -> None:
        self.targets = targets
        self.merge_owner, self.merge_name = merge_owner, merge_name
        self.clock = PhaseClock()
        self.kept = KeptCounter()

    @contextmanager
    def around(self) -> Iterator[None]:
        self.clock.take()
        self.kept.take()
        with patched(self.targets(), self.clock):
            if self.merge_owner is None:
                yield
                return
            original = getattr(self.merge_owner, self.merge_name)
            setattr(self.merge_owner, self.merge_name, self.kept.wrap(original))
            try:
                yield
            finally:
                setattr(self.merge_owner, self.merge_name, original)

    def take(self) -> tuple[dict[str, float], int]:
        return self.clock.take(), self.kept.take()


# -- the summary (pure)


@dataclass
class StepRun:
    """One timed step."""

    keys: int
    seconds: float
    records: int
    groups: int
    recomputed: int
    phases: dict[str, float] = field(default_factory=dict)
    #: Of the recomputed groups, those whose MIN/MAX the change itself puts back: the value
    #: taken away is matched or passed by one added (:func:`extreme_kept`).
    recomputed_kept: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"seconds": round(self.seconds, 3)}


def extreme_kept(
    aggregates: list[tuple[str, str]], change: dict[str, Any], stored: dict[str, Any] | None
) -> bool:
    """Whether a group the step recomputes for a MIN/MAX needed no base-table read: for each
    ``(func, alias)`` MIN/MAX whose stored value was taken away, a value at least as extreme
    was added by the same change (an update that leaves the column as it was takes the value
    away and adds it back), so the new extreme is the added one. False when any of them
    really lost its extreme, or the group was recomputed for another reason."""
    if stored is None:
        return False
    lost = False
    for func, alias in aggregates:
        current, added, gone = stored.get(alias), change[f"add_{alias}"], change[f"gone_{alias}"]
        if gone is None or current is None:
            continue
        if (gone <= current) if func == "min" else (gone >= current):
            lost = True
            if added is None or ((added > current) if func == "min" else (added < current)):
                return False
    return lost


@dataclass
class KeptCounter:
    """Counts the groups :func:`extreme_kept` finds among those ``_merge`` recomputes."""

    kept: int = 0

    def wrap(self, merge: Callable[..., Any]) -> Callable[..., Any]:
        def counted(view: Any, change: dict[str, Any], stored: dict[str, Any] | None) -> Any:
            merged = merge(view, change, stored)
            if merged is None:
                aggregates = [
                    (a.func, a.alias) for a in view.aggregates if a.func in ("min", "max")
                ]
                self.kept += extreme_kept(aggregates, change, stored)
            return merged

        return counted

    def take(self) -> int:
        kept, self.kept = self.kept, 0
        return kept


def steps_by_keys(steps: list[StepRun]) -> dict[int, dict[str, Any]]:
    """Per K: the median step seconds and the medians of what the steps did."""
    out: dict[int, dict[str, Any]] = {}
    for keys in sorted({s.keys for s in steps}):
        runs = [s for s in steps if s.keys == keys]
        phases = sorted({p for r in runs for p in r.phases})
        out[keys] = {
            "step_s": round(statistics.median(r.seconds for r in runs), 3),
            "records": int(statistics.median(r.records for r in runs)),
            "groups": int(statistics.median(r.groups for r in runs)),
            "recomputed": int(statistics.median(r.recomputed for r in runs)),
            "recomputed_kept": int(statistics.median(r.recomputed_kept for r in runs)),
            "phases_s": {
                p: round(statistics.median(r.phases.get(p, 0.0) for r in runs), 3) for p in phases
            },
            "rounds": len(runs),
        }
    return out


@dataclass
class SizeRun:
    """One table size: its load, its timed steps and rebuild, its check; the same for the
    join view (``join_*``, timed in the same rounds)."""

    rows: int
    load_s: float = 0.0
    #: Commits of ``shop.orders`` (the customers commit in the same ingest rounds).
    load_commits: int = 0
    base_files: int = 0
    base_mib: float = 0.0
    first_build_s: float = 0.0
    view_rows: int = 0
    steps: list[StepRun] = field(default_factory=list)
    rebuild_s: float = 0.0
    rebuild_phases: dict[str, float] = field(default_factory=dict)
    verified: bool | None = None
    join_first_build_s: float = 0.0
    join_view_rows: int = 0
    #: Customers moved to another region per round, by K.
    customer_changes: dict[int, int] = field(default_factory=dict)
    join_steps: list[StepRun] = field(default_factory=list)
    join_rebuild_s: float = 0.0
    join_rebuild_phases: dict[str, float] = field(default_factory=dict)

    def by_keys(self) -> dict[int, dict[str, Any]]:
        """The aggregate view's steps per K (:func:`steps_by_keys`)."""
        return steps_by_keys(self.steps)

    def join_by_keys(self) -> dict[int, dict[str, Any]]:
        """The join view's steps per K (:func:`steps_by_keys`)."""
        return steps_by_keys(self.join_steps)

    def to_json(self) -> dict[str, Any]:
        lists = ("steps", "join_steps", "customer_changes")
        out = {k: v for k, v in self.__dict__.items() if k not in lists}
        out["steps"] = [s.to_json() for s in self.steps]
        out["by_keys"] = {str(k): v for k, v in self.by_keys().items()}
        out["customer_changes"] = {str(k): v for k, v in self.customer_changes.items()}
        out["join_steps"] = [s.to_json() for s in self.join_steps]
        out["join_by_keys"] = {str(k): v for k, v in self.join_by_keys().items()}
        return out


SIZE_LABELS = ("small", "large")


def headline(plan: ViewsPlan, runs: list[SizeRun]) -> dict[str, Any]:
    """The part's top-level numbers: per size and K, and the large/small growth per K."""
    n: dict[str, Any] = {"views_customers": plan.customers}
    medians = {}
    for label, run in zip(SIZE_LABELS, runs, strict=False):
        n[f"views_rows_{label}"] = run.rows
        n[f"view_rebuild_s[{label}]"] = round(run.rebuild_s, 3)
        medians[label] = run.by_keys()
        for keys, m in medians[label].items():
            n |= {
                f"view_step_s[{label},k={keys}]": m["step_s"],
                f"view_step_records[{label},k={keys}]": m["records"],
                f"view_step_groups[{label},k={keys}]": m["groups"],
                f"view_step_recomputed[{label},k={keys}]": m["recomputed"],
                f"view_step_recomputed_kept[{label},k={keys}]": m["recomputed_kept"],
            }
    # The join view: the same names with ``view_join_`` (none when no join step ran).
    joins = {}
    for label, run in zip(SIZE_LABELS, runs, strict=False):
        joins[label] = run.join_by_keys()
        if not joins[label]:
            continue
        n[f"view_join_rebuild_s[{label}]"] = round(run.join_rebuild_s, 3)
        for keys, m in joins[label].items():
            n |= {
                f"view_join_step_s[{label},k={keys}]": m["step_s"],
                f"view_join_step_records[{label},k={keys}]": m["records"],
                f"view_join_step_groups[{label},k={keys}]": m["groups"],
                f"view_join_step_recomputed[{label},k={keys}]": m["recomputed"],
            }
    if any(joins.values()):
        for keys in plan.keys:
            n[f"views_customer_changes[k={keys}]"] = customer_changes(keys, plan.customer_share)
    if len(runs) == 2:
        n["views_size_ratio"] = ratio(runs[1].rows, runs[0].rows)
        for keys in plan.keys:
            small, large = medians["small"].get(keys), medians["large"].get(keys)
            if small and large:
                n[f"view_step_growth[k={keys}]"] = ratio(large["step_s"], small["step_s"])
            small, large = joins["small"].get(keys), joins["large"].get(keys)
            if small and large:
                n[f"view_join_step_growth[k={keys}]"] = ratio(large["step_s"], small["step_s"])
    return n


# -- running it


def views_config(home: Path, plan: ViewsPlan, rows: int) -> Config:
    """The defaults under ``home``, both views configured, load batches of rows/commits
    (with their share of the customers)."""
    batch = -(-rows // plan.load_commits) + -(-plan.customers // plan.load_commits)
    return load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(home),
            "TIDELAKE_INGEST__MAX_BATCH_EVENTS": str(max(1, batch)),
            f"TIDELAKE_VIEWS__{VIEW.upper()}__SQL": SQL,
            f"TIDELAKE_VIEWS__{JOIN_VIEW.upper()}__SQL": JOIN_SQL,
        },
    )


@dataclass
class Stager:
    """Stages events as the stager does: one file per table, then the manifest, per batch."""

    storage: LocalStorage
    seq: int = 0
    batches: int = 0

    def event(
        self, op: Op, row: dict[str, Any], table: str = TABLE, types: dict[str, str] = TYPES
    ) -> ChangeEvent:
        self.seq += 1
        values = canal_values(row)
        key = {"id": values["id"]}
        return ChangeEvent(
            source="bench",
            database=DATABASE,
            table=table,
            op=op,
            position=Position((self.seq, 0)),
            pk=("id",),
            key=key,
            before=values if op is Op.DELETE else None,
            after=None if op is Op.DELETE else values,
            commit_ts_ms=_COMMIT_MS + self.seq,
            column_types=dict(types),
            seq=self.seq,
        )

    def stage(
        self,
        changes: list[tuple[Op, dict[str, Any]]],
        customers: Sequence[tuple[Op, dict[str, Any]]] = (),
    ) -> Manifest:
        """One batch: the orders' ``changes`` and the ``customers``' in one manifest."""
        by_table = {
            TABLE: [self.event(op, row) for op, row in changes],
            CUSTOMERS_TABLE: [
                self.event(op, row, CUSTOMERS_TABLE, CUSTOMER_TYPES) for op, row in customers
            ],
        }
        self.batches += 1
        batch_id = f"v{self.batches:07d}"
        files = []
        for table, events in by_table.items():
            if not events:
                continue
            path = table_file_path(batch_id, DATABASE, table)
            self.storage.put(path, b"".join(e.to_json() + b"\n" for e in events))
            files.append(TableFile(DATABASE, table, path, len(events)))
        staged = [e for events in by_table.values() for e in events]
        manifest = Manifest(
            batch_id=batch_id,
            seq_first=min(e.seq for e in staged),
            seq_last=max(e.seq for e in staged),
            created_at_ms=int(time.time() * 1000),
            tables=tuple(files),
            received=len(staged),
            staged=len(staged),
        )
        write_manifest(self.storage, manifest)
        return manifest


def _base_table_size(config: Config) -> tuple[int, float]:
    from tidelake.lake.hudi import table_path

    root = Path(table_path(config.lake_root, DATABASE, TABLE))
    files = [p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts]
    return len(files), round(sum(p.stat().st_size for p in files) / 2**20, 1)


class SizeLake:
    """One lake of ``rows`` orders and the customers: loaded, both views built, then
    stepped round by round."""

    def __init__(
        self,
        spark: SparkSession,
        home: Path,
        plan: ViewsPlan,
        rows: int,
        log: Log,
        probe: StepProbe | None = None,
    ) -> None:
        from tidelake.lake.ingest import Ingestor
        from tidelake.view.maintain import ViewMaintainer

        self.plan, self.rows, self.log, self.probe = plan, rows, log, probe
        self.home = home
        self.config = views_config(home, plan, rows)
        self.run = SizeRun(rows=rows)
        self.stager = Stager(LocalStorage(self.config.stage_root))
        self.ingestor = Ingestor(self.config, spark, self.stager.storage)
        self.maintainer = ViewMaintainer(self.config, spark)
        self.orders = Orders(rows, plan.customers, seed=plan.seed)
        self.customers = Customers(plan.customers, seed=plan.seed)

    def load(self) -> None:
        """The base rows through the ingest, in ``plan.load_commits`` rounds (the customers
        spread over the same rounds); each view's first step (a rebuild)."""
        from tidelake.lake.store import completed_instants

        run, rows, customers = self.run, self.rows, self.plan.customers
        batch = max(1, -(-rows // self.plan.load_commits))
        customer_batch = max(1, -(-customers // self.plan.load_commits))
        started = time.monotonic()
        for n, first in enumerate(range(1, rows + 1, batch)):
            ids = range(first, min(rows, first + batch - 1) + 1)
            cids = range(n * customer_batch + 1, min(customers, (n + 1) * customer_batch) + 1)
            self.stager.stage(
                [(Op.INSERT, base_row(i, customers)) for i in ids],
                [(Op.INSERT, customer_row(c)) for c in cids],
            )
            self.ingestor.run_once()
        run.load_s = round(time.monotonic() - started, 1)
        orders_path = self.maintainer.base_path(f"{DATABASE}.{TABLE}")
        run.load_commits = len(
            completed_instants(self.maintainer.spark, orders_path, metadata_of=())
        )
        run.base_files, run.base_mib = _base_table_size(self.config)
        self.log(
            f"views: {rows:,} orders and {customers:,} customers loaded, {run.load_commits} "
            f"commits of the orders, {run.load_s:.0f} s "
            f"({run.base_files} base files, {run.base_mib} MiB of orders)"
        )
        for view in (VIEW, JOIN_VIEW):
            first_step = self.maintainer.step(view)
            if first_step.outcome != "rebuild":
                raise ViewBenchError(f"{view} first step: {first_step.outcome} {first_step.reason}")
            if view == VIEW:
                run.first_build_s = first_step.duration_ms / 1000
                run.view_rows = first_step.rows or 0
            else:
                run.join_first_build_s = first_step.duration_ms / 1000
                run.join_view_rows = first_step.rows or 0

    def _around(self) -> Any:
        return self.probe.around() if self.probe is not None else nullcontext()

    def step_round(self, keys: int) -> tuple[StepRun, StepRun]:
        """Stage and ingest ``keys`` order changes and a few customer changes, then time each
        view's step alone: the aggregate view's, then the join view's."""
        plan = self.plan
        moved = customer_changes(keys, plan.customer_share)
        self.run.customer_changes[keys] = moved
        self.stager.stage(
            self.orders.changes(keys, plan.insert_share, plan.delete_share),
            self.customers.changes(moved),
        )
        self.ingestor.run_once()
        return self._timed_step(VIEW, keys), self._timed_step(JOIN_VIEW, keys)

    def _timed_step(self, view: str, keys: int) -> StepRun:
        with self._around():
            started = time.perf_counter()
            result = self.maintainer.step(view)
            seconds = time.perf_counter() - started
        phases, kept = self.probe.take() if self.probe is not None else ({}, 0)
        if result.outcome != "step":
            raise ViewBenchError(
                f"{view}, {self.rows:,} rows, K={keys}: {result.outcome} {result.reason}"
            )
        step = StepRun(
            keys, seconds, result.records, result.groups, result.recomputed, phases, kept
        )
        self.log(
            f"views: {view}, {self.rows:,} rows, K={keys:,}: step {step.seconds:.2f} s, "
            f"{step.records:,} records, {step.groups:,} groups, {step.recomputed} recomputed"
            + (f" ({step.recomputed_kept} with their MAX kept)" if self.probe else "")
            + (f" {step.phases}" if step.phases else "")
        )
        return step

    def add_round(self, keys: int) -> None:
        """A timed round: each view's step kept."""
        step, join_step = self.step_round(keys)
        self.run.steps.append(step)
        self.run.join_steps.append(join_step)

    def finish(self) -> SizeRun:
        """Verify each stepped view, time its rebuild, verify it again."""
        run, rows = self.run, self.rows
        for view in (VIEW, JOIN_VIEW):
            _verify(self.maintainer, view, rows, "after the steps")
        for view in (VIEW, JOIN_VIEW):
            with self._around():
                started = time.perf_counter()
                rebuilt = self.maintainer.rebuild(view, "bench")
                seconds = round(time.perf_counter() - started, 3)
            phases = self.probe.take()[0] if self.probe is not None else {}
            if rebuilt.outcome != "rebuild":
                raise ViewBenchError(
                    f"{view} rebuild at {rows:,} rows: {rebuilt.outcome} {rebuilt.reason}"
                )
            if view == VIEW:
                run.rebuild_s, run.rebuild_phases = seconds, phases
            else:
                run.join_rebuild_s, run.join_rebuild_phases = seconds, phases
            self.log(f"views: {view}, {rows:,} rows: rebuild {seconds:.2f} s")
        groups = [_verify(self.maintainer, v, rows, "after the rebuild") for v in (VIEW, JOIN_VIEW)]
        run.verified = True
        self.log(
            f"views: {rows:,} rows: both views verified after the steps and the rebuild "
            f"({groups[0]:,} and {groups[1]:,} groups)"
        )
        return run


def _verify(maintainer: Any, view: str, rows: int, when: str) -> int:
    """The view's groups; raises :class:`ViewBenchError` when it differs from a recomputation."""
    verdict = maintainer.verify(view)
    if not verdict.ok:
        raise ViewBenchError(
            f"{view} wrong at {rows:,} rows {when}: {verdict.extra} extra, {verdict.missing} "
            f"missing of {verdict.expected:,} groups"
        )
    return int(verdict.rows)


@dataclass
class ViewsResult:
    plan: ViewsPlan
    runs: list[SizeRun] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": dict(self.plan.__dict__),
            "sql": SQL,
            "join_sql": JOIN_SQL,
            "sizes": [r.to_json() for r in self.runs],
        }


def run_views_bench(
    home: Path,
    plan: ViewsPlan,
    log: Log,
    spark: SparkSession | None = None,
    probe: StepProbe | None = None,
) -> ViewsResult:
    """Every size of ``plan`` in one Spark session (the ingest's builder and settings)."""
    from tidelake.lake.spark import build_spark_session

    result = ViewsResult(plan)
    homes = [home / f"rows{rows}" for rows in plan.table_rows]
    own = spark is None
    session = spark or build_spark_session(
        views_config(homes[0], plan, plan.table_rows[0]), app_name="tidelake-bench-views"
    )
    try:
        lakes = [
            SizeLake(session, size_home, plan, rows, log, probe)
            for rows, size_home in zip(plan.table_rows, homes, strict=True)
        ]
        for lake in lakes:
            lake.load()
        for lake in lakes:  # warm-up, not counted
            lake.step_round(plan.keys[0])
        # The sizes take turns, round by round: a change of machine load hits both alike.
        for keys in plan.keys:
            for _ in range(plan.rounds):
                for lake in lakes:
                    lake.add_round(keys)
        result.runs = [lake.finish() for lake in lakes]
        session.catalog.clearCache()
        for size_home in homes:
            shutil.rmtree(size_home, ignore_errors=True)
    finally:
        if own:
            session.stop()
    return result
