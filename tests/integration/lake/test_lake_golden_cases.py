"""Every golden case of tests/cases/ through decode → staged manifests → ingest → lake."""

from __future__ import annotations

from typing import Any

import pytest
from lakekit import Lake

from golden import Case, load_cases, sort_key
from tidelake.events import ChangeEvent, Op
from tidelake.formats import decode
from tidelake.lake.schema import convert_value
from tidelake.lake.verify import read_table

CASES = load_cases()


def _batches(case: Case) -> list[list[ChangeEvent]]:
    """Decoded events cut as the stager cuts them: halfway, and after every DDL (a barrier)."""
    batches: list[list[ChangeEvent]] = [[]]
    half = len(case.messages) // 2
    for seq, (message, key) in enumerate(zip(case.messages, case.keys, strict=True), start=1):
        for event in decode(message, seq=seq, key_json=key).events:
            batches[-1].append(event)
            if event.op is Op.DDL:
                batches.append([])
        if seq == half and batches[-1]:
            batches.append([])
    return [b for b in batches if b]


def _typed(
    rows: list[dict[str, Any]], types: dict[str, str], columns: list[str]
) -> list[dict[str, Any]]:
    return [{c: convert_value(r.get(c), types.get(c, "text")) for c in columns} for r in rows]


def _by_key(rows: list[dict[str, Any]], pk: list[str]) -> list[dict[str, Any]]:
    return sorted(
        rows, key=lambda r: sort_key(tuple(None if r[c] is None else str(r[c]) for c in pk))
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_case_ends_as_expected_in_the_lake(case: Case, lake: Lake) -> None:
    """The lake (read by hudi-rs) holds exactly the case's expected rows, typed."""
    types: dict[str, dict[str, str]] = {}
    for batch in _batches(case):
        for event in batch:
            types.setdefault(event.table_id, {}).update(event.column_types)
        lake.stage(batch)
    lake.ingest()
    for table_id, spec in sorted(case.expected.items()):
        pk = spec["pk"]
        columns = list(spec["rows"][0]) if spec["rows"] else list(pk)
        table_types = types.get(table_id, {})
        expected = _typed(spec["rows"], table_types, columns)
        lake_rows = read_table(lake.config.lake_root, table_id).to_pylist()
        actual = [{c: r.get(c) for c in columns} for r in lake_rows]
        assert _by_key(expected, pk) == _by_key(actual, pk), table_id
