"""Which events the stager admits by their names (docs/names.md): the one check of
database, table and column names, and of the table limits, before anything is staged.

A name no source could have sent (NUL, too long, not Unicode; tidelake/names.py), a column
the lake reserves or that collides with another but for case, a table the config denies, or
a new table past ``stage.tables.max_tables`` / ``max_tables_per_database``: the message is
dead-lettered on its first delivery with the reason. Nothing here raises for bad input, so a
hostile name never crash-loops the stager into a ``max_deliver`` dead letter.

The tables admitted so far live in the staging storage (``_tidelake/tables.json``), written
durably before the message that brought a new table is staged (so before its ack): a
restarted stager counts them again, and a burst of new names can admit no more than the
limits however often the stager restarts. Admission is for good: a table once admitted stays
admitted (its later events must not be refused), even when a limit is lowered.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

import orjson
import structlog

from tidelake.config import TablesConfig
from tidelake.errors import StorageError
from tidelake.events import ChangeEvent
from tidelake.names import REASON, columns_problem, lake_segment, name_problem, table_id
from tidelake.runtime.storage import Storage

log = structlog.get_logger(__name__)

#: Where the admitted tables are kept, in the staging storage.
REGISTRY_PATH = "_tidelake/tables.json"
REGISTRY_VERSION = 1
#: Reason prefixes of refusals by the table rules (names use ``names.REASON``).
DENIED = "table_denied"
LIMIT = "table_limit"
#: Name shapes remembered as acceptable before the memory starts over.
_MAX_SHAPES = 10_000


def _matches(patterns: Sequence[str], text: str) -> bool:
    return any(fnmatch.fnmatchcase(text, p) for p in patterns)


class TableAdmission:
    """The stager's gate on names: :meth:`refusal` says why an event may not be staged."""

    def __init__(self, config: TablesConfig, storage: Storage | None) -> None:
        self.config = config
        self.storage = storage
        self._admitted: set[tuple[str, str]] = set()
        self._per_database: dict[str, int] = {}
        self._loaded = False
        #: Name shapes already found acceptable (source, database, table, op, column names):
        #: the rules run once per shape, not once per event (the stager's hot path).
        self._accepted: set[tuple[object, ...]] = set()

    # -- the registry

    def _load(self) -> None:
        if self._loaded:
            return
        if self.storage is not None and self.storage.exists(REGISTRY_PATH):
            data = orjson.loads(self.storage.get(REGISTRY_PATH))
            if data.get("version") != REGISTRY_VERSION:
                raise StorageError(f"{REGISTRY_PATH}: unsupported version {data.get('version')!r}")
            for database, table in data["tables"]:
                self._remember(database, table)
        self._loaded = True

    def _remember(self, database: str, table: str) -> None:
        if (database, table) not in self._admitted:
            self._admitted.add((database, table))
            self._per_database[database] = self._per_database.get(database, 0) + 1

    def _save(self) -> None:
        if self.storage is None:
            return
        body = {"version": REGISTRY_VERSION, "tables": sorted(self._admitted)}
        self.storage.put(REGISTRY_PATH, orjson.dumps(body))

    @property
    def admitted(self) -> int:
        """How many tables are admitted."""
        self._load()
        return len(self._admitted)

    # -- the rules

    def name_refusal(self, event: ChangeEvent) -> str | None:
        """Why the names of ``event`` are not acceptable (no table limits), or None."""
        problem = name_problem(event.database, kind="database", source=event.source)
        if problem is not None:
            return problem
        if event.table or event.op.is_row_change:
            problem = name_problem(event.table, kind="table", source=event.source)
            if problem is not None:
                return problem
        for kind, name in (("database", event.database), ("table", event.table)):
            try:
                if name:
                    lake_segment(name)
            except ValueError as exc:  # a legal name no path can hold (64 four-byte letters)
                return f"{REASON}: {kind} name {name[:80]!r}: {exc}"
        if not event.op.is_row_change:
            return None
        columns: dict[str, None] = dict.fromkeys(event.pk)
        for image in (event.key, event.before, event.after, event.column_types):
            if image:
                columns.update(dict.fromkeys(image))
        problem = columns_problem(list(columns), source=event.source)
        if problem is None:
            return None
        # The table is named in the reason: a dead letter says which table it belongs to.
        detail = problem.removeprefix(f"{REASON}: ")
        return f"{REASON}: table {table_id(event.database, event.table)}: {detail}"

    def tables_refusal(self, tables: Sequence[tuple[str, str]]) -> str | None:
        """Why these ``(database, table)`` may not be staged by the allow/deny patterns and
        the limits, or None: then the new ones among them are admitted, durably, together."""
        self._load()
        cfg = self.config
        new: list[tuple[str, str]] = []
        per_database = dict(self._per_database)
        for database, table in dict.fromkeys(tables):
            if (database, table) in self._admitted:
                continue
            tid = table_id(database, table)
            if _matches(cfg.deny, tid) or (cfg.allow and not _matches(cfg.allow, tid)):
                return f"{DENIED}: table {tid} is not allowed by stage.tables.allow/deny"
            if len(self._admitted) + len(new) >= cfg.max_tables:
                return f"{LIMIT}: table {tid} would pass stage.tables.max_tables = {cfg.max_tables}"
            if per_database.get(database, 0) >= cfg.max_tables_per_database:
                return (
                    f"{LIMIT}: table {tid} would pass stage.tables.max_tables_per_database = "
                    f"{cfg.max_tables_per_database} in database {database!r}"
                )
            per_database[database] = per_database.get(database, 0) + 1
            new.append((database, table))
        if not new:
            return None
        before = (set(self._admitted), dict(self._per_database))
        for database, table in new:
            self._remember(database, table)
        try:
            self._save()  # durable before the events are staged, so before their ack
        except Exception:
            self._admitted, self._per_database = before
            raise
        log.info(
            "tables admitted", tables=[table_id(*t) for t in new], admitted=len(self._admitted)
        )
        return None

    def refusal(self, events: Sequence[ChangeEvent]) -> str | None:
        """Why the message carrying ``events`` must be dead-lettered, or None.

        Every event of the message is checked before any table is admitted, so a refused
        message admits nothing. Database-level DDL (no table) is not counted.
        """
        for event in events:
            shape = (
                event.source,
                event.database,
                event.table,
                event.op,
                event.pk,
                tuple(event.key or ()),
                tuple(event.before or ()),
                tuple(event.after or ()),
                tuple(event.column_types),
            )
            if shape in self._accepted:
                continue
            problem = self.name_refusal(event)
            if problem is not None:
                return problem
            if len(self._accepted) >= _MAX_SHAPES:
                self._accepted.clear()
            self._accepted.add(shape)
        if all((e.database, e.table) in self._admitted or not e.table for e in events):
            return None
        return self.tables_refusal([(e.database, e.table) for e in events if e.table])


def is_name_refusal(reason: str) -> bool:
    """True for a reason this module gave."""
    return reason.startswith((REASON, DENIED, LIMIT))
