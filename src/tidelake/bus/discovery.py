"""Where the embedded bus of a home listens: the record ``<home>/bus.json`` and how every verb
finds the bus.

A ``tidelake run`` (or a ``tidelake stage`` with no bus of its own to use) starts an embedded
nats-server on this machine. Once its streams and the stager's consumer exist, it writes
``<home>/bus.json``::

    {"version": 1, "url": "nats://127.0.0.1:4222", "monitor_url": "http://127.0.0.1:8222",
     "pid": 4242, "server_pid": 4243, "home": "/home/me/.local/share/tidelake",
     "started_at": "2026-11-25T00:10:00Z"}

``pid`` is the process that owns the bus (the ``run``); the record is valid while it lives,
``server_pid`` is the nats-server itself. The record is written atomically
(:func:`tidelake.runtime.durable.write_atomic`) and removed when its owner stops cleanly.

:func:`find_bus` is the one resolution every verb uses, in this order:

1. ``bus.url`` when configured (file or ``TIDELAKE_BUS__URL``): always, the record unread;
2. the record of the home, when its owner's pid is alive *and* its port answers;
3. nothing: a verb that can start its own embedded server (``run``, ``stage``) does so, the
   others say how to get a bus (:func:`no_bus_message`).

A record whose owner is gone (a ``run`` killed with ``kill -9``, a machine rebooted) is stale:
it is ignored, and :attr:`BusLookup.note` says why, for the verb to print. Reading verbs never
remove it (they never write); the next ``run`` on the home replaces it, and stops the
nats-server a killed ``run`` left behind on the home's store first (:func:`claim_home`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson
import structlog

from tidelake.config import Config
from tidelake.errors import BusError
from tidelake.runtime.durable import write_atomic

log = structlog.get_logger(__name__)

#: The record's file name inside the home.
RECORD_FILE = "bus.json"
RECORD_VERSION = 1
#: Seconds a record's port gets to accept a TCP connection before it counts as not answering.
PORT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class BusRecord:
    """What ``<home>/bus.json`` holds (see the module doc)."""

    url: str
    pid: int
    monitor_url: str | None
    server_pid: int | None
    home: str
    started_at: str
    version: int = RECORD_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> BusRecord:
        """Raises ``ValueError`` when ``data`` is not a record this version can read."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {data.get('version')!r}, not {RECORD_VERSION}")
        url, pid = data.get("url"), data.get("pid")
        if not isinstance(url, str) or not url.startswith("nats://"):
            raise ValueError(f"url {url!r} is not nats://host:port")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
            raise ValueError(f"pid {pid!r} is not a process id")
        server_pid = data.get("server_pid")
        monitor_url = data.get("monitor_url")
        return cls(
            url=url,
            pid=pid,
            monitor_url=monitor_url if isinstance(monitor_url, str) else None,
            server_pid=server_pid if isinstance(server_pid, int) else None,
            home=str(data.get("home", "")),
            started_at=str(data.get("started_at", "")),
        )


@dataclass(frozen=True)
class BusLookup:
    """The outcome of :func:`find_bus`: a URL and where it came from, or none and why."""

    url: str | None
    source: Literal["config", "record", "none"]
    record: BusRecord | None = None
    #: Why the home's record was not used (stale, unreadable); None when there was nothing to say.
    note: str | None = None


def record_path(home: Path) -> Path:
    return home.expanduser().resolve() / RECORD_FILE


