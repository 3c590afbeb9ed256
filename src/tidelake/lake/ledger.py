"""The ledger: every file of the ingest's local state, its typed record, and how it is written.

The ingest keeps a few small files beside the lake, in ``<lake_root>/_tidelake/`` (config
``lake_state_dir``; ``lake.state_dir`` or ``<home>/state`` for a lake on object storage).
This module is the only code that knows their names and formats; everything else reads and
writes them through :class:`Ledger`.

Each file, its record, who writes it (through this module) and who reads it:

* ``cursor.json`` — :class:`Cursor`. Written by the ingest after a round; read by the ingest
  at start and by chaos (has the lake caught up?).
* ``commits.jsonl`` — one :class:`CommitRecord` per line, per Hudi commit. Appended by the
  ingest after the commit; read by the API (``api/records.py``), the demo and chaos.
* ``skipped.jsonl`` — one :class:`SkippedRecord` per line. Appended by the ingest; read by
  the API and chaos.
* ``paused.json`` — :class:`PausedTables`. Written by the ingest (its pauses, and
  ``Controlled.pause``/``resume`` for an operator's request); read by the API, the ingest's
  resume (a table an earlier process paused) and chaos.
* ``control.json`` — :class:`ControlRequests`. Written by the API and the CLI
  (:meth:`Ledger.request`) and by the ingest's control once a skip is settled
  (:meth:`Ledger.forget_request`); read by the ingest's control (``lake/control.py``), the
  ingest's DDL skip and the API.
* ``dropped.json`` — :class:`Tombstones`. Written and read by schema evolution.
* ``ddl_blocked.json`` — :class:`BlockedDdls`. Written by schema evolution (a DDL it cannot
  apply) and the ingest's control (a settled skip); read by ``tidelake table skip-ddl``.
* ``databases.json`` — :class:`Databases`. Written and read by the catalog sync.
* ``ingest.heartbeat.json`` — ``runtime.heartbeat.HeartbeatRecord``. Written by the ingest
  loop (:meth:`Ledger.write_heartbeat`); read by the API, the demo, chaos and ``run``.
* ``ingest.lock`` — the writer lock and its holder (pid, host, since); held, written and
  read by ``lake/lock.py`` at :attr:`Ledger.lock_path`.
* ``.ledger.lock`` — empty; ``flock``-ed around every read-modify-write of this module.

The cursor is a hint that saves listing work; every correctness decision of the ingest comes
from the per-table checkpoints in the Hudi commits (``lake/checkpoint.py``). The other files
are the ingest's own bookkeeping (what it paused, what an operator asked, which tables were
dropped at which checkpoint) and its report to operators (the commit and skip logs).

**Durability.** Every whole-file write goes through :func:`durable_write`: a temporary file
in the same directory, flushed and ``fsync``-ed, renamed over the old one, then the directory
``fsync``-ed, so after a crash a file is either the old or the new version, never torn, and
the rename itself survives. Appends (:func:`durable_append`) ``fsync`` the file, and the
directory when the append created it. The writer lock is the one exception: it is written in
place through the locked descriptor (``lake/lock.py``), since renaming a new file over it
would hand the lock to a new inode.

**Versions.** Every record carries ``v``, the version of its format (:data:`LEDGER_VERSION`).
A record without ``v`` was written before the ledger existed (version 0) and is upgraded
explicitly on read (:meth:`_Record.upgrade`); a version newer than this code knows raises
:class:`LedgerVersionError` instead of being half-understood.

**Malformed state** raises :class:`LedgerError` (terminal) naming the file, except where the
file is documented as a hint: an unreadable cursor is 0 (with a warning), an unreadable
``control.json`` or ``databases.json`` is empty (their readers' documented contract), an
unreadable heartbeat is ``None``. A line of a JSON Lines log that is not JSON at all is the
tail of an append cut by a crash: it is skipped with a warning (the next append starts a new
line); a line that is JSON but not a valid record is corruption and raises.

This module imports no Spark: the API and the CLI use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

import orjson
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tidelake.errors import Terminal, TidelakeError
from tidelake.runtime.durable import append_line, make_dirs, write_atomic
from tidelake.runtime.heartbeat import heartbeat_name, heartbeat_record, read_heartbeat

log = structlog.get_logger(__name__)

#: The format version every record of this module writes.
LEDGER_VERSION = 1

CURSOR_FILE = "cursor.json"
COMMITS_FILE = "commits.jsonl"
SKIPPED_FILE = "skipped.jsonl"
PAUSED_FILE = "paused.json"
CONTROL_FILE = "control.json"
TOMBSTONES_FILE = "dropped.json"
BLOCKED_FILE = "ddl_blocked.json"
DATABASES_FILE = "databases.json"
LOCK_FILE = "ingest.lock"
#: ``flock``-ed around every read-modify-write, across threads and processes (the API and
#: the CLI write ``control.json`` while the ingest settles it).
UPDATE_LOCK_FILE = ".ledger.lock"
#: The stage name of the ingest's heartbeat (``ingest.heartbeat.json``).
INGEST_STAGE = "ingest"

#: The reason prefix of a pause an operator asked for.
OPERATOR_PREFIX = "paused by operator"


class LedgerError(TidelakeError, Terminal):
    """A state file is malformed; retrying reads the same bytes. The message names the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class LedgerVersionError(LedgerError):
    """A state file was written in a format version this code does not know (a newer one)."""


