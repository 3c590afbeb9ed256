"""``tidelake view …``: the materialized views over the lake (docs/views.md).

``view list`` shows each configured view, its definition and whether tidelake can keep it;
``view status`` what the ingest last did with each (``views.json``, no Spark); ``view run``
one step of every view now; ``view rebuild NAME`` recomputes a view from its base table and
swaps it in atomically (left to the running ingest when one holds the lake); ``view verify``
compares each view with a full recomputation (exit 1 on any difference).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tidelake.cli.output import Column, print_json, print_table

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from tidelake.config import Config
    from tidelake.view.keeper import ViewKeeper
    from tidelake.view.maintain import StepResult

console = Console()
err_console = Console(stderr=True)

view_app = typer.Typer(
    help="Materialized views over the lake, kept from the changes.", no_args_is_help=True
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]
NamesArgument = Annotated[
    list[str] | None, typer.Argument(help="views (views.<name> in the config); default all")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _config(config: Path | None, names: list[str] | None) -> tuple[Config, list[str]]:
    from tidelake.cli import _load

    cfg = _load(config)
    wanted = list(names or cfg.views)
    unknown = [n for n in wanted if n not in cfg.views]
    if unknown:
        err_console.print(f"[bold red]no view named {', '.join(unknown)} in the configuration[/]")
        raise typer.Exit(2)
    if not wanted:
        err_console.print("no views are configured (views: in the config; docs/views.md)")
    return cfg, wanted


def _spark(cfg: Config) -> SparkSession:
    from tidelake.lake.spark import build_spark_session

    return build_spark_session(cfg, app_name="tidelake-view")


def _holding_the_lake(
    cfg: Config, work: Callable[[ViewKeeper], list[StepResult]]
) -> list[StepResult]:
    """``work`` with the lake's writer lock held (raises ``LakeLockedError`` when an ingest
    holds it), recorded in ``views.json`` as the ingest records its runs."""
    from tidelake.lake.lock import lock_path, writer_lock
    from tidelake.view.keeper import ViewKeeper

    with writer_lock(lock_path(cfg)):
        spark = _spark(cfg)
        try:
            keeper = ViewKeeper(cfg, spark)
            results = work(keeper)
            keeper.record(results)
            return results
        finally:
            spark.stop()


@view_app.command("list")
def list_views(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Each configured view: its base table, key, and whether it can be kept incrementally."""
    from tidelake.view.definition import ViewDefinitionError, parse_view

    cfg, names = _config(config, None)
    rows: list[dict[str, Any]] = []
    for name in names:
        view = cfg.views[name]
        if view.kind == "lifecycle":
            rows.append(
                {
                    "view": name,
                    "kind": "lifecycle",
                    "table": view.table,
                    "key": [],
                    "columns": ["state", "times_entered", "ms_in_state", "entered_at", "left_at"],
                    "paused": view.paused,
                    "error": None,
                    "state_column": view.state_column,
                    "description": view.description,
                }
            )
            continue
        try:
            parsed = parse_view(name, view.sql or "")
            rows.append(
                {
                    "view": name,
                    "kind": "aggregate",
                    "table": parsed.table,
                    "tables": list(parsed.tables),
                    "join": parsed.join.kind if parsed.join else None,
                    "key": list(parsed.group_outputs),
                    "columns": [o.alias for o in parsed.outputs],
                    "paused": view.paused,
                    "error": None,
                    "sql": view.sql,
                    "description": view.description,
                }
            )
        except ViewDefinitionError as exc:
            rows.append({"view": name, "error": str(exc), "sql": view.sql, "paused": view.paused})
    if json_out:
        print_json(rows)
    else:
        _print_list(rows)
    if any(r["error"] for r in rows):
        raise typer.Exit(1)


def _print_list(rows: list[dict[str, Any]]) -> None:
    print_table(
        console,
        [Column("view", ident=True), Column("table"), Column("key"), Column("state")],
        [
            [
                r["view"],
                ", ".join(r.get("tables") or [r.get("table") or "-"]),
                ", ".join(r.get("key", [])),
                r["error"] or ("paused" if r["paused"] else "kept"),
            ]
            for r in rows
        ],
    )


