"""The golden event files of ``tests/cases/``: one directory per behaviour, replayable anywhere.

Each case directory holds:

* ``events.jsonl``: one wire message per line, the exact bytes a producer publishes (the
  newline is not part of the message);
* ``keys.jsonl`` (optional, Debezium cases): one message key per line, aligned with
  ``events.jsonl`` (the Kafka key / ``Tidelake-Key`` header); ``null`` means no key;
* ``expected.json``: the final rows per table the lake must hold after the whole pipeline,
  ``{"db.table": {"pk": [...], "rows": [{column: canal-text value or null}, ...]}}``; two
  optional keys beside the tables: ``"dead_letters": [{"table": ..., "reason_contains": ...}]``
  (events the lake must refuse, with their reasons) and ``"lake_only": true`` (the truth needs
  the table's definition — ENUM labels, DDL defaults — so the decode-only fold cannot reach it);
* ``config.json`` (optional): tidelake config overrides the case runs with (``lake.tables``,
  ``lake.source_timezone`` ...);
* ``subjects.jsonl`` (optional): the NATS subject of each message (JSON string), aligned with
  ``events.jsonl``; default ``<stream prefix><case name>``;
* ``README.md``: the behaviour the case proves, and the primary source it rests on.

Unit, stager, lake and end-to-end tests all replay :func:`load_cases`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CASES_DIR = Path(__file__).parent / "cases"


@dataclass(frozen=True)
class Case:
    """One behaviour: the messages to publish, in order, and the lake state they must produce."""

    name: str
    messages: list[bytes]
    expected: dict[str, Any]
    #: The message key of each message (aligned with ``messages``), None when it has none.
    keys: list[bytes | None]
    description: str
    path: Path
    #: Config overrides (``config.json``), nested like the YAML.
    config: dict[str, Any] = field(default_factory=dict)
    #: The subject of each message (``subjects.jsonl``), None for the default.
    subjects: list[str | None] = field(default_factory=list)
    #: Events the lake must dead-letter: ``{"table": ..., "reason_contains": ...}``.
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    #: The expected rows need the table's definition (the naive fold does not apply).
    lake_only: bool = False
    #: Databases that must exist in the catalog afterwards (``CREATE DATABASE``).
    databases: list[str] = field(default_factory=list)
    #: Tables that must not exist in the lake afterwards (dropped, renamed away).
    dropped_tables: list[str] = field(default_factory=list)

    def tables(self) -> list[str]:
        """The ``db.table`` names the case ends with."""
        return sorted(self.expected)


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line]


def load_case(path: Path) -> Case:
    """Read one case directory."""
    messages = _lines(path / "events.jsonl")
    keys_file = path / "keys.jsonl"
    keys: list[bytes | None] = [None] * len(messages)
    if keys_file.exists():
        keys = [None if line == b"null" else line for line in _lines(keys_file)]
        if len(keys) != len(messages):
            raise ValueError(
                f"{path.name}: keys.jsonl has {len(keys)} lines, events {len(messages)}"
            )
    expected = orjson.loads((path / "expected.json").read_bytes())
    dead_letters = expected.pop("dead_letters", None) or expected.pop("_dead_letters", None) or []
    lake_only = bool(expected.pop("lake_only", False) or expected.pop("_lake_only", False))
    databases = list(expected.pop("databases", None) or [])
    dropped_tables = list(expected.pop("dropped_tables", None) or [])
    subjects: list[str | None] = [None] * len(messages)
    if (path / "subjects.jsonl").exists():
        subjects = [orjson.loads(line) for line in _lines(path / "subjects.jsonl")]
    config_file = path / "config.json"
    return Case(
        name=path.name,
        messages=messages,
        expected=expected,
        keys=keys,
        description=(path / "README.md").read_text().strip(),
        path=path,
        config=orjson.loads(config_file.read_bytes()) if config_file.exists() else {},
        subjects=subjects,
        dead_letters=list(dead_letters),
        lake_only=lake_only or bool(dead_letters) or config_file.exists(),
        databases=databases,
        dropped_tables=dropped_tables,
    )


def load_cases() -> list[Case]:
    """Every case of ``tests/cases/``, sorted by name."""
    return [load_case(p) for p in sorted(CASES_DIR.iterdir()) if (p / "events.jsonl").exists()]


def as_text(value: Any) -> str | None:
    """A value in canal-json's text form: how ``expected.json`` writes every value."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


def fold_events(events: list[Any]) -> dict[str, dict[str, Any]]:
    """The naive reference: per table and key, the last event by position; same shape as
    ``expected.json``. Deletes win over older events; rows lack no column any event named.

    ``events`` are :class:`tidelake.events.ChangeEvent`; on equal positions (a redelivered
    copy) the later event wins.
    """
    last: dict[str, dict[tuple[Any, ...], Any]] = {}
    pks: dict[str, list[str]] = {}
    columns: dict[str, list[str]] = {}
    for event in events:
        table = columns.setdefault(event.table_id, [])
        for name in [*event.column_types, *(event.row or {})]:
            if name not in table:
                table.append(name)
        if not event.op.is_row_change:
            continue
        pks[event.table_id] = list(event.pk)
        key = tuple(as_text(event.key[c]) for c in event.pk)
        keyed = last.setdefault(event.table_id, {})
        held = keyed.get(key)
        if held is None or held.position <= event.position:
            keyed[key] = event
    out: dict[str, dict[str, Any]] = {}
    for table_id, keyed in last.items():
        rows = [
            {c: as_text(e.row.get(c)) for c in columns[table_id]}
            for _, e in sorted(keyed.items(), key=lambda kv: sort_key(kv[0]))
            if e.op.value != "delete"
        ]
        out[table_id] = {"pk": pks[table_id], "rows": rows}
    return out


def sort_key(key: tuple[str | None, ...]) -> tuple[tuple[int, str], ...]:
    """Rows in key order: numbers numerically, text as text."""
    return tuple(
        (0, f"{int(k):040d}") if k and k.lstrip("-").isdigit() else (1, k or "") for k in key
    )


def sorted_expected(expected: dict[str, Any]) -> dict[str, Any]:
    """``expected.json`` with each table's rows in :func:`sort_key` order."""
    return {
        table: {
            "pk": spec["pk"],
            "rows": sorted(spec["rows"], key=lambda r: sort_key(tuple(r[c] for c in spec["pk"]))),
        }
        for table, spec in expected.items()
    }
