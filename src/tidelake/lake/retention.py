"""The end of a staged batch: retired once every table has passed it.

A batch is needed until every table it holds events of has applied (or deliberately skipped)
them. The ingest knows that bound: its saved cursor, which it never moves past a paused
table's events, lowered further to the checkpoint of every paused table (a paused table
needs everything after its checkpoint; `lake/ingest.py`). Every manifest ending at or below
that bound is *retired*:

1. its counts are added to the cumulative ``retired/<bound>.json`` (``stage/manifest.py``
   :class:`RetiredTotals`), written durably before anything is deleted, so the totals
   ``tidelake serve`` shows stay whole (the older totals file is deleted after);
2. in ``archive`` mode the manifest and its table files are copied under
   ``stage.retention.archive_prefix`` (same relative paths);
3. the manifest is deleted first, so the batch stops existing before its files go; then
   its table files.

A crash anywhere leaves a state the next pass finishes: manifests at or below the bound of
the newest totals are counted already and are only deleted; a file left behind without its
manifest is never read. Retiring is idempotent, so two passes over one bound are harmless.

The bound comes only from what is durable (the saved cursor hint and the Hudi checkpoints),
never from the in-memory cursor, which runs ahead of a paused table.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from tidelake.config import RetentionConfig
from tidelake.runtime.storage import Storage
from tidelake.stage.manifest import (
    MANIFEST_DIR,
    RETIRED_DIR,
    Manifest,
    RetiredTotals,
    manifest_range,
    read_manifest,
    read_retired,
    retired_path,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Retired:
    """What one pass retired."""

    through_seq: int
    manifests: int
    files: int


class StagedRetention:
    """Retires the staged batches every table has passed (see the module doc)."""

    def __init__(self, storage: Storage, config: RetentionConfig) -> None:
        self.storage = storage
        self.config = config
        self._totals: RetiredTotals | None = None
        self._totals_path: str | None = None
        self._last_pass = 0.0

    def due(self, now: float | None = None) -> bool:
        """True when ``interval_s`` has passed since the last pass."""
        now = time.monotonic() if now is None else now
        return now - self._last_pass >= self.config.interval_s

    def through_seq(self) -> int:
        """The bound of the newest retirement: every table passed it, no manifest at or
        below it is left to read (0 when nothing was retired)."""
        if self._totals is None:
            self._totals_path, self._totals = read_retired(self.storage)
        return self._totals.through_seq

    def retire(self, passed_seq: int) -> Retired:
        """Retire every batch whose manifest ends at or below ``passed_seq``."""
        self._last_pass = time.monotonic()
        if self._totals is None:
            self._totals_path, self._totals = read_retired(self.storage)
        totals = self._totals
        passed = sorted(
            (seq_range, path)
            for path in self.storage.list(MANIFEST_DIR)
            if (seq_range := manifest_range(path)) is not None and seq_range[1] <= passed_seq
        )
        if not passed:
            return Retired(totals.through_seq, 0, 0)
        manifests = [(path, read_manifest(self.storage, path)) for _, path in passed]
        if passed_seq > totals.through_seq:
            for _, manifest in manifests:
                if manifest.seq_last > totals.through_seq:
                    totals.add(manifest)
            totals.through_seq = passed_seq
            new_path = retired_path(passed_seq)
            self.storage.put(new_path, totals.to_json())
            for old in self.storage.list(RETIRED_DIR):
                if old < new_path:
                    self.storage.delete(old)
            self._totals_path = new_path
        files = sum(self._retire_one(path, manifest) for path, manifest in manifests)
        log.info(
            "staged batches retired",
            through_seq=passed_seq,
            manifests=len(manifests),
            files=files,
            mode=self.config.mode,
        )
        return Retired(passed_seq, len(manifests), files)

    def _retire_one(self, path: str, manifest: Manifest) -> int:
        files = [t.path for t in manifest.tables]
        if self.config.mode == "archive":
            prefix = self.config.archive_prefix.strip("/")
            for name in (*files, path):
                if self.storage.exists(name):
                    self.storage.put(f"{prefix}/{name}", self.storage.get(name))
        self.storage.delete(path)  # the batch stops existing here
        for name in files:
            self.storage.delete(name)
        return len(files)
