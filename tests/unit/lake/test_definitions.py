"""Where a lake table's column types and key come from (lake/definitions.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from tidelake.config import load_config
from tidelake.lake.definitions import (
    SourceCatalog,
    TableDefinition,
    canonical_key,
    is_complete,
    resolve_columns,
)


@pytest.mark.parametrize(
    ("source_type", "complete"),
    [("decimal", False), ("enum", False), ("set", False), ("bit", False),
     ("bigint unsigned", True), ("decimal(12,2)", True), ("enum('a')", True), ("varchar", True),
     ("datetime", True), ("numeric", True)],
)  # fmt: skip
def test_a_type_without_its_parameters_is_incomplete(source_type: str, complete: bool) -> None:
    """TiCDC's default mysqlType names decimal/enum/set/bit without parameters: they say
    nothing exact; PostgreSQL's bare ``numeric`` is a real, unconstrained type."""
    assert complete == is_complete(source_type)


def test_configured_beats_the_tables_own_beats_the_catalog_beats_a_complete_hint() -> None:
    """The precedence of the module docstring, column by column; an incomplete hint alone
    types nothing."""
    out = resolve_columns(
        ["a", "b", "c", "d", "e"],
        configured_types={"a": "decimal(5,1)"},
        known={"a": "decimal(9,2)", "b": "decimal(12,2)"},
        catalog={"b": "decimal(14,2)", "c": "enum('x','y')"},
        hints={"a": "decimal", "b": "decimal", "c": "enum", "d": "varchar", "e": "decimal"},
    )
    expected = {"a": "decimal(5,1)", "b": "decimal(12,2)", "c": "enum('x','y')", "d": "varchar",
                "e": None}  # fmt: skip
    assert expected == out


def test_the_stored_key_order_wins_over_the_producers_order() -> None:
    """pkNames in column order (TiCDC) against a table created with PRIMARY KEY(b, a)."""
    assert ("b", "a") == canonical_key(["a", "b"], ("b", "a"))
    assert ("a", "b") == canonical_key(["a", "b"], None)


def test_the_catalog_is_read_once_and_an_unknown_table_asked_again_later() -> None:
    """A known table is cached; a table the source lacks is asked again after retry_s (it
    may be created later); an unreachable catalog answers None without raising."""
    calls: list[Sequence[str]] = []
    now = [0.0]
    tables: dict[str, TableDefinition] = {"s.t": TableDefinition({"id": "int"}, ("id",))}

    def reader(dsn: str, password: str | None, ids: Sequence[str]) -> Mapping[str, TableDefinition]:
        calls.append(list(ids))
        if ids == ["s.down"]:
            raise OSError("connection refused")
        return {i: tables[i] for i in ids if i in tables}

    cfg = load_config(None, environ={"TIDELAKE_LAKE__SOURCE_CATALOG__DSN": "mysql://r@h/"})
    catalog = SourceCatalog(cfg, reader, retry_s=60, clock=lambda: now[0])
    assert ("id",) == catalog.get("s.t").primary_key  # type: ignore[union-attr]
    assert catalog.get("s.t") is not None
    assert catalog.get("s.new") is None
    now[0] = 30
    assert catalog.get("s.new") is None
    tables["s.new"] = TableDefinition({"id": "int"}, ("id",))
    now[0] = 61
    assert catalog.get("s.new") is not None
    assert catalog.get("s.down") is None
    assert [["s.t"], ["s.new"], ["s.new"], ["s.down"]] == calls
