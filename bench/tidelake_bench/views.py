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
from collections.abc import Callable, Iterator
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

DATABASE, TABLE = "shop", "orders"
VIEW = "view"
SQL = (
    "SELECT customer_id, COUNT(*) AS orders, SUM(amount) AS spend, "
    "MAX(order_date) AS last_order FROM shop.orders GROUP BY customer_id"
)
TYPES = {
    "id": "bigint",
    "customer_id": "bigint",
    "amount": "decimal(12,2)",
    "status": "varchar(16)",
    "order_date": "date",
}
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
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


@dataclass
class SizeRun:
    """One table size: its load, its timed steps and rebuild, its check."""

    rows: int
    load_s: float = 0.0
    load_commits: int = 0
    base_files: int = 0
    base_mib: float = 0.0
    first_build_s: float = 0.0
    view_rows: int = 0
    steps: list[StepRun] = field(default_factory=list)
    rebuild_s: float = 0.0
    rebuild_phases: dict[str, float] = field(default_factory=dict)
    verified: bool | None = None

    def by_keys(self) -> dict[int, dict[str, Any]]:
        """Per K: the median step seconds and the medians of what the steps did."""
        out: dict[int, dict[str, Any]] = {}
        for keys in sorted({s.keys for s in self.steps}):
            runs = [s for s in self.steps if s.keys == keys]
            phases = sorted({p for r in runs for p in r.phases})
            out[keys] = {
                "step_s": round(statistics.median(r.seconds for r in runs), 3),
                "records": int(statistics.median(r.records for r in runs)),
                "groups": int(statistics.median(r.groups for r in runs)),
                "recomputed": int(statistics.median(r.recomputed for r in runs)),
                "recomputed_kept": int(statistics.median(r.recomputed_kept for r in runs)),
                "phases_s": {
                    p: round(statistics.median(r.phases.get(p, 0.0) for r in runs), 3)
                    for p in phases
                },
                "rounds": len(runs),
            }
        return out

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "steps"}
        out["steps"] = [s.to_json() for s in self.steps]
        out["by_keys"] = {str(k): v for k, v in self.by_keys().items()}
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
    if len(runs) == 2:
        n["views_size_ratio"] = ratio(runs[1].rows, runs[0].rows)
        for keys in plan.keys:
            small, large = medians["small"].get(keys), medians["large"].get(keys)
            if small and large:
                n[f"view_step_growth[k={keys}]"] = ratio(large["step_s"], small["step_s"])
    return n


# -- running it


