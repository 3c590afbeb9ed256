"""Row-by-row comparison of a lake table with the rows it must hold.

Expected rows are canal-json text (what the source sent); lake rows are typed values read
back from Hudi. Both sides are brought to one canonical text independently of the ingest's
own type conversion, so a conversion bug shows up as a mismatch instead of cancelling out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

#: How many differing keys a comparison keeps to show.
MAX_SAMPLES = 10


def canonical(value: Any) -> str | None:
    """One text form per value: what canal-json would have carried for it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        return f"{text}.{value.microsecond:06d}".rstrip("0") if value.microsecond else text
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    return str(value)


@dataclass
class Comparison:
    """The outcome for one table: counts and the first differing keys."""

    table: str
    rows_expected: int = 0
    rows_in_lake: int = 0
    missing: int = 0
    unexpected: int = 0
    different: int = 0
    duplicate_keys: int = 0
    #: Columns whose presence or type differs from the expected schema (compare_schema).
    schema: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)

    @property
    def mismatches(self) -> int:
        return (
            self.missing + self.unexpected + self.different + self.duplicate_keys + len(self.schema)
        )

    def _note(self, text: str) -> None:
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(text)


def compare_rows(
    table: str,
    pk: Sequence[str],
    expected: Iterable[Mapping[str, Any]],
    actual: Iterable[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
) -> Comparison:
    """Compare by primary key; ``columns`` (default: the expected rows' columns) are checked."""
    result = Comparison(table)
    want: dict[tuple[str | None, ...], dict[str, str | None]] = {}
    for row in expected:
        cols = columns or list(row)
        want[tuple(canonical(row[c]) for c in pk)] = {c: canonical(row.get(c)) for c in cols}
    result.rows_expected = len(want)
    seen: set[tuple[str | None, ...]] = set()
    for row in actual:
        result.rows_in_lake += 1
        key = tuple(canonical(row.get(c)) for c in pk)
        if key in seen:
            result.duplicate_keys += 1
            result._note(f"duplicate key {key}")
            continue
        seen.add(key)
        expect = want.get(key)
        if expect is None:
            result.unexpected += 1
            result._note(f"unexpected key {key}")
            continue
        got = {c: canonical(row.get(c)) for c in expect}
        if got != expect:
            result.different += 1
            diff = {c: (expect[c], got[c]) for c in expect if expect[c] != got[c]}
            result._note(f"key {key}: (expected, lake) {diff}")
    missing = [k for k in want if k not in seen]
    result.missing = len(missing)
    for key in missing[:MAX_SAMPLES]:
        result._note(f"missing key {key}")
    return result


def compare_schema(expected: Mapping[str, str], actual: Any) -> list[str]:
    """Differences between the source columns (name → source SQL type) and a lake table's
    Arrow schema (``pyarrow.Schema`` as hudi-rs reads it; lineage ``_tl_*`` and ``_hoodie_*``
    columns ignored). Types are compared through the documented mapping (``lake/schema.py``);
    timestamps by kind (the unit and zone are the reader's)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    from tidelake.lake.schema import spark_type

    have = {f.name: f.type for f in actual if not f.name.startswith(("_tl_", "_hoodie_"))}
    out: list[str] = []
    for name, source_type in expected.items():
        if name not in have:
            out.append(f"column {name} ({source_type}) missing")
            continue
        want = to_arrow_type(spark_type(source_type))
        got = have[name]
        same = (pa.types.is_timestamp(want) and pa.types.is_timestamp(got)) or want == got
        if not same:
            out.append(f"column {name}: expected {want} ({source_type}), lake has {got}")
    out.extend(f"unexpected column {name}" for name in have if name not in expected)
    return out
