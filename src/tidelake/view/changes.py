"""The changed rows of a lake table between two commits, as signed images (docs/views.md §3).

The lake's tables are written with Hudi's change log (``hoodie.table.cdc.enabled``, mode
``DATA_BEFORE_AFTER``, set at creation for every table a view reads: ``lake/hudi.py``). A CDC
query over a range of commits gives one record per changed key and commit: ``op`` (i, u, d)
and the ``before`` and ``after`` images as JSON. Each becomes two signed images: the
``before`` taken away (-1), the ``after`` added (+1). A view's new state is its old state plus
the signed images of the range — a sum over the range, so the order of commits inside it does
not matter.

The JSON is Hudi's, and not one encoding (checked on the pinned Hudi 1.1.1 with
``tests/integration/view/test_changes.py``):

* images written to the change log are Avro records as JSON: a DECIMAL is its unscaled
  two's-complement bytes as a list of signed bytes, a DATE days since 1970-01-01, a TIMESTAMP
  microseconds since the epoch (UTC);
* an insert Hudi infers from a new base file (no change log is written for a file that only
  inserts) carries the Spark row as JSON with the ``_hoodie_*`` fields: there a DECIMAL comes
  out as ``{"zero": false}``, its value lost. Those images are read again, typed, from the
  base file they name (``_hoodie_file_name``), which holds the row as that commit wrote it.

A range the change log cannot answer is not read: a table rewritten in it (a DDL, a
truncate: a ``replacecommit``), or one whose older file versions the cleaner may have removed
(more commits than ``clean_retain_commits`` since the view's checkpoint). The caller
recomputes the view instead (:class:`UnreadableRangeError`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import orjson

from tidelake.lake.hudi import RENAMED_KEY
from tidelake.lake.store import CompletedInstant

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: Hudi's ``_hoodie_*`` fields: present in an inferred base-file image only.
_FILE_FIELD = "_hoodie_file_name"
_PARTITION_FIELD = "_hoodie_partition_path"
_KEY_FIELD = "_hoodie_record_key"
_COMMIT_FIELD = "_hoodie_commit_time"


class UnreadableRangeError(Exception):
    """The change log cannot answer this range: recompute instead (the reason says why)."""


class UndecodableImageError(ValueError):
    """A value in a change-log image that tidelake cannot type exactly."""


@dataclass(frozen=True, slots=True)
class ChangeRange:
    """The commits of one table after ``after`` (exclusive) up to ``through`` (inclusive),
    both completion times; ``after`` None: from the table's first commit."""

    table: str
    path: str
    after: str | None
    through: str
    commits: int


def plan_range(
    table: str,
    path: str,
    instants: Sequence[CompletedInstant],
    after: str | None,
    *,
    retained_commits: int,
) -> ChangeRange | None:
    """The range to read from ``after`` to the table's latest commit; None when nothing new.

    Raises :class:`UnreadableRangeError` for a range holding a rewrite, one the cleaner may have
    thinned, or a checkpoint the timeline no longer shows (the table was dropped and made
    again, or its timeline archived past it)."""
    if not instants:
        raise UnreadableRangeError(f"{table} has no commits (dropped?)")
    newer = [i for i in instants if after is None or i.completed > after]
    if not newer:
        return None
    if after is not None and not any(i.completed == after for i in instants):
        raise UnreadableRangeError(f"{table}: commit {after} is no longer on its timeline")
    if after is None:
        raise UnreadableRangeError(f"{table}: the view has not read it yet")
    rewrites = [i for i in newer if i.action == "replacecommit"]
    if rewrites:
        raise UnreadableRangeError(
            f"{table} was rewritten at {rewrites[0].completed} (DDL or truncate)"
        )
    if len(newer) >= retained_commits:
        raise UnreadableRangeError(
            f"{table}: {len(newer)} commits behind, more than the cleaner keeps file versions "
            f"for ({retained_commits})"
        )
    return ChangeRange(table, path, after, newer[-1].completed, len(newer))


def renames_after(instants: Sequence[CompletedInstant], after: str | None) -> list[tuple[str, str]]:
    """The column renames the rewrites after ``after`` applied, in order (``RENAMED_KEY``)."""
    if after is None:
        return []
    out: list[tuple[str, str]] = []
    for instant in instants:
        text = instant.metadata.get(RENAMED_KEY)
        if instant.completed > after and text:
            out += [(str(old), str(new)) for old, new in orjson.loads(text)]
    return out


