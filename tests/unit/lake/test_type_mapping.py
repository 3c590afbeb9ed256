"""docs/type-mapping.md: one test per row, from the same data the document is made of."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.lake.schema import convert_value, spark_type
from tidelake.lake.type_mapping import TYPE_MAPPING, TypeRow, type_mapping_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "type-mapping.md"


@pytest.mark.parametrize(
    "row",
    TYPE_MAPPING,
    ids=[f"{r.source.split()[0]}-{r.source_type}-{r.example[:12]}" for r in TYPE_MAPPING],
)
def test_each_documented_type_maps_and_stores_its_example(row: TypeRow) -> None:
    """The row's Spark type is what lake/schema.py gives the source type, and its example
    wire value is stored as the documented value (type and all)."""
    assert row.spark == spark_type(row.source_type).simpleString()
    stored = convert_value(row.example, row.source_type, "UTC")
    assert row.stored == stored
    assert type(row.stored) is type(stored)


def test_type_mapping_doc_holds_the_generated_table() -> None:
    """Regenerate with type_mapping_markdown() when a row changes."""
    assert type_mapping_markdown() in DOC.read_text()
