"""The local stack: every stage of the pipeline on this machine, assembled in one place.

``tidelake run``, ``demo``, ``demo --source`` and ``chaos`` all run the same stack:

1. the bus: ``bus.url`` when configured, else an embedded nats-server
   (:class:`tidelake.bus.server.EmbeddedNats`) with its store under the home — refused while
   another live process owns the home's bus (:func:`tidelake.bus.discovery.claim_home`);
2. the config: the caller's (``run``), or one the stack writes into the home once the bus URL
   is known (the self-contained verbs: ``home``, ``bus.url`` and the caller's settings);
3. the streams and the stager's consumer (:func:`tidelake.bus.provision.provision`), and
   then, for an embedded bus, the record ``<home>/bus.json`` every other verb finds it by
   (:mod:`tidelake.bus.discovery`): provisioned first, so a producer that finds the bus finds
   its stream;
4. the stage processes (:func:`tidelake.pipeline.processes.stage_children`): the capture when
   ``capture.source`` is set, one ``source run`` per REST source (docs/rest-source.md), the
   stager, the continuous ingest, one ``route run`` per route (docs/routes.md) — one child
   process each, with an environment that pins them to this home, config and bus;
5. :meth:`LocalStack.wait_healthy`: until the stager and the ingest started by this stack
   report in their heartbeats (``runtime/heartbeat.py``) — the ingest once its Spark session
   is up (``idle`` or ``applying``), the stager once it is ``running``;
6. :meth:`LocalStack.stop`: the stages in start order — the producer first, so nothing new
   arrives, then the stager (it finishes its batch), then the ingest (it finishes its
   commit) — each with SIGTERM and a grace period, then the record goes, and the embedded
   bus last.

The caller decides what happens around it: ``run`` supervises the children and restarts one
that dies, ``demo`` publishes a workload and verifies the lake, ``chaos`` kills them.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
import yaml

from tidelake.bus import kafka as kafka_bus
from tidelake.bus.connection import connect
from tidelake.bus.discovery import BusRecord, claim_home, new_record, remove_record, write_record
from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats
from tidelake.capture.source_registry import SourceRegistry
from tidelake.config import Config, EmbeddedNatsConfig, load_config, merge_settings
from tidelake.errors import ConfigError, TidelakeError
from tidelake.lake.ledger import Ledger
from tidelake.pipeline.processes import (
    StageProcess,
    run_env,
    stage_children,
    stager_and_ingest,
    tidelake_argv,
)
from tidelake.pipeline.workers import WorkerShare
from tidelake.retry import backoff_s
from tidelake.route.registry import RouteRegistry
from tidelake.runtime.heartbeat import HEARTBEAT_DIR, heartbeat_name, parse_heartbeat
from tidelake.runtime.metrics_server import assign_child_ports
from tidelake.runtime.storage import open_storage

log = structlog.get_logger(__name__)

#: The variable that gives a child its own metrics port (runtime/metrics_server.py).
PORT_ENV = "TIDELAKE_METRICS__PORT"

#: Marks a directory a self-contained run (demo, chaos) created, so a rerun may wipe it.
HOME_MARKER = ".tidelake-demo"

#: The ingest's heartbeat states once its Spark session is up.
INGEST_UP = ("idle", "applying")


def prepare_home(home: Path) -> None:
    """Wipe and recreate the home of a self-contained run; refuse a directory it did not make."""
    if home.exists():
        if not (home / HOME_MARKER).exists():
            raise SystemExit(f"{home} exists and was not made by the demo; refusing to wipe it")
        shutil.rmtree(home)
    home.mkdir(parents=True)
    (home / HOME_MARKER).write_text("made by tidelake demo; removed by the next demo run\n")


class StageExited(TidelakeError):  # noqa: N818 -- named for what the caller sees
    """A stage process of the stack exited while it should be running."""


class LocalStack:
    """The bus, the config and the stage processes of one local pipeline.

    Either ``cfg`` (a loaded config; ``config_path`` is handed to the children when given) or
    ``settings`` (what the config the stack writes to ``home/config.yaml`` says besides
    ``home`` and ``bus.url``). ``env`` is added to the children's environment (credentials).
    """

    def __init__(
        self,
        home: Path,
        *,
        cfg: Config | None = None,
        config_path: Path | None = None,
        settings: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        ingest_interval_s: float = 0.5,
        die_with_parent: bool = False,
        workers: Sequence[WorkerShare] = (),
    ) -> None:
        if (cfg is None) == (settings is None):
            raise ValueError("LocalStack takes either cfg or settings")
        self.home = home.resolve()
        self._cfg = cfg
        self.config_path = config_path.resolve() if config_path is not None else None
        self.settings = dict(settings or {})
        self.extra_env = dict(env or {})
        self.ingest_interval_s = ingest_interval_s
        #: Every process of the stack gets SIGTERM when this one dies, even by ``kill -9``
        #: (``run``: nothing unsupervised outlives it); start them from the main thread.
        self.die_with_parent = die_with_parent
        self.nats: EmbeddedNats | None = None
        #: The record of the embedded bus once provisioned (None with ``bus.url``).
        self.record: BusRecord | None = None
        self.url: str | None = None
        self.env: dict[str, str] = {}
        self.children: list[StageProcess] = []
        #: Several workers (pipeline/workers.py), each a stager ``stager-<name>`` and an
        #: ingest ``ingest-<name>`` with a config of its own; none: one stager, one ingest.
        self.workers = tuple(workers)
        if self.workers and settings is None:
            raise ValueError("workers need settings: the stack writes each worker's config")
        self.worker_cfgs: dict[str, Config] = {}
        self._worker_env: dict[str, dict[str, str]] = {}

    # -- what the stack is ---------------------------------------------------------------------

    @property
    def cfg(self) -> Config:
        if self._cfg is None:
            raise RuntimeError("the stack's config is written once its bus has started")
        return self._cfg

    @property
    def bus_url(self) -> str:
        if self.url is None:
            raise RuntimeError("the stack's bus has not been started")
        return self.url

    def child(self, name: str) -> StageProcess:
        """The stage process called ``name`` (``capture``, ``stager``, ``ingest``)."""
        for child in self.children:
            if child.name == name:
                return child
        raise KeyError(name)

    # -- bring-up ------------------------------------------------------------------------------

    def start(self) -> LocalStack:
        """Bus, config, provisioning, then the stage processes (not waiting for health)."""
        self.start_bus()
        self.configure()
        self.start_stages()
        return self

    @property
    def on_kafka(self) -> bool:
        """The CDC log is a Kafka topic (``bus.kind: kafka``): no nats-server is started."""
        if self._cfg is not None:
            return self._cfg.bus.kind == "kafka"
        return dict(self.settings.get("bus") or {}).get("kind") == "kafka"

    def start_bus(self) -> str:
        """``bus.url`` when the config has one, else an embedded nats-server; its URL. On a
        Kafka bus, nothing is started and the URL is empty (the Kafka servers are in
        ``bus.kafka``)."""
        if self.on_kafka:
            self.url = ""
            return ""
        url = self._cfg.bus.url if self._cfg is not None else None
        if url is None:
            store = self._cfg.nats_store_dir if self._cfg is not None else self.home / "nats"
            claim_home(self.home, store)
            dies = self.die_with_parent
            self.nats = (
                EmbeddedNats.from_config(self._cfg.bus.embedded, store, die_with_parent=dies)
                if self._cfg is not None
                else EmbeddedNats(store, sync_always=self._sync_always(), die_with_parent=dies)
            )
            url = self.nats.start().url
            log.info("embedded nats-server started", url=url, store=str(store))
        self.url = url
        return url

    def _sync_always(self) -> bool:
        """Settings mode: ``bus.embedded.sync_always`` of the settings (the config is written
        once the bus has started, its URL in it)."""
        embedded = dict(self.settings.get("bus") or {}).get("embedded") or {}
        return EmbeddedNatsConfig.model_validate(embedded).sync_always

    def configure(self) -> Config:
        """Write the config (settings mode), load it, provision the bus; the children's
        environment follows."""
        url = self.bus_url
        if self._cfg is None:
            data: dict[str, Any] = {"home": str(self.home), **self.settings}
            data["bus"] = {"url": url or None, **dict(self.settings.get("bus", {}))}
            self.config_path = self.home / "config.yaml"
            self.config_path.write_text(yaml.safe_dump(data, sort_keys=False))
            # The children's secrets (object-store keys, a source password) reach this
            # process's config the same way as theirs: through TIDELAKE_… variables.
            self._cfg = load_config(self.config_path, environ=self.extra_env)
        home = self._cfg.home.resolve()
        if self.config_path is not None:
            self.env = run_env(self.config_path, home, url)
        else:
            self.env = {"TIDELAKE_HOME": str(home)}
            if url:
                self.env["TIDELAKE_BUS__URL"] = url
        self.env.update(self.extra_env)
        self._configure_workers(url)
        if self.on_kafka:
            asyncio.run(kafka_bus.ensure_topics(self._cfg.bus))
        elif self.workers:
            for worker in self.workers:  # the streams, and each worker's own consumer
                asyncio.run(provision(self.worker_cfgs[worker.name].bus, url))
        else:
            asyncio.run(provision(self._cfg.bus, url))
        if self.nats is not None:
            self.record = new_record(
                self.home, url, monitor_url=self.nats.monitor_url, server_pid=self.nats.pid
            )
            write_record(self.home, self.record)
        return self._cfg

    def _configure_workers(self, url: str) -> None:
        """Each worker's config: the shared settings with its own merged in, written to
        ``<home>/workers/<name>/config.yaml``, and the environment of its processes."""
        if not self.workers:
            return
        if self.on_kafka:
            raise ConfigError("several workers need a JetStream bus (subject filters)")
        for worker in self.workers:
            shared = {"home": str(self.home), **self.settings}
            data = merge_settings(merge_settings(shared, {"bus": {"url": url or None}}),
                                  worker.settings(self.home))  # fmt: skip
            path = worker.home(self.home) / "config.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            self.worker_cfgs[worker.name] = load_config(path, environ=self.extra_env)
            self._worker_env[worker.name] = {
                **run_env(path, self.home, url),
                **self.extra_env,
            }

    @property
    def lake_state_dirs(self) -> list[Path]:
        """The state directory of every ingest of the stack (one per worker)."""
        if self.workers:
            return [self.worker_cfgs[w.name].lake_state_dir for w in self.workers]
        return [self.cfg.lake_state_dir]

    def start_stages(self) -> list[StageProcess]:
        """Start the stage processes (capture when ``capture.source`` is set, the sources,
        stager, ingest, the routes; with several workers, each worker's stager and ingest)."""
        cfg = self.cfg
        if self.workers:
            self.children = self._worker_children()
        else:
            try:
                sources = sorted(SourceRegistry(cfg).sources())
            except ConfigError as exc:  # a registry written badly by hand: the config's own
                log.warning("source registry unreadable; the config's sources only", error=str(exc))
                sources = sorted(cfg.sources)
            self.children = stage_children(
                self.env,
                cfg.home.resolve() / "logs",
                capture=bool(cfg.capture.source),
                ingest_interval_s=self.ingest_interval_s,
                die_with_parent=self.die_with_parent,
                # Routes read a JetStream bus; a paused one idles in its process until resumed.
                routes=[] if self.on_kafka else sorted(RouteRegistry(cfg).routes()),
                # A source publishes to either bus; a paused one idles in its process.
                sources=sources,
            )
        # metrics.port is the parent's (run's own endpoint): each child gets its own port.
        assign_child_ports(self.children, cfg.metrics)
        for child in self.children:
            child.start()
            log.info("started", stage=child.name, pid=child.pid, log=str(child.log_path))
        return self.children

    def _worker_children(self) -> list[StageProcess]:
        """Each worker's stager and ingest, the stagers first (the producers' side). A stack
        of workers runs nothing else: a capture, source or route would belong to no worker."""
        cfg = self.cfg
        if cfg.capture.source or cfg.sources or cfg.routes:
            raise ConfigError(
                "several workers run only their stagers and ingests: run a capture, sources and "
                "routes as a pipeline of their own"
            )
        logs = cfg.home.resolve() / "logs"
        pairs = [
            stager_and_ingest(
                self._worker_env[worker.name],
                logs,
                ingest_interval_s=self.ingest_interval_s,
                die_with_parent=self.die_with_parent,
                worker=worker.name,
            )
            for worker in self.workers
        ]
        return [p[0] for p in pairs] + [p[1] for p in pairs]

    def add_stager(self, name: str) -> StageProcess:
        """Start one more stager, called ``name``, on the same durable consumer (a fault run
        pauses one stager past AckWait while another runs). It writes the same heartbeat
        file as the first, so :meth:`stager_up` follows whichever wrote last: add it after
        :meth:`wait_healthy`. :meth:`stop_stages` stops it with the others."""
        if any(child.name == name for child in self.children):
            raise ValueError(f"the stack already has a stage called {name!r}")
        stager = StageProcess(
            name,
            tidelake_argv("stage"),
            self.env,
            self.cfg.home.resolve() / "logs" / f"{name}.log",
            die_with_parent=self.die_with_parent,
        )
        self.children.append(stager)
        assign_child_ports(self.children, self.cfg.metrics)
        stager.start()
        log.info("started", stage=name, pid=stager.pid, log=str(stager.log_path))
        return stager

    def sync_routes(self) -> list[str]:
        """Start a process for each route added at run time, stop the one of each route
        removed (``route/registry.py``); what changed, as ``+name``/``-name``."""
        if self.on_kafka:
            return []
        return self._sync_managed("route")

    def sync_sources(self) -> list[str]:
        """Start a process for each source added at run time, stop the one of each source
        removed (``capture/source_registry.py``); what changed, as ``+name``/``-name``."""
        return self._sync_managed("source")

    def _wanted(self, kind: str) -> set[str]:
        """The names in effect of a run-time registry's ``kind`` (``route``, ``source``).
        Raises ConfigError for a registry written badly by hand."""
        registry = RouteRegistry(self.cfg) if kind == "route" else SourceRegistry(self.cfg)
        return set(registry.entries())

    def _sync_managed(self, kind: str) -> list[str]:
        """One process ``<kind>-<name>`` (``tidelake <kind> run <name>``) per entry of the
        registry: started for one added, stopped for one removed."""
        try:
            wanted = self._wanted(kind)
        except ConfigError as exc:  # a registry written badly by hand: keep what runs
            log.warning(f"{kind} registry unreadable; left as they are", error=str(exc))
            return []
        prefix = f"{kind}-"
        running = {c.name.removeprefix(prefix) for c in self.children if c.name.startswith(prefix)}
        changes = []
        for name in sorted(wanted - running):
            child = StageProcess(
                prefix + name,
                tidelake_argv(kind, "run", name),
                self.env,
                self.cfg.home.resolve() / "logs" / f"{prefix}{name}.log",
                die_with_parent=self.die_with_parent,
            )
            if self.cfg.metrics.port is not None:  # the next port after every one in use
                used = [int(c.env.get(PORT_ENV, "0")) for c in self.children]
                child.env[PORT_ENV] = str(max([*used, self.cfg.metrics.port]) + 1)
            if kind == "source":
                # A producer: first in the stop order, so nothing new arrives while the rest
                # stop.
                self.children.insert(0, child)
            else:
                self.children.append(child)
            child.start()
            log.info("started", stage=child.name, pid=child.pid, log=str(child.log_path))
            changes.append(f"+{name}")
        for name in sorted(running - wanted):
            child = self.child(prefix + name)
            child.stop()
            self.children.remove(child)
            log.info("stopped", stage=child.name, reason=f"{kind} removed")
            changes.append(f"-{name}")
        return changes

    def restart_exited(
        self,
        restarts: dict[str, int],
        *,
        stopping: Callable[[], bool] = lambda: False,
        max_backoff_s: float = 30.0,
    ) -> list[str]:
        """Start again each stage process that exited, after the retriers' growing back-off
        (``restarts`` counts each one's restarts); not a route's or a source's process when
        it is no longer in its registry (it exited because it was removed: the next sync
        lets it go), nor anything once ``stopping()``. The names restarted."""
        restarted = []
        for child in list(self.children):
            if child.alive() or stopping():
                continue
            if not self._still_wanted(child.name):
                continue
            restarts[child.name] = restarts.get(child.name, 0) + 1
            pause = backoff_s(restarts[child.name], max_wait_s=max_backoff_s)
            log.warning(
                "stage exited; restarting",
                stage=child.name,
                status=child.returncode(),
                backoff_s=round(pause, 2),
                log_tail=child.log_tail(5),
            )
            time.sleep(pause)
            if stopping():
                break
            child.start()
            restarted.append(child.name)
        return restarted

    def _still_wanted(self, child_name: str) -> bool:
        """Whether a child is still wanted: a route's or a source's while its registry has
        it (an unreadable registry keeps what runs running), any other always."""
        kind, _, name = child_name.partition("-")
        if kind not in ("route", "source") or not name:
            return True
        try:
            return name in self._wanted(kind)
        except ConfigError:
            return True

    # -- health --------------------------------------------------------------------------------

    def _stage_cfg(self, worker: str | None) -> Config:
        return self.worker_cfgs[worker] if worker is not None else self.cfg

    def ingest_heartbeat(self, worker: str | None = None) -> dict[str, Any] | None:
        """The ingest's heartbeat (``worker``'s, with several), read through the ledger (its
        state directory's owner)."""
        return Ledger(self._stage_cfg(worker).lake_state_dir).heartbeat()

    def stager_heartbeat(self, worker: str | None = None) -> dict[str, Any] | None:
        """The stager's heartbeat (``worker``'s, with several), read through the staging
        storage (local or S3)."""
        cfg = self._stage_cfg(worker)
        storage = open_storage(cfg.stage_root, cfg.storage.s3)
        try:
            return parse_heartbeat(storage.get(f"{HEARTBEAT_DIR}/{heartbeat_name('stager')}"))
        except TidelakeError:
            return None

    def ingest_up(self, worker: str | None = None) -> bool:
        """The running ingest child has its Spark session (its own heartbeat says so)."""
        ingest = self.child("ingest" if worker is None else f"ingest-{worker}")
        beat = self.ingest_heartbeat(worker) or {}
        return ingest.alive() and beat.get("pid") == ingest.pid and beat.get("state") in INGEST_UP

    def stager_up(self, worker: str | None = None) -> bool:
        stager = self.child("stager" if worker is None else f"stager-{worker}")
        beat = self.stager_heartbeat(worker) or {}
        return stager.alive() and beat.get("pid") == stager.pid and beat.get("state") == "running"

    def healthy(self) -> bool:
        if self.workers:
            return all(self.stager_up(w.name) and self.ingest_up(w.name) for w in self.workers)
        return self.stager_up() and self.ingest_up()

    def check_children(self, skip: Callable[[str], bool] | None = None) -> None:
        """Raise :class:`StageExited` (with its log's tail) when a stage process has exited
        (but not one whose name ``skip`` says to leave)."""
        for child in self.children:
            if not child.alive() and not (skip is not None and skip(child.name)):
                raise StageExited(
                    f"the {child.name} process exited ({child.returncode()}); its log:\n"
                    + child.log_tail()
                )

    def wait_healthy(
        self, timeout_s: float = 300.0, *, on_wait: Callable[[], None] | None = None
    ) -> None:
        """Until the stager and the ingest report healthy (see the module doc). A child that
        exits meanwhile raises :class:`StageExited` — unless ``on_wait`` (called between two
        looks: the chaos harness restarts children there) has brought it back."""
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if on_wait is not None:
                on_wait()
            else:
                self.check_children()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the stager and the ingest not healthy within {timeout_s} s")
            time.sleep(0.2)

    async def dlq_depth(self) -> int:
        """Messages in the dead-letter stream (or topic)."""
        if self.on_kafka:
            state = await kafka_bus.topic_state(self.cfg.bus, self.cfg.bus.kafka.dlq_topic)
            return state.end_offset - state.first_offset
        nc = await connect(self.cfg.bus, self.bus_url)
        try:
            info = await nc.jetstream().stream_info(self.cfg.bus.dlq.name)
            return int(info.state.messages)
        finally:
            await nc.close()

    # -- shutdown ------------------------------------------------------------------------------

    def stop_stages(self, timeout_s: float | None = None) -> None:
        """Stop the stage processes in start order: producer, stager, ingest."""
        for child in self.children:
            child.stop(timeout_s)

    def stop(self, timeout_s: float | None = None) -> None:
        """The stage processes (:meth:`stop_stages`), then the embedded bus."""
        try:
            self.stop_stages(timeout_s)
        finally:
            if self.record is not None:
                remove_record(self.home, self.record.pid)
            if self.nats is not None:
                self.nats.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
