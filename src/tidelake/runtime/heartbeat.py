"""Heartbeat files: how a stage process tells ``tidelake serve`` what it is doing.

The stages are separate processes, so the server cannot read their memory. Each long-running
stage writes one small JSON file, ``<stage>.heartbeat.json``, next to its own durable output,
atomically (a temporary file renamed over the old one, or one PUT):

* the ingest: ``<lake_root>/_tidelake/ingest.heartbeat.json``, written by the ingest loop
  itself (:func:`write_heartbeat`) when it goes idle, after each round and when it stops;
* the stager: ``<staging root>/_tidelake/stager.heartbeat.json``, written every
  :data:`INTERVAL_S` seconds by a daemon thread (:class:`Heartbeat`) through the staging
  storage, so it works on S3 too.

A record::

    {"v": 1, "stage": "ingest", "state": "idle", "pid": 4242, "host": "lake-1",
     "updated_at_ms": 1714929186000, ...fields of the stage (cursor, paused, counters)}

:class:`HeartbeatRecord` types the keys every stage writes; a stage adds its own fields
freely. ``v`` is the record's format version (:data:`HEARTBEAT_VERSION`): a record without
it was written before versions and has the same keys (version 0, read as is); a record of a
newer version, or without the common keys, is ignored with a warning, like an unreadable
one (a heartbeat is a hint, never a reason to fail).

``state`` is what the stage says (``running``, ``idle``, ``stopped``…); ``stopped`` is
written on a clean exit. A process killed with ``kill -9`` leaves its last state with an
``updated_at_ms`` that no longer moves: the server reports it down once the record is older
than :data:`DOWN_AFTER_S` (and, for the ingest, no commit is more recent either: a long
Hudi commit writes no heartbeat).

The file is a hint for operators, never an input of a correctness decision.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import structlog
from pydantic import BaseModel, ConfigDict, ValidationError

log = structlog.get_logger(__name__)

#: The format version of a heartbeat record.
HEARTBEAT_VERSION = 1
#: Seconds between two writes of the stager's heartbeat thread.
INTERVAL_S = 2.0
#: A heartbeat older than this (and not ``stopped``) means the process is gone.
DOWN_AFTER_S = 15.0
#: The sub-directory of a stage's output that holds its heartbeat.
HEARTBEAT_DIR = "_tidelake"

#: ``put(name, data)``: how a :class:`Heartbeat` stores its record (atomically).
PutFn = Callable[[str, bytes], None]
InfoFn = Callable[[], dict[str, Any]]


class HeartbeatRecord(BaseModel):
    """What a stage says about itself: the keys every stage writes, then its own fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    v: int = HEARTBEAT_VERSION
    stage: str
    #: ``running``, ``idle``, ``applying``, ``warming up``, ``stopped``…
    state: str
    pid: int
    host: str
    updated_at_ms: int


def heartbeat_name(stage: str) -> str:
    return f"{stage}.heartbeat.json"


def heartbeat_record(stage: str, state: str, **fields: Any) -> dict[str, Any]:
    """The record a stage writes: who, where, when, what it says."""
    record = HeartbeatRecord(
        stage=stage,
        state=state,
        pid=os.getpid(),
        host=socket.gethostname(),
        updated_at_ms=int(time.time() * 1000),
        **fields,
    )
    return record.model_dump()


def write_heartbeat(directory: Path, stage: str, state: str, **fields: Any) -> None:
    """Write ``<directory>/<stage>.heartbeat.json`` atomically; never raises (a heartbeat
    must not take its stage down)."""
    path = directory / heartbeat_name(stage)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(orjson.dumps(heartbeat_record(stage, state, **fields), default=str))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write the heartbeat", path=str(path), error=str(exc))


def parse_heartbeat(data: bytes) -> dict[str, Any] | None:
    """The record in ``data`` (a :class:`HeartbeatRecord` as a dict, at the current
    version), or None when it is not one this code reads."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    version = raw.get("v", 0)
    if not isinstance(version, int) or version > HEARTBEAT_VERSION:
        log.warning("heartbeat of an unknown format version ignored", version=version)
        return None
    try:
        record = HeartbeatRecord.model_validate({**raw, "v": HEARTBEAT_VERSION})
    except ValidationError as exc:
        log.warning("malformed heartbeat ignored", error=str(exc))
        return None
    return record.model_dump()


def read_heartbeat(directory: Path, stage: str) -> dict[str, Any] | None:
    """The stage's last record, or None when it never wrote one (or it is unreadable)."""
    try:
        return parse_heartbeat((directory / heartbeat_name(stage)).read_bytes())
    except OSError:
        return None


def heartbeat_age_s(record: dict[str, Any] | None, now_ms: int) -> float | None:
    if record is None:
        return None
    return max(0.0, (now_ms - int(record.get("updated_at_ms", 0))) / 1000)


def is_up(record: dict[str, Any] | None, now_ms: int, *, last_activity_ms: int = 0) -> bool:
    """Whether the process behind ``record`` is alive: not ``stopped``, and its heartbeat (or
    ``last_activity_ms``, e.g. its last commit) is younger than :data:`DOWN_AFTER_S`."""
    if record is None or record.get("state") == "stopped":
        return False
    latest = max(int(record.get("updated_at_ms", 0)), last_activity_ms)
    return now_ms - latest <= DOWN_AFTER_S * 1000


class Heartbeat:
    """A daemon thread storing ``<stage>.heartbeat.json`` every ``interval_s``.

    ``with Heartbeat(put, "stager", info):`` around a stage's run is all a stage needs;
    ``info`` is called from the heartbeat thread, so it must only read.
    """

    def __init__(
        self,
        put: PutFn,
        stage: str,
        info: InfoFn | None = None,
        *,
        interval_s: float = INTERVAL_S,
        fallback: PutFn | None = None,
    ) -> None:
        self.stage = stage
        # Tried when ``put`` fails (a full disk): the cause of a stall must still reach status.
        self._fallback = fallback
        self.interval_s = interval_s
        self._put = put
        self._info = info
        self._started_at_ms = int(time.time() * 1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self, state: str = "running") -> None:
        info: dict[str, Any] = {}
        if self._info is not None:
            try:
                info = self._info()
            except Exception as exc:  # a heartbeat must never take the stage down
                info = {"info_error": repr(exc)}
        record = heartbeat_record(
            self.stage, state, started_at_ms=self._started_at_ms, interval_s=self.interval_s, **info
        )
        key, data = f"{HEARTBEAT_DIR}/{heartbeat_name(self.stage)}", orjson.dumps(record)
        try:
            self._put(key, data)
        except Exception as exc:
            log.warning("cannot store the heartbeat", stage=self.stage, error=repr(exc))
            if self._fallback is not None:
                try:
                    self._fallback(key, data)
                except Exception as again:
                    log.warning("nor overwrite it", stage=self.stage, error=repr(again))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.stage}")
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with contextlib.suppress(Exception):
            self.beat("stopped")

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def scalar_fields(obj: object) -> dict[str, Any]:
    """The int, float, str and bool attributes of ``obj`` (a stats dataclass), safe to read
    from another thread while the owner updates its collections."""
    return {k: v for k, v in list(vars(obj).items()) if isinstance(v, int | float | str | bool)}
