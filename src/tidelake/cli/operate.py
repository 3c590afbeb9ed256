"""The operator verbs of the CLI: ``serve``, ``status``, ``dlq …``, ``replay``, ``table …``.

Each verb calls the same code as the HTTP API (:mod:`tidelake.api.monitor`,
:mod:`tidelake.api.jetstream`, and the ingest's ledger :mod:`tidelake.lake.ledger` for the
table requests), directly: no server needs to run for the CLI to work. ``tidelake.cli``
registers them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tidelake.api.monitor import STALE_AFTER_S
from tidelake.cli.output import (
    Column,
    abbreviate,
    is_plain,
    make_console,
    print_csv_records,
    print_json,
    print_table,
)
from tidelake.config import Config

T = TypeVar("T")

console = make_console()
err_console = make_console(stderr=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config file (default: $TIDELAKE_CONFIG or none)"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
CsvOption = Annotated[bool, typer.Option("--csv", help="print CSV (a header row, then rows)")]
WideOption = Annotated[
    bool,
    typer.Option("--wide", help="every column and every text whole, however wide the terminal"),
]

dlq_app = typer.Typer(
    help="List, show, replay or discard dead letters.", no_args_is_help=True, rich_markup_mode=None
)
table_app = typer.Typer(
    help="Pause or resume the ingest of a table, or skip the DDL it is paused on.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _load(path: Path | None) -> Config:
    """The config; logs go to stderr (stdout carries tables and JSON) at its ``log_level``."""
    from tidelake.cli import _load as load

    return load(path)


def _one_format(json: bool, csv: bool) -> None:
    if json and csv:
        raise typer.BadParameter("give one of --json and --csv", param_hint="--csv")


def _json(data: Any) -> None:
    print_json(data)


def _bus_call(cfg: Config, fn: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``fn(jetstream)`` on a fresh connection; bus errors exit 1 with the reason."""
    from tidelake.api.jetstream import JetStream, is_bus_error

    if not cfg.bus.url:
        from tidelake.bus.discovery import no_bus_message

        err_console.print(f"[bold red]{escape(no_bus_message(cfg))}[/]", soft_wrap=True)
        raise typer.Exit(2)

    async def go() -> T:
        bus = JetStream(cfg.bus)
        try:
            return await fn(bus)
        finally:
            await bus.close()

    try:
        return asyncio.run(go())
    except KeyError as exc:
        err_console.print(f"[bold red]not found[/] {exc}")
        raise typer.Exit(1) from exc
    except Exception as exc:
        if is_bus_error(exc):
            err_console.print(f"[bold red]bus error[/] {exc}")
            raise typer.Exit(1) from exc
        raise


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description:<20}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} s"


# --- serve and status ------------------------------------------------------------------------


def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="bind address (default api.host)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default api.port)")] = None,
    stale_after: Annotated[
        float, typer.Option(help="seconds behind after which a table is stale")
    ] = STALE_AFTER_S,
) -> None:
    """Serve /metrics, the status and management API, and the dashboard."""
    from pydantic import ValidationError

    from tidelake.api.server import serve as run_server
    from tidelake.config import ApiConfig
    from tidelake.errors import ConfigError

    cfg = _load(config)
    try:
        api = ApiConfig.model_validate(
            {
                **cfg.api.model_dump(),
                **({"host": host} if host else {}),
                **({"port": port} if port else {}),
            }
        )
        api.require_token_to_listen()  # only the verb that listens needs the token
    except ValidationError as exc:
        err_console.print(f"[bold red]invalid api settings[/] {exc.errors()[0]['msg']}")
        raise typer.Exit(2) from exc
    except ConfigError as exc:
        err_console.print(f"[bold red]invalid api settings[/] {exc}")
        raise typer.Exit(2) from exc
    cfg = cfg.model_copy(update={"api": api})
    auth = "bearer token required" if api.token else "no token (loopback only)"
    err_console.print(f"tidelake serve on http://{api.host}:{api.port}/ ({auth})")
    run_server(cfg, stale_after_s=stale_after)


