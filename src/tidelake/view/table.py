"""A view's Hudi table and the checkpoint in its commits (docs/views.md §4).

Each view is a Hudi table of its own at ``<lake>/_tidelake/views/<name>``, registered in the
session catalog as ``views.<name>``. Its record key is ``_tl_key``, the JSON of the group's
values (a NULL key value included, which Hudi would refuse as a key field). Every commit of
it carries :class:`ViewCheckpoint`: the definition it was computed from and, per base table,
the base commit (completion time) its rows include. Data and checkpoint land in one atomic
Hudi commit, so a step killed at any point is either wholly there or redone whole: a crash
never counts a change twice.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from tidelake.config import Config
from tidelake.lake.catalog import register_table
from tidelake.lake.hudi import COMMIT_META_PREFIX, TIDELAKE_DIR
from tidelake.lake.store import latest_commit_value, table_exists
from tidelake.view.definition import KEY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKPOINT_KEY = f"{COMMIT_META_PREFIX}view"
CATALOG_DATABASE = "views"
_VERSION = 2


@dataclass(frozen=True, slots=True)
class ViewCheckpoint:
    """What a view table's rows include."""

    #: ``ViewDefinition.fingerprint`` of the SQL the rows were computed with.
    definition: str
    #: Base table → completion time of the last base commit included.
    base: Mapping[str, str]
    #: When this commit was made (ms since the epoch): the view's freshness.
    at_ms: int
    #: How the commit came about: "rebuild" or "step".
    kind: str
    #: Per base table, its columns renamed since the definition was written: name → now.
    renamed: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return orjson.dumps(
            {
                "version": _VERSION,
                "definition": self.definition,
                "base": dict(self.base),
                "at_ms": self.at_ms,
                "kind": self.kind,
                "renamed": {t: dict(r) for t, r in self.renamed.items() if r},
            }
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> ViewCheckpoint:
        body = orjson.loads(text)
        version = body.get("version")
        if version not in (1, _VERSION):
            raise ValueError(f"unsupported view checkpoint version {version!r}")
        renamed = body.get("renamed") or {}
        if version == 1 and renamed:  # one base table, its renames held flat
            renamed = {next(iter(body["base"])): renamed}
        return cls(
            body["definition"],
            dict(body["base"]),
            int(body["at_ms"]),
            body["kind"],
            {t: dict(r) for t, r in renamed.items()},
        )


def view_path(config: Config, name: str) -> str:
    return f"{config.lake_root.rstrip('/')}/{TIDELAKE_DIR}/views/{name}"


class ViewTable:
    """The Hudi table of one view, through one Spark session."""

    def __init__(self, config: Config, spark: SparkSession, name: str) -> None:
        self.config = config
        self.spark = spark
        self.name = name
        self.path = view_path(config, name)

    def exists(self) -> bool:
        return table_exists(self.spark, self.path)

    def checkpoint(self) -> ViewCheckpoint | None:
        """The checkpoint of the latest completed commit; None before the first."""
        text = latest_commit_value(self.spark, self.path, CHECKPOINT_KEY)
        return ViewCheckpoint.from_json(text) if text else None

    def read(self) -> DataFrame:
        return self.spark.read.format("hudi").load(self.path)

    def register(self) -> None:
        """Name the table ``views.<name>`` in the session catalog."""
        if self.exists():
            register_table(self.spark, CATALOG_DATABASE, self.name, self.path)

    def write(self, rows: DataFrame, checkpoint: ViewCheckpoint, *, rebuild: bool) -> None:
        """Commit ``rows`` (with ``_hoodie_is_deleted``) and ``checkpoint`` in one commit;
        ``rebuild``: the rows replace the whole table (``insert_overwrite_table``)."""
        _crash_hook(self.path)
        rows.write.format("hudi").options(**self._options(checkpoint, rebuild)).mode("append").save(
            self.path
        )

    def _options(self, checkpoint: ViewCheckpoint, rebuild: bool) -> dict[str, str]:
        lake = self.config.lake
        services = lake.table_services
        opts = {
            "hoodie.table.name": f"tidelake_view_{self.name}",
            "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
            "hoodie.datasource.write.operation": "insert_overwrite_table" if rebuild else "upsert",
            "hoodie.datasource.write.recordkey.field": KEY,
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.keygenerator.class": (
                "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
            ),
            # A view row is the newest computation of its group: the latest commit wins.
            "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
            "hoodie.write.table.version": str(lake.table_version),
            "hoodie.table.timeline.timezone": "UTC",
            "hoodie.datasource.write.commitmeta.key.prefix": COMMIT_META_PREFIX,
            CHECKPOINT_KEY: checkpoint.to_json(),
            # A rebuild's rows are the whole new table: a changed definition may change the
            # columns and their types.
            "hoodie.datasource.write.reconcile.schema": "false",
            "hoodie.datasource.write.schema.allow.auto.evolution.column.drop": "true",
            # Look the step's few keys up in the record index, not in every base file.
            "hoodie.index.type": "RECORD_INDEX",
            "hoodie.metadata.record.index.enable": "true",
            "hoodie.metadata.record.index.min.filegroup.count": "1",
            "hoodie.clean.automatic": "true",
            "hoodie.clean.policy": "KEEP_LATEST_COMMITS",
            "hoodie.clean.commits.retained": str(services.clean_retain_commits),
            "hoodie.keep.min.commits": str(max(20, services.clean_retain_commits + 1)),
            "hoodie.keep.max.commits": str(max(20, services.clean_retain_commits + 1) + 10),
        }
        if lake.spark.master.startswith("local"):
            opts |= {"hoodie.embed.timeline.server": "false", "hoodie.write.markers.type": "DIRECT"}
        return opts


#: Test hook: ``before_commit`` SIGKILLs the process group before a view commit starts;
#: ``in_commit`` once the commit is in flight on the view's timeline (Hudi writing it).
CRASH_HOOK_ENV = "TEST_TIDELAKE_VIEW_CRASH_AT"


def _crash_hook(path: str) -> None:
    point = os.environ.get(CRASH_HOOK_ENV)
    if point == "before_commit":
        os.killpg(os.getpgid(0), signal.SIGKILL)
    elif point == "in_commit":
        timeline = Path(path) / ".hoodie" / "timeline"
        known = set(timeline.glob("*.inflight")) if timeline.is_dir() else set()

        def kill_when_in_flight() -> None:
            while not (set(timeline.glob("*.inflight")) - known if timeline.is_dir() else None):
                time.sleep(0.005)
            os.killpg(os.getpgid(0), signal.SIGKILL)

        threading.Thread(target=kill_when_in_flight, daemon=True).start()


def instant_seconds(instant: str) -> float:
    """A Hudi instant time (``yyyyMMddHHmmssSSS``, UTC timeline) in seconds since the epoch."""
    moment = dt.datetime.strptime(instant[:17].ljust(17, "0"), "%Y%m%d%H%M%S%f")
    return moment.replace(tzinfo=dt.UTC).timestamp()


def now_ms() -> int:
    return int(time.time() * 1000)
