"""What the lake knows of each source table: its key and the source type of each column.

Values are typed by the table, not by the message (issue: "types come from the table"). A
column's source type is taken from the first of these that knows it:

1. ``lake.tables.<db.table>.columns`` in the config (the operator said so);
2. the table's own definition, kept in its checkpoint: the types of its ``CREATE TABLE`` /
   ``ALTER TABLE`` seen in the stream and of every column it stored since
   (``TableCheckpoint.columns``);
3. the source catalog (``lake.source_catalog.dsn``: ``information_schema`` / ``pg_catalog``);
4. the type the message carries, when it is complete (:func:`is_complete`).

TiCDC's default canal-json names types without parameters (``decimal``, ``enum``, ``set``,
``bit``: ``GetMySQLType`` in pingcap/tiflow ``pkg/sink/codec/utils/mysql_types.go`` returns
``types.TypeToStr`` unless ``content-compatible``): such a hint fills no gap, since its
precision, scale, labels or width are unknown. A column whose type is known nowhere else has
no exact type, and a value of it is dead-lettered with that reason (``lake/ingest.py``).

The key: the producer's key list when it sends one (canal-json ``pkNames``, a Debezium message
key), else the config's ``primary_key``, the key of the table the lake already holds, or the
catalog's. Whatever order a producer lists the key in, the table keeps one record-key order:
the one it was created with (``hoodie.table.recordkey.fields``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from tidelake.config import Config

log = structlog.get_logger(__name__)

#: Type names that say nothing exact without their parameters.
_NEEDS_PARAMETERS = frozenset({"decimal", "dec", "fixed", "enum", "set", "bit"})
_NAME_RE = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9 _]*?)\s*(\(|$|\s+unsigned|\s+zerofill)")


def type_name(source_type: str) -> str:
    """``"decimal(12,2) unsigned"`` → ``"decimal"``."""
    match = _NAME_RE.match(source_type)
    return match.group(1).lower() if match else source_type.strip().lower()


def is_complete(source_type: str) -> bool:
    """False for a type whose name alone does not say how to store a value exactly
    (``decimal`` without precision and scale, ``enum``/``set`` without labels, ``bit``
    without width)."""
    return not (type_name(source_type) in _NEEDS_PARAMETERS and "(" not in source_type)


@dataclass(frozen=True, slots=True)
class TableDefinition:
    """A source table as a catalog declares it: column source types in order, key in order."""

    columns: dict[str, str] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()


#: ``dsn, password, table ids`` → definitions (``capture/catalog.py`` ``read_catalog``).
CatalogReader = Callable[[str, str | None, Sequence[str]], Mapping[str, TableDefinition]]


class SourceCatalog:
    """Table definitions read from the source database, once per table (then cached).

    A table unknown to the catalog is asked again after ``retry_s`` at the earliest, so a
    table created after start is found without hammering the source for every batch.
    """

    def __init__(
        self,
        config: Config,
        reader: CatalogReader | None = None,
        *,
        retry_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dsn = config.lake.source_catalog.dsn
        self._password = config.lake.source_catalog.resolved_password()
        self._reader = reader
        self._retry_s = retry_s
        self._clock = clock
        #: table → (definition or None, when it was read)
        self._known: dict[str, tuple[TableDefinition | None, float]] = {}

    @property
    def enabled(self) -> bool:
        return self._dsn is not None

    def get(self, table_id: str) -> TableDefinition | None:
        if self._dsn is None:
            return None
        held = self._known.get(table_id)
        now = self._clock()
        if held is None or (held[0] is None and now - held[1] >= self._retry_s):
            held = self._known[table_id] = (self._read(table_id), now)
        return held[0]

    def refresh(self, table_id: str) -> None:
        """Forget what was read (after DDL: the source's definition changed)."""
        self._known.pop(table_id, None)

    def _read(self, table_id: str) -> TableDefinition | None:
        assert self._dsn is not None
        reader = self._reader
        if reader is None:
            from tidelake.capture.catalog import read_catalog

            reader = read_catalog  # type: ignore[assignment]
            assert reader is not None
        try:
            found = reader(self._dsn, self._password, [table_id])
        except Exception as exc:  # an unreachable catalog must not stop the lake
            log.warning("source catalog not read", table=table_id, error=str(exc)[:300])
            return None
        definition = found.get(table_id)
        if definition is None:
            return None
        return TableDefinition(dict(definition.columns), tuple(definition.primary_key))


def configured(config: Config, table_id: str) -> TableDefinition:
    """``lake.tables.<table_id>``, empty when not configured."""
    spec = config.lake.tables.get(table_id)
    if spec is None:
        return TableDefinition()
    return TableDefinition(dict(spec.columns), tuple(spec.primary_key))


def resolve_columns(
    names: Sequence[str],
    *,
    configured_types: Mapping[str, str],
    known: Mapping[str, str],
    catalog: Mapping[str, str],
    hints: Mapping[str, str],
) -> dict[str, str | None]:
    """Each column's source type by the precedence of the module docstring; None when no
    source gives an exact one (only an incomplete hint, or nothing)."""
    out: dict[str, str | None] = {}
    for name in names:
        chosen: str | None = None
        for source in (configured_types, known, catalog):
            if name in source:
                chosen = source[name]
                break
        if chosen is None:
            hint = hints.get(name)
            if hint is not None and is_complete(hint):
                chosen = hint
        out[name] = chosen
    return out


def canonical_key(given: Sequence[str], stored: Sequence[str] | None) -> tuple[str, ...]:
    """The record-key order of a table: the stored one when the table exists and the given
    key names the same columns (in any order), else the given order."""
    if stored and set(stored) == set(given):
        return tuple(stored)
    return tuple(given)