def new_record(
    home: Path, url: str, *, monitor_url: str | None, server_pid: int | None
) -> BusRecord:
    """The record this process writes for a bus it owns."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    return BusRecord(
        url=url,
        pid=os.getpid(),
        monitor_url=monitor_url,
        server_pid=server_pid,
        home=str(home.expanduser().resolve()),
        started_at=now.isoformat().replace("+00:00", "Z"),
    )


def write_record(home: Path, record: BusRecord) -> Path:
    """Write ``<home>/bus.json`` atomically (all or nothing, durable); its path."""
    path = record_path(home)
    write_atomic(path, orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    log.info("bus recorded", path=str(path), url=record.url)
    return path


def read_record(home: Path) -> BusRecord | None:
    """The home's record; None when there is none. Raises ``ValueError`` when it is there but
    unreadable (torn by hand, another version)."""
    path = record_path(home)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror}") from exc
    try:
        return BusRecord.from_json(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc


def remove_record(home: Path, pid: int | None = None) -> bool:
    """Remove the home's record if it is ``pid``'s (default: this process's); whether it did.
    A record another process wrote meanwhile is left alone."""
    owner = os.getpid() if pid is None else pid
    try:
        record = read_record(home)
    except ValueError:
        return False
    if record is None or record.pid != owner:
        return False
    record_path(home).unlink(missing_ok=True)
    return True


def pid_alive(pid: int) -> bool:
    """A process with this pid runs on this machine (a zombie, exited but not yet reaped by
    its parent, does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        # /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: the signal test is all there is
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def port_answers(url: str, timeout_s: float = PORT_TIMEOUT_S) -> bool:
    """The ``host:port`` of ``url`` accepts a TCP connection."""
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s):
            return True
    except OSError:
        return False


def live_record(home: Path) -> tuple[BusRecord | None, str | None]:
    """The home's record when its owner is alive and its port answers, else ``(None, why)``
    (``why`` None when there is no record at all)."""
    path = record_path(home)
    try:
        record = read_record(home)
    except ValueError as exc:
        return None, f"ignoring {path}: {exc}"
    if record is None:
        return None, None
    if not pid_alive(record.pid):
        return None, (
            f"ignoring {path}: the process that started the bus {record.url} (pid {record.pid}, "
            f"{record.started_at}) is not running; start `tidelake run` again"
        )
    if not port_answers(record.url):
        return None, (
            f"ignoring {path}: {record.url} does not answer (its owner, pid {record.pid}, is "
            "still running: starting or stopping?)"
        )
    return record, None


def find_bus(cfg: Config) -> BusLookup:
    """``bus.url``, else the home's live record, else nothing (see the module doc)."""
    if cfg.bus.url:
        return BusLookup(cfg.bus.url, "config")
    record, note = live_record(cfg.home)
    if record is not None:
        return BusLookup(record.url, "record", record)
    return BusLookup(None, "none", note=note)


def use_bus(cfg: Config, lookup: BusLookup) -> Config:
    """``cfg`` with the found bus: ``bus.url`` (and ``bus.monitor_url`` from a record, unless
    configured) set, so everything downstream reads it where it always has."""
    if lookup.url is None or lookup.source == "config":
        return cfg
    update: dict[str, Any] = {"url": lookup.url}
    if cfg.bus.monitor_url is None and lookup.record is not None and lookup.record.monitor_url:
        update["monitor_url"] = lookup.record.monitor_url
    return cfg.model_copy(update={"bus": cfg.bus.model_copy(update=update)})


def no_bus_message(cfg: Config) -> str:
    """What a verb that needs a running bus says when :func:`find_bus` found none."""
    return (
        f"no bus: bus.url is not set (TIDELAKE_BUS__URL) and no `tidelake run` has recorded one "
        f"in {record_path(cfg.home)}; start `tidelake run` (same --home) in another shell, "
        "or set bus.url"
    )


def claim_home(home: Path, store_dir: Path) -> None:
    """Make sure this process may start the home's embedded bus.

    Raises :class:`BusError` when a live owner recorded the home's bus (two pipelines on one
    home would share its staging and lake). A stale record's nats-server that still runs on
    this store (its ``run`` was killed with ``kill -9``: the server lives in a session of its
    own) is stopped, so the new server does not open a store another one holds.
    """
    path = record_path(home)
    try:
        record = read_record(home)
    except ValueError:
        return  # unreadable: replaced by this start's record
    if record is None:
        return
    if pid_alive(record.pid) and port_answers(record.url):
        raise BusError(
            f"a tidelake process (pid {record.pid}) already runs this home's bus at {record.url} "
            f"({path}); stop it first, use it (verbs find it), or choose another --home"
        )
    if record.server_pid is not None and _is_our_server(record.server_pid, store_dir):
        log.warning(
            "stopping the nats-server a stopped run left on this home",
            pid=record.server_pid,
            store=str(store_dir),
        )
        _stop_pid(record.server_pid)


def _stop_pid(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM (JetStream flushes its store), then SIGKILL after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _is_our_server(pid: int, store_dir: Path) -> bool:
    """``pid`` is a nats-server running on ``store_dir`` (not a stranger that reused the pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return bool(argv) and "nats-server" in Path(argv[0]).name and str(store_dir) in argv


@contextlib.contextmanager
def recorded(home: Path, record: BusRecord) -> Iterator[Path]:
    """Write the record, yield its path, remove it on the way out (if still ours)."""
    path = write_record(home, record)
    try:
        yield path
    finally:
        remove_record(home, record.pid)


@dataclass(frozen=True)
class OwnedBus:
    """An embedded bus this process started, provisioned and recorded."""

    record: BusRecord
    record_path: Path

    @property
    def url(self) -> str:
        return self.record.url

    def lookup(self) -> BusLookup:
        """As :func:`find_bus` would find it (for :func:`use_bus`)."""
        return BusLookup(self.record.url, "record", self.record)


@contextlib.contextmanager
def embedded_bus(cfg: Config) -> Iterator[OwnedBus]:
    """Start the home's embedded nats-server (``bus.embedded``, store ``<home>/nats``),
    provision the streams and the stager's consumer, then record it; on the way out remove
    the record and stop the server. What a ``tidelake stage`` with no bus to find does, so a
    stager alone works on embedded defaults as ``tidelake run`` does.

    Raises :class:`BusError` when another live process owns the home's bus
    (:func:`claim_home`) or the server does not start.
    """
    import asyncio

    from tidelake.bus.provision import provision
    from tidelake.bus.server import EmbeddedNats

    claim_home(cfg.home, cfg.nats_store_dir)
    # Dies with this process, even by kill -9: no orphaned server holds the home's store.
    nats = EmbeddedNats.from_config(cfg.bus.embedded, cfg.nats_store_dir, die_with_parent=True)
    nats.start()
    try:
        # Provisioned before recorded: whoever finds the record finds the stream too.
        asyncio.run(provision(cfg.bus, nats.url))
        record = new_record(cfg.home, nats.url, monitor_url=nats.monitor_url, server_pid=nats.pid)
        with recorded(cfg.home, record) as path:
            yield OwnedBus(record, path)
    finally:
        nats.stop()
