"""The table store: every access of the lake's Hudi tables goes through here.

One :class:`TableStore` per ingest (one Spark session) writes and reads the tables:

* commits: an upsert (or, for a DDL, a rewrite) whose commit metadata holds the table's new
  :class:`~tidelake.lake.checkpoint.TableCheckpoint`, read back and verified after the write;
* checkpoints: read from Hudi's timeline once per table, then kept current by our commits;
  a dropped table answers with its tombstone (``dropped.json``);
* the index each commit uses (:meth:`TableStore.uses_record_index`), the stored schema and
  record key (``hoodie.properties``, parsed in :func:`hoodie_properties`), catalog sync,
  table deletion, the JVM warm-up;
* the one table discovery (:func:`discover_tables`), for a lake on the local filesystem and
  on object storage alike (through the session's Hadoop FileSystem: ``s3a://``).

Reading checkpoints goes through Hudi's own timeline API in the Spark JVM
(``HoodieTableMetaClient``, the completed commits timeline,
``readCommitMetadata(...).getExtraMetadata()``), never by parsing timeline files by hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import javaproperties
import structlog

from tidelake import names
from tidelake.config import Config
from tidelake.errors import IngestError
from tidelake.lake.catalog import sync_table, unregister_table
from tidelake.lake.checkpoint import NO_ROWS, AppliedRows, CommittedCheckpoint, TableCheckpoint
from tidelake.lake.hudi import (
    APPLIED_KEY,
    CHECKPOINT_KEY,
    DELETE_FIELD,
    METADATA_PARTITIONS_KEY,
    ORDERING_FIELD,
    TIDELAKE_DIR,
    TableLocation,
    discard_interrupted_creation,
    is_hudi_table,
    local_dir,
    newest_base_file_bytes,
    split_table_id,
    table_path,
    write_options,
)
from tidelake.lake.jvm_errors import describe_error
from tidelake.lake.ledger import Ledger
from tidelake.lake.schema import source_fields
from tidelake.runtime.durable import fsync_dir, fsync_paths

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

log = structlog.get_logger(__name__)

RECORD_KEY_PROPERTY = "hoodie.table.recordkey.fields"


# --- files, local or through the session's Hadoop FileSystem ---------------------------------


def _hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """``(FileSystem, Path)`` of ``path`` in the session's JVM."""
    jvm: Any = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def _changed_since(root: Path, since_ns: int) -> list[Path]:
    """Files and directories under ``root`` whose mtime or ctime is at or after ``since_ns``
    (a rename into place changes the ctime), children before their directory is done."""
    out: list[Path] = []
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed by a concurrent cleaner
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if max(st.st_mtime_ns, st.st_ctime_ns) >= since_ns:
                out.append(Path(entry.path))
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return out


def table_exists(spark: SparkSession, path: str) -> bool:
    """True when ``path`` (local or on object storage) holds a Hudi table."""
    if local_dir(path) is not None:
        return is_hudi_table(path)
    fs, hpath = _hadoop_path(spark, f"{path.rstrip('/')}/.hoodie/hoodie.properties")
    return bool(fs.exists(hpath))


#: A file that makes the archived timeline's folder exist before Hudi archives anything.
ARCHIVE_MARKER = ".hoodie/timeline/history/.tidelake-keep"


def mark_archived_timeline(spark: SparkSession, path: str) -> None:
    """Make ``.hoodie/timeline/history`` of the table at ``path`` hold a file (table version 8
    and later: version 6 keeps its archive in ``.hoodie/history``, which no reader lists
    before it exists).

    Hudi creates that folder only when it first archives (tens of commits in); readers that
    list folders as an object store does, where an empty folder does not exist, fail on the
    table until then: Trino 476's Hudi connector answers every query with "Could not load
    archived commit timeline" (docs/query-engines.md). Hudi itself reads only the ``_version_``,
    ``manifest_*`` and Parquet files of that folder, so an empty hidden file there changes
    nothing for it (archival was run beside it: tests/integration/lake)."""
    fs, marker = _hadoop_path(spark, f"{path.rstrip('/')}/{ARCHIVE_MARKER}")
    if not fs.exists(marker):
        fs.create(marker, True).close()
        local = local_dir(path)
        if local is not None:  # made after the commit's own fsyncs: durable by itself
            folder = (local / ARCHIVE_MARKER).parent
            fsync_paths([folder / ".tidelake-keep", folder / "..tidelake-keep.crc"])
            fsync_dir(folder.parent)