def decode_value(value: Any, data_type: DataType) -> Any:
    """One JSON value of a change-log image as the Python value Spark stores for ``data_type``.

    Raises :class:`UndecodableImageError` for an encoding this does not know: a value is typed
    exactly or the step stops with the reason, never guessed."""
    from pyspark.sql import types as T  # noqa: N812 (PySpark's own convention)

    if value is None:
        return None
    if isinstance(data_type, T.DecimalType):
        if isinstance(value, list) and all(isinstance(b, int) for b in value):
            unscaled = int.from_bytes(bytes(b & 0xFF for b in value), "big", signed=True)
            return Decimal(unscaled).scaleb(-data_type.scale)
        if isinstance(value, str | int):
            return Decimal(str(value))
        raise UndecodableImageError(f"a DECIMAL encoded as {str(value)[:60]}")
    if isinstance(data_type, T.DateType):
        if isinstance(value, int):
            return _EPOCH_DATE + dt.timedelta(days=value)
        if isinstance(value, str):
            return dt.date.fromisoformat(value)
        raise UndecodableImageError(f"a DATE encoded as {str(value)[:60]}")
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        if not isinstance(value, int):
            raise UndecodableImageError(f"a TIMESTAMP encoded as {str(value)[:60]}")
        moment = _EPOCH + dt.timedelta(microseconds=value)
        return moment.replace(tzinfo=None) if isinstance(data_type, T.TimestampNTZType) else moment
    if isinstance(data_type, T.IntegralType):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UndecodableImageError(f"an integer encoded as {str(value)[:60]}")
        return value
    if isinstance(data_type, T.FractionalType):  # FLOAT/DOUBLE (DECIMAL is handled above)
        if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UndecodableImageError(f"a floating-point value encoded as {str(value)[:60]}")
        return float(value)
    if isinstance(data_type, T.BooleanType | T.StringType):
        return value
    raise UndecodableImageError(f"a column of type {data_type.simpleString()} in a view")


@dataclass(slots=True)
class SignedImages:
    """The range's images of ``columns``: each row ``(*values, sign)``."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    #: Change records read (one per changed key and commit).
    records: int


def read_changes(
    spark: SparkSession, span: ChangeRange, schema: StructType, columns: Sequence[str]
) -> SignedImages:
    """The signed images of ``columns`` over ``span`` (see the module docstring)."""
    types = {f.name: f.dataType for f in schema.fields}
    missing = [c for c in columns if c not in types]
    if missing:
        raise UnreadableRangeError(f"{span.table} has no column {', '.join(missing)} now")
    reader = (
        spark.read.format("hudi")
        .option("hoodie.datasource.query.type", "incremental")
        .option("hoodie.datasource.query.incremental.format", "cdc")
        .option("hoodie.datasource.read.begin.instanttime", span.after or "0")
        .option("hoodie.datasource.read.end.instanttime", span.through)
    )
    records = reader.load(span.path).select("op", "before", "after").collect()
    rows: list[tuple[Any, ...]] = []
    # Inferred base-file inserts, read again from their files: file → partition, keys.
    refetch: dict[str, tuple[str, set[str]]] = {}
    for record in records:
        for text, sign in ((record["before"], -1), (record["after"], 1)):
            if text is None or text == "null":
                continue
            image = orjson.loads(text)
            if _FILE_FIELD in image and _KEY_FIELD in image:
                held = refetch.setdefault(
                    str(image[_FILE_FIELD]), (str(image.get(_PARTITION_FIELD) or ""), set())
                )
                held[1].add(str(image[_KEY_FIELD]))
                continue
            try:
                rows.append((*(decode_value(image.get(c), types[c]) for c in columns), sign))
            except UndecodableImageError as exc:
                raise UndecodableImageError(f"{span.table}: {exc}") from exc
    rows += _file_images(spark, span, refetch, columns)
    return SignedImages(tuple(columns), rows, len(records))


def _file_images(
    spark: SparkSession,
    span: ChangeRange,
    files: Mapping[str, tuple[str, set[str]]],
    columns: Sequence[str],
) -> list[tuple[Any, ...]]:
    """The images of inserts Hudi inferred from new base files, read from those files."""
    from pyspark.sql import functions as F  # noqa: N812

    by_file: dict[str, set[str]] = defaultdict(set)
    for name, (partition, keys) in files.items():
        directory = f"{span.path.rstrip('/')}/{partition}" if partition else span.path.rstrip("/")
        by_file[f"{directory}/{name}"] |= keys
    out: list[tuple[Any, ...]] = []
    for file, keys in by_file.items():
        picked = (
            spark.read.parquet(file)
            .where(F.col(_KEY_FIELD).isin(sorted(keys)))
            .select(*columns)
            .collect()
        )
        if len(picked) != len(keys):
            raise UnreadableRangeError(
                f"{span.table}: {file} holds {len(picked)} of the {len(keys)} rows its change "
                "log names (cleaned?)"
            )
        out += [(*(row[c] for c in columns), 1) for row in picked]
    return out
