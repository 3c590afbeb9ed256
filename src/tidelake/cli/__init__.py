"""The ``tidelake`` command line. Each verb is a thin shell over one stage's module."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import structlog
import typer
from rich.markup import escape

from tidelake.cli.output import make_console, print_json
from tidelake.config import Config, load_config
from tidelake.errors import ConfigError
from tidelake.runtime.logs import LogFormat, configure_logging

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidelake.lake.after_round import AfterRound, Hook

app = typer.Typer(
    name="tidelake",
    help="Every committed change of an OLTP database in an Apache Hudi lakehouse within seconds.",
    no_args_is_help=True,
    # `tidelake --install-completion` / `--show-completion`: bash, zsh, fish, PowerShell.
    add_completion=True,
    # Click's plain help: no `<bool>` after a flag (typer's rich panels show one), and it
    # reads the same at 80 columns, in a pipe and in a terminal.
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
)
config_app = typer.Typer(
    help="Validate and show the configuration.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(config_app, name="config")

console = make_console()
err_console = make_console(stderr=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]


def _configure_logging(level: str, fmt: LogFormat = "console") -> None:
    """structlog to stderr at ``level`` in ``fmt``: stdout is for tables and JSON."""
    configure_logging(level, fmt)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("tidelake")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            number = "unknown (not installed)"
        sys.stdout.write(f"tidelake {number}\n")
        raise typer.Exit(0)


VersionOption = Annotated[
    bool,
    typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit"),
]


HomeOption = Annotated[
    Path | None,
    typer.Option(
        "--home",
        help="data directory of every verb (default: $TIDELAKE_HOME, the config's home, "
        "else $XDG_DATA_HOME/tidelake or ~/.local/share/tidelake)",
        show_default=False,
    ),
]


@app.callback()
def _main(home: HomeOption = None, version: VersionOption = False) -> None:
    """Every verb starts at INFO; a verb that loads a config applies its ``log_level``."""
    _configure_logging("info")
    if home is not None:
        # Through the environment, as TIDELAKE_HOME: it wins over the config file's home like
        # every TIDELAKE_ override, and the stage processes `run` starts inherit it.
        os.environ["TIDELAKE_HOME"] = str(home.expanduser().resolve())


def _home() -> Path:
    """The home without loading a config: ``--home``/``TIDELAKE_HOME``, else the default (the
    self-contained verbs keep their data under it; a config file's home is theirs to ignore)."""
    from tidelake.config import default_home

    named = os.environ.get("TIDELAKE_HOME", "").strip()
    return Path(named).expanduser() if named else default_home(os.environ)


def _view_keeper(cfg: Config) -> Hook:
    """What the ingest runs after each round: the configured views (view/keeper.py)."""

    def make(spark: SparkSession) -> AfterRound:
        from tidelake.view.keeper import ViewKeeper

        return ViewKeeper(cfg, spark)

    return make


@contextlib.contextmanager
def _metrics_endpoint(cfg: Config, process: str, collectors: list[Any]) -> Iterator[None]:
    """This long-running verb's own /metrics and /healthz while it runs (``metrics.port``;
    runtime/metrics_server.py); a port that cannot be bound exits 2 before any work."""
    from tidelake.runtime.metrics_server import MetricsPortError, serving

    endpoint = serving(cfg.metrics, process, collectors)
    try:
        endpoint.__enter__()
    except MetricsPortError as exc:
        err_console.print(f"[bold red]metrics endpoint[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from exc
    try:
        yield
    finally:
        endpoint.__exit__(None, None, None)


def _load(path: Path | None, *, find_bus: bool = True) -> Config:
    """The config, and (``find_bus``) the bus a ``tidelake run`` recorded in the home when
    ``bus.url`` is unset (bus/discovery.py); a stale record is named on stderr and ignored."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        err_console.print(f"[bold red]invalid configuration[/]\n{exc}")
        raise typer.Exit(2) from exc
    _configure_logging(cfg.log_level, cfg.log_format)
    if find_bus and not cfg.bus.url and cfg.bus.kind == "nats":
        from tidelake.bus.discovery import find_bus as lookup_bus
        from tidelake.bus.discovery import use_bus

        found = lookup_bus(cfg)
        if found.note:
            err_console.print(f"[yellow]{found.note}[/]", soft_wrap=True)
        cfg = use_bus(cfg, found)
    return cfg


@config_app.command("check")
def config_check(
    file: Annotated[Path | None, typer.Argument(help="config file to check")] = None,
) -> None:
    """Validate a config file; print the effective config (secrets masked) or exit 2."""
    cfg = _load(file, find_bus=False)
    console.print_json(orjson.dumps(cfg.masked()).decode())


@app.command()
def demo(
    events: Annotated[int, typer.Option(help="change events to publish")] = 50_000,
    rate: Annotated[float, typer.Option(help="events per second")] = 2_000.0,
    seed: Annotated[int, typer.Option(help="workload seed (same seed, same events)")] = 7,
    home: Annotated[
        Path | None,
        typer.Option(help="demo data directory, wiped first (default: <home>/demo)"),
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="print one JSON summary line last")] = False,
    object_store: Annotated[
        str | None,
        typer.Option(help="minio: staging and lake in a private MinIO (S3) server"),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(help="mariadb or postgres: capture from a private database server"),
    ] = None,
    with_ddl: Annotated[
        bool,
        typer.Option(
            "--with-ddl", help="schema changes mid-stream (add, drop, rename, widen, create, drop)"
        ),
    ] = False,
    kafka: Annotated[
        bool,
        typer.Option(
            "--kafka",
            help="TiCDC's Kafka sink in front: the workload through a private Kafka broker and "
            "two `capture kafka` members, with a member and the broker killed -9 on the way",
        ),
    ] = False,
    bus: Annotated[
        str,
        typer.Option(
            help="nats (JetStream) or kafka: Kafka as the pipeline's bus too, with two stagers "
            "in one consumer group and the one holding the topic killed -9 (implies --kafka)",
        ),
    ] = "nats",
    trino: Annotated[
        bool,
        typer.Option(
            "--trino",
            help="register the tables in a private Hive Metastore and verify them through "
            "Trino too (scripts/setup with TIDELAKE_SETUP_QUERY_ENGINES=1 installs both)",
        ),
    ] = False,
    sinks: Annotated[
        bool,
        typer.Option(
            "--sinks",
            help="routes beside the lake: PostgreSQL, Redis, a webhook and OpenSearch (when "
            "laid out), each killed -9 once, then a replay and a dead-letter re-process; every "
            "destination verified, DDL included with --with-ddl (needs PostgreSQL and "
            "redis-server: scripts/setup with TIDELAKE_SETUP_DATABASES=1; OpenSearch: "
            "TIDELAKE_SETUP_TESTS=1)",
        ),
    ] = False,
    views: Annotated[
        bool,
        typer.Option(
            "--views",
            help="two materialized views over the orders (customer activity, order "
            "lifecycle) kept by the ingest, which is killed -9 once mid-commit and once "
            "mid-view-update; each view checked against its full recomputation",
        ),
    ] = False,
    tables: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="N tables of one schema (shop.store_0001 …) instead of the order system, the "
            "transactions spread round-robin over them (--rate is the total: each table gets "
            "rate/N events/s); the tables are declared in lake.tables, as for a changefeed "
            "started on existing tables",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            metavar="N",
            help="N workers, each a stager and an ingest owning a share of the tables (its own "
            "consumer over its tables' subjects, staging root and ingest state; one lake): "
            "the tables dealt round-robin; the order or --tables workload on NATS only",
        ),
    ] = 1,
    fsync: Annotated[
        bool,
        typer.Option(
            "--fsync/--no-fsync",
            help="the embedded nats-server fsyncs before every PubAck (sync_interval: "
            "always); --no-fsync: on nats-server's default schedule, every 2 minutes. Each "
            "message is fsynced on its own, so on a disk like the 2-core bench machine's, "
            "always caps publishing near 4,000 events/s (docs/benchmarks.md, optimisation 9)",
        ),
    ] = True,
) -> None:
    """Run the whole pipeline on embedded defaults and verify the lake row by row."""
    from tidelake.pipeline.demo import DemoOptions, render_summary, run_demo

    if object_store not in (None, "minio"):
        err_console.print("[bold red]--object-store takes minio[/]")
        raise typer.Exit(2)
    if bus not in ("nats", "kafka"):
        err_console.print("[bold red]--bus takes nats or kafka[/]")
        raise typer.Exit(2)
    if sinks and (source is not None or kafka or bus == "kafka"):
        err_console.print("[bold red]--sinks runs with the workload on a NATS bus only[/]")
        raise typer.Exit(2)
    if views and (source is not None or kafka or bus == "kafka"):
        err_console.print("[bold red]--views runs with the workload on a NATS bus only[/]")
        raise typer.Exit(2)
    if not fsync and (source is not None or kafka or bus == "kafka"):
        err_console.print("[bold red]--no-fsync runs with the workload on a NATS bus only[/]")
        raise typer.Exit(2)
    if tables is not None and (
        source is not None or kafka or bus == "kafka" or with_ddl or sinks or views
    ):
        err_console.print(
            "[bold red]--tables runs the many-tables workload on a NATS bus, without "
            "--source, --kafka, --with-ddl, --sinks or --views[/]"
        )
        raise typer.Exit(2)
    if workers > 1 and (
        source is not None
        or kafka
        or bus == "kafka"
        or with_ddl
        or sinks
        or views
        or trino
        or object_store
    ):
        err_console.print(
            "[bold red]--workers runs the order or --tables workload on a NATS bus, without "
            "--source, --kafka, --with-ddl, --sinks, --views, --trino or --object-store[/]"
        )
        raise typer.Exit(2)
    out = err_console if json else console
    options = DemoOptions(
        sinks=sinks,
        views=views,
        bus=bus,
        events=events,
        rate=rate,
        seed=seed,
        home=home or _home() / "demo",
        object_store=object_store,
        with_ddl=with_ddl,
        trino=trino,
        tables=tables,
        workers=workers,
        fsync=fsync,
    )
    if source is not None:
        from tidelake.pipeline.demo_source import run_source_demo

        if source not in ("mariadb", "postgres"):
            err_console.print("[bold red]--source takes mariadb or postgres[/]")
            raise typer.Exit(2)
        result = run_source_demo(options, source, out)  # type: ignore[arg-type]
    elif kafka or bus == "kafka":
        from tidelake.pipeline.demo_kafka import run_kafka_demo

        result = run_kafka_demo(options, out)
    else:
        result = run_demo(options, out)
    render_summary(result, out)
    if json:
        print_json(result.to_json())
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def chaos(
    seed: Annotated[int, typer.Option(help="seed of the workload and of the fault schedule")] = 1,
    events: Annotated[int, typer.Option(help="change events the source produces")] = 30_000,
    rate: Annotated[float, typer.Option(help="events per second")] = 150.0,
    min_faults: Annotated[
        int, typer.Option(help="keep injecting faults until this many (each kind at least once)")
    ] = 50,
    kinds: Annotated[
        str,
        typer.Option(
            help="comma-separated fault kinds: kill, pause, bus-down, disk-full, store-down, "
            "store-slow, restart-storm (the store kinds need --stage-store s3); default all"
        ),
    ] = "",
    stage_store: Annotated[
        str, typer.Option(help="local (a directory) or s3 (a private MinIO) for staging")
    ] = "local",
    stagers: Annotated[int, typer.Option(help="stagers on the one durable consumer")] = 2,
    max_deliver: Annotated[
        int, typer.Option(help="the consumer's MaxDeliver during the run")
    ] = 1_000,
    source: Annotated[
        str,
        typer.Option(
            help="workload (canal-json published here), mariadb (+ tidelake capture) or "
            "debezium (MariaDB + Debezium Server)"
        ),
    ] = "workload",
    home: Annotated[
        Path | None, typer.Option(help="data directory, wiped first (default: <home>/chaos)")
    ] = None,
    json: Annotated[bool, typer.Option("--json", help="print one JSON summary line last")] = False,
) -> None:
    """Run the pipeline under a seeded fault schedule; verify the lake row by row."""
    from tidelake.pipeline.chaos import KINDS, ChaosOptions, run_chaos

    if source not in ("workload", "mariadb", "debezium"):
        err_console.print("[bold red]--source takes workload, mariadb or debezium[/]")
        raise typer.Exit(2)
    if stage_store not in ("local", "s3"):
        err_console.print("[bold red]--stage-store takes local or s3[/]")
        raise typer.Exit(2)
    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip()) or KINDS
    try:
        options = ChaosOptions(
            seed=seed,
            events=events,
            rate=rate,
            min_faults=min_faults,
            kinds=chosen,
            stage_store=stage_store,  # type: ignore[arg-type]
            stagers=stagers,
            max_deliver=max_deliver,
            source=source,  # type: ignore[arg-type]
            home=home or _home() / "chaos",
        )
    except ValueError as exc:
        err_console.print(f"[bold red]{exc}[/]")
        raise typer.Exit(2) from None
    result = run_chaos(options)
    out = err_console if json else console
    out.print(
        f"chaos seed {result.seed}: {result.faults_total} faults {result.faults}, "
        f"{result.events} events, {result.rows_in_lake}/{result.rows_expected} rows, "
        f"lost {result.lost}, duplicated {result.duplicated}, mismatches {result.mismatches}, "
        f"dead-lettered {result.dlq} {result.dead_letters}, {result.elapsed_s} s"
    )
    if result.error:
        out.print(f"[bold red]chaos run failed:[/] {result.error}")
    if json:
        print_json(result.to_json())
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def stage(
    config: ConfigOption = None,
    once: Annotated[
        bool, typer.Option("--once", help="stage what is pending, then exit (for tests, cron)")
    ] = False,
) -> None:
    """Stage CDC messages from JetStream (or, bus.kind kafka, the Kafka CDC topic) into batch
    files + manifests until SIGTERM/SIGINT."""
    import asyncio

    from tidelake.errors import BusError
    from tidelake.stage.consumer import run_stager

    cfg = _load(config)
    from tidelake.bus.discovery import embedded_bus, use_bus
    from tidelake.runtime.live_metrics import stager_collectors

    try:
        with contextlib.ExitStack() as owned:
            if not cfg.bus.url and cfg.bus.kind == "nats":
                # No bus.url and no live `tidelake run` recorded in the home: this stager
                # starts the home's embedded bus itself, as `run` would, and records it.
                bus = owned.enter_context(embedded_bus(cfg))
                cfg = use_bus(cfg, bus.lookup())
                err_console.print(
                    f"no bus.url and no running `tidelake run`: started an embedded nats-server "
                    f"at {bus.url} (recorded in {bus.record_path}; it stops with this stager)",
                    soft_wrap=True,
                )
            with _metrics_endpoint(cfg, "stager", stager_collectors()):
                if cfg.bus.kind == "kafka":
                    from tidelake.stage.kafka_consumer import run_kafka_stager

                    asyncio.run(run_kafka_stager(cfg, once=once))
                else:
                    asyncio.run(run_stager(cfg, once=once))
    except ConfigError as exc:
        err_console.print(f"[bold red]invalid configuration[/]\n{exc}")
        raise typer.Exit(2) from exc
    except BusError as exc:
        err_console.print(f"[bold red]bus error[/] {exc}")
        raise typer.Exit(1) from exc


@app.command()
def run(
    config: ConfigOption = None,
    interval: Annotated[float, typer.Option(help="ingest idle pause, seconds")] = 1.0,
    serve: Annotated[
        bool,
        typer.Option("--serve", help="also serve the API and dashboard (api.host:api.port)"),
    ] = False,
) -> None:
    """Run every stage here, supervised: embedded NATS (unless bus.url), stager, ingest.

    The embedded bus is provisioned, then recorded in <home>/bus.json: verbs in another
    shell (same --home) find it there."""
    from tidelake.errors import BusError
    from tidelake.pipeline.run import run_pipeline
    from tidelake.runtime.metrics_server import MetricsPortError

    # Not the home's recorded bus: `run` starts (and records) its own, or uses bus.url.
    cfg = _load(config, find_bus=False)
    if serve or cfg.run.serve:
        try:
            cfg.api.require_token_to_listen()
        except ConfigError as exc:
            err_console.print(f"[bold red]invalid configuration[/]\n{exc}", soft_wrap=True)
            raise typer.Exit(2) from exc
    try:
        status = run_pipeline(
            cfg,
            config,
            interval_s=interval,
            serve=serve,
            say=lambda line: err_console.print(line, soft_wrap=True, highlight=False, markup=False),
        )
    except BusError as exc:
        err_console.print(f"[bold red]bus error[/] {exc}", soft_wrap=True)
        raise typer.Exit(1) from exc
    except MetricsPortError as exc:
        err_console.print(f"[bold red]metrics endpoint[/] {exc}", soft_wrap=True)
        raise typer.Exit(2) from exc
    raise typer.Exit(status)


#: ``ingest --once`` exit status when the run applied what it could but tables are paused.
EXIT_TABLES_PAUSED = 3


@app.command()
def ingest(
    config: ConfigOption = None,
    once: Annotated[bool, typer.Option("--once", help="apply what is staged, then exit")] = False,
    continuous: Annotated[
        bool, typer.Option("--continuous", help="keep applying until SIGTERM (the default)")
    ] = False,
    interval: Annotated[
        float | None, typer.Option(help="idle pause in seconds (default ingest.interval_s)")
    ] = None,
    allow_paused: Annotated[
        bool,
        typer.Option(
            "--allow-paused",
            help=f"--once: exit 0 although tables were paused (default: {EXIT_TABLES_PAUSED})",
        ),
    ] = False,
) -> None:
    """Apply staged batches to the Hudi lake (one commit per table, checkpoint inside).

    Exit status: 0 done; 1 the run stopped on an error (the message names the table and the
    root cause; the next run retries); 2 bad configuration or options; 3 (``--once``) the run
    finished but tables were paused, listed with the reason (``--allow-paused``: 0)."""
    from rich.markup import escape

    from tidelake.errors import TidelakeError
    from tidelake.lake.ingest import run_ingest
    from tidelake.lake.jvm_errors import describe_error, java_throwable
    from tidelake.runtime.tracing import process_tracing

    log = structlog.get_logger("tidelake.cli")
    if once and continuous:
        err_console.print("[bold red]--once and --continuous exclude each other[/]")
        raise typer.Exit(2)
    cfg = _load(config)
    from tidelake.runtime.live_metrics import ingester_collectors

    endpoint = (
        contextlib.nullcontext()
        if once  # a one-shot run is not probed or scraped
        else _metrics_endpoint(cfg, "ingest", ingester_collectors())
    )
    try:
        with endpoint, process_tracing(cfg.tracing, "ingest"):  # docs/tracing.md
            stats = run_ingest(
                cfg,
                once=once,
                interval_s=interval,
                after_round=_view_keeper(cfg) if cfg.views else None,
            )
    except Exception as exc:
        # A JVM failure outside a table's write (reading a checkpoint, the catalog) reaches
        # here as py4j's bare "An error occurred while calling o…": give its cause chain.
        if not isinstance(exc, TidelakeError) and java_throwable(exc) is None:
            raise  # a bug: the traceback is what helps
        reason = str(exc) if isinstance(exc, TidelakeError) else describe_error(exc)
        log.error("ingest failed", error=reason)
        err_console.print(f"[bold red]ingest failed[/] {escape(reason)}", soft_wrap=True)
        raise typer.Exit(1) from exc
    for table, reason in sorted(stats.refused.items()):
        err_console.print(f"[bold yellow]paused[/] {table}: {escape(reason)}", soft_wrap=True)
    err_console.print(
        f"ingest: {stats.commits} commits, {stats.events} events, {stats.manifests} manifests, "
        f"{stats.duplicates} duplicates and {stats.stale} stale events skipped"
    )
    if once and stats.refused and not allow_paused:
        tables = ", ".join(sorted(stats.refused))
        err_console.print(
            f"[bold red]{len(stats.refused)} table(s) paused[/]: {tables} (their events wait; "
            f"see `tidelake status`); exit {EXIT_TABLES_PAUSED}, --allow-paused exits 0",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_TABLES_PAUSED)


capture_app = typer.Typer(
    help="Capture MySQL/MariaDB binlog or PostgreSQL pgoutput changes into JetStream until "
    "SIGTERM (bare `tidelake capture`); `tidelake capture snapshot TABLE` asks the running "
    "capture for an incremental snapshot.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(capture_app, name="capture")


@capture_app.command("snapshot")
def capture_snapshot(
    tables: Annotated[
        list[str] | None, typer.Argument(help="db.table (PostgreSQL: schema.table) to snapshot")
    ] = None,
    config: ConfigOption = None,
    status: Annotated[
        bool, typer.Option("--status", help="show the snapshots' progress instead")
    ] = False,
) -> None:
    """Ask the running capture to snapshot TABLE again while it streams (docs/capture.md,
    Snapshots on demand): a request record in the staging store, picked up within seconds."""
    from tidelake.capture.incremental import request_path, request_record
    from tidelake.runtime.storage import open_storage

    cfg = _load(config, find_bus=False)
    staging = open_storage(cfg.stage_root, cfg.storage.s3)
    if status or not tables:
        _print_snapshot_status(staging)
        if not tables:
            return
    for table in tables or []:
        try:
            path = request_path(table)
        except ValueError as exc:
            err_console.print(f"[bold red]{escape(str(exc))}[/]")
            raise typer.Exit(2) from exc
        staging.put(path, request_record(table))
        console.print(f"snapshot of {table} requested ({staging.uri(path)})", soft_wrap=True)


def _print_snapshot_status(staging: Any) -> None:
    """The capture heartbeat's ``snapshot`` part, one line per table."""
    import orjson

    try:
        beat = orjson.loads(staging.get("_tidelake/capture.heartbeat.json"))
    except Exception:
        console.print("no capture heartbeat found (is `tidelake capture` running?)")
        return
    info = beat.get("info", beat)
    tables = ((info.get("snapshot") or {}).get("tables")) or {}
    if not tables:
        console.print("no incremental snapshot")
        return
    for name, t in sorted(tables.items()):
        total = t.get("rows_total")
        of = f" of ~{total}" if total is not None else ""
        err = f" ({t['error']})" if t.get("error") else ""
        console.print(
            f"{name}: {t.get('state')}, {t.get('rows_done', 0)} rows{of}, "
            f"{t.get('chunks_done', 0)} chunks{err}",
            soft_wrap=True,
        )


@capture_app.command("lag")
def capture_lag(
    config: ConfigOption = None,
    json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Measure the capture's lag now from the source and the saved position, also while the
    capture is stopped: slot lag and retained WAL, or binlog bytes and GTIDs behind
    (docs/capture.md, Lag and health)."""
    from tidelake.capture.lag import measure_once
    from tidelake.capture.position import PositionStore
    from tidelake.capture.sources import open_source
    from tidelake.errors import TidelakeError

    cfg = _load(config, find_bus=False)
    try:
        source = open_source(cfg)
        report = measure_once(source, PositionStore(cfg.capture_position_file).load())
    except ConfigError as exc:
        err_console.print(f"[bold red]invalid configuration[/] {exc}")
        raise typer.Exit(2) from exc
    except TidelakeError as exc:
        err_console.print(f"[bold red]lag not measured[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from exc
    if json:
        print_json({"source": source.kind, **report})
        return
    for key, value in report.items():
        if key != "at_ms" and value is not None:
            plain = isinstance(value, bool) or not isinstance(value, int)
            console.print(f"{key}: {value}" if plain else f"{key}: {value:,}")


@capture_app.command("kafka")
def capture_kafka(config: ConfigOption = None) -> None:
    """Read the change topics TiCDC or Debezium write to Kafka (capture.kafka) into the bus
    (JetStream, or the CDC topic of a Kafka bus) until SIGTERM: in commitTs order across
    partitions for TiCDC, offsets committed only once the bus stored the messages
    (docs/kafka.md)."""
    from tidelake.capture.kafka_merge import KafkaOrderError
    from tidelake.capture.kafka_source import run_kafka_source
    from tidelake.errors import TidelakeError

    cfg = _load(config)
    if not cfg.bus.url and cfg.bus.kind == "nats":
        from tidelake.bus.discovery import no_bus_message

        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)
    try:
        stats = run_kafka_source(cfg)
    except (ConfigError, KafkaOrderError) as exc:
        err_console.print(f"[bold red]capture kafka cannot run[/] {exc}")
        raise typer.Exit(2) from exc
    except TidelakeError as exc:
        err_console.print(f"[bold red]capture kafka failed[/] {exc}")
        raise typer.Exit(1) from exc
    err_console.print(
        f"capture kafka: {stats.consumed} messages read, {stats.published} stored in the bus "
        f"({stats.duplicates} duplicates), {stats.replays_dropped} TiCDC replays dropped, "
        f"{stats.rebalances} assignments"
    )


@capture_app.command("rest")
def capture_rest(
    config: ConfigOption = None,
    once: Annotated[bool, typer.Option("--once", help="poll once, then exit")] = False,
) -> None:
    """Poll an HTTP API (capture.rest) by its updated_since cursor into the bus until SIGTERM:
    each new record version a change event, the cursor saved once the bus stored them
    (docs/rest-source.md)."""
    from tidelake.capture.rest import run_rest_source
    from tidelake.errors import TidelakeError

    cfg = _load(config)
    if not cfg.bus.url and cfg.bus.kind == "nats":
        from tidelake.bus.discovery import no_bus_message

        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)
    from tidelake.runtime.live_metrics import poller_collectors

    try:
        with _metrics_endpoint(cfg, "capture-rest", poller_collectors()):
            stats = run_rest_source(cfg, once=once)
    except ConfigError as exc:
        err_console.print(f"[bold red]capture rest cannot run[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    except TidelakeError as exc:
        err_console.print(f"[bold red]capture rest failed[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from exc
    err_console.print(
        f"capture rest: {stats.polls} polls, {stats.records} records read, {stats.published} "
        f"stored in the bus ({stats.duplicates} duplicates), cursor saved {stats.saves} times",
        soft_wrap=True,
    )


@capture_app.callback()
def capture(
    ctx: typer.Context,
    config: ConfigOption = None,
    source: Annotated[str | None, typer.Option(help="source DSN (default capture.source)")] = None,
    table: Annotated[
        list[str] | None, typer.Option(help="db.table or db.* to capture (repeatable)")
    ] = None,
) -> None:
    """Capture MySQL/MariaDB binlog or PostgreSQL pgoutput changes into the bus (JetStream, or
    the Kafka CDC topic) until SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    from tidelake.capture.runner import run_capture
    from tidelake.capture.sources import open_source
    from tidelake.errors import TidelakeError

    cfg = _load(config)
    update: dict[str, Any] = {}
    if source:
        update["source"] = source
    if table:
        update["tables"] = table
    if update:
        cfg = cfg.model_copy(update={"capture": cfg.capture.model_copy(update=update)})
    if not cfg.bus.url and cfg.bus.kind == "nats":
        from tidelake.bus.discovery import no_bus_message

        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)
    from tidelake.runtime.live_metrics import capturer_collectors

    try:
        with _metrics_endpoint(cfg, "capture", capturer_collectors()):
            stats = run_capture(cfg, open_source(cfg))
    except ConfigError as exc:
        err_console.print(f"[bold red]invalid configuration[/] {exc}")
        raise typer.Exit(2) from exc
    except TidelakeError as exc:
        err_console.print(f"[bold red]capture failed[/] {exc}")
        raise typer.Exit(1) from exc
    err_console.print(
        f"capture: {stats.published} messages published ({stats.duplicates} duplicates), "
        f"position saved {stats.saves} times"
    )


@app.command()
def verify(
    source: Annotated[
        str, typer.Option(help="source DSN: mysql://user@host:port/ or postgresql://.../db")
    ],
    table: Annotated[list[str], typer.Option(help="db.table to compare (repeatable)")],
    config: ConfigOption = None,
    json: Annotated[bool, typer.Option("--json", help="print one JSON line per table")] = False,
) -> None:
    """Compare live source tables with their Hudi tables: counts, row hashes, first differences."""
    from tidelake.cli.output import Column, print_table
    from tidelake.verify.source import verify_table

    cfg = _load(config)
    password = cfg.capture.resolved_password()
    # By the key the capture uses: capture.keys, the primary key, or the whole row.
    results = [
        verify_table(
            source, cfg.lake_root, t, password, keys=cfg.capture.keys, keyless=cfg.capture.keyless
        )
        for t in table
    ]
    if json:
        for r in results:
            print_json(r.to_json())
    else:
        rows = []
        for r in results:
            same = "equal" if r.hash_source == r.hash_lake and r.hash_source else "differ"
            style = "green" if r.ok else "bold red"
            rows.append([escape(r.table), str(r.rows_source), str(r.rows_lake),
                         f"[{style}]{r.mismatches}[/]", same])  # fmt: skip
        print_table(
            console,
            [Column("table", ident=True), Column("source rows", "right"),
             Column("lake rows", "right"), Column("mismatches", "right"), Column("hashes")],
            rows,
            title="source vs lake, row by row",
            label_first=False,
        )  # fmt: skip
        for r in results:
            if r.error:
                console.print(f"[bold red]{r.table}[/] {r.error}")
            for sample in r.samples:
                console.print(f"  [red]{r.table}[/] {sample}")
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="SQL over db.table names, e.g. SELECT * FROM shop.t")],
    config: ConfigOption = None,
    limit: Annotated[int, typer.Option(help="rows shown at most")] = 1000,
    engine: Annotated[
        str,
        typer.Option(
            metavar="duckdb|spark",
            help="duckdb: JVM-free, the latest snapshot of the tables named (hudi-rs + DuckDB "
            "SQL); spark: Spark SQL with every table registered (time travel, incremental "
            "queries)",
        ),
    ] = "duckdb",
    json: Annotated[bool, typer.Option("--json", help="one JSON object per row")] = False,
    csv: Annotated[bool, typer.Option("--csv", help="CSV with a header row")] = False,
) -> None:
    """Run SQL over the lake's tables and print the result (DuckDB, no JVM, by default)."""
    from tidelake.cli.output import Column, cell, print_csv, print_table
    from tidelake.lake.query import ENGINES, QueryError, run_query

    if engine not in ENGINES:
        raise typer.BadParameter(f"takes {' or '.join(ENGINES)}", param_hint="--engine")
    if json and csv:
        raise typer.BadParameter("give one of --json and --csv", param_hint="--csv")
    cfg = _load(config, find_bus=False)
    try:
        result = run_query(cfg, sql, limit, engine)
    except QueryError as exc:
        err_console.print(f"[bold red]query failed[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from exc
    more = " (more not shown; --limit)" if result.truncated else ""
    if json:
        for row in result.rows:
            print_json(dict(zip(result.columns, row, strict=True)))
    elif csv:
        print_csv(result.columns, result.rows)
    else:
        columns = [Column(name) for name in result.columns]
        rows = [[escape(cell(v)) for v in row] for row in result.rows]
        print_table(console, columns, rows)
        console.print(f"{len(result.rows)} row(s){more}")
        return
    if more:
        err_console.print(f"{len(result.rows)} row(s){more}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def submit(
    ctx: typer.Context,
    config: ConfigOption = None,
    master: Annotated[
        str | None,
        typer.Option(help="spark://host:7077, yarn, k8s://… (default lake.spark.master)"),
    ] = None,
    deploy_mode: Annotated[str, typer.Option(help="client or cluster")] = "client",
    print_only: Annotated[
        bool, typer.Option("--print", help="print the spark-submit command line, run nothing")
    ] = False,
) -> None:
    """Run a tidelake Spark verb under spark-submit: `tidelake submit -c F -- ingest --once`."""
    import shlex
    import subprocess

    from tidelake.cli.submit import submit_argv

    cfg = _load(config)
    job_args = list(ctx.args)
    if not job_args:
        err_console.print("[bold red]name the verb to submit[/], e.g. `-- ingest --once`")
        raise typer.Exit(2)
    if config is not None:
        job_args += ["--config", str(config.resolve())]
    argv = submit_argv(cfg, job_args, master=master, deploy_mode=deploy_mode)
    if print_only:
        sys.stdout.write(shlex.join(argv) + "\n")
        return
    raise typer.Exit(subprocess.call(argv))


@app.command()
def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="smaller sizes, under 10 minutes on 2 cores")
    ] = False,
    json: Annotated[bool, typer.Option("--json", help="print one JSON result line last")] = False,
    part: Annotated[
        list[str] | None,
        typer.Option(
            help="stage, ingest, freshness, nats_sync, floor, capture, snapshot, views, tables or "
            "workers (repeatable; default all; docs/benchmarks.md)"
        ),
    ] = None,
    home: Annotated[
        Path | None,
        typer.Option(help="bench data directory, wiped first (default: <home>/bench)"),
    ] = None,
    docs: Annotated[
        Path | None, typer.Option(help="append the run to this Markdown file (docs/benchmarks.md)")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="keep the bench data directory")] = False,
    saved: Annotated[
        Path | None,
        typer.Option(
            help="append the run saved in this file to --docs instead of running: each part "
            "saves the run so far beside the data directory (<home>/bench-progress.json), "
            "so a run stopped midway keeps the parts it finished"
        ),
    ] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME:key=value,...: one more tidelake ingest with these Hudi options "
            "(TIDELAKE_* keys: configuration overrides; a table type or index change gets "
            "a base table of its own)"
        ),
    ] = None,
) -> None:
    """Measure stager, ingest and freshness side by side with nats bench, HoodieStreamer,
    Hudi and Parquet on this machine (docs/benchmarks.md). Runs from a source checkout."""
    # The benchmarks are not in the wheel: they live in the checkout's bench/ (its
    # tidelake_bench package), found beside this package when installed from the checkout
    # (src/tidelake/cli/ → the checkout), else in the working directory or one above it.
    cwd = Path.cwd().resolve()
    checkout = next(
        (
            root
            for root in (Path(__file__).resolve().parents[3], cwd, *cwd.parents)
            if (root / "bench" / "tidelake_bench" / "__init__.py").is_file()
        ),
        None,
    )
    if checkout is None:
        err_console.print(
            "[bold red]tidelake bench runs from a source checkout[/]: the benchmarks "
            "(bench/tidelake_bench) are not part of the installed package; run it inside a "
            "clone of the repository (`make bench`)"
        )
        raise typer.Exit(2)
    if str(checkout / "bench") not in sys.path:
        sys.path.insert(0, str(checkout / "bench"))
    from tidelake_bench.report import append_run, load_result
    from tidelake_bench.runner import PARTS, BenchOptions, parse_variant, run_bench

    if saved is not None:
        if docs is None:
            err_console.print("[bold red]--saved needs --docs[/]: the file to append the run to")
            raise typer.Exit(2)
        append_run(docs, load_result(saved))
        console.print(f"appended the run saved in {saved} to {docs}")
        return

    parts = tuple(part or PARTS)
    if unknown := sorted(set(parts) - set(PARTS)):
        err_console.print(f"[bold red]unknown --part {', '.join(unknown)}[/] (take {PARTS})")
        raise typer.Exit(2)
    try:
        variants = dict(parse_variant(v) for v in variant or [])
    except ValueError as exc:
        err_console.print(f"[bold red]--variant[/] {exc}")
        raise typer.Exit(2) from exc
    out = err_console if json else console
    bench_home = home or _home() / "bench"
    options = BenchOptions(
        quick=quick,
        home=bench_home,
        parts=parts,
        keep=keep,
        variants=variants,
        progress=bench_home.parent / f"{bench_home.name}-progress.json",
    )
    result = run_bench(options, out)
    if docs is not None:
        append_run(docs, result)
        out.print(f"appended to {docs}")
    for error in result.errors:
        out.print(f"[yellow]not measured:[/] {error}")
    if json:
        print_json(result.to_json())
    else:
        console.print_json(orjson.dumps(result.to_json()).decode())


