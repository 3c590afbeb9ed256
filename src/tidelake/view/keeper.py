"""The views kept by the ingest: a step of every view after each round that committed, the
rebuilds an operator asked for, and what ``status`` and ``/metrics`` show (docs/views.md §6).

The ingest is the lake's one writer (``lake/lock.py``), so it writes the view tables too: a
step runs in its process right after the round, in the same Spark session. Outside it
(``tidelake view run`` with no ingest running) the CLI takes the writer lock itself. A rebuild
asked for while the ingest runs is left as a request file (``<state>/views/rebuild-<name>``)
that the ingest takes up after its next round, or at once when idle.

With tracing on, each view's update is a ``view <name>`` span, a child of the round's span
(``view/trace.py``, docs/tracing.md).

After every run the keeper writes ``<state>/views.json``: per view the last outcome, the base
commit the view includes, when it was updated and how far behind it was. It is what ``tidelake
view status`` reads without Spark.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from tidelake.config import Config
from tidelake.lake.after_round import RoundEvents
from tidelake.runtime import live_metrics as live
from tidelake.runtime import tracing
from tidelake.runtime.durable import write_atomic
from tidelake.view.lifecycle import DefinitionChangedError, LifecycleView
from tidelake.view.maintain import StepResult, VerifyResult, ViewMaintainer
from tidelake.view.replay import replay_table
from tidelake.view.table import ViewTable, instant_seconds
from tidelake.view.trace import traced

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = structlog.get_logger("tidelake.view")

STATE_FILE = "views.json"
REQUESTS_DIR = "views"


def state_path(config: Config) -> Path:
    return config.lake_state_dir / STATE_FILE


def request_path(config: Config, name: str) -> Path:
    return config.lake_state_dir / REQUESTS_DIR / f"rebuild-{name}"


def broken_path(config: Config, name: str) -> Path:
    """A lifecycle view that missed a round's events: it can no longer be complete."""
    return config.lake_state_dir / REQUESTS_DIR / f"broken-{name}"


def request_rebuild(config: Config, name: str) -> Path:
    """Ask the running ingest to rebuild ``name`` (see the module docstring)."""
    path = request_path(config, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, orjson.dumps({"asked_at_ms": int(time.time() * 1000)}))
    return path


def read_state(config: Config) -> dict[str, Any]:
    """``views.json``: view name → its last recorded run ({} before the first)."""
    try:
        data: dict[str, Any] = orjson.loads(state_path(config).read_bytes())
    except FileNotFoundError:
        return {}
    return data