def list_dir(spark: SparkSession, path: str) -> list[tuple[str, int]]:
    """``(name, bytes)`` of the files directly in ``path`` (local or object storage)."""
    local = local_dir(path)
    if local is not None:
        try:
            return [(e.name, e.stat().st_size) for e in os.scandir(local) if e.is_file()]
        except FileNotFoundError:
            return []
    fs, hpath = _hadoop_path(spark, path)
    if not fs.exists(hpath):
        return []
    return [
        (str(st.getPath().getName()), int(st.getLen()))
        for st in fs.listStatus(hpath)
        if st.isFile()
    ]


def discover_tables(spark: SparkSession | None, lake_root: str) -> list[TableLocation]:
    """Every Hudi table under a lake root, as ``<db>/<table>/.hoodie/hoodie.properties``,
    sorted by path: a local root is globbed here, one on object storage through the
    session's Hadoop FileSystem (``spark`` may be None for a local root only)."""
    base = local_dir(lake_root)
    if base is not None:
        if not base.is_dir():
            return []
        found = [
            (props.parent.parent.parent.name, props.parent.parent.name, props.parent.parent)
            for props in base.glob("*/*/.hoodie/hoodie.properties")
        ]
        return sorted(
            (
                TableLocation(unquote(db), unquote(table), str(table_dir.resolve()))
                for db, table, table_dir in found
                if db != TIDELAKE_DIR
            ),
            key=lambda t: t.path,
        )
    if spark is None:
        raise ValueError(f"{lake_root}: discovering tables on object storage needs Spark")
    root = lake_root.rstrip("/")
    fs, pattern = _hadoop_path(spark, f"{root}/*/*/.hoodie/hoodie.properties")
    remote = []
    for status in fs.globStatus(pattern) or []:
        table_dir = status.getPath().getParent().getParent()
        db, table = str(table_dir.getParent().getName()), str(table_dir.getName())
        if db != TIDELAKE_DIR:
            remote.append(TableLocation(unquote(db), unquote(table), f"{root}/{db}/{table}"))
    return sorted(remote, key=lambda t: t.path)


# --- Hudi's own view of a table ----------------------------------------------------------------


def _meta_client(spark: SparkSession, path: str) -> Any:
    jvm: Any = spark.sparkContext._jvm
    if jvm is None:
        raise IngestError("the Spark session has no JVM (stopped?)")
    storage_conf = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(
        spark.sparkContext._jsc.hadoopConfiguration()
    )
    return (
        jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
        .setConf(storage_conf)
        .setBasePath(path)
        .build()
    )


def read_checkpoint(spark: SparkSession, path: str) -> CommittedCheckpoint | None:
    """The checkpoint of the latest completed commit of the Hudi table at ``path`` that holds
    one (compaction and clustering commits do not); None for a table not written yet."""
    found = _latest_holding(spark, path, CHECKPOINT_KEY)
    if found is None:
        return None
    instant, text = found
    return CommittedCheckpoint(
        TableCheckpoint.from_json(text),
        str(instant.requestedTime()),
        str(instant.getCompletionTime()) if instant.getCompletionTime() else None,
    )


def applied_since(spark: SparkSession, path: str, seq: int) -> list[tuple[int, AppliedRows | None]]:
    """``(checkpoint seq, what it applied)`` of each completed commit of the table at ``path``
    that may cover events at stream sequence ``seq`` or above (its checkpoint is at or above
    it), newest first: an event belongs to the one with the lowest checkpoint at or above its
    sequence. What a commit applied is None when it was written before tidelake recorded it."""
    if not table_exists(spark, path):
        return []
    client = _meta_client(spark, path)
    timeline = client.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()
    instants = timeline.getReverseOrderedInstants().iterator()
    out: list[tuple[int, AppliedRows | None]] = []
    while instants.hasNext():
        extra = timeline.readCommitMetadata(instants.next()).getExtraMetadata()
        text = extra.get(CHECKPOINT_KEY)
        if text is None:
            continue  # compaction, clustering
        covered = TableCheckpoint.from_json(str(text)).seq
        if covered < seq:
            break
        applied = extra.get(APPLIED_KEY)
        out.append((covered, AppliedRows.from_json(str(applied)) if applied else None))
    return out


