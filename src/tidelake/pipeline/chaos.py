"""``tidelake chaos``: the pipeline under a seeded fault schedule, then verified row by row.

The local stack (``pipeline/stack.py``: an embedded nats-server, the stager, the continuous
ingest, and with ``source="mariadb"`` a private MariaDB read by ``tidelake capture``) runs
with a **second stager** on the same durable consumer, its stage root and its lake each on
a size-limited filesystem (``pipeline/disks.py``), and with ``stage_store="s3"`` the
staging area in a private MinIO whose data directory is that filesystem. While the source
produces, the harness injects one fault at a time, at seeded moments:

==================  ==========================================================================
kind                what happens
==================  ==========================================================================
``kill``            ``kill -9`` of a process (its whole group, a JVM included), restarted
                    after a short random downtime: nats-server (same port, same store), each
                    stager, the ingest, the capture, MinIO
``pause``           ``SIGSTOP`` of a stager (while the other one runs), the ingest or the
                    capture for longer than AckWait, then ``SIGCONT``: JetStream redelivers
                    what a paused stager held, and it resumes with a stale batch
``bus-down``        nats-server unreachable for longer than AckWait: stopped (killed, kept
                    down, started) or frozen (``SIGSTOP``/``SIGCONT``), drawn per fault
``disk-full``       the stage root's or the lake's filesystem filled with a ballast file,
                    held (sometimes past AckWait), then freed — nothing acked may be lost,
                    and the pipeline must carry on by itself
``store-down``      MinIO killed and kept down past AckWait (every request fails), restarted
``store-slow``      MinIO throttled: frozen and thawed in a duty cycle past AckWait (every
                    request slow, some time out)
``restart-storm``   a process killed and restarted 3 to 5 times within a few seconds
==================  ==========================================================================

The schedule is a sequence of *rounds*: each round is every (kind, target) pair the run
can do, in a seeded shuffle, so every kind hits every process it applies to once per round.
A pair whose target has not recovered from its last fault yet is passed over for the next
ready one. When the source is done, at least ``min_faults`` faults happened and every
kind and every process had at least one, every process is brought back up, the disks are
freed, the lake is awaited (everything acked by the stagers, the ingest's cursor at the
stream's end) and compared row by row with the source: the result counts what was lost,
duplicated, unexpected (resurrected) or different, and lists every dead letter with its
reason — the source produces only valid events, so any dead letter is a failure.

The schedule (which fault, on what, for how long) is a pure function of the seed; what the
victims were doing at those instants is not, and that is the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import structlog

from tidelake.bus.connection import connect
from tidelake.bus.dlq import HEADER_REASON
from tidelake.bus.scan import scan_stream
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, default_home
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.chaos_sources import (
    ChaosSource,
    DebeziumSource,
    MariaDBSource,
    WorkloadSource,
    stream_position,
)
from tidelake.pipeline.disks import LoopDisk, unmount_under
from tidelake.pipeline.object_store import DEMO_BUCKET, MinioServer
from tidelake.pipeline.stack import LocalStack, prepare_home
from tidelake.runtime.processes import ChildProcess, free_port

log = structlog.get_logger(__name__)

Source = Literal["workload", "mariadb", "debezium"]
StageStore = Literal["local", "s3"]

KILL = "kill"
PAUSE = "pause"
BUS_DOWN = "bus-down"
DISK_FULL = "disk-full"
STORE_DOWN = "store-down"
STORE_SLOW = "store-slow"
RESTART_STORM = "restart-storm"
#: Every fault kind, in the order the result lists them.
KINDS: tuple[str, ...] = (
    KILL,
    PAUSE,
    BUS_DOWN,
    DISK_FULL,
    STORE_DOWN,
    STORE_SLOW,
    RESTART_STORM,
)
#: Kinds that need the staging area in MinIO (``stage_store="s3"``).
STORE_KINDS = (STORE_DOWN, STORE_SLOW)


@dataclass
class ChaosOptions:
    """What one chaos run does; equal options and seed give an equal schedule."""

    seed: int = 1
    events: int = 30_000
    #: Change events per second the source produces.
    rate: float = 150.0
    #: Keep the faults coming (after the workload if need be) until this many.
    min_faults: int = 50
    #: The fault kinds to inject (each at least once); store kinds need ``stage_store="s3"``.
    kinds: tuple[str, ...] = KINDS
    #: Seconds between two faults, drawn uniformly.
    gap_s: tuple[float, float] = (1.5, 4.5)
    #: The stager's AckWait during the run; pauses and outages last longer than this.
    ack_wait_s: float = 4.0
    #: Deliveries before a message is dead-lettered. High because crashes, pauses and restart
    #: storms redeliver a batch many times, and none of those is a poison message (that path
    #: is tests/integration/stage); a resource error must not count toward it at all.
    max_deliver: int = 1_000
    #: Stagers on the one durable consumer (2: a paused stager's batch goes to the other).
    stagers: int = 2
    #: Where the staging area lives: a local directory, or a bucket of a private MinIO.
    stage_store: StageStore = "local"
    #: Sizes of the loop-mounted filesystems holding the stage root (or MinIO's data) and
    #: the lake; disk-full faults fill them.
    stage_disk_mb: int = 1024
    lake_disk_mb: int = 2048
    #: ``<home>/chaos`` of the default home (config.default_home); the CLI passes its own.
    home: Path = field(default_factory=lambda: default_home(os.environ) / "chaos")
    source: Source = "workload"
    catch_up_timeout_s: float = 900.0
    #: The fault phase ends after this long even if ``min_faults`` is not reached.
    max_chaos_s: float = 3600.0

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {list(KINDS)}")
        if self.stage_store != "s3" and set(self.kinds) & set(STORE_KINDS):
            # Without an object store these kinds have no target: leave them out rather
            # than report a kind that never ran.
            self.kinds = tuple(k for k in self.kinds if k not in STORE_KINDS)
        if not self.kinds:
            raise ValueError("no fault kind left to inject")
        if self.stagers < 1:
            raise ValueError("stagers must be at least 1")


@dataclass
class ChaosResult:
    """The JSON line ``tidelake chaos --json`` prints last."""

    seed: int
    source: str = "workload"
    stage_store: str = "local"
    events: int = 0
    #: Faults injected, per kind, and per ``kind/target``.
    faults: dict[str, int] = field(default_factory=dict)
    faults_by_target: dict[str, int] = field(default_factory=dict)
    faults_total: int = 0
    #: The processes of the run (every one was the target of at least one fault).
    processes: list[str] = field(default_factory=list)
    #: ``kill -9``\\s per process, restart storms included.
    kills: dict[str, int] = field(default_factory=dict)
    kills_total: int = 0
    #: Exits the harness did not cause (each one restarted); a stage should never crash.
    unexpected_exits: dict[str, int] = field(default_factory=dict)
    tables: int = 0
    rows_expected: int = 0
    rows_in_lake: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    different: int = 0
    mismatches: int = 0
    dlq: int = 0
    #: Dead letters per reason (the source sends only valid events: each one is a failure).
    dead_letters: dict[str, int] = field(default_factory=dict)
    duplicates_skipped: int = 0
    stale_skipped: int = 0
    chaos_s: float = 0.0
    catch_up_s: float = 0.0
    elapsed_s: float = 0.0
    error: str | None = None
    per_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``"<seconds> <action> <target>"`` in order: what happened when.
    actions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.mismatches == 0
            and self.lost == 0
            and self.duplicated == 0
            and self.dlq == 0
            and self.tables > 0
        )

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
        """Up long enough since its last start that a fault on it tests something."""
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
    can_pause = False  # a frozen server is the bus-down kind, not a pause

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


class _ServerVictim:
    """A server process the harness started (``server.pid``, ``start()``): signalled as a
    process group, ready ``ready_after_s`` after each start."""

    ready_after_s = 1.0

    def __init__(self, server: Any) -> None:
        self.server = server
        self._started_at = time.monotonic()

    def _signal(self, sig: signal.Signals) -> None:
        pid = self.server.pid
        if pid is not None and self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)

    def start(self) -> None:
        self.server.start()
        self._started_at = time.monotonic()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def alive(self) -> bool:
        raise NotImplementedError

    def ready(self) -> bool:
        return self.alive() and time.monotonic() - self._started_at > self.ready_after_s


class MinioVictim(_ServerVictim):
    """The private MinIO holding the staging area: restarted on the same port with the same
    data directory and credentials (:class:`MinioServer` keeps both)."""

    name = "minio"
    can_pause = False  # a frozen MinIO is the store-slow kind

    def __init__(self, server: MinioServer) -> None:
        super().__init__(server)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self.server.stop(timeout_s=5)  # reaps it (it is gone already)

    def alive(self) -> bool:
        pid = self.server.pid
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False


class DebeziumVictim(_ServerVictim):
    """The Debezium Server JVM of a ``debezium`` source: restarted from its saved offsets."""

    name = "debezium"
    can_pause = True
    # A JVM and a binlog connection take seconds: a kill before that tests little.
    ready_after_s = 8.0

    def kill(self) -> None:
        self.server.kill()

    def alive(self) -> bool:
        return bool(self.server.running)


# --- the schedule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: its kind and what it hits (a process or a disk)."""

    kind: str
    target: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.target}"


