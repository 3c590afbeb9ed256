"""``tidelake route …``: the stream's changes into other sinks besides the lake (docs/routes.md).

``route list`` shows each route's consumer (acknowledged, pending, in flight) and its dead
letters; ``route run NAME`` runs one route until SIGTERM/SIGINT; ``route replay NAME
--from-seq N`` delivers the stream to it again from a sequence (the route stopped); ``route
reprocess NAME`` applies its dead letters again and removes the ones that land; ``route
add|pause|resume|remove`` change the routes at run time (``route/registry.py``).
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tidelake.cli.output import Column, print_json, print_table

if TYPE_CHECKING:
    from tidelake.config import Config
    from tidelake.route.runner import RouteStats, RouteStatus

console = Console()
err_console = Console(stderr=True)

route_app = typer.Typer(
    help="Routes: the stream's changes into PostgreSQL, Redis or webhooks.", no_args_is_help=True
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]
NameArgument = Annotated[str, typer.Argument(help="the route's name (routes.<name> in the config)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _config(config: Path | None, name: str | None = None) -> Config:
    from tidelake.cli import _load
    from tidelake.errors import ConfigError
    from tidelake.route.runner import route_config

    cfg = _load(config)
    if cfg.bus.kind != "nats":
        err_console.print("[bold red]routes read a NATS JetStream bus (bus.kind: nats)[/]")
        raise typer.Exit(2)
    if name is not None:
        try:
            route_config(cfg, name)
        except ConfigError as exc:
            err_console.print(f"[bold red]{escape(str(exc))}[/]", soft_wrap=True)
            raise typer.Exit(2) from exc
    return cfg


@route_app.command("list")
def route_list(config: ConfigOption = None, json: JsonOption = False) -> None:
    """Each route: its sink, where its consumer stands on the stream, its dead letters."""
    from tidelake.bus.connection import on_jetstream
    from tidelake.route.registry import RouteRegistry
    from tidelake.route.runner import route_status

    cfg = _config(config)

    names = sorted(RouteRegistry(cfg).routes())

    async def collect(js: Any) -> list[RouteStatus]:
        return [await route_status(js, cfg, name) for name in names]

    statuses = asyncio.run(on_jetstream(cfg.bus, collect))
    if json:
        print_json({"routes": [asdict(s) for s in statuses]})
        return
    columns = [
        Column("route", ident=True),
        Column("sink"),
        Column("state"),
        Column("acked", "right", ident=True),
        Column("pending", "right"),
        Column("in flight", "right"),
        Column("dead letters", "right"),
    ]
    rows = [
        [
            s.name,
            s.sink,
            "paused" if s.paused else ("running" if s.exists else "not started"),
            str(s.acked_seq),
            f"{s.pending:,}",
            f"{s.in_flight:,}",
            f"{s.dead_letters:,}",
        ]
        for s in statuses
    ]
    print_table(console, columns, rows)


@route_app.command("run")
def route_run(
    name: NameArgument,
    config: ConfigOption = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="stop once a fetch finds nothing new")
    ] = False,
    json: JsonOption = False,
) -> None:
    """Run one route: consume the CDC stream, apply to its sink, ack after the sink holds it.
    Stops cleanly on SIGTERM/SIGINT (what it holds unacknowledged is redelivered). While the
    route is paused it fetches nothing; once it is removed it exits."""
    from tidelake.cli import _metrics_endpoint
    from tidelake.route.runner import RouteRunner
    from tidelake.runtime.live_metrics import router_collectors
    from tidelake.runtime.tracing import process_tracing

    cfg = _config(config, name)

    async def main() -> RouteStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await RouteRunner(cfg, name).run(stop, until_idle=until_idle)

    with (
        _metrics_endpoint(cfg, f"route-{name}", router_collectors()),
        process_tracing(cfg.tracing, "route"),  # a span per batch (docs/tracing.md)
    ):
        stats = asyncio.run(main())
    if json:
        print_json({"route": name, **asdict(stats)})
    else:
        console.print(
            f"route {name}: {stats.messages:,} messages, {stats.changes:,} changes applied, "
            f"{stats.filtered:,} filtered out, {stats.dead_lettered:,} dead-lettered",
            highlight=False,
        )


@route_app.command("replay")
def route_replay(
    name: NameArgument,
    from_seq: Annotated[int, typer.Option("--from-seq", min=1, help="first stream sequence")],
    config: ConfigOption = None,
) -> None:
    """Deliver the stream to a stopped route again from a sequence. What its sink already
    holds is not moved back: every sink applies by key with the source position as version."""
    from tidelake.bus.connection import on_jetstream
    from tidelake.route.runner import rewind

    cfg = _config(config, name)

    asyncio.run(on_jetstream(cfg.bus, lambda js: rewind(js, cfg, name, from_seq)))
    console.print(f"route {name} will read the stream again from sequence {from_seq}")


@route_app.command("reprocess")
def route_reprocess(
    name: NameArgument, config: ConfigOption = None, json: JsonOption = False
) -> None:
    """Apply a route's dead letters again; remove each one that lands. Exit 1 when some still
    fail (they stay, with their new reason logged)."""
    from tidelake.bus.connection import on_jetstream
    from tidelake.route.runner import RouteRunner, reprocess

    cfg = _config(config, name)

    runner = RouteRunner(cfg, name)
    try:
        result = asyncio.run(on_jetstream(cfg.bus, lambda js: reprocess(js, runner)))
    finally:
        runner.sink.close()
    if json:
        print_json({"route": name, **asdict(result)})
    else:
        console.print(
            f"route {name}: {result.applied:,} dead letters applied and removed, "
            f"{result.still_failing:,} still failing",
            highlight=False,
        )
    if result.still_failing:
        raise typer.Exit(1)


def _change(config: Path | None, name: str, change: str) -> None:
    from tidelake.errors import ConfigError
    from tidelake.route.registry import RouteRegistry

    cfg = _config(config)
    registry = RouteRegistry(cfg)
    try:
        getattr(registry, change)(name)
    except ConfigError as exc:
        err_console.print(f"[bold red]{escape(str(exc))}[/]", soft_wrap=True)
        raise typer.Exit(2) from exc
    console.print(f"route {name}: {change}d (recorded in {registry.path})", highlight=False)


@route_app.command("add")
def route_add(
    name: NameArgument,
    file: Annotated[Path, typer.Option("--file", "-f", help="YAML or JSON: the route's settings")],
    config: ConfigOption = None,
) -> None:
    """Add a route at run time (kept in <home>/routes.yaml); `tidelake run` starts it.
    Secrets only through password_file/signing_key_file."""
    import yaml

    from tidelake.errors import ConfigError
    from tidelake.route.registry import RouteRegistry

    cfg = _config(config)
    registry = RouteRegistry(cfg)
    try:
        data = yaml.safe_load(file.read_text())
        if not isinstance(data, dict):
            raise ConfigError(f"{file}: a route's settings are a mapping")
        route = registry.add(name, data)
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        err_console.print(f"[bold red]{escape(str(exc))}[/]", soft_wrap=True)
        raise typer.Exit(2) from exc
    console.print(
        f"route {name} ({route.sink.kind}) added (recorded in {registry.path})", highlight=False
    )


@route_app.command("pause")
def route_pause(name: NameArgument, config: ConfigOption = None) -> None:
    """Pause a route: it stops fetching; its consumer keeps its place in the stream."""
    _change(config, name, "pause")


@route_app.command("resume")
def route_resume(name: NameArgument, config: ConfigOption = None) -> None:
    """Resume a route paused at run time."""
    _change(config, name, "resume")


@route_app.command("remove")
def route_remove(name: NameArgument, config: ConfigOption = None) -> None:
    """Remove a route: its process exits (`tidelake run` does not start it again). Its
    consumer stays on the bus until deleted there; adding the route again resumes from it."""
    _change(config, name, "remove")


def register(app: typer.Typer) -> None:
    """Add ``tidelake route …`` to the command line."""
    app.add_typer(route_app, name="route")
