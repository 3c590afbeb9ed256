"""The one place that names Hudi options, and the layout of the lake on disk.

One Hudi table per source table, at ``<lake_root>/<db>/<table>`` (each name encoded by
``tidelake/names.py``: percent-encoded when it holds a character unsafe in a path or starts
with ``.``/``_``; docs/names.md). Every write is an upsert whose records carry:

* the source primary key as the record key (composite keys too);
* ``_tl_position`` (docs/architecture.md §2) as the ordering field, merged with
  ``EVENT_TIME_ORDERING``: a record only replaces the stored one when its position is not
  older, whatever the commit it arrives in;
* ``_hoodie_is_deleted``: deletes travel in the same upsert as the other rows;
* the ingest checkpoint in the commit's extra metadata (``tidelake.checkpoint``), so data and
  checkpoint land in one atomic commit, and beside it which of the stream's row events the
  commit applied (``tidelake.applied``: ``lake/checkpoint.py``).

``docs/spark-and-hudi.md`` explains each option.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelake import names
from tidelake.config import LakeConfig

#: Commit extra-metadata keys starting with this prefix are copied from the write options.
COMMIT_META_PREFIX = "tidelake."
#: The commit extra-metadata key holding the table's :class:`TableCheckpoint` as JSON.
CHECKPOINT_KEY = "tidelake.checkpoint"
#: Beside it: which of the stream's row events the commit applied (``AppliedRows``).
APPLIED_KEY = "tidelake.applied"
#: In a rewrite's commit: the column renames it applied, ``[[old, new], …]`` (for the views).
RENAMED_KEY = "tidelake.renamed"
#: The ordering field: ``Position.encode()``, a fixed-width string in commit order.
ORDERING_FIELD = "_tl_position"
#: Hudi's own soft-delete marker column.
DELETE_FIELD = "_hoodie_is_deleted"
#: Directory under the lake root holding tidelake's own files (cursor, commit log, logs).
TIDELAKE_DIR = "_tidelake"


@dataclass(frozen=True, slots=True)
class TableLocation:
    """Where the Hudi table of one source table lives."""

    database: str
    table: str
    path: str

    @property
    def table_id(self) -> str:
        return names.table_id(self.database, self.table)


def split_table_id(table_id: str) -> tuple[str, str]:
    """``"db.table"`` → ``("db", "table")``; either part may be backtick-quoted (names.py)."""
    return names.split_table_id(table_id)


def table_path(lake_root: str, database: str, table: str) -> str:
    """``<lake_root>/<db>/<table>``, each segment encoded by ``names.lake_segment``.

    A table an earlier version wrote at its older path (a name starting with ``_`` or ``.``
    was not encoded then) stays there on a local lake, so upgrading moves no table.
    """
    path = names.lake_path(lake_root, database, table)
    legacy = names.legacy_lake_path(lake_root, database, table)
    if (
        legacy is not None
        and legacy != path
        and local_dir(path) is not None
        and not is_hudi_table(path)
        and is_hudi_table(legacy)
    ):
        return legacy
    return path


def hudi_table_name(database: str, table: str) -> str:
    """The Hudi table name of a new table (``names.hudi_table_name``); an existing table keeps
    the one in its ``hoodie.properties``."""
    return names.hudi_table_name(database, table)


def local_dir(root: str) -> Path | None:
    """The local directory of a lake root (a path or ``file://``), None for remote storage."""
    if root.startswith("file://"):
        return Path(root[len("file://") :])
    if "://" in root:
        return None
    return Path(root)


def is_hudi_table(path: str) -> bool:
    """True when ``path`` (local) holds a Hudi table."""
    local = local_dir(path)
    return local is not None and (local / ".hoodie" / "hoodie.properties").is_file()


#: ``hoodie.properties`` key listing the table's metadata-table partitions (empty: none).
METADATA_PARTITIONS_KEY = "hoodie.table.metadata.partitions"


def newest_base_file_bytes(files: Iterable[tuple[str, int]]) -> int:
    """Bytes of the newest version of each base file among ``(name, size)`` of a table
    directory: ``<fileId>_<writeToken>_<instant>.parquet``; older versions (kept for
    readers until cleaning) and log files do not count."""
    newest: dict[str, tuple[str, int]] = {}
    for name, size in files:
        if not name.endswith(".parquet") or name.startswith("."):
            continue
        parts = name[: -len(".parquet")].split("_")
        if len(parts) != 3:
            continue
        file_id, _, instant = parts
        if file_id not in newest or instant > newest[file_id][0]:
            newest[file_id] = (instant, size)
    return sum(size for _, size in newest.values())


#: Timeline files of completed actions: a table holding one has data, whatever else it lacks.
_COMPLETED_ACTIONS = (".commit", ".deltacommit", ".replacecommit")


#: Keys Hudi writes into every ``hoodie.properties`` it creates (its order is a hash order, so
#: a file cut short lacks some of them; ``hoodie.table.checksum`` guards the name).
_REQUIRED_PROPERTIES = (
    b"hoodie.table.name=",
    b"hoodie.table.type=",
    b"hoodie.table.version=",
    b"hoodie.table.checksum=",
)


def _properties_written(path: Path) -> bool:
    """True when ``hoodie.properties`` exists whole: every key Hudi always writes is there."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    return all(key in data for key in _REQUIRED_PROPERTIES)


def discard_interrupted_creation(path: str) -> bool:
    """Remove a local table directory whose creation was killed before it finished.

    Hudi writes ``.hoodie/hoodie.properties`` when it creates a table, before any commit; a
    process killed in between leaves a ``.hoodie`` without it, or with an empty or torn one
    (killed inside the write; seen by ``make chaos``), and every later write to that path
    fails. With no properties, no properties backup (left by an interrupted properties
    update) and no completed commit, the directory holds nothing committed: it is removed so
    the next write creates the table afresh. Returns True when it removed something.
    """
    local = local_dir(path)
    if local is None:
        return False
    meta = local / ".hoodie"
    if not meta.is_dir() or _properties_written(meta / "hoodie.properties"):
        return False
    if (meta / "hoodie.properties.backup").exists():
        return False
    if any(f.name.endswith(_COMPLETED_ACTIONS) for f in meta.rglob("*") if f.is_file()):
        return False
    shutil.rmtree(local)
    return True


def write_options(
    lake: LakeConfig,
    database: str,
    table: str,
    pk: Sequence[str],
    extra_metadata: dict[str, str],
    *,
    rewrite: bool = False,
    record_index: bool = True,
    table_name: str | None = None,
    table_version: str | None = None,
    change_log: bool = False,
) -> dict[str, str]:
    """The Hudi datasource options of one upsert into ``database.table``.

    ``extra_metadata`` keys must start with :data:`COMMIT_META_PREFIX`; they end up in the
    commit's extra metadata. ``lake.hudi_options`` is merged last and wins.

    ``rewrite``: the write replaces the whole table in one ``replacecommit``
    (``insert_overwrite_table``) with exactly the DataFrame's schema — how a DDL that drops,
    renames or re-types columns, fills an added column's default, or truncates the table is
    applied (``lake/evolve.py``). Readers see the old table or the new one, never a mix, and
    every file of the new snapshot has the new schema, so hudi-rs reads it like Spark does.

    ``record_index`` (unpartitioned tables): look keys up in the metadata table's record
    index; else use the SIMPLE index without a metadata table, which is cheaper while the
    table is small (``TableStore.uses_record_index`` decides; docs/benchmarks.md). Never
    pass False for a table that has a metadata table: Hudi would delete it.

    ``table_name``: the ``hoodie.table.name`` of an existing table (its ``hoodie.properties``):
    Hudi refuses a write naming another, and tables made before names.py have older names.

    ``table_version``: the ``hoodie.table.version`` of an existing table, written again as it
    is (Hudi would upgrade an older table in place, and cannot write a newer one at a lower
    version); a new table gets ``lake.table_version``, pinned so that a Hudi upgrade cannot
    silently write a layout that a reader of the lake rejects (docs/query-engines.md).

    ``change_log``: the table keeps Hudi's change log with before and after images
    (``hoodie.table.cdc.enabled``), which the views read (``view/changes.py``): set when a
    table a view reads is created, and on every write of a table created with it.
    """
    if not pk:
        raise ValueError("a Hudi table needs a record key")
    partition_by = lake.partition_by.get(names.table_id(database, table), [])
    opts = {
        "hoodie.table.name": table_name or hudi_table_name(database, table),
        "hoodie.datasource.write.table.type": lake.table_type,
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.recordkey.field": ",".join(pk),
        # The position decides, not the commit: Hudi 1.x defaults to COMMIT_TIME_ORDERING.
        "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
        "hoodie.table.ordering.fields": ORDERING_FIELD,
        # Pre-1.1 name of the same setting, still read by some code paths.
        "hoodie.datasource.write.precombine.field": ORDERING_FIELD,
        "hoodie.write.table.version": table_version or str(lake.table_version),
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.datasource.write.commitmeta.key.prefix": COMMIT_META_PREFIX,
        # New columns (ALTER TABLE ADD COLUMN) arrive with the next rows; missing ones are null.
        "hoodie.datasource.write.reconcile.schema": "true",
        "hoodie.datasource.write.hive_style_partitioning": "true",
    }
    if partition_by:
        opts |= {
            "hoodie.datasource.write.partitionpath.field": ",".join(partition_by),
            "hoodie.datasource.write.keygenerator.class": (
                "org.apache.hudi.keygen.ComplexKeyGenerator"
            ),
            # A row whose partition value changes must move, not be duplicated: global index.
            "hoodie.index.type": "GLOBAL_SIMPLE",
            "hoodie.simple.index.update.partition.path": "true",
        }
    elif not record_index:
        opts |= {
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": (
                "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
            ),
            # A small table: reading the keys of its few base files costs less than keeping
            # a metadata table, which doubles every commit (a deltacommit of its own).
            "hoodie.index.type": "SIMPLE",
            "hoodie.metadata.enable": "false",
        }
    else:
        opts |= {
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": (
                "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
            ),
            # Key lookups in the metadata table's record index stay bounded by the batch,
            # where the SIMPLE index reads the keys of every base file: the same commit into
            # 10M rows took 1.39x its time at 1M instead of 4.1x (docs/benchmarks.md).
            "hoodie.index.type": "RECORD_INDEX",
            "hoodie.metadata.record.index.enable": "true",
            # Every commit looks its keys up in, and appends to, each file group of the
            # index: Hudi's minimum of 10 cost a 20,000-row table about 1-1.4 s a commit
            # over 1 or 2 (docs/benchmarks.md). A table built from existing rows gets more.
            "hoodie.metadata.record.index.min.filegroup.count": str(lake.record_index_file_groups),
        }
    if lake.spark.master.startswith("local"):
        # One JVM is driver and executors: an embedded timeline server has nobody to serve,
        # and markers are plain files beside the data (docs/benchmarks.md: +17% records/s).
        opts |= {
            "hoodie.embed.timeline.server": "false",
            "hoodie.write.markers.type": "DIRECT",
        }
    if change_log:
        opts |= {
            "hoodie.table.cdc.enabled": "true",
            "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE_AFTER",
        }
    services = lake.table_services
    opts |= {
        # Cleaning after every commit bounds the file versions kept (docs/deployment.md).
        "hoodie.clean.automatic": "true",
        "hoodie.clean.policy": "KEEP_LATEST_COMMITS",
        "hoodie.clean.commits.retained": str(services.clean_retain_commits),
        # Archival must keep more commits than cleaning needs.
        "hoodie.keep.min.commits": str(max(20, services.clean_retain_commits + 1)),
        "hoodie.keep.max.commits": str(max(20, services.clean_retain_commits + 1) + 10),
        # File sizing: inserts top up small base files instead of adding new ones.
        "hoodie.parquet.max.file.size": str(services.max_file_mb * 1024 * 1024),
        "hoodie.parquet.small.file.limit": str(services.small_file_mb * 1024 * 1024),
    }
    if lake.table_type == "MERGE_ON_READ":
        opts |= {
            # Compact inline every few delta commits so readers merge few log files.
            "hoodie.compact.inline": str(services.compaction == "inline").lower(),
            "hoodie.compact.inline.max.delta.commits": str(services.compaction_delta_commits),
        }
    if rewrite:
        opts |= {
            "hoodie.datasource.write.operation": "insert_overwrite_table",
            # The DataFrame's schema is the new table schema: no column is re-added ...
            "hoodie.datasource.write.reconcile.schema": "false",
            # ... and a column it lacks is dropped (DROP COLUMN, RENAME COLUMN).
            "hoodie.datasource.write.schema.allow.auto.evolution.column.drop": "true",
        }
    for key, value in extra_metadata.items():
        if not key.startswith(COMMIT_META_PREFIX):
            raise ValueError(f"commit metadata key {key!r} lacks the {COMMIT_META_PREFIX!r} prefix")
        opts[key] = value
    opts |= lake.hudi_options
    return opts