def status(
    config: ConfigOption = None,
    json: JsonOption = False,
    stale_after: Annotated[
        float, typer.Option(help="seconds behind after which a table is stale")
    ] = STALE_AFTER_S,
    check: Annotated[
        bool, typer.Option("--check", help="exit 1 unless the pipeline is healthy")
    ] = False,
    csv: Annotated[
        bool, typer.Option("--csv", help="print the tables as CSV (every field of each)")
    ] = False,
    wide: WideOption = False,
) -> None:
    """The pipeline at a glance: processes, bus, tables (freshness, lag), errors.

    On a terminal narrower than the tables table, each table is a block of its fields
    (--wide: the table anyway); in a pipe, plain aligned columns, nothing cut."""
    from tidelake.api.monitor import Monitor, status_json

    _one_format(json, csv)
    cfg = _load(config)

    async def snap() -> dict[str, Any]:
        mon = Monitor(cfg, stale_after_s=stale_after)
        try:
            return status_json(await mon.snapshot())
        finally:
            await mon.close()

    data = asyncio.run(snap())
    if json:
        _json(data)
    elif csv:
        # One row per table: its scalar fields (the recent commits are in --json).
        print_csv_records(
            [{k: v for k, v in t.items() if not isinstance(v, list)} for t in data["tables"]]
        )
    else:
        render_status(data, console, wide=wide)
    if check and data["state"] != "healthy":
        raise typer.Exit(1)


_STATE_STYLE = {
    "healthy": "bold green",
    "fresh": "green",
    "catching_up": "yellow",
    "degraded": "yellow",
    "stale": "bold red",
    "paused": "bold magenta",
    "skipped": "dim",
    "down": "bold red",
    "unknown": "dim",
}


def render_status(data: dict[str, Any], out: Console, *, wide: bool = False) -> None:
    """A ``/api/status`` document for a person: rich tables on a terminal (one block per
    table when the terminal is narrower than the tables table, unless ``wide``), plain
    aligned text otherwise. Problems, warnings and errors are printed whole."""
    state = data["state"]
    out.print(f"pipeline [{_STATE_STYLE.get(state, '')}]{state}[/]  at {_when(data['now_ms'])} UTC")
    # A terminal wraps long texts at words; a pipe gets each whole on one line.
    whole_lines = is_plain(out)
    for problem in data["problems"]:
        out.print(f"  [yellow]•[/] {escape(problem)}", soft_wrap=whole_lines)
    for warning in data.get("warnings", []):
        out.print(f"  [yellow]warning[/] {escape(warning)}", soft_wrap=whole_lines)
    print_table(
        out,
        [Column("stage", ident=True), Column("up"), Column("state"), Column("doing"),
         Column("heartbeat age", "right"), Column("pid", "right", ident=True), Column("host")],
        [
            [
                escape(name),
                "[green]up[/]" if p["up"] else "[red]down[/]",
                escape(str(p["state"])),
                escape(str(p.get("activity") or "-")),
                _secs(p["heartbeat_age_s"]),
                str(p["pid"] or "-"),
                escape(str(p["host"] or "-")),
            ]
            for name, p in data["processes"].items()
        ],
        title="processes",
        wide=wide,
        label_first=False,
    )  # fmt: skip
    if data.get("capture"):
        render_capture(data["capture"], out, wide=wide)
    bus = data["bus"]
    if bus["up"]:
        c = bus.get("consumer") or {}
        out.print(
            f"bus: stream {bus['stream']['name']} {bus['stream']['messages']:,} messages "
            f"(last seq {bus['stream']['last_seq']:,}) · consumer pending {c.get('pending', 0):,}, "
            f"ack pending {c.get('ack_pending', 0):,} · dead letters {bus['dlq']['messages']:,}"
        )
        unstaged = bus.get("unstaged")
        if unstaged and unstaged["subject_count"]:
            # Every listed subject with its count; the problem above names only the first few.
            listed = ", ".join(f"{escape(s)} ({n:,})" for s, n in unstaged["subjects"].items())
            more = unstaged["subject_count"] - len(unstaged["subjects"])
            out.print(
                f"unstaged: [red]{unstaged['messages']:,} messages[/] on "
                f"{unstaged['subject_count']:,} subjects no stager takes: {listed}"
                + (f" (+{more:,} more)" if more > 0 else ""),
                soft_wrap=whole_lines,
            )
    else:
        out.print(f"bus: [red]unreachable[/] {escape(str(bus['error']))}", soft_wrap=whole_lines)
    s = data["stage"]
    out.print(
        f"staged: {s['batches']:,} batches · received {s['received']:,} = staged {s['staged']:,}"
        f" + dead-lettered {s['dead_lettered']:,} + skipped {s['skipped']:,}"
    )
    numbers = ("freshness", "lag", "checkpoint", "stream last", "commits", "upserts", "deletes",
               "skipped")  # fmt: skip
    print_table(
        out,
        [
            Column("table", ident=True),
            Column("state"),
            *(Column(name, "right") for name in numbers),
            Column("last commit (UTC)"),
        ],
        [
            [
                escape(t["table"]),
                f"[{_STATE_STYLE.get(t['state'], '')}]{t['state']}[/]",
                _secs(t["freshness_s"]),
                _secs(t["lag_s"]),
                f"{t['checkpoint_seq']:,}",
                "-" if t["stream_last_seq"] is None else f"{t['stream_last_seq']:,}",
                f"{t['commits']:,}",
                f"{t['upserts']:,}",
                f"{t['deletes']:,}",
                f"{t['skipped_duplicates'] + t['skipped_stale']:,}",
                _when(t["last_commit_ms"]),
            ]
            for t in data["tables"]
        ],
        title="tables",
        wide=wide,
        label_first=False,
    )
    # Whole (wrapped at words on a terminal), and as text: a reason (a JVM cause chain, a
    # DDL) may hold brackets rich would take for markup; the root cause is at its end.
    for e in data["errors"]:
        where = f"{e['source']}" + (f" {e['table']}" if e.get("table") else "")
        out.print(
            f"[red]error[/] {escape(where)}: {escape(str(e['message']))}", soft_wrap=whole_lines
        )


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"  # unreachable: GiB is the last unit


