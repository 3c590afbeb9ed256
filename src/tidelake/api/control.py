"""Pausing and resuming a table: the control file the API writes and the ingest honours.

``<lake_root>/_tidelake/control.json`` holds the last request per table::

    {"tables": {"shop.orders": {"action": "pause", "reason": "backfill", "at_ms": 1714929186000},
                "shop.items":  {"action": "resume", "reason": "", "at_ms": 1714929190000}}}

Writers (``tidelake table pause|resume``, ``POST /api/tables/{table}/pause|resume``) replace the
table's entry under a file lock and rename the file into place. The ingest calls
:meth:`TableControl.apply` at the start of every round; it re-reads the file only when it
changed, and applies each entry once (by ``at_ms``):

* ``pause``: the table joins the ingest's paused tables (``paused.json``, with the reason
  ``paused by operator: …``); its events are left for later and the saved cursor hint stays
  behind them, exactly like a table the ingest paused itself. A pause survives a restart of
  the ingest, since the entry stays in the file.
* ``resume``: the table leaves the paused tables, whether an operator or the ingest paused it,
  and its failure count is reset; the ingest's cursor goes back to the table's checkpoint so
  the events it skipped while paused are read again (the other tables skip them by their
  own checkpoints, DESIGN.md §3 rule 1).
* ``skip_ddl`` (with ``seq``, the stream sequence of the DDL the table is paused on, from
  ``ddl_blocked.json``): a resume that also tells the ingest to record that one DDL as
  applied without changing the table (``lake/evolve.py``). The entry stays in the file, so a
  restart before the skip is committed still skips it, until the table's checkpoint has
  moved past the DDL: then the entry and the table's ``ddl_blocked.json`` entry are cleared
  (:meth:`TableControl.apply`, every round).

A resume or skip reaches the table in ``paused.json`` also when another ingest process paused
it (``tidelake ingest --once`` runs one process per call): that file is what ``status`` reads.

``paused.json`` says what the ingest *did*; ``control.json`` what was *asked*.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
import structlog

log = structlog.get_logger(__name__)

CONTROL_FILE = "control.json"
PAUSED_FILE = "paused.json"
#: ``lake/evolve.py`` ``BLOCKED_FILE``: per paused table, the DDL it waits on.
BLOCKED_FILE = "ddl_blocked.json"
OPERATOR_PREFIX = "paused by operator"

Action = Literal["pause", "resume", "skip_ddl"]


@dataclass(frozen=True, slots=True)
class TableRequest:
    """The last pause or resume asked for one table."""

    table: str
    action: Action
    reason: str
    at_ms: int
    #: ``skip_ddl``: the stream sequence of the DDL to skip.
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "reason": self.reason, "at_ms": self.at_ms}
        if self.seq is not None:
            out["seq"] = self.seq
        return out


def read_requests(state_dir: Path) -> dict[str, TableRequest]:
    """Every table's last request (empty when the file is missing or unreadable)."""
    try:
        data = orjson.loads((state_dir / CONTROL_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    out: dict[str, TableRequest] = {}
    tables = data.get("tables") if isinstance(data, dict) else None
    for table, entry in (tables or {}).items():
        try:
            action = entry["action"]
            if action not in ("pause", "resume", "skip_ddl"):
                continue
            seq = entry.get("seq")
            out[table] = TableRequest(
                table,
                action,
                str(entry.get("reason", "")),
                int(entry["at_ms"]),
                int(seq) if seq is not None else None,
            )
        except (KeyError, TypeError, ValueError):
            log.warning("control entry ignored", table=table, entry=entry)
    return out


def read_paused(state_dir: Path) -> dict[str, str]:
    """``paused.json``: the tables the ingest holds paused, with the reason."""
    try:
        data = orjson.loads((state_dir / PAUSED_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / ".control.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def request(
    state_dir: Path, table: str, action: Action, reason: str = "", seq: int | None = None
) -> TableRequest:
    """Record a pause, resume or skip-ddl of ``table`` for the ingest's next round."""
    if "." not in table:
        raise ValueError(f"{table!r}: a table is named <database>.<table>")
    if (action == "skip_ddl") != (seq is not None):
        raise ValueError("skip_ddl, and only skip_ddl, names the DDL's stream sequence")
    with _locked(state_dir):
        current = {t: r.to_dict() for t, r in read_requests(state_dir).items()}
        # at_ms strictly grows per table, so two requests in one millisecond both apply.
        previous = current.get(table, {}).get("at_ms", 0)
        req = TableRequest(table, action, reason, max(int(time.time() * 1000), previous + 1), seq)
        current[table] = req.to_dict()
        target = state_dir / CONTROL_FILE
        tmp = target.with_name(f".{CONTROL_FILE}.{os.getpid()}.tmp")
        tmp.write_bytes(orjson.dumps({"tables": current}, option=orjson.OPT_INDENT_2))
        os.replace(tmp, target)
    log.info("table control requested", table=table, action=action, reason=reason, seq=seq)
    return req


def _write_json(path: Path, data: dict[str, Any], **dumps: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, **dumps))
    os.replace(tmp, path)


def _drop_key(path: Path, key: str, seq_at_most: int) -> bool:
    """Remove ``key`` from the JSON object at ``path`` unless its ``seq`` is beyond
    ``seq_at_most`` (a later DDL the table now waits on)."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    entry = data.get(key) if isinstance(data, dict) else None
    if entry is None or (isinstance(entry, dict) and int(entry.get("seq") or 0) > seq_at_most):
        return False
    del data[key]
    _write_json(path, data, option=orjson.OPT_INDENT_2)
    return True


def forget_request(state_dir: Path, req: TableRequest) -> bool:
    """Remove ``req`` from ``control.json`` once it has done its work; a newer request of the
    same table (another ``at_ms``) stays."""
    with _locked(state_dir):
        try:
            data = orjson.loads((state_dir / CONTROL_FILE).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return False
        tables = data.get("tables") if isinstance(data, dict) else None
        entry = tables.get(req.table) if isinstance(tables, dict) else None
        if not isinstance(entry, dict) or entry.get("at_ms") != req.at_ms:
            return False
        del tables[req.table]  # type: ignore[union-attr]
        _write_json(state_dir / CONTROL_FILE, {"tables": tables}, option=orjson.OPT_INDENT_2)
    return True


def skipped_ddl_seq(state_dir: Path, table: str) -> int | None:
    """The stream sequence of the DDL an operator asked to skip for ``table``, if any."""
    req = read_requests(state_dir).get(table)
    return req.seq if req is not None and req.action == "skip_ddl" else None


class Controlled(Protocol):
    """What :meth:`TableControl.apply` needs of the ingest (``lake.ingest.Ingestor``)."""

    paused: dict[str, str]
    failures: dict[str, int]
    cursor: int

    @property
    def writer(self) -> Any: ...

    def _write_paused(self) -> None: ...


class TableControl:
    """The ingest's side: apply new requests of ``control.json`` at the start of a round."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._seen_mtime_ns = -1
        self._applied: dict[str, int] = {}
        #: skip_ddl requests whose DDL the table's checkpoint has not passed yet.
        self._skips: dict[str, TableRequest] = {}

    def _changed(self) -> bool:
        try:
            mtime = (self.state_dir / CONTROL_FILE).stat().st_mtime_ns
        except OSError:
            return False
        if mtime == self._seen_mtime_ns:
            return False
        self._seen_mtime_ns = mtime
        return True

    def apply(self, ingest: Controlled) -> list[TableRequest]:
        """Apply the requests not applied yet; returns them (usually none, cheaply). Then
        clear the skips whose DDL the table's checkpoint has passed."""
        done = self._apply_new(ingest) if self._changed() else []
        self._settle(ingest)
        return done

    def _settle(self, ingest: Controlled) -> None:
        """A skip whose DDL is behind the table's checkpoint has done its work: forget it
        (control.json) and the DDL it was for (ddl_blocked.json)."""
        for table, req in list(self._skips.items()):
            checkpoint = ingest.writer.checkpoint(table)
            if req.seq is None or checkpoint is None or int(checkpoint.seq) < req.seq:
                continue
            del self._skips[table]
            forget_request(self.state_dir, req)
            passed = int(checkpoint.seq)
            _drop_key(self.state_dir / BLOCKED_FILE, table, passed)
            # paused.json lost the table when the skip was applied; a pause since then has
            # another reason (a later DDL, failures) and stays.
            log.info("ddl skip settled", table=table, seq=req.seq, checkpoint_seq=passed)

    def _apply_new(self, ingest: Controlled) -> list[TableRequest]:
        done: list[TableRequest] = []
        on_disk = read_paused(self.state_dir)
        for table, req in read_requests(self.state_dir).items():
            if req.action == "skip_ddl":
                self._skips[table] = req
            else:
                self._skips.pop(table, None)
            if self._applied.get(table, 0) >= req.at_ms:
                continue
            self._applied[table] = req.at_ms
            if req.action == "pause":
                reason = f"{OPERATOR_PREFIX}: {req.reason}" if req.reason else OPERATOR_PREFIX
                ingest.paused[table] = reason
            elif table in ingest.paused or table in on_disk:
                # In paused.json but not in this process's paused tables: an earlier ingest
                # process paused it, and status still shows it paused until the file says not.
                ingest.paused.pop(table, None)
                ingest.failures.pop(table, None)
                checkpoint = ingest.writer.checkpoint(table)
                floor = int(checkpoint.seq) if checkpoint is not None else 0
                ingest.cursor = min(ingest.cursor, floor)
            else:
                continue
            done.append(req)
            log.info("table control applied", table=table, action=req.action, cursor=ingest.cursor)
        if done:
            ingest._write_paused()
        return done
