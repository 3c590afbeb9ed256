"""Row typing: one table's change events → the typed rows of one Hudi upsert.

:func:`build_batch` collapses a table's (already filtered) events by the rules of
``lake/rules.py`` and types every value for the Spark type its column is stored as
(``lake/schema.py``); a value that cannot be stored exactly is refused with the reason
(:class:`~tidelake.lake.dead_letters.Rejected`) instead of being written wrong.
:class:`RowTyping` decides a table's record key and the source type of each column, in the
precedence of ``lake/definitions.py``. Nothing here writes: the table store does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import DataType, StringType, StructField, StructType

from tidelake.config import Config
from tidelake.errors import TableRefused
from tidelake.events import ChangeEvent, Op
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.dead_letters import Rejected
from tidelake.lake.definitions import (
    SourceCatalog,
    canonical_key,
    configured,
    is_complete,
    resolve_columns,
)
from tidelake.lake.rules import Change, KeyFn, collapse
from tidelake.lake.schema import LINEAGE_FIELDS, LINEAGE_NAMES, converter, spark_type, value_form

#: Source type assumed for a column an event carries without a type.
UNTYPED = "text"


def column_hints(events: Sequence[ChangeEvent], pk: Sequence[str]) -> dict[str, str]:
    """Column → the type the messages carry (hints), over every event, in first-seen order;
    a column no message types maps to ``""``."""
    columns: dict[str, str] = {}
    for event in events:
        for name, source_type in event.column_types.items():
            columns[name] = source_type
    for event in events:
        for image in (event.after, event.before, event.key):
            for name in image or {}:
                columns.setdefault(name, "")
        for name in event.unchanged:
            columns.setdefault(name, "")
    for name in pk:
        columns.setdefault(name, "")
    return {k: v for k, v in columns.items() if k not in LINEAGE_NAMES}


def _ms_to_utc(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


#: A stored Spark type → the source type that reads a value into it, for a column the table
#: stores but no definition types (a table written before definitions were kept).
_STORED_AS = {
    "tinyint": "tinyint",
    "smallint": "smallint",
    "int": "int",
    "bigint": "bigint",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "date": "date",
    "timestamp": "datetime",
    "string": "text",
    "binary": "varbinary",
}


@dataclass(frozen=True)
class TableTypes:
    """How the values of one table are typed: each column's source type (None: known
    nowhere, ``lake/definitions.py``), the Spark types the table stores already, and the zone
    of zone-less source timestamps."""

    source: Mapping[str, str | None]
    stored: Mapping[str, DataType] = field(default_factory=dict)
    timezone: str = "UTC"
    #: What the messages said of a column whose type is unknown (for the reason).
    hints: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_hints(cls, columns: Mapping[str, str], timezone: str = "UTC") -> TableTypes:
        """Types from the messages alone (an untyped column as text; an incomplete type,
        such as a bare ``decimal``, types nothing)."""
        source = {c: t or UNTYPED for c, t in columns.items()}
        return cls(
            {c: t if is_complete(t) else None for c, t in source.items()},
            {},
            timezone,
            {c: t for c, t in columns.items() if t},
        )

    def target(self, name: str) -> DataType | None:
        """The Spark type column ``name`` is stored as; None when no source types it."""
        held = self.stored.get(name)
        if held is not None:
            return held
        source_type = self.source.get(name)
        return spark_type(source_type) if source_type else None

    def converter(self, table_id: str, name: str, form: str) -> Callable[[Any], Any]:
        target = self.target(name)
        source_type = self.source.get(name) or self.hints.get(name)
        if target is None:
            said = self.hints.get(name)
            return _refuse(
                f"{table_id}: the type of column {name} is not known"
                + (f" (the message says only {said!r})" if said else "")
                + f": define it by CREATE TABLE in the stream, lake.tables.{table_id}.columns "
                "or lake.source_catalog"
            )
        if not source_type:
            source_type = _STORED_AS.get(target.simpleString(), target.simpleString())
        return converter(source_type, self.timezone, form, target)


def _refuse(reason: str) -> Callable[[Any], Any]:
    def refuse(value: Any) -> Any:
        raise ValueError(reason)

    return refuse


class _Rejected(Exception):  # noqa: N818 -- control flow inside build_batch, never escapes
    def __init__(self, event: ChangeEvent, reason: str) -> None:
        super().__init__(reason)
        self.event = event
        self.reason = reason


#: Reads the stored values of ``columns`` for typed ``keys``: key → column → typed value.
CurrentValues = Callable[
    [Sequence[tuple[Any, ...]], Sequence[str]], Mapping[tuple[Any, ...], Mapping[str, Any]]
]


@dataclass
class TableBatch:
    """The typed rows of one table's upsert, ready for Spark, and the events refused."""

    columns: dict[str, str]
    schema: StructType
    rows: list[tuple[Any, ...]]
    upserts: int
    deletes: int
    rejected: list[Rejected] = field(default_factory=list)


