"""``tidelake chaos``: the pipeline under seeded ``kill -9`` and stalls, then verified row by row.

The demo's pipeline (embedded nats-server, the stager and the continuous ingest as child
processes, the order workload published as TiCDC canal-json) runs while this harness, at
seeded random moments:

* ``SIGKILL``\\s a *victim* and starts it again after a short random downtime: nats-server
  (same port, same store), the stager, the ingest (its whole process group, JVM included),
  and — with ``source="mariadb"`` — the ``tidelake capture`` process reading a private MariaDB;
* ``SIGSTOP``\\s the stager or the ingest for longer than the consumer's AckWait, then
  ``SIGCONT``\\s it: JetStream redelivers what the stalled stager held while it still holds
  it, and the stalled process resumes with a stale batch.

Victims are taken in seeded random rounds (each one once per round, skipping one that has
not yet recovered from its last kill), so the kills spread over every process. When the
workload is done and at least ``min_kills`` kills happened, every victim is brought back up,
the lake is awaited (everything acked by the stager, the ingest's cursor at the stream's
end) and each table is compared row by row with the expected state: 0 lost, 0 duplicated,
0 resurrected, 0 different.

The harness uses public interfaces only: the local stack (``pipeline/stack.py``) assembles
the pipeline, each victim is a :class:`tidelake.runtime.processes.ChildProcess` (signals go to
its whole process group), the ingest's state is read through the ledger
(``lake/ledger.py``), and the lake is compared through ``tidelake.verify``.

The schedule (which victim, kill or pause, when) is a pure function of the seed; what the
victims were doing at those instants is not, and that is the point.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import structlog

from tidelake.bus.connection import connect
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.demo import publish_workload, verify_workload
from tidelake.pipeline.stack import LocalStack, prepare_home
from tidelake.runtime.processes import ChildProcess
from tidelake.workload.orders import DATABASE, SCHEMAS, OrderWorkload, WorkloadSpec

log = structlog.get_logger(__name__)

Source = Literal["workload", "mariadb"]


@dataclass
class ChaosOptions:
    """What one chaos run does; equal options and seed give an equal schedule."""

    seed: int = 1
    events: int = 30_000
    #: Change events per second the source produces.
    rate: float = 150.0
    #: Keep the chaos going (after the workload if need be) until this many kills.
    min_kills: int = 50
    #: ... and until every victim was killed at least this many times.
    min_kills_each: int = 5
    #: Seconds between two actions, drawn uniformly.
    gap_s: tuple[float, float] = (1.5, 4.5)
    #: Share of the actions on the stager or the ingest that are SIGSTOP pauses.
    pause_share: float = 0.25
    #: The stager's AckWait during the run; a pause lasts longer than this.
    ack_wait_s: float = 4.0
    home: Path = Path(".tidelake/chaos")
    source: Source = "workload"
    catch_up_timeout_s: float = 600.0
    #: The chaos phase ends after this long even if ``min_kills`` is not reached.
    max_chaos_s: float = 1800.0


@dataclass
class ChaosResult:
    """The JSON line ``tidelake chaos --json`` prints last."""

    seed: int
    source: str = "workload"
    events: int = 0
    kills: dict[str, int] = field(default_factory=dict)
    pauses: dict[str, int] = field(default_factory=dict)
    kills_total: int = 0
    #: Exits the harness did not cause (each one restarted); a stage should never crash.
    unexpected_exits: dict[str, int] = field(default_factory=dict)
    tables: int = 0
    rows_expected: int = 0
    rows_in_lake: int = 0
    mismatches: int = 0
    dlq: int = 0
    duplicates_skipped: int = 0
    stale_skipped: int = 0
    chaos_s: float = 0.0
    catch_up_s: float = 0.0
    elapsed_s: float = 0.0
    error: str | None = None
    per_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``"<seconds> <action> <victim>"`` in order: what happened when.
    actions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.mismatches == 0 and self.dlq == 0 and self.tables > 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --- victims ----------------------------------------------------------------------------------


class Victim(Protocol):
    """A process the harness may kill and restart, or stall."""

    name: str
    can_pause: bool

    def kill(self) -> None: ...
    def start(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def alive(self) -> bool: ...
    def ready(self) -> bool:
        """Up long enough since its last start that killing it again tests something."""
        ...


class ProcessVictim:
    """A stage child process; every signal goes to its whole process group (a JVM child
    too), and a kill also reaches descendants that left the group."""

    def __init__(
        self,
        process: ChildProcess,
        *,
        can_pause: bool,
        ready: Callable[[], bool] | None = None,
        min_uptime_s: float = 2.0,
    ) -> None:
        self.process = process
        self.name = process.name
        self.can_pause = can_pause
        self._ready = ready
        self._min_uptime_s = min_uptime_s
        self._started_at = time.monotonic()  # the stack started it

    def kill(self) -> None:
        self.process.kill()

    def start(self) -> None:
        self.process.start()
        self._started_at = time.monotonic()

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def alive(self) -> bool:
        return self.process.alive()

    def ready(self) -> bool:
        if not self.alive() or time.monotonic() - self._started_at < self._min_uptime_s:
            return False
        return self._ready is None or self._ready()


class NatsVictim:
    """The embedded nats-server: restarted on the same port with the same store."""

    name = "nats"
    can_pause = False

    def __init__(self, server: EmbeddedNats) -> None:
        self.server = server
        self._started_at = time.monotonic()

    def kill(self) -> None:
        self.server.kill()

    def start(self) -> None:
        self.server.start()
        self._started_at = time.monotonic()

    def pause(self) -> None:
        if self.server.running:
            self.server.process.pause()

    def resume(self) -> None:
        if self.server.running:
            self.server.process.resume()

    def alive(self) -> bool:
        return self.server.running

    def ready(self) -> bool:
        return self.alive() and time.monotonic() - self._started_at > 1.0


# --- sources ----------------------------------------------------------------------------------


class _WorkloadSource:
    """The order workload, published by this process as TiCDC canal-json."""

    def __init__(self, opts: ChaosOptions) -> None:
        self.workload = OrderWorkload(WorkloadSpec(events=opts.events, seed=opts.seed))
        self.rate = opts.rate
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def configure(self) -> dict[str, Any]:
        """The config settings this source adds (none)."""
        return {}

    def env(self) -> dict[str, str]:
        return {}

    def start(self, cfg: Config, url: str) -> None:
        def publish() -> None:
            try:
                asyncio.run(publish_workload(cfg, url, self.workload, self.rate))
            except BaseException as exc:
                self.error = exc

        self._thread = threading.Thread(target=publish, name="workload", daemon=True)
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def published(self, cfg: Config, url: str) -> bool:
        return self.finished()  # the publisher returns once every PubAck is in

    @property
    def events(self) -> int:
        return self.workload.emitted

    def verify(self, cfg: Config) -> dict[str, dict[str, Any]]:
        return {
            c.table: {
                "rows_expected": c.rows_expected,
                "rows_in_lake": c.rows_in_lake,
                "mismatches": c.mismatches,
                "samples": c.samples,
            }
            for c in verify_workload(cfg, self.workload)
        }

    def close(self) -> None:
        return None


class _MariaDBSource:
    """A private MariaDB changed by the order workload as SQL; ``tidelake capture`` (a victim
    like the others) turns its binlog into canal-json. Verified against the live tables."""

    def __init__(self, opts: ChaosOptions, home: Path) -> None:
        from tidelake.capture.servers import MariaDBServer

        self.opts = opts
        self.server = MariaDBServer(home / "mariadb")
        self.error: BaseException | None = None
        self.rows_changed = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def dsn(self) -> str:
        return f"mysql://{self.server.user}@{self.server.host}:{self.server.port}/"

    def configure(self) -> dict[str, Any]:
        """Start the server, create the schema; the ``capture`` settings (the stack then runs
        ``tidelake capture``, a victim like the others)."""
        from tidelake.workload.sql import schema_statements

        self.server.start()
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for statement in schema_statements("mysql"):
                    cur.execute(statement)
        finally:
            conn.close()
        return {"capture": {"source": self.dsn, "tables": ["shop.*"]}}

    def env(self) -> dict[str, str]:
        return {"TIDELAKE_CAPTURE__PASSWORD": self.server.password}

    def start(self, cfg: Config, url: str) -> None:
        from tidelake.workload.sql import run_sql_workload

        def write() -> None:
            conn = self.server.connect(autocommit=False)
            try:
                run = run_sql_workload(
                    conn,
                    WorkloadSpec(events=self.opts.events, seed=self.opts.seed),
                    rate=self.opts.rate,
                    should_stop=self._stop.is_set,
                )
                self.rows_changed = run.rows_changed
            except BaseException as exc:
                self.error = exc
            finally:
                conn.close()

        self._thread = threading.Thread(target=write, name="sql-workload", daemon=True)
        self._thread.start()

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def published(self, cfg: Config, url: str) -> bool:
        """The workload is done and the capture has published every change it made."""
        if not self.finished():
            return False
        last, _, _ = asyncio.run(_stream_position(cfg, url))
        return last >= self.rows_changed

    @property
    def events(self) -> int:
        return self.rows_changed

    def verify(self, cfg: Config) -> dict[str, dict[str, Any]]:
        from tidelake.verify.source import verify_table

        out: dict[str, dict[str, Any]] = {}
        for table in SCHEMAS:
            c = verify_table(self.dsn, cfg.lake_root, f"{DATABASE}.{table}", self.server.password)
            if c.error:
                raise RuntimeError(f"verify {c.table}: {c.error}")
            out[c.table] = {
                "rows_expected": c.rows_source,
                "rows_in_lake": c.rows_lake,
                "mismatches": c.mismatches,
                "samples": c.samples,
            }
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.server.stop()


# --- the run ----------------------------------------------------------------------------------


def _settings(opts: ChaosOptions, extra: dict[str, Any]) -> dict[str, Any]:
    """What the run's config says besides ``home`` and ``bus.url`` (the stack adds those)."""
    data: dict[str, Any] = {
        "bus": {
            # Short AckWait so a pause outlasts it; a high MaxDeliver because this run tests
            # crash recovery, not the poison-message path (tests/integration/stage).
            "consumer": {"ack_wait_s": opts.ack_wait_s, "max_deliver": 1_000},
        },
        "stage": {"max_age_s": 0.5},
        # Every restart of the ingest would pay the warm-up again: skip it.
        "ingest": {"warm_up": False, "interval_s": 0.5},
        "lake": {"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
    }
    data.update(extra)
    return data


async def _stream_position(cfg: Config, url: str) -> tuple[int, int, int]:
    """(last stream sequence, consumer pending, consumer ack-pending)."""
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        stream = await js.stream_info(cfg.bus.stream.name)
        consumer = await js.consumer_info(cfg.bus.stream.name, cfg.bus.consumer.durable)
        return (
            int(stream.state.last_seq),
            int(consumer.num_pending or 0),
            int(consumer.num_ack_pending or 0),
        )
    finally:
        await nc.close()


def _skipped_totals(ledger: Ledger) -> tuple[int, int]:
    """(duplicates, stale) the ingest skipped, from its skip log."""
    skipped = ledger.skipped()
    return sum(r.duplicates for r in skipped), sum(r.stale for r in skipped)


class ChaosSchedule:
    """The seeded schedule of actions over the victims."""

    def __init__(self, opts: ChaosOptions, victims: list[Victim], result: ChaosResult) -> None:
        self.opts = opts
        self.victims = victims
        self.result = result
        self.rng = random.Random(opts.seed)
        self.kills: Counter[str] = Counter()
        self.pauses: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self._round: list[Victim] = []
        self._t0 = time.monotonic()

    def _note(self, action: str, victim: Victim) -> None:
        line = f"{time.monotonic() - self._t0:7.1f}s {action} {victim.name}"
        self.result.actions.append(line)
        log.info("chaos", action=action, victim=victim.name)

    def supervise(self) -> None:
        """Restart a victim that died on its own (and count it: that is a finding)."""
        for victim in self.victims:
            if not victim.alive():
                self.crashes[victim.name] += 1
                self._note("restart-after-unexpected-exit", victim)
                victim.start()

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.supervise()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _next_victim(self) -> Victim | None:
        if not self._round:
            self._round = list(self.victims)
            self.rng.shuffle(self._round)
        for i, victim in enumerate(self._round):
            if victim.ready():
                return self._round.pop(i)
        return None

    def act(self) -> None:
        """One action: pause or kill the next ready victim of the round."""
        victim = self._next_victim()
        # Draw every number whether or not it is used, so the schedule depends on the seed only.
        pause_roll, downtime, extra = self.rng.random(), self.rng.uniform(0, 1.5), self.rng.random()
        if victim is None:
            return
        if victim.can_pause and pause_roll < self.opts.pause_share:
            self._note("SIGSTOP", victim)
            victim.pause()
            time.sleep(self.opts.ack_wait_s + 1.0 + 2.0 * extra)
            victim.resume()
            self._note("SIGCONT", victim)
            self.pauses[victim.name] += 1
            return
        self._note("SIGKILL", victim)
        victim.kill()
        self.kills[victim.name] += 1
        time.sleep(downtime)
        victim.start()
        self._note("start", victim)

    def run(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.opts.max_chaos_s
        while time.monotonic() < deadline:
            enough = sum(self.kills.values()) >= self.opts.min_kills and all(
                self.kills[v.name] >= self.opts.min_kills_each for v in self.victims
            )
            if done() and enough:
                return
            self.sleep(self.rng.uniform(*self.opts.gap_s))
            self.act()


def _wait_for_lake(
    cfg: Config,
    url: str,
    chaos: ChaosSchedule,
    source_done: Callable[[], bool],
    timeout_s: float,
) -> None:
    """Until the stager has acked everything and the ingest's cursor is at the stream's end."""
    ledger = Ledger(cfg.lake_state_dir)
    deadline = time.monotonic() + timeout_s
    while True:
        chaos.supervise()
        if source_done():
            last, pending, ack_pending = asyncio.run(_stream_position(cfg, url))
            if not pending and not ack_pending and ledger.cursor() >= last:
                return
        paused = ledger.paused()
        if paused:
            raise RuntimeError(f"the ingest paused tables: {paused}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the lake did not catch up within {timeout_s:.0f} s")
        time.sleep(0.5)


def run_chaos(opts: ChaosOptions) -> ChaosResult:
    """One chaos run; every failure is reported in the result, never raised."""
    started = time.monotonic()
    result = ChaosResult(seed=opts.seed, source=opts.source)
    home = opts.home.resolve()
    prepare_home(home)
    source: _WorkloadSource | _MariaDBSource = (
        _MariaDBSource(opts, home) if opts.source == "mariadb" else _WorkloadSource(opts)
    )
    stack: LocalStack | None = None
    victims: list[Victim] = []
    chaos: ChaosSchedule | None = None
    try:
        stack = LocalStack(
            home,
            settings=_settings(opts, source.configure()),
            env=source.env(),
            ingest_interval_s=0.5,
        )
        stack.start()
        cfg, url = stack.cfg, stack.bus_url
        assert stack.nats is not None  # the run's config has no bus.url
        victims = [
            NatsVictim(stack.nats),
            ProcessVictim(stack.child("stager"), can_pause=True),
            ProcessVictim(stack.child("ingest"), can_pause=True, ready=stack.ingest_up),
            *(
                [ProcessVictim(stack.child("capture"), can_pause=True)]
                if cfg.capture.source
                else []
            ),
        ]
        chaos = ChaosSchedule(opts, victims, result)
        # Publish once the ingest has its Spark session (a restarted child counts as a crash).
        stack.wait_healthy(300, on_wait=chaos.supervise)
        source.start(cfg, url)
        chaos_started = time.monotonic()
        chaos.run(source.finished)
        result.chaos_s = round(time.monotonic() - chaos_started, 1)
        for victim in victims:
            if not victim.alive():
                victim.start()
        if source.error is not None:
            raise RuntimeError(f"the source failed: {source.error!r}") from source.error
        catch_up_started = time.monotonic()
        _wait_for_lake(cfg, url, chaos, lambda: source.published(cfg, url), opts.catch_up_timeout_s)
        result.catch_up_s = round(time.monotonic() - catch_up_started, 1)
        stack.stop_stages()
        result.events = source.events
        result.dlq = asyncio.run(stack.dlq_depth())
        result.duplicates_skipped, result.stale_skipped = _skipped_totals(
            Ledger(cfg.lake_state_dir)
        )
        result.per_table = source.verify(cfg)
        result.tables = len(result.per_table)
        result.rows_expected = sum(t["rows_expected"] for t in result.per_table.values())
        result.rows_in_lake = sum(t["rows_in_lake"] for t in result.per_table.values())
        result.mismatches = sum(t["mismatches"] for t in result.per_table.values())
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        for victim in victims:
            victim.resume()
        if stack is not None:
            stack.stop(timeout_s=30)
        source.close()
        if chaos is not None:
            result.kills = {v.name: chaos.kills[v.name] for v in victims}
            result.pauses = {v.name: chaos.pauses[v.name] for v in victims if v.can_pause}
            result.unexpected_exits = dict(chaos.crashes)
            result.kills_total = sum(chaos.kills.values())
        result.events = result.events or source.events
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result