# --- durable writes ---------------------------------------------------------------------------


#: The ingest's whole-file writes and appends: :mod:`tidelake.runtime.durable` (the one helper).
durable_write = write_atomic
durable_append = append_line


# --- records ----------------------------------------------------------------------------------


class _Record(BaseModel):
    """A versioned record: ``v`` first, unknown keys refused (a typo is a bug, not data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The format version this class reads and writes.
    VERSION: ClassVar[int] = LEDGER_VERSION

    v: int = LEDGER_VERSION

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """``data`` of an older ``version`` in this version's shape. Version 0 (files written
        before the ledger) has the same keys as version 1, without ``v``."""
        return {**data, "v": cls.VERSION}

    def to_json(self) -> dict[str, Any]:
        """The record as it is stored (``None`` fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    def dumps(self) -> bytes:
        return orjson.dumps(self.to_json())


R = TypeVar("R", bound=_Record)


def decode(cls: type[R], data: Any, path: Path) -> R:
    """``data`` (parsed JSON) as a ``cls`` record, upgraded from an older version; a record
    of an unknown version or shape raises naming ``path``."""
    if not isinstance(data, dict):
        raise LedgerError(path, f"a {cls.__name__} is a JSON object, not {type(data).__name__}")
    version = data.get("v", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise LedgerError(path, f"format version {version!r} is not a version")
    if version > cls.VERSION:
        raise LedgerVersionError(
            path,
            f"format version {version} of {cls.__name__} is newer than this tidelake reads "
            f"({cls.VERSION}); upgrade tidelake",
        )
    if version < cls.VERSION:
        data = cls.upgrade(data, version)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise LedgerError(path, f"not a valid {cls.__name__}: {exc}") from None


class CommitRecord(_Record):
    """One line of ``commits.jsonl``: one Hudi commit of one table (rows, or a DDL).

    Written by the ingest after the commit completed (``lake/ingest.py``); read by the API
    (counts, freshness, recent commits), the demo and chaos (what the lake covers) and the
    bench. ``seq`` is the table's checkpoint after the commit.
    """

    table: str
    #: The Hudi instant (None: the DDL changed no table data, e.g. a skipped one).
    instant: str | None = None
    #: The table's checkpoint sequence before this commit.
    seq_from: int = 0
    seq: int
    position: str | None = None
    schema_version: int = 0
    events: int = 0
    upserts: int = 0
    deletes: int = 0
    #: Events whose values the table cannot store, sent to the dead-letter stream.
    dead_lettered: int = 0
    #: 1 for a DDL commit, 0 for rows (a count, so sums count DDLs).
    ddl: int = 0
    ddl_type: str | None = None
    #: What the DDL did to the table (``lake/evolve.py``), or ``skipped``.
    ddl_action: str | None = None
    ddl_changes: list[str] | None = None
    rows_rewritten: int | None = None
    skipped_duplicates: int = 0
    skipped_stale: int = 0
    committed_at_ms: int
    #: Newest source commit time applied (the freshness reference).
    max_commit_ts_ms: int | None = None
    commit_ts_ms_p50: int | None = None
    duration_ms: int | None = None
    #: Of ``duration_ms``: building the rows in Python and handing them to Spark.
    prepare_ms: int | None = None

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        # Version 0 lines were built in three places; keep the keys this record knows.
        known = set(cls.model_fields)
        return {**{k: v for k, v in data.items() if k in known}, "v": cls.VERSION}


class SkippedRecord(_Record):
    """One line of ``skipped.jsonl``: events of one table a round did not apply again."""

    table: str
    #: The last stream sequence of the round.
    seq_last: int
    #: At or below the table's checkpoint (docs/architecture.md §3 rule 1).
    duplicates: int = 0
    #: Below the table's position watermark (rule 2).
    stale: int = 0
    at_ms: int


class Cursor(_Record):
    """``cursor.json``: the stream sequence the ingest has listed up to (a hint only)."""

    seq: int = Field(ge=0)


class _TableMap(_Record):
    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        # Version 0 was the bare mapping, without an envelope.
        return {"v": cls.VERSION, "tables": data}


class PausedTables(_TableMap):
    """``paused.json``: the tables the ingest holds paused, with the reason.

    What the ingest *did*; ``control.json`` holds what was *asked*. A new ingest process
    starts with nothing paused (it writes the file empty) and tries every table again.
    """

    tables: dict[str, str] = Field(default_factory=dict)


Action = Literal["pause", "resume", "skip_ddl"]


class ControlEntry(BaseModel):
    """The last pause, resume or skip-ddl asked for one table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    reason: str = ""
    #: When it was asked; strictly growing per table, so each request applies once.
    at_ms: int
    #: ``skip_ddl``: the stream sequence of the DDL to skip.
    seq: int | None = None


class ControlRequests(_Record):
    """``control.json``: per table, the last request of an operator (API or CLI)."""

    tables: dict[str, ControlEntry] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TableRequest:
    """One table's entry of ``control.json``, with its table."""

    table: str
    action: Action
    reason: str
    at_ms: int
    #: ``skip_ddl``: the stream sequence of the DDL to skip.
    seq: int | None = None

    def entry(self) -> ControlEntry:
        return ControlEntry(action=self.action, reason=self.reason, at_ms=self.at_ms, seq=self.seq)

    def to_dict(self) -> dict[str, Any]:
        return self.entry().model_dump(mode="json", exclude_none=True)


class Tombstones(_TableMap):
    """``dropped.json``: per table dropped (or renamed away), its last checkpoint (the JSON
    text of ``lake.checkpoint.TableCheckpoint``), so events replayed from before the drop
    stay skipped when a table of the same name comes back."""

    tables: dict[str, str] = Field(default_factory=dict)


class BlockedDdl(BaseModel):
    """The DDL a paused table waits on: ``tidelake table skip-ddl`` names its ``seq``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    position: str | None = None
    ddl: str | None = None
    reason: str = ""


class BlockedDdls(_TableMap):
    """``ddl_blocked.json``: per table paused on a DDL the lake cannot apply, that DDL."""

    tables: dict[str, BlockedDdl] = Field(default_factory=dict)


class DatabaseState(BaseModel):
    """A database's last DDL: its stream sequence, and whether the database exists after it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    exists: bool


class Databases(_Record):
    """``databases.json``: per database, its last ``CREATE``/``DROP DATABASE``."""

    databases: dict[str, DatabaseState] = Field(default_factory=dict)

    @classmethod
    def upgrade(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        return {"v": cls.VERSION, "databases": data}


# --- reading ----------------------------------------------------------------------------------


def _load(path: Path) -> Any | None:
    """The JSON at ``path``; None when the file does not exist; raises when it is not JSON."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(path, f"unreadable: {exc}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LedgerError(path, f"not JSON: {exc}") from None


def _parse_line(cls: type[R], line: bytes, path: Path) -> R | None:
    """One JSON Lines record; None for a line torn by a crash (not JSON), with a warning."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        log.warning("torn line skipped", path=str(path), line=line[:200])
        return None
    return decode(cls, data, path)


class RecordTail(Generic[R]):
    """The complete records appended to a JSON Lines file since the last call.

    A line without its newline yet (a writer mid-append) is left for the next call. A file
    that shrank or was replaced is read again from the start (``reset`` is then True).
    """

    def __init__(self, path: Path, cls: type[R]) -> None:
        self.path = path
        self.cls = cls
        self.offset = 0
        self._inode: int | None = None
        self.reset = False

    def read_new(self) -> list[R]:
        self.reset = False
        try:
            st = self.path.stat()
        except OSError:
            if self.offset:
                self.offset, self._inode, self.reset = 0, None, True
            return []
        if st.st_ino != self._inode or st.st_size < self.offset:
            self.reset = self._inode is not None
            self.offset, self._inode = 0, st.st_ino
        if st.st_size == self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []
        out: list[R] = []
        for line in data[:end].split(b"\n"):
            if line.strip():
                record = _parse_line(self.cls, line, self.path)
                if record is not None:
                    out.append(record)
        # Only once every line parsed: a corrupt record raises again on the next call.
        self.offset += end + 1
        return out


# --- the ledger -------------------------------------------------------------------------------


class Ledger:
    """The ingest's state directory: the one reader and writer of its files.

    Cheap to construct (no I/O); many may exist for one directory, in one process or several:
    read-modify-write updates hold :data:`UPDATE_LOCK_FILE`.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)

    def path(self, name: str) -> Path:
        return self.state_dir / name

    @property
    def lock_path(self) -> Path:
        """The ingest's writer lock (``lake/lock.py`` holds and writes it)."""
        return self.path(LOCK_FILE)

    @contextlib.contextmanager
    def _updating(self) -> Iterator[None]:
        make_dirs(self.state_dir)
        with self.path(UPDATE_LOCK_FILE).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, name: str, record: _Record, *, indent: bool = True) -> None:
        option = orjson.OPT_INDENT_2 if indent else 0
        durable_write(self.path(name), orjson.dumps(record.to_json(), option=option))

    def _read(self, name: str, cls: type[R]) -> R | None:
        path = self.path(name)
        data = _load(path)
        return None if data is None else decode(cls, data, path)

    # -- cursor.json

    def cursor(self) -> int:
        """The saved cursor hint; 0 when absent or unreadable (it only saves listing work)."""
        try:
            record = self._read(CURSOR_FILE, Cursor)
        except LedgerVersionError:
            raise
        except LedgerError as exc:
            log.warning("unreadable cursor hint ignored", path=str(exc.path), error=exc.reason)
            return 0
        return record.seq if record is not None else 0

    def save_cursor(self, seq: int) -> None:
        self._write(CURSOR_FILE, Cursor(seq=seq), indent=False)

    # -- commits.jsonl, skipped.jsonl

    def append_commit(self, record: CommitRecord) -> None:
        durable_append(self.path(COMMITS_FILE), record.dumps())

    def append_skipped(self, record: SkippedRecord) -> None:
        durable_append(self.path(SKIPPED_FILE), record.dumps())

    def commits(self) -> list[CommitRecord]:
        """Every complete line of ``commits.jsonl`` (empty when absent)."""
        return self.commit_tail().read_new()

    def skipped(self) -> list[SkippedRecord]:
        """Every complete line of ``skipped.jsonl`` (empty when absent)."""
        return self.skipped_tail().read_new()

    def commit_tail(self) -> RecordTail[CommitRecord]:
        """An incremental reader of ``commits.jsonl``: each call returns the new lines."""
        return RecordTail(self.path(COMMITS_FILE), CommitRecord)

    def skipped_tail(self) -> RecordTail[SkippedRecord]:
        return RecordTail(self.path(SKIPPED_FILE), SkippedRecord)

    def covered(self) -> dict[str, int]:
        """Per table, the highest checkpoint sequence ``commits.jsonl`` reports."""
        out: dict[str, int] = {}
        for c in self.commits():
            out[c.table] = max(out.get(c.table, 0), c.seq)
        return out

    # -- paused.json

    def paused(self) -> dict[str, str]:
        """The tables the ingest holds paused, with the reason (empty when absent)."""
        record = self._read(PAUSED_FILE, PausedTables)
        return dict(record.tables) if record is not None else {}

    def save_paused(self, paused: Mapping[str, str]) -> None:
        self._write(PAUSED_FILE, PausedTables(tables=dict(paused)))

    # -- control.json

    def _requests(self) -> ControlRequests:
        """``control.json``; empty when absent or unreadable (documented: an unreadable
        request file must not stop the ingest), but a newer format version raises."""
        path = self.path(CONTROL_FILE)
        try:
            data = _load(path)
        except LedgerError as exc:
            log.warning("unreadable control file ignored", path=str(path), error=exc.reason)
            return ControlRequests()
        if not isinstance(data, dict):
            return ControlRequests()
        if data.get("v", 0) == 0:
            data = ControlRequests.upgrade(data, 0)
        entries = data.get("tables")
        if isinstance(entries, dict):
            # One malformed entry loses that entry only (with a warning), as before the ledger.
            kept = {}
            for table, entry in entries.items():
                try:
                    kept[table] = ControlEntry.model_validate(entry)
                except ValidationError:
                    log.warning("control entry ignored", table=table, entry=entry)
            data = {**data, "tables": kept}
        return decode(ControlRequests, data, path)

    def requests(self) -> dict[str, TableRequest]:
        """Every table's last request (empty when the file is missing or unreadable)."""
        return {
            table: TableRequest(table, e.action, e.reason, e.at_ms, e.seq)
            for table, e in self._requests().tables.items()
        }

    def control_version(self) -> int | None:
        """A value that changes whenever ``control.json`` is replaced (None when absent):
        the ingest re-reads the requests only then."""
        try:
            return self.path(CONTROL_FILE).stat().st_mtime_ns
        except OSError:
            return None

    def request(
        self, table: str, action: Action, reason: str = "", seq: int | None = None
    ) -> TableRequest:
        """Record a pause, resume or skip-ddl of ``table`` for the ingest's next round."""
        if "." not in table:
            raise ValueError(f"{table!r}: a table is named <database>.<table>")
        if (action == "skip_ddl") != (seq is not None):
            raise ValueError("skip_ddl, and only skip_ddl, names the DDL's stream sequence")
        with self._updating():
            current = dict(self._requests().tables)
            # at_ms strictly grows per table, so two requests in one millisecond both apply.
            previous = current[table].at_ms if table in current else 0
            req = TableRequest(
                table, action, reason, max(int(time.time() * 1000), previous + 1), seq
            )
            current[table] = req.entry()
            self._write(CONTROL_FILE, ControlRequests(tables=current))
        log.info("table control requested", table=table, action=action, reason=reason, seq=seq)
        return req

    def forget_request(self, req: TableRequest) -> bool:
        """Remove ``req`` once it has done its work; a newer request of the same table
        (another ``at_ms``) stays."""
        with self._updating():
            current = dict(self._requests().tables)
            entry = current.get(req.table)
            if entry is None or entry.at_ms != req.at_ms:
                return False
            del current[req.table]
            self._write(CONTROL_FILE, ControlRequests(tables=current))
        return True

    def skipped_ddl_seq(self, table: str) -> int | None:
        """The stream sequence of the DDL an operator asked to skip for ``table``, if any."""
        req = self.requests().get(table)
        return req.seq if req is not None and req.action == "skip_ddl" else None

    # -- dropped.json

    def tombstones(self) -> dict[str, str]:
        """Per dropped table, the JSON text of its last checkpoint."""
        record = self._read(TOMBSTONES_FILE, Tombstones)
        return dict(record.tables) if record is not None else {}

    def tombstone(self, table_id: str) -> str | None:
        return self.tombstones().get(table_id)

    def put_tombstone(self, table_id: str, checkpoint_json: str) -> None:
        self._update_map(TOMBSTONES_FILE, Tombstones, table_id, checkpoint_json)

    def remove_tombstone(self, table_id: str) -> None:
        self._update_map(TOMBSTONES_FILE, Tombstones, table_id, None)

    # -- ddl_blocked.json

    def blocked(self) -> dict[str, BlockedDdl]:
        """Per paused table, the DDL it waits on (empty when absent)."""
        record = self._read(BLOCKED_FILE, BlockedDdls)
        return dict(record.tables) if record is not None else {}

    def record_blocked(self, table_id: str, blocked: BlockedDdl) -> None:
        self._update_map(BLOCKED_FILE, BlockedDdls, table_id, blocked)

    def clear_blocked(self, table_id: str, seq_at_most: int | None = None) -> bool:
        """Forget the DDL ``table_id`` waits on; with ``seq_at_most``, only when that DDL is
        not beyond it (a later DDL the table now waits on stays). True when one was removed."""

        def keep(entry: BlockedDdl) -> bool:
            return seq_at_most is not None and entry.seq > seq_at_most

        return self._update_map(BLOCKED_FILE, BlockedDdls, table_id, None, keep=keep)

    def _update_map(
        self,
        name: str,
        cls: type[Tombstones] | type[BlockedDdls],
        key: str,
        value: Any | None,
        keep: Callable[[Any], bool] | None = None,
    ) -> bool:
        """Set (or, with ``value`` None, remove) one table's entry of a table map file."""
        with self._updating():
            record = self._read(name, cls)
            tables: dict[str, Any] = dict(record.tables) if record is not None else {}
            if value is None:
                if key not in tables or (keep is not None and keep(tables[key])):
                    return False
                del tables[key]
            else:
                tables[key] = value
            self._write(name, cls(tables=tables))
        return True

    # -- databases.json

    def databases(self) -> dict[str, DatabaseState]:
        """Per database, its last DDL; empty when absent or unreadable (documented by the
        catalog sync: the catalog is a convenience, never a reason to stop the ingest)."""
        try:
            record = self._read(DATABASES_FILE, Databases)
        except LedgerVersionError:
            raise
        except LedgerError as exc:
            log.warning("unreadable databases file ignored", path=str(exc.path), error=exc.reason)
            return {}
        return dict(record.databases) if record is not None else {}

    def record_database(self, database: str, seq: int, exists: bool) -> bool:
        """Record the database DDL at ``seq``; False when a DDL at or after ``seq`` is
        recorded already (a replay changes nothing)."""
        with self._updating():
            current = self.databases()
            held = current.get(database)
            if held is not None and held.seq >= seq:
                return False
            current[database] = DatabaseState(seq=seq, exists=exists)
            self._write(DATABASES_FILE, Databases(databases=current))
        return True

    # -- ingest.heartbeat.json

    def heartbeat(self) -> dict[str, Any] | None:
        """The ingest's last heartbeat (``runtime/heartbeat.py``); None when it never wrote
        one or it is unreadable (a hint for operators)."""
        return read_heartbeat(self.state_dir, INGEST_STAGE)

    def write_heartbeat(self, state: str, **fields: Any) -> None:
        """Tell ``serve``, ``status``, the demo and chaos what the ingest is doing; never
        raises (a heartbeat must not take the ingest down)."""
        record = heartbeat_record(INGEST_STAGE, state, **fields)
        try:
            durable_write(
                self.path(heartbeat_name(INGEST_STAGE)), orjson.dumps(record, default=str)
            )
        except OSError as exc:
            log.warning("cannot write the heartbeat", path=str(self.state_dir), error=str(exc))