class ChaosSchedule:
    """The seeded schedule of faults over the victims and the disks."""

    def __init__(
        self,
        opts: ChaosOptions,
        victims: list[Victim],
        disks: dict[str, LoopDisk],
        result: ChaosResult,
    ) -> None:
        self.opts = opts
        self.victims = {v.name: v for v in victims}
        self.disks = disks
        self.result = result
        self.rng = random.Random(opts.seed)
        self.faults: Counter[str] = Counter()
        self.by_target: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.hit: set[str] = set()
        #: Victims a fault holds down on purpose: supervision leaves them alone.
        self._held: set[str] = set()
        self._round: list[Fault] = []
        self._t0 = time.monotonic()
        self.pairs = self._pairs()

    def _pairs(self) -> list[Fault]:
        """Every (kind, target) this run can do."""
        names = list(self.victims)
        pausable = [n for n, v in self.victims.items() if v.can_pause]
        targets: dict[str, list[str]] = {
            KILL: names,
            PAUSE: pausable,
            BUS_DOWN: ["nats"],
            DISK_FULL: sorted(self.disks),
            STORE_DOWN: ["minio"] if "minio" in self.victims else [],
            STORE_SLOW: ["minio"] if "minio" in self.victims else [],
            # nats-server restarts in a storm are the bus-down/kill kinds' business; a storm
            # hits the stages, whose start-up (a Spark session, a consumer bind) is the
            # fragile part.
            RESTART_STORM: [n for n in names if n not in ("nats", "minio")],
        }
        return [Fault(k, t) for k in self.opts.kinds for t in targets[k]]

    @property
    def processes(self) -> list[str]:
        return list(self.victims)

    def _note(self, action: str, target: str) -> None:
        line = f"{time.monotonic() - self._t0:7.1f}s {action} {target}"
        self.result.actions.append(line)
        log.info("chaos", action=action, target=target)

    def supervise(self) -> None:
        """Restart a victim that died on its own (and count it: that is a finding)."""
        for name, victim in self.victims.items():
            if name not in self._held and not victim.alive():
                self.crashes[name] += 1
                self._note("restart-after-unexpected-exit", name)
                victim.start()

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.supervise()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _ready(self, fault: Fault) -> bool:
        if fault.kind == DISK_FULL:
            return True
        return self.victims[fault.target].ready()

    def _next(self) -> Fault | None:
        if not self._round:
            self._round = list(self.pairs)
            self.rng.shuffle(self._round)
        for i, fault in enumerate(self._round):
            if self._ready(fault):
                return self._round.pop(i)
        return None

    def covered(self) -> bool:
        """Every kind had a fault, and so did every process some chosen kind applies to."""
        targets = {f.target for f in self.pairs} & set(self.victims)
        return all(self.faults[k] > 0 for k in self.opts.kinds) and self.hit >= targets

    def act(self) -> None:
        """One fault on the next ready target of the round."""
        fault = self._next()
        # Draw every number whether or not it is used, so the schedule depends on the seed only.
        a, b, c = self.rng.random(), self.rng.random(), self.rng.random()
        if fault is None:
            return
        longer = self.opts.ack_wait_s + 1.0 + 2.0 * b  # past AckWait
        if fault.kind == KILL:
            self._kill_and_start(fault.target, downtime=1.5 * b)
        elif fault.kind == PAUSE:
            self._pause(fault.target, longer)
        elif fault.kind == BUS_DOWN:
            if a < 0.5:
                self._pause(fault.target, longer, action="freeze")
            else:
                self._kill_and_start(fault.target, downtime=longer, action="stop")
        elif fault.kind == DISK_FULL:
            self._disk_full(fault.target, hold=1.0 + 2.0 * self.opts.ack_wait_s * b)
        elif fault.kind == STORE_DOWN:
            self._kill_and_start(fault.target, downtime=longer, action="stop")
        elif fault.kind == STORE_SLOW:
            self._throttle(fault.target, longer, stop_s=0.2 + 0.6 * a, run_s=0.1 + 0.2 * c)
        elif fault.kind == RESTART_STORM:
            self._storm(fault.target, times=3 + int(3 * a), gap=0.2 + 0.8 * c)
        self.faults[fault.kind] += 1
        self.by_target[str(fault)] += 1
        self.hit.add(fault.target)

    # -- the faults ----------------------------------------------------------------------------

    def _kill_and_start(self, name: str, *, downtime: float, action: str = "SIGKILL") -> None:
        victim = self.victims[name]
        self._held.add(name)
        try:
            self._note(action, name)
            victim.kill()
            self.kills[name] += 1
            self.sleep(downtime)
            victim.start()
            self._note("start", name)
        finally:
            self._held.discard(name)

    def _pause(self, name: str, seconds: float, *, action: str = "SIGSTOP") -> None:
        victim = self.victims[name]
        self._note(action, name)
        victim.pause()
        try:
            self.sleep(seconds)
        finally:
            victim.resume()
            self._note("SIGCONT", name)

    def _throttle(self, name: str, seconds: float, *, stop_s: float, run_s: float) -> None:
        victim = self.victims[name]
        self._note(f"throttle({stop_s:.1f}s frozen/{run_s:.1f}s running)", name)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                victim.pause()
                time.sleep(stop_s)
                victim.resume()
                self.sleep(run_s)
        finally:
            victim.resume()
            self._note("unthrottled", name)

    def _disk_full(self, name: str, hold: float) -> None:
        disk = self.disks[name]
        held = disk.fill()
        self._note(f"disk-full({held // (1 << 20)} MB ballast, {hold:.1f}s)", name)
        try:
            self.sleep(hold)
        finally:
            disk.free()
            self._note("disk-freed", name)

    def _storm(self, name: str, *, times: int, gap: float) -> None:
        victim = self.victims[name]
        self._held.add(name)
        try:
            for i in range(times):
                self._note(f"SIGKILL(storm {i + 1}/{times})", name)
                victim.kill()
                self.kills[name] += 1
                time.sleep(0.1)
                victim.start()
                time.sleep(gap)
            self._note("storm over", name)
        finally:
            self._held.discard(name)

    def run(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.opts.max_chaos_s
        while time.monotonic() < deadline:
            total = sum(self.faults.values())
            if done() and total >= self.opts.min_faults and self.covered():
                return
            self.sleep(self.rng.uniform(*self.opts.gap_s))
            self.act()

    def heal(self, *, restart: bool = True) -> None:
        """Every disk freed, every victim thawed, and (``restart``) every one back up."""
        for disk in self.disks.values():
            if disk.is_mounted:
                disk.free()
        for victim in self.victims.values():
            victim.resume()
            if restart and not victim.alive():
                victim.start()


# --- the run ----------------------------------------------------------------------------------


def _settings(opts: ChaosOptions, extra: dict[str, Any]) -> dict[str, Any]:
    """What the run's config says besides ``home`` and ``bus.url`` (the stack adds those)."""
    data: dict[str, Any] = {
        "bus": {
            # Short AckWait so pauses and outages outlast it (see ChaosOptions.max_deliver).
            "consumer": {"ack_wait_s": opts.ack_wait_s, "max_deliver": opts.max_deliver},
        },
        "stage": {"max_age_s": 0.5},
        # Every restart of the ingest would pay the warm-up again: skip it.
        "ingest": {"warm_up": False, "interval_s": 0.5},
        "lake": {"spark": {"master": "local[2]", "driver_memory": "1g", "shuffle_partitions": 2}},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def _skipped_totals(ledger: Ledger) -> tuple[int, int]:
    """(duplicates, stale) the ingest skipped, from its skip log."""
    skipped = ledger.skipped()
    return sum(r.duplicates for r in skipped), sum(r.stale for r in skipped)


async def dead_letters(cfg: Config, url: str) -> dict[str, int]:
    """Every message of the dead-letter stream, counted per reason header."""
    nc = await connect(cfg.bus, url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(cfg.bus.dlq.name)
        total = int(info.state.messages)
        if total == 0:
            return {}
        msgs = await scan_stream(js, f"{cfg.bus.dlq.subject_prefix}.>", total)
        reasons: Counter[str] = Counter(
            (m.headers or {}).get(HEADER_REASON, "(no reason header)")[:240] for m in msgs
        )
        return dict(reasons)
    finally:
        await nc.close()


def _wait_for_lake(
    cfg: Config,
    url: str,
    chaos: ChaosSchedule,
    source_done: Callable[[], bool],
    timeout_s: float,
) -> None:
    """Until the stagers have acked everything and the ingest's cursor is at the stream's end."""
    ledger = Ledger(cfg.lake_state_dir)
    deadline = time.monotonic() + timeout_s
    while True:
        chaos.supervise()
        if source_done():
            last, pending, ack_pending = asyncio.run(stream_position(cfg, url))
            if not pending and not ack_pending and ledger.cursor() >= last:
                return
        paused = ledger.paused()
        if paused:
            raise RuntimeError(f"the ingest paused tables: {paused}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the lake did not catch up within {timeout_s:.0f} s")
        time.sleep(0.5)


class _Environment:
    """The run's disks and object store: made before the stack, torn down after it."""

    def __init__(self, opts: ChaosOptions, home: Path) -> None:
        self.opts = opts
        self.home = home
        self.disks: dict[str, LoopDisk] = {}
        self.minio: MinioServer | None = None

    def start(self) -> dict[str, Any]:
        """Mount the disks (and start MinIO on the stage disk); the settings they add."""
        settings: dict[str, Any] = {}
        need_disks = DISK_FULL in self.opts.kinds
        stage_dir = self.home / ("minio" if self.opts.stage_store == "s3" else "staging")
        lake_dir = self.home / "lake"
        if need_disks:
            self.disks["stage"] = LoopDisk(
                self.home / "disks" / "stage.img", stage_dir, self.opts.stage_disk_mb
            ).mount()
            self.disks["lake"] = LoopDisk(
                self.home / "disks" / "lake.img", lake_dir, self.opts.lake_disk_mb
            ).mount()
        settings["lake"] = {"root": str(lake_dir)}
        if self.opts.stage_store == "s3":
            # A fixed port: a restarted MinIO must be where the stages look for it.
            self.minio = MinioServer(stage_dir, port=free_port()).start()
            self.minio.create_bucket(DEMO_BUCKET)
            settings["storage"] = {"s3": self.minio.settings()}
            settings["stage"] = {"root": f"s3://{DEMO_BUCKET}/staging"}
        else:
            settings["stage"] = {"root": str(stage_dir)}
        return settings

    def env(self) -> dict[str, str]:
        return self.minio.credentials_env() if self.minio is not None else {}

    def stop(self, *, keep_images: bool = False) -> None:
        """Stop MinIO, unmount the disks; ``keep_images`` leaves their images in the home
        (``mount -o loop <home>/disks/lake.img <dir>`` shows what a failed run left)."""
        if self.minio is not None:
            with_suppressed(lambda: self.minio.stop() if self.minio else None)
        for disk in self.disks.values():
            with_suppressed(functools.partial(disk.unmount, keep_image=keep_images))


def with_suppressed(fn: Callable[[], object]) -> None:
    """Run a clean-up step; log (never raise) what it raises, so the next step runs."""
    try:
        fn()
    except Exception as exc:
        log.warning("chaos clean-up step failed", error=repr(exc))


def _make_source(opts: ChaosOptions, home: Path) -> ChaosSource:
    if opts.source == "mariadb":
        return MariaDBSource(opts.events, opts.seed, opts.rate, home)
    if opts.source == "debezium":
        return DebeziumSource(opts.events, opts.seed, opts.rate, home)
    return WorkloadSource(opts.events, opts.seed, opts.rate)


def run_chaos(opts: ChaosOptions) -> ChaosResult:
    """One chaos run; every failure is reported in the result, never raised."""
    started = time.monotonic()
    result = ChaosResult(seed=opts.seed, source=opts.source, stage_store=opts.stage_store)
    home = opts.home.resolve()
    # A crashed earlier run may have left its disks mounted in the home it is about to wipe.
    unmount_under(home)
    prepare_home(home)
    source = _make_source(opts, home)
    env = _Environment(opts, home)
    stack: LocalStack | None = None
    chaos: ChaosSchedule | None = None
    try:
        extra = env.start()
        extra.update(source.configure())
        stack = LocalStack(
            home,
            settings=_settings(opts, extra),
            env={**env.env(), **source.env()},
            ingest_interval_s=0.5,
        )
        stack.start()
        cfg, url = stack.cfg, stack.bus_url
        assert stack.nats is not None  # the run's config has no bus.url
        victims: list[Victim] = [
            NatsVictim(stack.nats),
            ProcessVictim(stack.child("stager"), can_pause=True),
            ProcessVictim(stack.child("ingest"), can_pause=True, ready=stack.ingest_up),
        ]
        if cfg.capture.source:
            victims.append(ProcessVictim(stack.child("capture"), can_pause=True))
        if env.minio is not None:
            victims.append(MinioVictim(env.minio))
        chaos = ChaosSchedule(opts, victims, env.disks, result)
        # Publish once the ingest has its Spark session (a restarted child counts as a crash).
        stack.wait_healthy(300, on_wait=chaos.supervise)
        for n in range(2, opts.stagers + 1):
            # More stagers join once the first is running (they share its heartbeat name).
            extra_stager = stack.add_stager(f"stager-{n}")
            victim = ProcessVictim(extra_stager, can_pause=True)
            chaos.victims[victim.name] = victim
        source.start(cfg, url)
        if isinstance(source, DebeziumSource):
            chaos.victims["debezium"] = DebeziumVictim(source.debezium)
        chaos.pairs = chaos._pairs()
        result.processes = chaos.processes
        chaos_started = time.monotonic()
        chaos.run(source.finished)
        result.chaos_s = round(time.monotonic() - chaos_started, 1)
        chaos.heal()
        if source.error is not None:
            raise RuntimeError(f"the source failed: {source.error!r}") from source.error
        catch_up_started = time.monotonic()
        _wait_for_lake(cfg, url, chaos, lambda: source.published(cfg, url), opts.catch_up_timeout_s)
        result.catch_up_s = round(time.monotonic() - catch_up_started, 1)
        stack.stop_stages()
        result.events = source.events
        result.dead_letters = asyncio.run(dead_letters(cfg, url))
        result.dlq = sum(result.dead_letters.values())
        result.duplicates_skipped, result.stale_skipped = _skipped_totals(
            Ledger(cfg.lake_state_dir)
        )
        result.per_table = source.verify(cfg)
        tables = result.per_table.values()
        result.tables = len(result.per_table)
        result.rows_expected = sum(t["rows_expected"] for t in tables)
        result.rows_in_lake = sum(t["rows_in_lake"] for t in tables)
        result.lost = sum(t["lost"] for t in tables)
        result.duplicated = sum(t["duplicated"] for t in tables)
        result.unexpected = sum(t["unexpected"] for t in tables)
        result.different = sum(t["different"] for t in tables)
        result.mismatches = sum(t["mismatches"] for t in tables)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if chaos is not None:
            with_suppressed(lambda: chaos.heal(restart=False) if chaos else None)
        if stack is not None:
            with_suppressed(lambda: stack.stop(timeout_s=30) if stack else None)
        with_suppressed(source.close)
        env.stop(keep_images=not result.ok)
        if chaos is not None:
            result.faults = {k: chaos.faults[k] for k in opts.kinds}
            result.faults_by_target = dict(sorted(chaos.by_target.items()))
            result.faults_total = sum(chaos.faults.values())
            result.kills = {n: chaos.kills[n] for n in chaos.victims}
            result.kills_total = sum(chaos.kills.values())
            result.unexpected_exits = dict(chaos.crashes)
        result.events = result.events or source.events
        result.elapsed_s = round(time.monotonic() - started, 1)
    return result
