"""Which source tables a capture takes: ``capture.tables`` patterns."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

#: Schemas of the servers themselves, never captured by an empty filter.
SYSTEM_SCHEMAS = frozenset(
    {"mysql", "information_schema", "performance_schema", "sys", "pg_catalog",
     "pg_toast", "tidelake"}
)  # fmt: skip


class TableFilter:
    """``db.table`` / ``db.*`` patterns (fnmatch); no pattern = every non-system table."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = [p.strip() for p in patterns if p.strip()]
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, database: str, table: str) -> bool:
        key = (database, table)
        hit = self._cache.get(key)
        if hit is None:
            if not self.patterns:
                hit = database not in SYSTEM_SCHEMAS and not database.startswith("pg_")
            else:
                name = f"{database}.{table}"
                hit = any(fnmatch.fnmatchcase(name, p) for p in self.patterns)
            self._cache[key] = hit
        return hit

    def databases(self) -> list[str] | None:
        """The databases the patterns name (None: any)."""
        if not self.patterns:
            return None
        dbs = {p.split(".", 1)[0] for p in self.patterns}
        return None if any(any(ch in d for ch in "*?[") for d in dbs) else sorted(dbs)
