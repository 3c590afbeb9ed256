"""How the ingest treats a failed share of one table (``lake/ingest.py``): the decision, the
wait before a retry, and a heartbeat that still says why when the state disk is full.

:func:`table_failure` decides by ``tidelake.errors.classify``, plus the resource faults a JVM
error only names in its text: a Hudi write that hits a full disk reaches Python as py4j's
error wrapped in an ``IngestError``, with "No space left on device" somewhere in its cause
chain, and that is as transient as an ``OSError(ENOSPC)``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from tidelake.errors import Decision, TableRefused, classify
from tidelake.lake.ledger import INGEST_STAGE, Ledger
from tidelake.runtime.heartbeat import heartbeat_name, heartbeat_record

log = structlog.get_logger(__name__)

#: Longest wait before a failing table is tried again (the back-off doubles up to it).
MAX_TABLE_RETRY_WAIT_S = 60.0

#: Resource faults a JVM error reports only in its text (py4j wraps the Java IOException, so
#: no Python class says "disk full"): each is transient, gone once space or the store is
#: back. Lower-case; matched against the whole cause chain (``lake/jvm_errors.py``).
RESOURCE_FAULTS = (
    "no space left on device",
    "disk quota exceeded",
    "enospc",
    "connection refused",
    "connect timed out",
    "read timed out",
    "sockettimeoutexception",
    "unknownhostexception",
    "slowdown",
    "service unavailable",
    "503",
    "too many open files",
)


def table_failure(exc: BaseException) -> Decision:
    """How a table's failed share of a round is handled (module docstring): ``terminal``
    pauses it, ``transient`` retries it after a back-off for as long as it takes,
    ``unknown`` retries it ``MAX_TABLE_FAILURES`` times."""
    if isinstance(exc, TableRefused):
        return "terminal"
    decided = classify(exc)
    if decided == "terminal":
        return "terminal"
    text = str(exc).lower()
    cause = exc.__cause__
    while cause is not None and len(text) < 20_000:
        text += " " + str(cause).lower()
        cause = cause.__cause__
    if decided == "transient" or any(fault in text for fault in RESOURCE_FAULTS):
        return "transient"
    return "unknown"


@dataclass
class TableRetry:
    """A table held back after a failure: why, how often in a row, and when to try again."""

    error: BaseException
    cause: str
    failures: int
    retry_at: float


def heartbeat_in_place(ledger: Ledger, state: str, fields: dict[str, Any]) -> None:
    """When the ledger could not replace the ingest's heartbeat (the state directory's disk
    is full: a new file needs a free block), overwrite the old file's bytes instead, so
    ``status`` still shows why tables wait rather than ``errors: []`` (issue 23). A record
    under the file system's block size fits the block the file already holds."""
    now_ms = int(time.time() * 1000)
    written = ledger.heartbeat() or {}
    if int(written.get("updated_at_ms") or 0) >= now_ms - 1000:
        return  # the ledger's write went through
    path = ledger.path(heartbeat_name(INGEST_STAGE))
    data = orjson.dumps(heartbeat_record(INGEST_STAGE, state, **fields), default=str)
    try:
        with path.open("r+b") as f:
            f.write(data)
            f.truncate(len(data))
    except OSError as exc:
        log.warning("heartbeat not written in place", path=str(path), error=str(exc))
