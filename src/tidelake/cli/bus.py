"""``tidelake bus …``: the NATS JetStream bus itself. ``bus init`` provisions it.

Provisioning (the CDC stream, the dead-letter stream, the stager's durable consumer:
:func:`tidelake.bus.provision.provision`) also happens by itself when ``run``, ``stage`` or
``capture`` starts; ``bus init`` does it on purpose, before any of them, so that a producer
(Debezium Server, TiCDC, a script with nats-py) can publish first and get its acknowledgement
instead of "no response from stream". It is idempotent: a second run reports ``unchanged``.

The bus is the one every verb finds (:func:`tidelake.bus.discovery.find_bus`): ``bus.url``,
else the one a ``tidelake run`` recorded in the home.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tidelake.cli.output import print_json

console = Console()
err_console = Console(stderr=True)

bus_app = typer.Typer(
    help="The NATS JetStream bus: provision its streams and consumer.", no_args_is_help=True
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]


@bus_app.command("init")
def bus_init(
    config: ConfigOption = None,
    json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Create (or update) the CDC stream, the dead-letter stream and the stager's consumer.

    Idempotent; prints what it did to each (created, updated, unchanged). Exit status: 0 done;
    1 the bus refused or did not answer; 2 no bus found (no bus.url and no `tidelake run`
    recorded in the home)."""
    from tidelake.bus.discovery import find_bus, no_bus_message, record_path, use_bus
    from tidelake.bus.provision import provision
    from tidelake.cli import _load
    from tidelake.errors import BusError

    cfg = _load(config, find_bus=False)
    found = find_bus(cfg)  # as every verb does; here to say where the bus came from
    if found.note:
        err_console.print(f"[yellow]{escape(found.note)}[/]", soft_wrap=True)
    if found.url is None:
        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)
    cfg = use_bus(cfg, found)
    came_from = str(record_path(cfg.home)) if found.source == "record" else "bus.url"
    try:
        report = asyncio.run(provision(cfg.bus, cfg.bus.url))
    except BusError as exc:
        err_console.print(f"[bold red]bus error[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from exc
    if json:
        data: dict[str, Any] = {
            "url": cfg.bus.url,
            "found_in": came_from,
            "provisioned": [
                {
                    "kind": step.kind,
                    "name": step.name,
                    "action": step.action,
                    "fields": list(step.fields),
                    "messages": step.messages,
                }
                for step in report
            ],
        }
        print_json(data)
        return
    console.print(f"bus {cfg.bus.url} (from {came_from})", soft_wrap=True, highlight=False)
    table = Table(show_edge=False, box=None, pad_edge=False)
    for column in ("kind", "name", "action", "messages"):
        table.add_column(column, justify="right" if column == "messages" else "left")
    for step in report:
        action = step.action + (f" ({', '.join(step.fields)})" if step.fields else "")
        table.add_row(step.kind, step.name, action, f"{step.messages:,}")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add ``tidelake bus …`` to the command line."""
    app.add_typer(bus_app, name="bus")