def _latest_holding(spark: SparkSession, path: str, key: str) -> tuple[Any, str] | None:
    """The latest completed commit whose extra metadata holds ``key``, and its value; reads
    back from the newest commit only as far as needed (None: no table, or no such commit)."""
    if not table_exists(spark, path):
        return None
    client = _meta_client(spark, path)
    timeline = client.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()
    instants = timeline.getReverseOrderedInstants().iterator()
    while instants.hasNext():
        instant = instants.next()
        text = timeline.readCommitMetadata(instant).getExtraMetadata().get(key)
        if text is not None:
            return instant, str(text)
    return None


CDC_PROPERTY = "hoodie.table.cdc.enabled"


def viewed_tables(config: Config) -> set[str]:
    """The ``db.table`` of every lake table a configured view reads."""
    import sqlglot
    from sqlglot import exp

    found = set()
    for view in config.views.values():
        if view.sql is None:
            continue
        try:
            tree = sqlglot.parse_one(view.sql, read="spark")
        except sqlglot.errors.ParseError:  # the view's own check reports its SQL
            continue
        found |= {names.table_id(t.db, t.name) for t in tree.find_all(exp.Table) if t.db}
    return found


@dataclass(frozen=True, slots=True)
class CompletedInstant:
    """One completed write on a table's active timeline."""

    action: str  # commit, deltacommit, replacecommit
    requested: str
    completed: str
    #: The commit's extra metadata (``tidelake.*`` keys).
    metadata: Mapping[str, str]


def completed_instants(
    spark: SparkSession, path: str, *, metadata_of: Collection[str] | None = None
) -> list[CompletedInstant]:
    """The completed writes on the active timeline of the table at ``path``, oldest first by
    completion time ([] for a table not written yet). Readers of changes (``view/``) order and
    bound their ranges by completion time, as Hudi 1.x incremental queries do.

    ``metadata_of``: the actions whose commit metadata is read (one file read each; None:
    every instant's); the others come with empty metadata."""
    if not table_exists(spark, path):
        return []
    client = _meta_client(spark, path)
    timeline = client.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()
    out = []
    instants = timeline.getInstants().iterator()
    while instants.hasNext():
        instant = instants.next()
        action = str(instant.getAction())
        metadata: dict[str, str] = {}
        if metadata_of is None or action in metadata_of:
            extra = timeline.readCommitMetadata(instant).getExtraMetadata()
            metadata = {str(k): str(extra.get(k)) for k in extra.keySet()}
        out.append(
            CompletedInstant(
                action,
                str(instant.requestedTime()),
                str(instant.getCompletionTime() or instant.requestedTime()),
                metadata,
            )
        )
    return sorted(out, key=lambda i: i.completed)


def latest_commit_value(spark: SparkSession, path: str, key: str) -> str | None:
    """``key`` of the extra metadata of the latest completed commit that holds it (None for a
    table not written yet, or none holding it)."""
    found = _latest_holding(spark, path, key)
    return found[1] if found is not None else None


def hoodie_properties(spark: SparkSession | None, path: str) -> Mapping[str, str]:
    """The table's ``.hoodie/hoodie.properties``: parsed from the file on a local lake (a
    Java properties file), read through Hudi's table config on object storage."""
    local = local_dir(path)
    if local is not None:
        props = local / ".hoodie" / "hoodie.properties"
        parsed: dict[str, str] = javaproperties.loads(props.read_text(encoding="latin-1"))
        return parsed
    if spark is None:
        raise ValueError(f"{path}: reading a table on object storage needs Spark")
    held = _meta_client(spark, path).getTableConfig().getProps()
    return {str(k): str(held.getProperty(k)) for k in held.stringPropertyNames()}


# --- the store -------------------------------------------------------------------------------


