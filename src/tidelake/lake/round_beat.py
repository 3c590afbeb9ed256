"""The ingest's heartbeat while a round runs: a long Hudi commit must not look like a dead
ingest (issue 22).

``status`` calls a process down once its heartbeat is older than
:data:`~tidelake.runtime.heartbeat.DOWN_AFTER_S` (15 s). The ingest loop writes its heartbeat
between rounds; a round whose commit takes minutes wrote none meanwhile, so ``status`` said
"the ingest is down" while it committed. :class:`RoundBeat` keeps a thread rewriting it
while a round runs, with what the round does (heartbeat key ``round``)::

    {"started_ms": 1714929186000, "phase": "committing",
     "committing": {"shop.orders": 1714929190000}}

``phase`` is ``committing`` while a table's commit runs, else the state the round runs in
(``applying``; ``warming up`` for the ingest's JVM warm-up, a throw-away commit of 10-20 s);
``committing`` maps each table whose commit runs to when it started. ``status`` turns it into
"committing shop.orders for 42 s" (``api/monitor.py`` :func:`activity`).

The thread does not turn the loop for ``/healthz`` (``runtime/metrics_server.py``): a commit
that hangs must still look stuck there (``metrics.healthy_within_s``); only the heartbeat
file, which says *what* runs, keeps moving.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog

from tidelake.runtime.heartbeat import INTERVAL_S

log = structlog.get_logger(__name__)

#: ``write(state, round_info, turn)``: store the ingest's heartbeat in ``state`` with the
#: round's info; ``turn``: it is the loop's own write (it turns ``/healthz``), not the thread's.
WriteFn = Callable[[str, dict[str, Any], bool], None]


class RoundBeat:
    """The round under way and the thread that reports it every ``interval_s``."""

    def __init__(self, write: WriteFn, *, interval_s: float = INTERVAL_S) -> None:
        self._write = write
        self.interval_s = interval_s
        self._started_ms: int | None = None
        self._state = "applying"
        self._committing: dict[str, int] = {}
        self._lock = threading.Lock()

    def info(self) -> dict[str, Any]:
        """The round's ``started_ms``, ``phase`` and ``committing``; empty between rounds."""
        if self._started_ms is None:
            return {}
        with self._lock:
            committing = dict(self._committing)
        return {
            "started_ms": self._started_ms,
            "phase": "committing" if committing else self._state,
            "committing": committing,
        }

    @contextlib.contextmanager
    def committing(self, table: str) -> Iterator[None]:
        """Around one table's commit (called from the round's commit threads)."""
        with self._lock:
            self._committing[table] = int(time.time() * 1000)
        try:
            yield
        finally:
            with self._lock:
                self._committing.pop(table, None)

    @contextlib.contextmanager
    def running(self, state: str = "applying") -> Iterator[None]:
        """Around a round (or the warm-up): the heartbeat in ``state`` now, as the loop's own
        write, then from the thread every ``interval_s`` until it ends."""
        self._started_ms = int(time.time() * 1000)
        self._state = state
        done = threading.Event()

        def run() -> None:
            while not done.wait(self.interval_s):
                try:
                    self._write(state, self.info(), False)
                except Exception as exc:  # a heartbeat must never take the round down
                    log.warning("round heartbeat not written", error=repr(exc))

        self._write(state, self.info(), True)
        thread = threading.Thread(target=run, name="ingest-round-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=10)
            self._started_ms = None
