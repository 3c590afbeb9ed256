"""Where a view step's time goes, at two base-table sizes: ``tidelake bench --part views``'s
workload (bench/tidelake_bench/views.py) with the maintainer's pieces timed.

A diagnosis, not a benchmark: it patches private functions of ``tidelake.view`` (listed in
:func:`targets`) with timed wrappers, so it follows ``view/maintain.py`` and may need
updating when that changes. Exclusive seconds per piece (a piece's time excludes the timed
pieces it calls); ``kept``: recomputed groups whose MAX the change itself put back.

The join view's step has one more piece, ``join_changes`` (``_join_changes``: the changed join
keys picked in both tables as of the checkpoint and now, and joined). Spark runs those lazily,
inside the merge's first job; so that their time shows as theirs, this tool materializes the
result (cached and counted) before returning it, and the merge then reads the cache. The
signed joined rows it counts are printed per step. The bench itself changes nothing of that.

    PYTHONPATH=src:bench .venv/bin/python tools/view_step_phases.py HOME [ROWS_SMALL ROWS_LARGE]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import orjson

from tidelake_bench.report import views_markdown
from tidelake_bench.views import StepProbe, ViewsPlan, headline, run_views_bench


def targets() -> list[tuple[Any, str, str]]:
    """``(owner, attribute, phase)`` of the pieces a step goes through."""
    from tidelake.view import maintain
    from tidelake.view.maintain import ViewMaintainer
    from tidelake.view.table import ViewTable

    return [
        (ViewMaintainer, "step", "rest"),
        (ViewMaintainer, "rebuild", "rest"),
        (maintain, "completed_instants", "timeline"),
        (maintain, "hoodie_properties", "timeline"),
        (ViewTable, "checkpoint", "timeline"),
        (ViewTable, "exists", "timeline"),
        (ViewMaintainer, "_snapshot", "snapshot_relation"),
        (ViewMaintainer, "_table_schema", "view_schema"),
        (maintain, "read_changes", "change_log"),
        (ViewMaintainer, "_join_changes", "join_changes"),
        (ViewMaintainer, "_apply", "merge"),
        (ViewMaintainer, "_recompute", "recompute"),
        (ViewMaintainer, "_state", "state_query"),
        (ViewTable, "read", "view_read"),
        (ViewTable, "write", "view_write"),
    ]


class Materialized:
    """``ViewMaintainer._join_changes`` with its result cached and counted before it returns
    (the previous step's cache dropped first); the counts of signed joined rows, in order."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.counts: list[int] = []
        self._held: Any = None

    def install(self) -> None:
        from tidelake.view.maintain import ViewMaintainer

        original = ViewMaintainer._join_changes

        def materialized(maintainer: Any, *args: Any, **kwargs: Any) -> Any:
            signed, records = original(maintainer, *args, **kwargs)
            if self._held is not None:
                self._held.unpersist()
                self._held = None
            if signed is not None:
                self._held = signed = signed.cache()
                self.counts.append(signed.count())
                self.log(f"join_changes: {self.counts[-1]:,} signed joined rows")
            return signed, records

        ViewMaintainer._join_changes = materialized  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    from tidelake.view import maintain

    home = Path(argv[0])
    sizes = (int(argv[1]), int(argv[2])) if len(argv) > 2 else (20_000, 200_000)
    plan = ViewsPlan(table_rows=sizes)
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {message}", file=sys.stderr, flush=True)

    Materialized(log).install()
    probe = StepProbe(targets, maintain, "_merge")
    result = run_views_bench(home, plan, log, probe=probe)
    details = result.to_json()
    print("\n".join(views_markdown(details)))
    print()
    for size in details["sizes"]:
        for keys, m in size["by_keys"].items():
            print(f"{size['rows']:,} rows K={keys}: kept {m['recomputed_kept']} of "
                  f"{m['recomputed']} recomputed; phases {m['phases_s']}")  # fmt: skip
        print(f"{size['rows']:,} rows rebuild: {size['rebuild_phases']}")
        for keys, m in size["join_by_keys"].items():
            print(f"{size['rows']:,} rows K={keys} join view: kept {m['recomputed_kept']} of "
                  f"{m['recomputed']} recomputed; phases {m['phases_s']}")  # fmt: skip
        print(f"{size['rows']:,} rows join view rebuild: {size['join_rebuild_phases']}")
    print(orjson.dumps({"numbers": headline(plan, result.runs), "details": details}).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