class ViewKeeper:
    """Runs the configured views after each ingest round (``Ingestor.after_round``)."""

    def __init__(self, config: Config, spark: SparkSession) -> None:
        self.config = config
        self.maintainer = ViewMaintainer(config, spark)
        self._caught_up = False

    def wants(self, staged: RoundEvents | None) -> bool:
        """After a round that committed; on the first call (to catch up on a round the last
        process committed before it died); when a rebuild was asked for."""
        if not self.config.views:
            return False
        asked = any(request_path(self.config, n).exists() for n in self.config.views)
        return staged is not None or asked or not self._caught_up

    def __call__(self, staged: RoundEvents | None) -> list[StepResult]:
        """Update every view after a round (``staged``: its events per table; None when
        nothing was staged) and take up the rebuilds asked for."""
        if not self.wants(staged):
            return []
        asked = {n for n in self.config.views if request_path(self.config, n).exists()}
        self._caught_up = True
        tr = tracing.active()  # on: a span per view, a child of the round's (view/trace.py)
        results = []
        for name in self.config.views:
            update = partial(self._update, name, name in asked, staged)
            kind = self.config.views[name].kind
            results.append(update() if tr is None else traced(tr, name, kind, update))
        self.record(results)
        return results

    def _update(self, name: str, asked: bool, staged: RoundEvents | None) -> StepResult:
        """The rebuild ``asked`` for (its request taken up), else a step."""
        if not asked:
            return self.step(name, staged)
        result = self.rebuild(name)
        request_path(self.config, name).unlink(missing_ok=True)
        return result

    def step(self, name: str, staged: RoundEvents | None = None) -> StepResult:
        """One update of view ``name``; a lifecycle view takes the round's events (``staged``:
        None outside the ingest, when it can only start its history or find it current)."""
        if self.config.views[name].kind == "aggregate":
            return self.maintainer.step(name)
        started = time.monotonic()
        table = self.config.views[name].table or ""
        rounds = staged.events.values() if staged is not None else ()
        mine = [e for batch in rounds for e in batch if e.table_id == table]
        broken = broken_path(self.config, name)
        if broken.exists():
            return StepResult(name, "failed", reason=broken.read_text())
        if self.config.views[name].paused:
            if mine:  # the round's events pass it by: its history has a hole from here
                self._break(name, "paused while its table changed: the history is incomplete")
            return StepResult(name, "paused")
        try:
            view = LifecycleView(self.config, self.maintainer.spark, name)
            result = view.apply(mine, staged.seq_last if staged is not None else None)
        except DefinitionChangedError:  # its rows hold another column's history
            return self.rebuild(name, "the definition changed")
        except Exception as exc:  # the view's own failure: reported, the lake goes on
            log.warning("lifecycle view step failed", view=name, error=str(exc)[:500])
            self._break(name, f"a round's events were not applied ({str(exc)[:500]})")
            result = StepResult(name, "failed", reason=str(exc)[:2000])
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def _break(self, name: str, reason: str) -> None:
        """A lifecycle view missed events that will not come again (the ingest moves on):
        it stays failed with the reason until its table is removed (docs/views.md §7)."""
        path = broken_path(self.config, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(
            path,
            f"{reason}; remove {ViewTable(self.config, self.maintainer.spark, name).path} "
            "and this file to start a new history, or rebuild it by replaying the stream "
            "(tidelake view rebuild)".encode(),
        )

    def rebuild(self, name: str, reason: str = "asked for (tidelake view rebuild)") -> StepResult:
        """Recompute view ``name`` and swap it in: an aggregate view from its base tables, a
        lifecycle view by replaying the stream (its past is not in the lake)."""
        if self.config.views[name].kind != "lifecycle":
            return self.maintainer.rebuild_or_fail(name, reason)
        started = time.monotonic()
        try:
            view = LifecycleView(self.config, self.maintainer.spark, name)
            through = view.through()
            if through is None:
                return StepResult(name, "waiting", reason=f"{view.base} has no commit yet")
            result = view.rebuild(replay_table(self.config, view.base, through))
            # The history is whole again: a view broken by a missed round goes on.
            broken_path(self.config, name).unlink(missing_ok=True)
        except Exception as exc:  # the view's own failure: reported, the lake goes on
            log.warning("lifecycle rebuild failed", view=name, error=str(exc)[:500])
            result = StepResult(name, "failed", reason=str(exc)[:2000])
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def verify(self, name: str) -> VerifyResult:
        """Compare view ``name`` with what the base table says it must hold."""
        if self.config.views[name].kind == "lifecycle":
            return LifecycleView(self.config, self.maintainer.spark, name).verify()
        return self.maintainer.verify(name)

    def record(self, results: list[StepResult]) -> None:
        """Keep ``views.json`` and the metrics current with ``results``."""
        state = read_state(self.config)
        now = time.time()
        for result in results:
            entry = state.get(result.view, {})
            entry.update(
                {
                    "outcome": result.outcome,
                    "reason": result.reason,
                    "ran_at_ms": int(now * 1000),
                    "duration_ms": result.duration_ms,
                    "records": result.records,
                    "groups": result.groups,
                    "recomputed": result.recomputed,
                }
            )
            if result.checkpoint is not None:
                entry["base"] = dict(result.checkpoint.base)
                entry["updated_at_ms"] = result.checkpoint.at_ms
                entry["lag_s"] = 0.0
            elif result.outcome == "failed" and entry.get("base"):
                # Behind since the first base commit after the one it includes.
                # An aggregate view includes base commits (instant times); a lifecycle view
                # stream sequences: for it, its last update stands in.
                instants = [t for t in entry["base"].values() if len(t) >= 14]
                included = (
                    min(instant_seconds(t) for t in instants)
                    if instants
                    else entry.get("updated_at_ms", now * 1000) / 1000
                )
                entry["lag_s"] = round(max(0.0, now - included), 3)
            state[result.view] = entry
            live.VIEW_STEPS.labels(result.view, result.outcome).inc()
            live.VIEW_STEP_SECONDS.observe(result.duration_ms / 1000)
            if "lag_s" in entry:
                live.VIEW_LAG.labels(result.view).set(entry["lag_s"])
            if "updated_at_ms" in entry:
                live.VIEW_UPDATED.labels(result.view).set(entry["updated_at_ms"] / 1000)
        for gone in set(state) - set(self.config.views):
            del state[gone]
        path = state_path(self.config)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        for result in results:
            if result.outcome == "failed":
                log.warning("view not updated", view=result.view, reason=result.reason[:300])
