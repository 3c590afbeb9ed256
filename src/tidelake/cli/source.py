"""``tidelake source …``: REST APIs polled into the bus, managed at run time
(docs/rest-source.md, Managed sources).

``source list`` shows each source's state, cursor, last poll and totals; ``source run NAME``
polls one until SIGTERM/SIGINT (``tidelake run`` starts one per source); ``source
add|pause|resume|remove`` change the sources at run time (``capture/source_registry.py``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tidelake.cli.output import Column, print_json, print_table

if TYPE_CHECKING:
    from tidelake.capture.rest import RestSourceStats
    from tidelake.config import Config

console = Console()
err_console = Console(stderr=True)

source_app = typer.Typer(
    help="Sources: HTTP APIs polled into the bus, managed at run time.", no_args_is_help=True
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]
NameArgument = Annotated[
    str, typer.Argument(help="the source's name (sources.<name> in the config)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[bold red]{escape(str(exc))}[/]", soft_wrap=True)
    return typer.Exit(2)


def _config(config: Path | None) -> Config:
    from tidelake.cli import _load

    return _load(config, find_bus=False)


def _when(ms: int | None) -> str:
    if not ms:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@source_app.command("list")
def source_list(config: ConfigOption = None, json: JsonOption = False) -> None:
    """Each source: its table, state, saved cursor, last poll, totals and last error."""
    from tidelake.capture.source_runner import source_statuses
    from tidelake.errors import ConfigError

    cfg = _config(config)
    try:
        statuses = source_statuses(cfg)
    except ConfigError as exc:
        raise _fail(exc) from exc
    if json:
        print_json({"sources": [asdict(s) for s in statuses]})
        return
    columns = [
        Column("source", ident=True),
        Column("table", ident=True),
        Column("state"),
        Column("cursor", ident=True),
        Column("last poll"),
        Column("published", "right"),
        Column("errors", "right"),
        Column("last error"),
    ]
    rows = [
        [
            s.name,
            s.table,
            s.state,
            escape(s.cursor or "-"),
            _when(s.last_poll_ms),
            f"{s.published:,}",
            f"{s.errors:,}",
            escape(s.last_error or ""),
        ]
        for s in statuses
    ]
    print_table(console, columns, rows)


@source_app.command("run")
def source_run(
    name: NameArgument,
    config: ConfigOption = None,
    once: Annotated[
        bool, typer.Option("--once", help="poll once (none when paused), then exit")
    ] = False,
    json: JsonOption = False,
) -> None:
    """Poll one source into the bus until SIGTERM/SIGINT, the cursor saved once the bus
    stored each poll. While the source is paused it polls nothing; once it is removed it
    exits. A failing poll is counted and tried again at the next interval."""
    from tidelake.capture.rest import RestSourceError, RestUnavailableError
    from tidelake.capture.source_runner import SourceRunner
    from tidelake.cli import _load, _metrics_endpoint
    from tidelake.errors import ConfigError, TidelakeError
    from tidelake.runtime.live_metrics import poller_collectors

    cfg = _load(config)
    if not cfg.bus.url and cfg.bus.kind == "nats":
        from tidelake.bus.discovery import no_bus_message

        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)
    try:
        runner = SourceRunner(cfg, name)
    except ConfigError as exc:
        raise _fail(exc) from exc

    async def main() -> RestSourceStats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await runner.run(stop, once=once)

    try:
        with _metrics_endpoint(cfg, f"source-{name}", poller_collectors()):
            stats = asyncio.run(main())
    except ConfigError as exc:
        raise _fail(exc) from exc
    except (RestSourceError, RestUnavailableError, TidelakeError) as exc:
        err_console.print(f"[bold red]source {name} failed[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from exc
    if json:
        print_json({"source": name, **asdict(stats)})
    else:
        err_console.print(
            f"source {name}: {stats.polls} polls, {stats.records} records read, "
            f"{stats.published} stored in the bus ({stats.duplicates} duplicates), cursor saved "
            f"{stats.saves} times, {sum(stats.errors.values())} failed polls",
            soft_wrap=True,
            highlight=False,
        )


def _change(config: Path | None, name: str, change: str) -> None:
    from tidelake.capture.source_registry import SourceRegistry
    from tidelake.errors import ConfigError

    registry = SourceRegistry(_config(config))
    try:
        getattr(registry, change)(name)
    except ConfigError as exc:
        raise _fail(exc) from exc
    console.print(f"source {name}: {change}d (recorded in {registry.path})", highlight=False)


def _assignment(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(f"{text!r}: give KEY=VALUE", param_hint="--set")
    return key.strip(), yaml.safe_load(value)


@source_app.command("add")
def source_add(
    name: NameArgument,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="YAML or JSON: the source's settings")
    ] = None,
    url: Annotated[str | None, typer.Option(help="the API's list endpoint")] = None,
    database: Annotated[str | None, typer.Option(help="database of the records' table")] = None,
    table: Annotated[str | None, typer.Option(help="table the records become")] = None,
    primary_key: Annotated[
        list[str] | None, typer.Option("--primary-key", help="a field keying a record (repeatable)")
    ] = None,
    cursor_field: Annotated[str | None, typer.Option(help="the cursor field")] = None,
    cursor_type: Annotated[
        str | None, typer.Option(metavar="timestamp|integer", help="the cursor's kind")
    ] = None,
    interval: Annotated[float | None, typer.Option(help="seconds between two polls")] = None,
    token_file: Annotated[Path | None, typer.Option(help="file holding the bearer token")] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option("--set", help="KEY=VALUE: any other setting, VALUE as YAML (repeatable)"),
    ] = None,
    paused: Annotated[bool, typer.Option("--paused", help="add it paused")] = False,
    config: ConfigOption = None,
) -> None:
    """Add a source at run time (kept in <home>/sources.yaml); `tidelake run` starts it.
    Settings from --file, then the options over them. Secrets only through token_file."""
    import yaml

    from tidelake.capture.source_registry import SourceRegistry
    from tidelake.errors import ConfigError

    registry = SourceRegistry(_config(config))
    try:
        data: dict[str, Any] = {}
        if file is not None:
            loaded = yaml.safe_load(file.read_text())
            if not isinstance(loaded, dict):
                raise ConfigError(f"{file}: a source's settings are a mapping")
            data = loaded
        options = {
            "url": url,
            "database": database,
            "table": table,
            "primary_key": primary_key or None,
            "cursor_field": cursor_field,
            "cursor_type": cursor_type,
            "interval_s": interval,
            "token_file": str(token_file) if token_file is not None else None,
            "paused": paused or None,
        }
        data.update({k: v for k, v in options.items() if v is not None})
        data.update(dict(_assignment(s) for s in setting or []))
        source = registry.add(name, data)
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        raise _fail(exc) from exc
    console.print(
        f"source {name} ({source.kind} {source.url} into {source.database}.{source.table}) added "
        f"(recorded in {registry.path})",
        highlight=False,
    )


@source_app.command("pause")
def source_pause(name: NameArgument, config: ConfigOption = None) -> None:
    """Pause a source: it stops polling within seconds; its cursor stays where it is."""
    _change(config, name, "pause")


@source_app.command("resume")
def source_resume(name: NameArgument, config: ConfigOption = None) -> None:
    """Resume a source paused at run time: it polls from its saved cursor."""
    _change(config, name, "resume")


@source_app.command("remove")
def source_remove(name: NameArgument, config: ConfigOption = None) -> None:
    """Remove a source: its process exits (`tidelake run` does not start it again). Its
    cursor file stays; adding the source again (same table) resumes from it."""
    _change(config, name, "remove")


def register(app: typer.Typer) -> None:
    """Add ``tidelake source …`` to the command line."""
    app.add_typer(source_app, name="source")