def render_capture(capture: dict[str, Any], out: Console, *, wide: bool = False) -> None:
    """The capture's lag (``capture/lag.py``), snapshot progress and skipped tables."""
    lag = capture["lag"]
    head = f"capture ({capture.get('source') or '?'}, {capture.get('phase') or '?'}):"
    parts: list[str] = []
    if lag.get("error"):
        parts.append(f"[red]lag unknown[/] {escape(str(lag['error']))}")
    else:
        parts.append(f"behind {_secs(lag.get('seconds'))}")
        what = "slot lag" if capture.get("source") == "postgres" else "binlog lag"
        parts.append(f"{what} {_bytes(lag.get('bytes'))}")
        if lag.get("retained_wal_bytes") is not None:
            status = f" ({lag['wal_status']})" if lag.get("wal_status") else ""
            parts.append(f"retained WAL {_bytes(lag['retained_wal_bytes'])}{status}")
        if lag.get("gtid_behind") is not None:
            parts.append(f"{lag['gtid_behind']:,} GTIDs behind")
    out.print(f"{head} {' · '.join(parts)}", soft_wrap=is_plain(out))
    tables = capture["snapshot"]["tables"]
    if tables:
        rows = []
        for table, t in sorted(tables.items()):
            done, total = t.get("rows_done") or 0, t.get("rows_total")
            pct = f"{100 * done / total:.0f} %" if total else "-"
            rows.append(
                [escape(table), escape(str(t.get("state", "?"))), f"{done:,}",
                 "-" if total is None else f"{total:,}", pct, f"{t.get('chunks_done') or 0:,}",
                 _when(t.get("updated_ms"))]
            )  # fmt: skip
        print_table(
            out,
            [Column("table", ident=True), Column("state"), Column("rows", "right"),
             Column("of", "right"), Column("done", "right"), Column("chunks", "right"),
             Column("last progress (UTC)")],
            rows,
            title="snapshots",
            wide=wide,
            label_first=False,
        )  # fmt: skip
    for table, reason in sorted(capture["skipped"].items()):
        out.print(f"  skipped {escape(table)}: {escape(str(reason))}", soft_wrap=is_plain(out))


# --- dead letters ----------------------------------------------------------------------------