class TableStore:
    """The Hudi tables of one lake, through one Spark session."""

    def __init__(self, config: Config, spark: SparkSession, ledger: Ledger | None = None) -> None:
        self.config = config
        self.spark = spark
        self.lake_root = config.lake_root
        #: The ingest's state: the tombstones of dropped tables (``dropped.json``).
        self.ledger = ledger or Ledger(config.lake_state_dir)
        self._checkpoints: dict[str, CommittedCheckpoint | None] = {}
        #: The tables a view reads: created with Hudi's change log (``view/changes.py``).
        self.change_log_tables = viewed_tables(config)
        #: Per table: the Spark types of the columns it stores (kept current by our commits).
        self._stored: dict[str, dict[str, DataType]] = {}

    def path(self, table_id: str) -> str:
        """Where the table of ``db.table`` lives (``lake/hudi.py``)."""
        return table_path(self.lake_root, *split_table_id(table_id))

    # -- checkpoints

    def checkpoint(self, table_id: str) -> TableCheckpoint | None:
        """The table's checkpoint: read from Hudi once, then kept current by our commits.

        A dropped table answers with its tombstone (``lake/evolve.py``); a drop that was
        interrupted after its tombstone is finished here.
        """
        if table_id not in self._checkpoints:
            # Before Hudi reads it; only a table of ours: another worker may be creating it.
            owned = self.config.ingest.owns(table_id)
            if owned and discard_interrupted_creation(self.path(table_id)):
                log.warning("removed a table whose creation was interrupted", table=table_id)
            committed = read_checkpoint(self.spark, self.path(table_id))
            tombstone = self.tombstone(table_id)
            if tombstone is not None and (
                committed is None or committed.checkpoint.seq < tombstone.seq
            ):
                if committed is not None:
                    log.warning("finishing an interrupted drop", table=table_id)
                    self.remove_table(table_id)
                committed = CommittedCheckpoint(tombstone, "dropped", None)
            elif tombstone is not None:
                self.ledger.remove_tombstone(table_id)  # re-created after the drop
            self._checkpoints[table_id] = committed
        held = self._checkpoints[table_id]
        return held.checkpoint if held else None

    def tombstone(self, table_id: str) -> TableCheckpoint | None:
        """The last checkpoint of ``table_id`` if it was dropped (``lake/evolve.py``)."""
        text = self.ledger.tombstone(table_id)
        return TableCheckpoint.from_json(text) if text is not None else None

    def forget(self, table_id: str) -> None:
        """Re-read the checkpoint from Hudi next time (after a failed write)."""
        self._checkpoints.pop(table_id, None)
        self._stored.pop(table_id, None)

    # -- writing

    def commit(
        self,
        table_id: str,
        df: DataFrame,
        checkpoint: TableCheckpoint,
        *,
        pk: Sequence[str] | None = None,
        rewrite: bool = False,
        extra: Mapping[str, str] | None = None,
        applied: AppliedRows = NO_ROWS,
    ) -> str:
        """Write ``df`` to the table in one Hudi commit holding ``checkpoint``, which of the
        stream's row events it ``applied`` (none: a DDL's), and ``extra`` commit metadata
        (``tidelake.*`` keys); its instant."""
        database, table = split_table_id(table_id)
        path = self.path(table_id)
        key = tuple(pk) if pk else self.stored_primary_key(path)
        if discard_interrupted_creation(path):  # a kill -9 while Hudi created the table
            log.warning("removed a table whose creation was interrupted", table=table_id)
        stored = self.stored_properties(path)
        options = write_options(
            self.config.lake,
            database,
            table,
            key,
            {CHECKPOINT_KEY: checkpoint.to_json(), APPLIED_KEY: applied.to_json(), **(extra or {})},
            rewrite=rewrite,
            record_index=self.uses_record_index(path),
            table_name=stored.get("hoodie.table.name") or None,
            table_version=stored.get("hoodie.table.version") or None,
            change_log=stored.get(CDC_PROPERTY) == "true"
            or (not stored and table_id in self.change_log_tables),
        )
        write_began_ns = time.time_ns()
        try:
            df.write.format("hudi").options(**options).mode("append").save(path)
        except Exception as exc:  # py4j / Spark errors: the JVM cause chain, root cause last
            self.forget(table_id)
            raise IngestError(f"{table_id}: the Hudi write failed: {describe_error(exc)}") from exc
        committed = read_checkpoint(self.spark, path)
        if committed is None or committed.checkpoint != checkpoint:
            self.forget(table_id)
            raise IngestError(
                f"{table_id}: the commit does not hold the checkpoint just written "
                f"({committed.checkpoint if committed else None} != {checkpoint})"
            )
        self.sync_commit(table_id, path, write_began_ns)
        self._checkpoints[table_id] = committed
        written = source_fields(df.schema)
        held = self._stored.get(table_id)
        if rewrite:
            self._stored[table_id] = written
        elif held is not None:
            held.update({n: t for n, t in written.items() if n not in held})
        return committed.instant

    def stored_properties(self, path: str) -> Mapping[str, str]:
        """The ``hoodie.properties`` of the table at ``path``, empty for a table not created
        yet. A table keeps the name it was created with (Hudi refuses a write naming another,
        and tables made before ``names.hudi_table_name`` have names of the older rule) and its
        table version (``lake.table_version`` applies to new tables)."""
        if not self.exists(path):
            return {}
        return hoodie_properties(self.spark, path)

    def sync_commit(self, table_id: str, path: str, since_ns: int) -> int:
        """Fsync what a commit wrote into the local table at ``path``; the number of fsyncs.

        The JVM writes through Hadoop's ``LocalFileSystem``, which never fsyncs: a completed
        commit sits in the page cache, and an OS crash after the ingest retired the staged
        batch (or recorded the commit in its ledger) would lose rows that exist nowhere else.
        So before :meth:`commit` returns, every file and directory under the table changed
        since the write began (``since_ns``; mtime or ctime) is fsync-ed, then each directory
        holding one: the data files the commit names, the ``.hoodie/`` and
        ``.hoodie/timeline/`` files of its instant, ``hoodie.properties``, the metadata
        table's files, and the table's own directory and new parents when it was created.
        Timestamps are compared a second early, since filesystem clocks are coarse (an extra
        fsync of an older file is harmless). On object storage (``s3a://``) there is nothing
        to do: a PUT answers once the object is stored.
        """
        local = local_dir(path)
        if local is None:
            return 0
        began = time.perf_counter()
        since = since_ns - 1_000_000_000
        changed = _changed_since(local, since)
        # The table directory, and its database directory, when this commit created them.
        for parent in (local, local.parent):
            with contextlib.suppress(FileNotFoundError):
                st = parent.stat()
                if max(st.st_mtime_ns, st.st_ctime_ns) >= since:
                    changed.append(parent)
        fsyncs = fsync_paths(changed)
        log.debug(
            "commit fsynced",
            table=table_id,
            fsyncs=fsyncs,
            ms=round((time.perf_counter() - began) * 1000, 1),
        )
        return fsyncs

    def uses_record_index(self, path: str) -> bool:
        """Whether the next commit into the unpartitioned table at ``path`` looks keys up in
        the metadata table's record index, or reads the keys of the table's base files
        (SIMPLE index, no metadata table).

        SIMPLE costs less while the table is small; its cost grows with the table, the
        record index's does not (docs/benchmarks.md). A table switches once its newest base
        files reach ``lake.record_index_from_mb`` (Hudi builds the metadata table and the
        index from them in that commit) and never back: a table that has a metadata table
        keeps it, since writing with the metadata table disabled would delete it.
        """
        threshold_mb = self.config.lake.record_index_from_mb
        if threshold_mb <= 0:
            return True
        if not self.exists(path):
            return False  # created small
        if hoodie_properties(self.spark, path).get(METADATA_PARTITIONS_KEY, "").strip():
            return True
        return newest_base_file_bytes(list_dir(self.spark, path)) >= threshold_mb * 2**20

    def remove_table(self, table_id: str) -> None:
        """Delete the table's directory and its catalog entry (DROP TABLE at the source)."""
        database, table = split_table_id(table_id)
        unregister_table(self.spark, database, table)
        fs, hpath = _hadoop_path(self.spark, self.path(table_id))
        if fs.exists(hpath):
            fs.delete(hpath, True)
            local = local_dir(self.path(table_id))
            if local is not None:  # the removal durable, so an OS crash cannot bring it back
                fsync_dir(local.parent)
        tombstone = self.tombstone(table_id)
        self._checkpoints[table_id] = (
            CommittedCheckpoint(tombstone, "dropped", None) if tombstone else None
        )
        self._stored.pop(table_id, None)

    def sync_catalog(self, table_id: str) -> None:
        """Make the catalog show the table's current schema (after creation or a DDL)."""
        database, table = split_table_id(table_id)
        try:
            if int(self.stored_properties(self.path(table_id)).get("hoodie.table.version", 9)) >= 8:
                mark_archived_timeline(self.spark, self.path(table_id))
            sync_table(self.spark, database, table, self.path(table_id))
        except Exception as exc:  # the catalog is a convenience: never fail a commit on it
            log.warning("catalog not synced", table=table_id, error=str(exc)[:500])

    def warm_up(self) -> float:
        """Two throw-away upserts into a scratch table beside the lake, then remove it.

        A fresh JVM spends 10-20 s loading and compiling Hudi's write path on its first
        commit; a continuous ingest pays that once here, before it reports ready, instead
        of on the first real batch (which would otherwise be that much less fresh).
        """
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        started = time.monotonic()
        # Local even for a lake on object storage: the JVM's write path is what warms up.
        scratch = self.config.lake_state_dir / "warmup"
        shutil.rmtree(scratch, ignore_errors=True)
        schema = StructType(
            [
                StructField("id", LongType()),
                StructField(ORDERING_FIELD, StringType()),
                StructField(DELETE_FIELD, BooleanType()),
            ]
        )
        # The path of a new (small) table: SIMPLE index, no metadata table.
        options = write_options(
            self.config.lake, "tidelake", "warmup", ["id"], {}, record_index=False
        )
        for round_no in range(2):
            rows = [(i, f"{round_no:020d}", i % 7 == 0 and round_no == 1) for i in range(100)]
            df = self.spark.createDataFrame(rows, schema)
            df.write.format("hudi").options(**options).mode("append").save(str(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
        return time.monotonic() - started

    # -- reading

    def exists(self, path: str) -> bool:
        """True when ``path`` holds a Hudi table (local or on object storage)."""
        return table_exists(self.spark, path)

    def read(self, path: str) -> DataFrame:
        """The table's current snapshot."""
        return self.spark.read.format("hudi").load(path)

    def tables(self) -> list[TableLocation]:
        """Every table of the lake (local or on object storage)."""
        return discover_tables(self.spark, self.lake_root)

    def tables_of(self, database: str) -> list[str]:
        """The ``db.table`` names of the lake's tables in ``database``."""
        return [t.table_id for t in self.tables() if t.database == database]

    def stored_schema(self, path: str) -> StructType:
        """The table's source and lineage columns as stored (no ``_hoodie_*`` meta columns)."""
        from pyspark.sql.types import StructType

        stored = self.read(path).schema
        return StructType(
            [
                f
                for f in stored.fields
                if not f.name.startswith("_hoodie_") or f.name == DELETE_FIELD
            ]
        )

    def stored_types(self, table_id: str, path: str) -> dict[str, DataType]:
        """The Spark types of the table's source columns (cached, kept current by commits)."""
        held = self._stored.get(table_id)
        if held is None:
            held = self._stored[table_id] = source_fields(self.stored_schema(path))
        return held

    def stored_primary_key(self, path: str) -> tuple[str, ...]:
        """The record key fields of the table at ``path``."""
        stored = hoodie_properties(self.spark, path).get(RECORD_KEY_PROPERTY)
        if stored:
            return tuple(stored.split(","))
        raise IngestError(f"{path}: no record key in hoodie.properties")

    def current_values(
        self,
        path: str,
        pk: Sequence[str],
        stored: Mapping[str, DataType],
        keys: Sequence[tuple[Any, ...]],
        columns: Sequence[str],
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """The stored values of ``columns`` for ``keys`` (a partial update's unsent columns)."""
        from pyspark.sql import functions as F  # noqa: N812 (PySpark's own convention)
        from pyspark.sql.types import StructField, StructType

        wanted = [c for c in columns if c in stored]
        if not keys or not stored:
            return {}
        key_rows = self.spark.createDataFrame(
            [tuple(k) for k in set(keys)],
            StructType([StructField(c, stored[c], True) for c in pk]),
        )
        picked = self.read(path).join(F.broadcast(key_rows), on=list(pk), how="inner")
        out: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in picked.select(*pk, *wanted).collect():
            values = row.asDict()
            key = tuple(values[c] for c in pk)
            out[key] = {c: values[c] for c in wanted}
            out[key].update({c: None for c in columns if c not in stored})
        return out