def build_batch(
    table_id: str,
    events: Sequence[ChangeEvent],
    pk: Sequence[str],
    source_timezone: str = "UTC",
    ingest_ts: dt.datetime | None = None,
    *,
    types: TableTypes | None = None,
    current: CurrentValues | None = None,
) -> TableBatch:
    """Collapse ``events`` (already filtered) and type them into Spark rows.

    An event holding a value its column cannot store exactly (``lake/schema.py`` raises
    ValueError) is left out and returned in ``rejected`` with the reason; the key's previous
    event in the batch, if any, then decides the key, as if the refused event never came.
    ``current`` reads the stored values of columns an update did not send.
    """
    hints = column_hints(events, pk)
    types = types or TableTypes.from_hints(hints, source_timezone)
    rejected: list[Rejected] = []
    live = list(events)
    while True:
        refused = _typed_batch(table_id, live, pk, types, ingest_ts, current)
        if isinstance(refused, TableBatch):
            refused.rejected = rejected
            return refused
        gone = {id(r.event) for r in refused}
        rejected.extend(refused)
        live = [e for e in live if id(e) not in gone]


def _typed_batch(
    table_id: str,
    events: Sequence[ChangeEvent],
    pk: Sequence[str],
    types: TableTypes,
    ingest_ts: dt.datetime | None,
    current: CurrentValues | None,
) -> TableBatch | list[Rejected]:
    """The batch, or the events refused in this pass (the caller drops them and retries)."""
    columns = column_hints(events, pk)
    names = [n for n in columns if types.target(n) is not None or n in pk]
    unknown = [n for n in columns if n not in names]
    index = {n: i for i, n in enumerate(names)}
    forms: dict[tuple[str, str], str] = {}
    by_form: dict[str, list[Callable[[Any], Any]]] = {}

    def form_of(event: ChangeEvent) -> str:
        ident = (event.source, event.encoding)
        form = forms.get(ident)
        if form is None:
            form = forms[ident] = value_form(*ident)
        return form

    def converters(form: str) -> list[Callable[[Any], Any]]:
        """One converter per column of ``names``, for values written in ``form``."""
        held = by_form.get(form)
        if held is None:
            held = by_form[form] = [types.converter(table_id, n, form) for n in names]
        return held

    def typed(name: str, value: Any, event: ChangeEvent) -> Any:
        if value is None:
            return None
        try:
            if name in unknown:
                return types.converter(table_id, name, form_of(event))(value)
            return converters(form_of(event))[index[name]](value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise _Rejected(
                event,
                f"{table_id}: value {str(value)[:200]!r} of column {name} cannot be stored "
                f"exactly: {exc}",
            ) from exc

    def key_fn(event: ChangeEvent) -> KeyFn:
        def key_of(image: Mapping[str, Any]) -> tuple[Any, ...]:
            missing = [c for c in pk if image.get(c) is None]
            if missing:
                raise _Rejected(
                    event, f"{table_id}: an event lacks primary-key column(s) {missing}"
                )
            return tuple(typed(c, image[c], event) for c in pk)

        return key_of

    refused: list[Rejected] = []
    row_events = [e for e in events if e.op.is_row_change]
    for event in row_events if unknown else ():
        try:
            for name in unknown:
                typed(name, (event.row or {}).get(name), event)  # a value: refused, with why
        except _Rejected as exc:
            refused.append(Rejected(exc.event, exc.reason))
    if refused:
        return refused
    try:
        changes = collapse(row_events, key_for=key_fn)
    except _Rejected:
        # A key that does not type: find every such event (the rare path).
        for event in row_events:
            try:
                collapse([event], key_fn(event))
            except _Rejected as exc:
                refused.append(Rejected(exc.event, exc.reason))
        return refused
    stored_values = _stored_values(table_id, changes, current)
    if isinstance(stored_values, list):
        return stored_values
    now = ingest_ts or dt.datetime.now(dt.UTC)
    rows = []
    deletes = 0
    for change in changes:
        e = change.event
        image = change.row
        try:
            if change.missing:
                held = stored_values.get(change.key, {})
                values = [
                    held[n] if n in change.missing else typed(n, image.get(n), e) for n in names
                ]
            else:
                fns = converters(form_of(e))
                values = [
                    None if (v := image.get(n)) is None else fn(v)
                    for n, fn in zip(names, fns, strict=True)
                ]
        except (ValueError, TypeError, ArithmeticError):
            try:  # again, column by column, for the reason naming the value
                for n in names:
                    typed(n, image.get(n), e)
            except _Rejected as exc:
                refused.append(Rejected(exc.event, exc.reason))
                continue
            raise  # converters are deterministic: never reached, never a silent skip
        except _Rejected as exc:
            refused.append(Rejected(exc.event, exc.reason))
            continue
        deletes += change.delete
        op = Op.DELETE.value if change.delete else e.op.value
        rows.append(
            (
                *values,
                op,
                e.position.encode(),
                _ms_to_utc(e.commit_ts_ms),
                now,
                e.seq,
                change.delete,
            )
        )
    if refused:
        return refused
    schema = StructType(
        [StructField(n, types.target(n) or StringType(), True) for n in names]
        + list(LINEAGE_FIELDS)
    )
    used = {n: types.source.get(n) or "" for n in names}
    return TableBatch(used, schema, rows, len(rows) - deletes, deletes)


def _stored_values(
    table_id: str, changes: Sequence[Change], current: CurrentValues | None
) -> dict[tuple[Any, ...], Mapping[str, Any]] | list[Rejected]:
    """The stored values of the columns updates did not send, per key."""
    wanting = [c for c in changes if c.missing and not c.delete]
    if not wanting:
        return {}
    columns = sorted({name for c in wanting for name in c.missing})
    found = dict(current([c.key for c in wanting], columns)) if current is not None else {}
    refused = [
        Rejected(
            c.event,
            f"{table_id}: column(s) {sorted(c.missing)} were not sent (unchanged at the source) "
            f"and the lake holds no row for key {c.key} to take them from",
        )
        for c in wanting
        if c.key not in found
    ]
    return refused or found


class RowTyping:
    """A lake's record keys and column types, from the messages, ``lake.tables``, the table's
    own checkpoint and the source catalog (``lake/definitions.py``)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.source_timezone = config.lake.source_timezone
        self.catalog = SourceCatalog(config)

    def primary_key(
        self, table_id: str, row_events: Sequence[ChangeEvent], stored_key: tuple[str, ...] | None
    ) -> tuple[tuple[str, ...], str | None]:
        """The table's record key in its one canonical order (``lake/definitions.py``), and
        a reason when no source names one (its events are then dead-lettered)."""
        given: tuple[str, ...] = next((e.pk for e in reversed(row_events) if e.pk), ())
        if not given:
            given = configured(self.config, table_id).primary_key or stored_key or ()
        if not given:
            found = self.catalog.get(table_id)
            given = found.primary_key if found else ()
        if not given:
            return (), (
                f"{table_id}: no primary key known — the message names none; set "
                f"lake.tables.{table_id}.primary_key or lake.source_catalog (the lake refuses "
                "keyless tables: Hudi needs a record key to upsert and delete exactly)"
            )
        key = canonical_key(given, stored_key)
        if stored_key and set(key) != set(stored_key):
            raise TableRefused(
                f"{table_id}: the primary key changed from {list(stored_key)} to {list(key)}; "
                "the table's record key cannot change in place"
            )
        return key, None

    def types(
        self,
        table_id: str,
        row_events: Sequence[ChangeEvent],
        pk: Sequence[str],
        stored: Mapping[str, DataType],
        previous: TableCheckpoint | None,
    ) -> tuple[TableTypes, dict[str, str]]:
        """How this batch's values are typed, and the source types it declares for the
        table (to keep in its checkpoint): configured > the table's own > catalog > a
        complete message type; a stored column keeps its stored Spark type."""
        hints = column_hints(row_events, pk)
        conf = configured(self.config, table_id).columns
        known = previous.columns if previous else {}

        def settled(name: str) -> bool:
            return name in conf or name in known or is_complete(hints.get(name) or "decimal")

        catalog: Mapping[str, str] = {}
        if self.catalog.enabled and not all(settled(n) for n in hints):
            found = self.catalog.get(table_id)
            catalog = found.columns if found else {}
        source = resolve_columns(
            list(hints), configured_types=conf, known=known, catalog=catalog, hints=hints
        )
        declared = {n: t for n, t in source.items() if t is not None}
        types = TableTypes(
            source,
            stored,
            self.source_timezone,
            {n: h for n, h in hints.items() if h},
        )
        return types, declared