@dlq_app.command("list")
def dlq_list(
    config: ConfigOption = None,
    limit: Annotated[int, typer.Option(help="dead letters shown at most")] = 50,
    start: Annotated[int, typer.Option(help="first DLQ sequence")] = 1,
    json: JsonOption = False,
    csv: CsvOption = False,
    wide: Annotated[
        bool, typer.Option("--wide", help="reasons whole (a terminal shows their start)")
    ] = False,
) -> None:
    """Dead letters with their reason, original subject and sequence.

    On a terminal a reason is cut to its first characters unless --wide; in a pipe, and with
    --json or --csv, every reason is whole."""
    _one_format(json, csv)
    cfg = _load(config)
    page = _bus_call(cfg, lambda bus: bus.dlq_list(start, limit))
    if json:
        _json(page)
        return
    columns = ["dlq_seq", "time_ms", "original_subject", "original_seq", "deliveries", "reason"]
    if csv:
        print_csv_records(page["messages"], columns)
        return
    whole = wide or is_plain(console)
    cut = False
    rows = []
    for m in page["messages"]:
        reason = str(m["reason"])
        shown = reason if whole else abbreviate(reason)
        cut = cut or shown != reason
        rows.append(
            [
                str(m["dlq_seq"]),
                _when(m["time_ms"]),
                escape(str(m["original_subject"])),
                str(m["original_seq"]),
                str(m["deliveries"]),
                escape(shown),
            ]
        )
    print_table(
        console,
        [Column("dlq seq", "right", ident=True), Column("time (UTC)"),
         Column("original subject"), Column("seq", "right", ident=True),
         Column("deliveries", "right"), Column("reason")],
        rows,
        title=f"dead letters ({cfg.bus.dlq.name})",
        wide=wide,
    )  # fmt: skip
    if cut:
        console.print("reasons cut to their start: --wide (or --json) shows them whole")
    if page["next_seq"]:
        console.print(f"more: tidelake dlq list --start {page['next_seq']}")


@dlq_app.command("show")
def dlq_show(
    seq: Annotated[int, typer.Argument(help="DLQ sequence")],
    config: ConfigOption = None,
    json: JsonOption = False,
) -> None:
    """One dead letter: headers, reason and payload."""
    cfg = _load(config)
    m = _bus_call(cfg, lambda bus: bus.dlq_show(seq))
    if json:
        _json(m)
        return
    for key in ("dlq_seq", "original_subject", "original_seq", "deliveries", "reason"):
        console.print(f"[bold]{key}[/]: {m[key]}")
    console.print(f"[bold]time[/]: {_when(m['time_ms'])} UTC")
    console.print("[bold]payload[/]:")
    console.print(m["payload"], markup=False, highlight=False)


def _check_seqs(seqs: list[int], all_: bool) -> None:
    """Exactly one of DLQ sequences and ``--all``, else a usage error (exit 2)."""
    if not seqs and not all_:
        raise typer.BadParameter("name DLQ sequences, or --all for every dead letter",
                                 param_hint="SEQS")  # fmt: skip
    if seqs and all_:
        raise typer.BadParameter("name DLQ sequences or give --all, not both",
                                 param_hint="--all")  # fmt: skip


def _each_dlq(
    cfg: Config, seqs: list[int], all_: bool, op: str, fn: Callable[[Any, int], Awaitable[Any]]
) -> list[Any]:
    _check_seqs(seqs, all_)

    async def run(bus: Any) -> list[Any]:
        todo = await bus.dlq_seqs() if all_ else seqs
        out = []
        with _progress() as progress:
            task = progress.add_task(op, total=len(todo))
            for s in todo:
                out.append(await fn(bus, s))
                progress.advance(task)
        return out

    return _bus_call(cfg, run)


@dlq_app.command("replay")
def dlq_replay(
    seqs: Annotated[list[int] | None, typer.Argument(help="DLQ sequences")] = None,
    config: ConfigOption = None,
    all_: Annotated[bool, typer.Option("--all", help="every dead letter")] = False,
    json: JsonOption = False,
) -> None:
    """Republish dead letters to their original subject, then delete them from the DLQ.

    The ingest applies a replayed event even below its table's watermark unless its key (or
    the whole table, by a DDL) was deleted at a later position — then it is skipped as stale
    and counted; Hudi's ordering by position keeps a newer stored row (docs/guarantees.md)."""
    _check_seqs(seqs or [], all_)
    cfg = _load(config)
    done = _each_dlq(cfg, seqs or [], all_, "replaying", lambda bus, s: bus.dlq_replay(s))
    if json:
        _json(done)
        return
    for r in done:
        console.print(f"dead letter {r['dlq_seq']} → {r['subject']} as stream sequence {r['seq']}")
    console.print(f"{len(done)} replayed")