def _register_operator_verbs() -> None:
    from tidelake.cli.bus import register as register_bus
    from tidelake.cli.operate import register
    from tidelake.cli.route import register as register_route
    from tidelake.cli.setup import register as register_setup
    from tidelake.cli.source import register as register_source
    from tidelake.cli.view import register as register_view

    register(app)
    register_setup(app)
    register_bus(app)
    register_route(app)
    register_source(app)
    register_view(app)


_register_operator_verbs()


def _verb_and_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """The verb of a command line and the words after it: the program's own options before
    the verb (``--home DIR``) are skipped with their values; nothing is run."""
    group = typer.main.get_command(app)
    # Typer's options are click's (or its vendored copy's): read them by their attributes.
    with_value = {
        opt for p in group.params if getattr(p, "is_flag", True) is False for opt in p.opts
    }
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            return word, argv[i + 1 :]
        i += 2 if word in with_value else 1
    return None, []


#: Verbs whose own ``--home`` is their data directory (wiped first), not the global option.
_OWN_HOME_VERBS = frozenset({"demo", "chaos", "bench"})


def _hoist_home(argv: list[str]) -> list[str]:
    """``argv`` with a ``--home DIR`` typed after the verb moved before it, where the global
    option is parsed: ``tidelake status --home DIR`` means ``tidelake --home DIR status``
    (click parses a group's options only before its subcommand). Not for the verbs with a
    ``--home`` of their own, and nothing after ``--`` (``submit``'s job arguments)."""
    verb = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if verb is None or argv[verb] in _OWN_HOME_VERBS:
        return argv
    head, tail = argv[: verb + 1], argv[verb + 1 :]
    rest: list[str] = []
    hoisted: list[str] = []
    i = 0
    while i < len(tail):
        arg = tail[i]
        if arg == "--":
            rest += tail[i:]
            break
        if arg == "--home" and i + 1 < len(tail):
            hoisted = ["--home", tail[i + 1]]
            i += 2
            continue
        if arg.startswith("--home="):
            hoisted = ["--home", arg.split("=", 1)[1]]
        else:
            rest.append(arg)
        i += 1
    return hoisted + head + rest


def main() -> None:
    """The ``tidelake`` program: a verb whose optional dependencies are not installed fails
    with the ``pip install 'tidelake[extra]'`` line (runtime/extras.py), not a traceback."""
    from rich.markup import escape

    sys.argv[1:] = _hoist_home(sys.argv[1:])

    from tidelake.runtime.extras import MissingExtraError, check_command, extra_for_module, require

    try:
        check_command(*_verb_and_args(sys.argv[1:]))
        app()
    except MissingExtraError as exc:
        err_console.print(f"[bold red]missing dependencies[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)
    except ModuleNotFoundError as exc:
        extra = extra_for_module(exc.name)
        if extra is None:
            raise
        try:
            require(extra, "this command")
        except MissingExtraError as missing:
            err_console.print(
                f"[bold red]missing dependencies[/] {escape(str(missing))}", soft_wrap=True
            )
            sys.exit(2)
        raise