def views_config(home: Path, plan: ViewsPlan, rows: int) -> Config:
    """The defaults under ``home``, the view configured, load batches of rows/commits."""
    return load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(home),
            "TIDELAKE_INGEST__MAX_BATCH_EVENTS": str(max(1, -(-rows // plan.load_commits))),
            f"TIDELAKE_VIEWS__{VIEW.upper()}__SQL": SQL,
        },
    )


@dataclass
class Stager:
    """Stages events as the stager does: one table file, then the manifest, per batch."""

    storage: LocalStorage
    seq: int = 0
    batches: int = 0

    def event(self, op: Op, row: dict[str, Any]) -> ChangeEvent:
        self.seq += 1
        values = canal_values(row)
        key = {"id": values["id"]}
        return ChangeEvent(
            source="bench",
            database=DATABASE,
            table=TABLE,
            op=op,
            position=Position((self.seq, 0)),
            pk=("id",),
            key=key,
            before=values if op is Op.DELETE else None,
            after=None if op is Op.DELETE else values,
            commit_ts_ms=_COMMIT_MS + self.seq,
            column_types=dict(TYPES),
            seq=self.seq,
        )

    def stage(self, changes: list[tuple[Op, dict[str, Any]]]) -> Manifest:
        events = [self.event(op, row) for op, row in changes]
        self.batches += 1
        batch_id = f"v{self.batches:07d}"
        path = table_file_path(batch_id, DATABASE, TABLE)
        self.storage.put(path, b"".join(e.to_json() + b"\n" for e in events))
        manifest = Manifest(
            batch_id=batch_id,
            seq_first=events[0].seq,
            seq_last=events[-1].seq,
            created_at_ms=int(time.time() * 1000),
            tables=(TableFile(DATABASE, TABLE, path, len(events)),),
            received=len(events),
            staged=len(events),
        )
        write_manifest(self.storage, manifest)
        return manifest


def _base_table_size(config: Config) -> tuple[int, float]:
    from tidelake.lake.hudi import table_path

    root = Path(table_path(config.lake_root, DATABASE, TABLE))
    files = [p for p in root.rglob("*.parquet") if ".hoodie" not in p.parts]
    return len(files), round(sum(p.stat().st_size for p in files) / 2**20, 1)


class SizeLake:
    """One lake of ``rows`` orders: loaded, its view built, then stepped round by round."""

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

    def load(self) -> None:
        """The base rows through the ingest, in ``plan.load_commits`` commits; the view's
        first step (a rebuild)."""
        run, rows = self.run, self.rows
        batch = max(1, -(-rows // self.plan.load_commits))
        started = time.monotonic()
        for first in range(1, rows + 1, batch):
            ids = range(first, min(rows, first + batch - 1) + 1)
            self.stager.stage([(Op.INSERT, base_row(i, self.plan.customers)) for i in ids])
            run.load_commits += self.ingestor.run_once().commits
        run.load_s = round(time.monotonic() - started, 1)
        run.base_files, run.base_mib = _base_table_size(self.config)
        self.log(
            f"views: {rows:,} orders loaded in {run.load_commits} commits, {run.load_s:.0f} s "
            f"({run.base_files} base files, {run.base_mib} MiB)"
        )
        first_step = self.maintainer.step(VIEW)
        if first_step.outcome != "rebuild":
            raise ViewBenchError(f"first step: {first_step.outcome} {first_step.reason}")
        run.first_build_s = first_step.duration_ms / 1000
        run.view_rows = first_step.rows or 0

    def _around(self) -> Any:
        return self.probe.around() if self.probe is not None else nullcontext()

    def step_round(self, keys: int) -> StepRun:
        """Stage and ingest ``keys`` changes, then time the view's step alone."""
        plan = self.plan
        self.stager.stage(self.orders.changes(keys, plan.insert_share, plan.delete_share))
        self.ingestor.run_once()
        with self._around():
            started = time.perf_counter()
            result = self.maintainer.step(VIEW)
            seconds = time.perf_counter() - started
        phases, kept = self.probe.take() if self.probe is not None else ({}, 0)
        if result.outcome != "step":
            raise ViewBenchError(f"{self.rows:,} rows, K={keys}: {result.outcome} {result.reason}")
        step = StepRun(
            keys, seconds, result.records, result.groups, result.recomputed, phases, kept
        )
        self.log(
            f"views: {self.rows:,} rows, K={keys:,}: step {step.seconds:.2f} s, "
            f"{step.records:,} records, {step.groups:,} groups, {step.recomputed} recomputed"
            + (f" ({step.recomputed_kept} with their MAX kept)" if self.probe else "")
            + (f" {step.phases}" if step.phases else "")
        )
        return step

    def finish(self) -> SizeRun:
        """Verify the stepped view, time a rebuild, verify again."""
        run, rows = self.run, self.rows
        _verify(self.maintainer, rows, "after the steps")
        with self._around():
            started = time.perf_counter()
            rebuilt = self.maintainer.rebuild(VIEW, "bench")
            run.rebuild_s = round(time.perf_counter() - started, 3)
        run.rebuild_phases = self.probe.take()[0] if self.probe is not None else {}
        if rebuilt.outcome != "rebuild":
            raise ViewBenchError(f"rebuild at {rows:,} rows: {rebuilt.outcome} {rebuilt.reason}")
        self.log(f"views: {rows:,} rows: rebuild {run.rebuild_s:.2f} s")
        groups = _verify(self.maintainer, rows, "after the rebuild")
        run.verified = True
        self.log(
            f"views: {rows:,} rows: verified after the steps and the rebuild ({groups:,} groups)"
        )
        return run


def _verify(maintainer: Any, rows: int, when: str) -> int:
    """The view's groups; raises :class:`ViewBenchError` when it differs from a recomputation."""
    verdict = maintainer.verify(VIEW)
    if not verdict.ok:
        raise ViewBenchError(
            f"view wrong at {rows:,} rows {when}: {verdict.extra} extra, {verdict.missing} "
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
                    lake.run.steps.append(lake.step_round(keys))
        result.runs = [lake.finish() for lake in lakes]
        session.catalog.clearCache()
        for size_home in homes:
            shutil.rmtree(size_home, ignore_errors=True)
    finally:
        if own:
            session.stop()
    return result