@dlq_app.command("discard")
def dlq_discard(
    seqs: Annotated[list[int] | None, typer.Argument(help="DLQ sequences")] = None,
    config: ConfigOption = None,
    all_: Annotated[bool, typer.Option("--all", help="every dead letter")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="no question asked")] = False,
) -> None:
    """Delete dead letters for good (asks first unless --yes)."""
    _check_seqs(seqs or [], all_)
    cfg = _load(config)
    what = "every dead letter" if all_ else "dead letter(s) " + ", ".join(map(str, seqs or []))
    if not yes and not typer.confirm(f"discard {what} for good?"):
        raise typer.Exit(1)
    done = _each_dlq(cfg, seqs or [], all_, "discarding", lambda bus, s: bus.dlq_discard(s))
    console.print(f"{len(done)} discarded")


# --- replay ----------------------------------------------------------------------------------


def replay(
    config: ConfigOption = None,
    from_seq: Annotated[
        int | None, typer.Option("--from-seq", help="first stream sequence")
    ] = None,
    from_time: Annotated[
        str | None, typer.Option("--from-time", help="first time: ISO 8601 or Unix seconds")
    ] = None,
    to_seq: Annotated[int | None, typer.Option("--to-seq", help="last sequence")] = None,
    table: Annotated[str | None, typer.Option(help="only this table (<db>.<table>)")] = None,
    subject: Annotated[str | None, typer.Option(help="only this subject filter")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count, publish nothing")] = False,
    json: JsonOption = False,
) -> None:
    """Republish the CDC stream from a sequence or a time (the ingest skips what it holds).

    Each copy carries ``Tidelake-Replay: stream:<seq>``; docs/operations.md says when to use it."""
    from tidelake.api.jetstream import table_subject
    from tidelake.api.server import parse_time_ms

    cfg = _load(config)
    if (from_seq is None) == (from_time is None):
        err_console.print("[bold red]give exactly one of --from-seq and --from-time[/]")
        raise typer.Exit(2)
    try:
        when = parse_time_ms(from_time) if from_time else None
    except ValueError as exc:
        err_console.print(f"[bold red]{exc}[/]")
        raise typer.Exit(2) from exc
    if cfg.bus.kind == "kafka":
        _rewind_kafka(cfg, from_seq, when, to_seq, table or subject, dry_run, json)
        return
    filt = table_subject(cfg.bus, table) if table else subject

    async def run(bus: Any) -> dict[str, Any]:
        with _progress() as progress:
            task = progress.add_task("dry run" if dry_run else "replaying", total=None)

            def tick(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            result: dict[str, Any] = await bus.replay(
                from_seq=from_seq,
                from_time_ms=when,
                to_seq=to_seq,
                subject=filt,
                dry_run=dry_run,
                progress=tick,
            )
            return result

    result = _bus_call(cfg, run)
    if json:
        _json(result)
        return
    verb = "would replay" if dry_run else "replayed"
    console.print(
        f"{verb} {result['messages']:,} message(s) of {result['subject']} "
        f"(sequences {result['from_seq']:,}..{result['to_seq']:,})"
    )


def _rewind_kafka(
    cfg: Config,
    from_seq: int | None,
    from_time_ms: int | None,
    to_seq: int | None,
    filt: str | None,
    dry_run: bool,
    json: bool,
) -> None:
    """``replay`` on a Kafka bus: the stagers' group is moved back (bus/kafka.py ``rewind``);
    Kafka has no per-subject copy to make, so the whole topic from there is staged again."""
    from tidelake.bus import kafka as kbus

    if to_seq is not None or filt is not None:
        err_console.print(
            "[bold red]on a Kafka bus, replay moves the stagers back from a sequence or a "
            "time; --to-seq, --table and --subject need JetStream[/]"
        )
        raise typer.Exit(2)
    try:
        result = asyncio.run(
            kbus.rewind(cfg.bus, from_seq=from_seq, from_time_ms=from_time_ms, dry_run=dry_run)
        )
    except Exception as exc:
        err_console.print(f"[bold red]replay failed[/] {exc}")
        raise typer.Exit(1) from exc
    if json:
        _json(result)
        return
    verb = "would stage again" if dry_run else "the stagers stage again"
    console.print(
        f"{verb} {result['messages']:,} message(s) of Kafka topic {result['topic']} "
        f"(sequences {result['from_seq']:,}..{result['to_seq']:,})"
    )


# --- tables ----------------------------------------------------------------------------------


def known_tables(cfg: Config) -> set[str]:
    """Every ``db.table`` the pipeline has seen: committed or skipped by the ingest (its
    ledger), paused or blocked on a DDL, staged (the manifests), or in the lake. An
    operator's request alone does not make a table known."""
    from tidelake.api.records import StageRecord
    from tidelake.lake.ledger import Ledger
    from tidelake.lake.query import known_tables as lake_tables
    from tidelake.runtime.storage import open_storage

    ledger = Ledger(cfg.lake_state_dir)
    names = {c.table for c in ledger.commits()} | {s.table for s in ledger.skipped()}
    names |= set(ledger.paused()) | set(ledger.blocked())
    stage = StageRecord(open_storage(cfg.stage_root, cfg.storage.s3))
    stage.refresh()
    names |= set(stage.totals.events_by_table)
    return names | set(lake_tables(cfg.lake_root))


def _require_known(cfg: Config, table: str) -> None:
    """Exit 2 naming the known tables when ``table`` is none of them (a typo would else
    record a request nothing ever reads)."""
    known = known_tables(cfg)
    if table not in known:
        shown = ", ".join(sorted(known)) if known else "none yet"
        err_console.print(
            f"[bold red]unknown table {escape(table)}[/]; known: {escape(shown)}", soft_wrap=True
        )
        raise typer.Exit(2)


def _request(
    config: Path | None, table: str, action: Literal["pause", "resume"], reason: str = ""
) -> None:
    """Record ``action`` for ``table`` in the ledger; a bad or unknown table name exits 2."""
    from tidelake.lake.ledger import Ledger

    cfg = _load(config)
    _require_known(cfg, table)
    try:
        req = Ledger(cfg.lake_state_dir).request(table, action, reason)
    except ValueError as exc:
        err_console.print(f"[bold red]{exc}[/]")
        raise typer.Exit(2) from exc
    console.print(f"{action} of {table} requested at {_when(req.at_ms)} UTC")


@table_app.command("pause")
def table_pause(
    table: Annotated[str, typer.Argument(help="<db>.<table>")],
    config: ConfigOption = None,
    reason: Annotated[str, typer.Option(help="why, shown in the status")] = "",
) -> None:
    """Pause the ingest of a table from its next round (its events wait, nothing is lost)."""
    _request(config, table, "pause", reason)


@table_app.command("resume")
def table_resume(
    table: Annotated[str, typer.Argument(help="<db>.<table>")],
    config: ConfigOption = None,
) -> None:
    """Resume a table paused by an operator or by failures; it catches up from its checkpoint."""
    _request(config, table, "resume")


@table_app.command("skip-ddl")
def table_skip_ddl(
    table: Annotated[str, typer.Argument(help="<db>.<table>")],
    config: ConfigOption = None,
) -> None:
    """Go on past the DDL a table is paused on, without applying it (docs/type-mapping.md)."""
    from tidelake.lake.ledger import Ledger

    cfg = _load(config)
    _require_known(cfg, table)
    ledger = Ledger(cfg.lake_state_dir)
    blocked = ledger.blocked().get(table)
    if blocked is None:
        err_console.print(
            f"[bold red]{table} is not paused on a DDL[/] (nothing for it in ddl_blocked.json); "
            f"`tidelake table resume {table}` resumes a table paused for another reason"
        )
        raise typer.Exit(2)
    try:
        req = ledger.request(table, "skip_ddl", "skip-ddl", seq=blocked.seq)
    except ValueError as exc:
        err_console.print(f"[bold red]{exc}[/]")
        raise typer.Exit(2) from exc
    console.print(
        f"skip of the DDL at stream sequence {blocked.seq} of {table} requested at "
        f"{_when(req.at_ms)} UTC: {(blocked.ddl or '').strip()[:200]}"
    )


def register(app: typer.Typer) -> None:
    """Add the operator verbs to the ``tidelake`` command line."""
    app.command("serve")(serve)
    app.command("status")(status)
    app.command("replay")(replay)
    app.add_typer(dlq_app, name="dlq")
    app.add_typer(table_app, name="table")