@view_app.command("status")
def status(config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """What the last run did with each view: outcome, base commit included, freshness."""
    from tidelake.view.keeper import read_state, request_path

    cfg, names = _config(config, None)
    state = read_state(cfg)
    now_ms = time.time() * 1000
    out = []
    for name in names:
        entry = dict(state.get(name, {"outcome": "never run"}))
        entry["view"] = name
        entry["rebuild_asked"] = request_path(cfg, name).exists()
        if "updated_at_ms" in entry:
            entry["age_s"] = round((now_ms - entry["updated_at_ms"]) / 1000, 1)
        out.append(entry)
    if json_out:
        print_json(out)
        return
    print_table(
        console,
        [
            Column("view", ident=True),
            Column("last run"),
            Column("base commit", ident=True),
            Column("updated", justify="right"),
            Column("lag", justify="right"),
            Column("reason"),
        ],
        [
            [
                e["view"],
                e["outcome"] + (" (rebuild asked)" if e["rebuild_asked"] else ""),
                ", ".join(f"{t}@{i}" for t, i in e.get("base", {}).items()) or "-",
                f"{e['age_s']} s ago" if "age_s" in e else "-",
                f"{e['lag_s']} s" if "lag_s" in e else "-",
                escape(e.get("reason") or ""),
            ]
            for e in out
        ],
    )


@view_app.command("run")
def run(
    names: NamesArgument = None, config: ConfigOption = None, json_out: JsonOption = False
) -> None:
    """One step of each view now (the ingest does this after every round by itself).
    Exit 1 when a view failed."""
    from tidelake.lake.lock import LakeLockedError

    cfg, wanted = _config(config, names)
    try:
        results = _holding_the_lake(cfg, lambda keeper: [keeper.step(n) for n in wanted])
    except LakeLockedError as exc:
        err_console.print(
            f"[bold yellow]{escape(str(exc))}[/]\nthe running ingest updates the views after "
            "each round: see `tidelake view status`",
            soft_wrap=True,
        )
        raise typer.Exit(1) from exc
    _report([r.as_dict() for r in results], json_out)
    if any(r.outcome == "failed" for r in results):
        raise typer.Exit(1)


@view_app.command("rebuild")
def rebuild(
    names: NamesArgument = None,
    config: ConfigOption = None,
    wait_s: Annotated[
        float, typer.Option("--wait", help="seconds to wait for a running ingest to rebuild")
    ] = 600.0,
    json_out: JsonOption = False,
) -> None:
    """Recompute views from their base tables and swap each in atomically (one Hudi
    insert_overwrite_table commit: readers see the old view or the new one)."""
    from tidelake.lake.lock import LakeLockedError
    from tidelake.view.keeper import read_state, request_path, request_rebuild

    cfg, wanted = _config(config, names)
    try:
        results = _holding_the_lake(cfg, lambda keeper: [keeper.rebuild(n) for n in wanted])
        _report([r.as_dict() for r in results], json_out)
        if any(r.outcome == "failed" for r in results):
            raise typer.Exit(1)
        return
    except LakeLockedError:
        pass
    # The ingest holds the lake: it rebuilds after its next round (view/keeper.py).
    for name in wanted:
        request_rebuild(cfg, name)
    err_console.print(f"the running ingest was asked to rebuild {', '.join(wanted)}")
    deadline = time.monotonic() + wait_s
    while any(request_path(cfg, n).exists() for n in wanted):
        if time.monotonic() > deadline:
            err_console.print("[bold yellow]not rebuilt yet: see `tidelake view status`[/]")
            raise typer.Exit(1)
        time.sleep(0.5)
    state = read_state(cfg)
    entries = [{"view": n, **state.get(n, {})} for n in wanted]
    _report(entries, json_out)
    if any(e.get("outcome") == "failed" for e in entries):
        raise typer.Exit(1)


@view_app.command("verify")
def verify(
    names: NamesArgument = None, config: ConfigOption = None, json_out: JsonOption = False
) -> None:
    """Compare each view with a full recomputation over the base commit it includes.
    Exit 1 on any difference."""
    from tidelake.view.keeper import ViewKeeper

    cfg, wanted = _config(config, names)
    spark = _spark(cfg)
    try:
        keeper = ViewKeeper(cfg, spark)
        results = [keeper.verify(n) for n in wanted]
    finally:
        spark.stop()
    rows: list[dict[str, Any]] = [
        {
            "view": r.view,
            "ok": r.ok,
            "rows": r.rows,
            "expected": r.expected,
            "extra": r.extra,
            "missing": r.missing,
            "base": r.base,
        }
        for r in results
    ]
    if json_out:
        print_json(rows)
    else:
        print_table(
            console,
            [
                Column("view", ident=True),
                Column("result"),
                Column("rows", justify="right"),
                Column("expected", justify="right"),
                Column("extra", justify="right"),
                Column("missing", justify="right"),
            ],
            [
                [
                    str(r["view"]),
                    "equal" if r["ok"] else "DIFFERS",
                    str(r["rows"]),
                    str(r["expected"]),
                    str(r["extra"]),
                    str(r["missing"]),
                ]
                for r in rows
            ],
        )
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _report(entries: list[dict[str, Any]], json_out: bool) -> None:
    if json_out:
        print_json(entries)
        return
    print_table(
        console,
        [
            Column("view", ident=True),
            Column("outcome"),
            Column("records", justify="right"),
            Column("groups", justify="right"),
            Column("ms", justify="right"),
            Column("reason"),
        ],
        [
            [
                e["view"],
                str(e.get("outcome", "-")),
                str(e.get("records", 0)),
                str(e.get("groups", 0)),
                str(e.get("duration_ms", 0)),
                escape(str(e.get("reason") or "")),
            ]
            for e in entries
        ],
    )


def register(app: typer.Typer) -> None:
    """Add ``tidelake view …`` to the command line."""
    app.add_typer(view_app, name="view")
