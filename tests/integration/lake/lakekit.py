"""Helpers of the lake integration tests: stage events as the stager would, ingest, read back.

Manifests and table files are written with ``stage/manifest.py`` and ``LocalStorage``
directly, so these tests do not depend on the stager.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from tidelake.config import Config, load_config
from tidelake.events import ChangeEvent, Op, Position
from tidelake.lake.checkpoint import TableCheckpoint
from tidelake.lake.hudi import split_table_id, table_path
from tidelake.lake.ingest import Ingestor, IngestStats
from tidelake.lake.ledger import Ledger
from tidelake.lake.store import read_checkpoint
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import (
    RETIRED_DIR,
    Manifest,
    TableFile,
    table_file_path,
    write_manifest,
)
from tidelake.verify.lake import read_table

_batches = itertools.count(1)

#: Column types of the default test table ``shop.orders``.
ORDER_TYPES = {"id": "bigint", "status": "varchar(16)", "amount": "decimal(10,2)"}


def lake_env(home: Path, **env: str) -> dict[str, str]:
    """The ``TIDELAKE_*`` environment of a test lake under ``home``; Spark small for 2 cores."""
    return {
        "TIDELAKE_HOME": str(home),
        "TIDELAKE_LAKE__SPARK__MASTER": "local[2]",
        "TIDELAKE_LAKE__SPARK__DRIVER_MEMORY": "1g",
        "TIDELAKE_LAKE__SPARK__SHUFFLE_PARTITIONS": "2",
        **env,
    }


def lake_config(home: Path, **env: str) -> Config:
    """A config whose every root is under ``home`` (see :func:`lake_env`)."""
    return load_config(None, environ=lake_env(home, **env))


def event(
    op: Op | str,
    key: int | dict[str, Any],
    position: int | tuple[int, ...],
    seq: int,
    *,
    table: str = "shop.orders",
    values: dict[str, Any] | None = None,
    types: dict[str, str] | None = None,
    pk: Sequence[str] = ("id",),
    before: dict[str, Any] | None = None,
    commit_ts_ms: int | None = None,
) -> ChangeEvent:
    """One row event; ``key`` is the id (or the key dict), values are canal text."""
    op = Op(op)
    database, name = split_table_id(table)
    key_dict = {"id": str(key)} if isinstance(key, int) else dict(key)
    row = {**key_dict, **(values or {})}
    parts = (position, 0) if isinstance(position, int) else position
    return ChangeEvent(
        source="test",
        database=database,
        table=name,
        op=op,
        position=Position(parts),
        pk=tuple(pk),
        key=key_dict if pk else None,
        before=row if op is Op.DELETE else before,
        after=None if op is Op.DELETE else row,
        commit_ts_ms=commit_ts_ms if commit_ts_ms is not None else 1_714_929_186_000 + parts[0],
        column_types=dict(types if types is not None else ORDER_TYPES),
        seq=seq,
    )


def ddl_event(table: str, ddl: str, ddl_type: str, position: int, seq: int) -> ChangeEvent:
    """One DDL event of ``table``."""
    database, name = split_table_id(table)
    return ChangeEvent(
        source="test",
        database=database,
        table=name,
        op=Op.DDL,
        position=Position((position, 0)),
        ddl=ddl,
        ddl_type=ddl_type,
        seq=seq,
    )


@dataclass
class Lake:
    """One test's staging root and lake, ingested through the shared Spark session."""

    config: Config
    spark: SparkSession
    #: The environment that makes ``config`` (for ``tidelake`` subprocesses).
    env: dict[str, str] = field(default_factory=dict)
    storage: LocalStorage = field(init=False)

    def __post_init__(self) -> None:
        self.storage = LocalStorage(self.config.stage_root)

    def stage(
        self, events: Iterable[ChangeEvent], seq_range: tuple[int, int] | None = None
    ) -> Manifest:
        """Write one batch (one file per table, then the manifest) as the stager does."""
        events = list(events)
        batch_id = f"b{next(_batches):06d}"
        by_table: dict[tuple[str, str], list[ChangeEvent]] = {}
        for e in events:
            by_table.setdefault((e.database, e.table), []).append(e)
        files = []
        for (database, table), table_events in by_table.items():
            path = table_file_path(batch_id, database, table)
            self.storage.put(path, b"".join(e.to_json() + b"\n" for e in table_events))
            files.append(TableFile(database, table, path, len(table_events)))
        seqs = [e.seq for e in events]
        first, last = seq_range or (min(seqs), max(seqs))
        manifest = Manifest(
            batch_id=batch_id,
            seq_first=first,
            seq_last=last,
            created_at_ms=0,
            tables=tuple(files),
            ddl=tuple(e.to_dict() for e in events if e.op is Op.DDL),
            received=len(events),
            staged=len(events),
        )
        write_manifest(self.storage, manifest)
        return manifest

    def forget_progress(self) -> None:
        """Remove what the ingest saved about its progress besides the lake's own commits
        (the cursor hint and the retention's record of what every table passed), as if it
        died before saving either: a new ingest then reads every staged manifest and only
        the tables' checkpoints keep it from applying an event twice."""
        (Path(self.config.lake_state_dir) / "cursor.json").unlink(missing_ok=True)
        shutil.rmtree(Path(self.config.stage_root) / RETIRED_DIR, ignore_errors=True)

    def ingestor(self) -> Ingestor:
        """A fresh ingestor: state only from the lake (checkpoints) and the cursor hint."""
        return Ingestor(self.config, self.spark, self.storage)

    def ingest(self) -> IngestStats:
        """``tidelake ingest --once`` in this process."""
        return self.ingestor().run_once()

    def path(self, table_id: str = "shop.orders") -> str:
        return table_path(self.config.lake_root, *split_table_id(table_id))

    def rows(self, table_id: str = "shop.orders") -> list[dict[str, Any]]:
        """The table read JVM-free by hudi-rs, sorted by record key columns' text."""
        data = read_table(self.config.lake_root, table_id).to_pylist()
        return sorted(data, key=lambda r: str(r.get("id")))

    def spark_rows(self, table_id: str = "shop.orders") -> list[dict[str, Any]]:
        """The same table read by Spark (Hudi snapshot query), without Hudi meta columns."""
        from pyspark.sql.types import TimestampType

        df = self.spark.read.format("hudi").load(self.path(table_id))
        keep = [c for c in df.columns if not c.startswith("_hoodie_")]
        instants = {f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)}
        data = []
        for row in df.select(*keep).collect():
            values = row.asDict()
            for name, value in values.items():
                # PySpark hands TIMESTAMP back as a naive local datetime: make it the instant.
                if name in instants and value is not None:
                    values[name] = value.astimezone(dt.UTC)
                elif isinstance(value, bytearray):
                    values[name] = bytes(value)
            data.append(values)
        return sorted(data, key=lambda r: str(r.get("id")))

    def state(self, table_id: str = "shop.orders", *columns: str) -> dict[str, tuple[Any, ...]]:
        """``{id: (column values...)}`` of the table (hudi-rs), default column ``status``."""
        columns = columns or ("status",)
        return {str(r["id"]): tuple(r[c] for c in columns) for r in self.rows(table_id)}

    def checkpoint(self, table_id: str = "shop.orders") -> TableCheckpoint | None:
        committed = read_checkpoint(self.spark, self.path(table_id))
        return committed.checkpoint if committed else None

    def commits(self) -> list[dict[str, Any]]:
        """Every line of ``commits.jsonl`` (through the ledger), each with all its keys."""
        return [c.model_dump() for c in Ledger(self.config.lake_state_dir).commits()]


def ingest_in_subprocess(lake: Lake, log: Path, **env: str) -> int:
    """``tidelake ingest --once`` in a process group of its own (a crash hook in ``env``
    kills the group, not the test); its exit status."""
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "ingest", "--once"],
        env={**os.environ, **lake.env, **env},
        cwd=Path(__file__).resolve().parents[3],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        timeout=300,
        check=False,
    )
    return proc.returncode
