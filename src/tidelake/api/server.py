"""``tidelake serve``: Prometheus metrics, the status and management API, the dashboard.

One FastAPI application (OpenAPI at ``/docs`` and ``/openapi.json``):

* ``GET /metrics`` — Prometheus exposition (docs/metrics.md);
* ``GET /api/status`` and ``/api/tables[/{table}]`` — the pipeline and its tables;
* ``GET /api/history`` and ``/api/tables/{table}/history`` — the charts' series over a window
  (``api/history.py``: from the commit log and serve's own samples, so they survive restarts);
* ``POST /api/tables/{table}/pause|resume`` — the control file the ingest honours;
* ``GET /api/messages[/{seq}]`` — the message explorer (delivered vs pending);
* ``GET /api/dlq[/{seq}]``, ``POST /api/dlq/{seq}/replay|discard`` — dead letters;
* ``POST /api/replay`` — republish the stream from a sequence or a time;
* ``GET|POST /api/routes``, ``POST /api/routes/{name}/pause|resume``, ``DELETE
  /api/routes/{name}`` — routes at run time (and ``/api/sources`` likewise for the REST
  sources: docs/rest-source.md, Managed sources);
* ``/`` — the dashboard (static files built from ``dashboard/`` into ``api/static/``).

It binds 127.0.0.1 by default. Off loopback a bearer token is required (``api.token``, env
``TIDELAKE_API__TOKEN``; :func:`create_app` refuses to build the app otherwise);
when a token is set every route but ``/api/health`` and the dashboard's static files needs
``Authorization: Bearer <token>``; an empty token is refused at config load.

Whatever the token, a browser page cannot drive or read it (:mod:`tidelake.api.browser_guard`):
a ``Host`` that does not name this server gets 400 (DNS rebinding), and a request that changes
state (every POST) gets 403 when a browser sent it from another origin and 415 unless it says
``Content-Type: application/json``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from tidelake import __version__
from tidelake.api import metrics
from tidelake.api.browser_guard import BrowserGuard, allowed_hosts
from tidelake.api.history import MAX_WINDOW_S, MIN_WINDOW_S, History
from tidelake.api.jetstream import is_bus_error
from tidelake.api.monitor import STALE_AFTER_S, Monitor, status_json, table_states
from tidelake.config import Config
from tidelake.errors import ConfigError
from tidelake.lake.ledger import LedgerError

STATIC_DIR = Path(__file__).parent / "static"

_MISSING_DASHBOARD = """<!doctype html><html><head><title>tidelake</title></head><body>
<h1>tidelake</h1><p>The dashboard is not built into this installation: run
<code>make dashboard</code> in the repository (needs Node.js and npm), then restart
<code>tidelake serve</code>. The API works: <a href="/api/status">/api/status</a>,
<a href="/metrics">/metrics</a>, <a href="/docs">/docs</a>.</p></body></html>"""


#: The history routes' parameters (``api/history.py``).
WindowQuery = Annotated[
    int, Query(ge=MIN_WINDOW_S, le=MAX_WINDOW_S, description="seconds back from now")
]
StepQuery = Annotated[
    int | None, Query(ge=1, le=MAX_WINDOW_S, description="bucket seconds (default: ~360 points)")
]
SmoothQuery = Annotated[
    int | None, Query(ge=1, le=MAX_WINDOW_S, description="moving-average seconds of the rates")
]


def parse_time_ms(text: str) -> int:
    """Unix seconds (``1714929186``, ``1714929186.5``) or ISO 8601 (UTC when no zone)."""
    try:
        return int(float(text) * 1000)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r}: not Unix seconds nor an ISO 8601 time") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


class PauseRequest(BaseModel):
    reason: str = Field("", description="why (shown in paused.json and the dashboard)")


class SnapshotRequest(BaseModel):
    table: str = Field(description="db.table (PostgreSQL: schema.table) to snapshot again")


class RouteRequest(BaseModel):
    """A route added at run time: its name and its settings, as under ``routes.<name>``."""

    name: str
    route: dict[str, Any]


class SourceRequest(BaseModel):
    """A source added at run time: its name and its settings, as under ``sources.<name>``."""

    name: str
    source: dict[str, Any]


class ReplayRequest(BaseModel):
    from_seq: int | None = Field(None, ge=1, description="first stream sequence to replay")
    from_time: str | None = Field(None, description="or the first time (ISO 8601 / Unix s)")
    to_seq: int | None = Field(None, ge=1, description="last sequence (default: the last now)")
    subject: str | None = Field(None, description="only this subject (wildcards allowed)")
    table: str | None = Field(None, description="only this table (<db>.<table>)")
    dry_run: bool = Field(False, description="count what would be replayed, publish nothing")


def create_app(
    cfg: Config,
    *,
    stale_after_s: float = STALE_AFTER_S,
    monitor: Monitor | None = None,
    static_dir: Path | None = None,
    history: History | None = None,
) -> FastAPI:
    """The application; ``monitor`` and ``static_dir`` may be given by tests. Raises
    :class:`~tidelake.errors.ConfigError` off loopback without a token."""
    cfg.api.require_token_to_listen()
    mon = monitor or Monitor(cfg, stale_after_s=stale_after_s)
    token = cfg.api.token.get_secret_value() if cfg.api.token else None
    static = static_dir or STATIC_DIR
    hist = history or History.of(cfg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The charts' samples are taken whether or not a page is open (api/history.py).
        sampler = asyncio.create_task(hist.sample_forever(mon.snapshot))
        yield
        sampler.cancel()
        await mon.close()

    app = FastAPI(
        title="tidelake",
        version=__version__,
        description="Status, metrics and management of a tidelake pipeline.",
        lifespan=lifespan,
    )
    app.add_middleware(BrowserGuard, hosts=allowed_hosts(cfg.api))

    async def authorized(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(value.strip(), token):
            raise HTTPException(
                401, "a bearer token is required", headers={"WWW-Authenticate": "Bearer"}
            )

    auth = [Depends(authorized)]

    def bus_failed(exc: Exception) -> HTTPException:
        return HTTPException(503, f"the bus is unreachable: {type(exc).__name__}: {exc}")

    @app.get("/api/health", tags=["status"])
    async def health() -> dict[str, Any]:
        """Liveness of the server itself (no token needed)."""
        return {"ok": True, "version": __version__, "auth": token is not None}

    @app.get("/metrics", tags=["status"], dependencies=auth, response_class=Response)
    async def prometheus() -> Response:
        """Prometheus exposition of every metric in docs/metrics.md."""
        snap = await mon.snapshot()
        return Response(metrics.render(snap), media_type=metrics.CONTENT_TYPE)

    @app.get("/api/status", tags=["status"], dependencies=auth)
    async def status() -> dict[str, Any]:
        """The pipeline: processes, bus, staging totals, every table, recent commits, errors."""
        return status_json(await mon.snapshot())

    @app.get("/api/tables", tags=["tables"], dependencies=auth)
    async def tables() -> list[dict[str, Any]]:
        return table_states(await mon.snapshot())

    @app.get("/api/tables/{table}", tags=["tables"], dependencies=auth)
    async def table(table: str) -> dict[str, Any]:
        for row in table_states(await mon.snapshot()):
            if row["table"] == table:
                return row
        raise HTTPException(404, f"no table {table}")

    @app.get("/api/history", tags=["status"], dependencies=auth)
    async def history_all(
        window: WindowQuery = 3600,
        step: StepQuery = None,
        smooth: SmoothQuery = None,
    ) -> dict[str, Any]:
        """The pipeline over time: staged and committed changes/s (smoothed), commit lag
        p50/p99, commit duration, dead-letter depth and consumer backlog, per bucket."""
        return await asyncio.to_thread(hist.query, window, step, smooth)

    @app.get("/api/tables/{table}/history", tags=["tables"], dependencies=auth)
    async def history_table(
        table: str,
        window: WindowQuery = 3600,
        step: StepQuery = None,
        smooth: SmoothQuery = None,
    ) -> dict[str, Any]:
        """One table over time (committed changes/s, lag, duration) with its DDL history,
        its last commits and the DDL it waits on, if any."""
        out = await asyncio.to_thread(hist.query, window, step, smooth, table)
        await mon.snapshot()  # the recent commits as of now
        held = mon.lake.tables.get(table)
        recent = list(held.recent)[::-1] if held is not None else []
        out = {**out, "blocked_ddl": None, "recent_commits": [c.model_dump() for c in recent]}
        try:
            blocked = mon.lake.ledger.blocked().get(table)
        except LedgerError:  # /api/status names the unreadable file
            blocked = None
        if blocked is not None:
            out["blocked_ddl"] = blocked.model_dump(mode="json")
        return out

    @app.post("/api/tables/{table}/pause", tags=["tables"], dependencies=auth)
    async def pause(table: str, body: PauseRequest | None = None) -> dict[str, Any]:
        """Ask the ingest to pause ``table`` from its next round (``lake/control.py``)."""
        try:
            req = mon.lake.ledger.request(table, "pause", body.reason if body else "")
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"table": table, **req.to_dict()}

    @app.post("/api/tables/{table}/resume", tags=["tables"], dependencies=auth)
    async def resume(table: str) -> dict[str, Any]:
        """Ask the ingest to resume ``table`` (paused by an operator or by a failure)."""
        try:
            req = mon.lake.ledger.request(table, "resume")
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        return {"table": table, **req.to_dict()}

    @app.get("/api/messages", tags=["explorer"], dependencies=auth)
    async def messages(
        subject: Annotated[str | None, Query(description="subject filter, wildcards ok")] = None,
        table: Annotated[str | None, Query(description="<db>.<table>")] = None,
        start_seq: Annotated[int | None, Query(ge=1)] = None,
        start_time: Annotated[str | None, Query(description="ISO 8601 or Unix s")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        """A page of the CDC stream; each message says whether the stager has it acked,
        delivered (awaiting the ack) or pending, and whether the table's checkpoint holds it."""
        try:
            when = parse_time_ms(start_time) if start_time else None
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        try:
            page = await mon.bus.explore(
                subject=subject, table=table, start_seq=start_seq, start_time_ms=when, limit=limit
            )
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise
        for row in page["messages"]:
            held = mon.lake.tables.get(row["table"] or "")
            row["in_lake"] = bool(held and held.checkpoint_seq >= row["seq"])
        return page

    @app.get("/api/messages/{seq}", tags=["explorer"], dependencies=auth)
    async def message(seq: int) -> dict[str, Any]:
        try:
            return await mon.bus.message(seq)
        except KeyError as exc:
            raise HTTPException(404, f"no message {seq} in the stream") from exc
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

    @app.get("/api/dlq", tags=["dead letters"], dependencies=auth)
    async def dlq_list(
        start_seq: Annotated[int, Query(ge=1)] = 1,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        """Dead letters with their reason, original subject and sequence."""
        try:
            return await mon.bus.dlq_list(start_seq, limit)
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

    async def _dlq(op: str, seq: int) -> dict[str, Any]:
        fn = {
            "show": mon.bus.dlq_show,
            "replay": mon.bus.dlq_replay,
            "discard": mon.bus.dlq_discard,
        }[op]
        try:
            return await fn(seq)
        except KeyError as exc:
            raise HTTPException(404, f"no dead letter {seq}") from exc
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

    @app.get("/api/dlq/{seq}", tags=["dead letters"], dependencies=auth)
    async def dlq_show(seq: int) -> dict[str, Any]:
        """One dead letter with its headers and payload."""
        return await _dlq("show", seq)

    @app.post("/api/dlq/{seq}/replay", tags=["dead letters"], dependencies=auth)
    async def dlq_replay(seq: int) -> dict[str, Any]:
        """Republish to the original subject (header ``Tidelake-Replay``), then delete it."""
        return await _dlq("replay", seq)

    @app.post("/api/dlq/{seq}/discard", tags=["dead letters"], dependencies=auth)
    async def dlq_discard(seq: int) -> dict[str, Any]:
        """Delete a dead letter for good."""
        return await _dlq("discard", seq)

    async def _on_bus(work: Callable[[Any], Awaitable[Any]]) -> Any:
        from tidelake.bus.connection import on_jetstream

        try:
            return await on_jetstream(cfg.bus, work)
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

    def _registry_change(change: Callable[[], Any]) -> Any:
        try:
            return change()
        except ConfigError as exc:
            raise HTTPException(422, str(exc)) from exc

    def _registry(kind: str) -> Any:
        """The run-time registry of routes or sources (runtime/registry.py)."""
        if kind == "route":
            from tidelake.route.registry import RouteRegistry

            return RouteRegistry(cfg)
        from tidelake.capture.source_registry import SourceRegistry

        return SourceRegistry(cfg)

    def _known(kind: str, name: str) -> None:
        """404 unless the registry of ``kind`` has ``name`` (422: it is unreadable)."""
        if name not in _registry_change(_registry(kind).entries):
            raise HTTPException(404, f"no {kind} {name!r}")

    def _change(kind: str, name: str, change: str) -> None:
        """``pause``, ``resume`` or ``remove`` the ``kind`` named ``name``."""
        _known(kind, name)
        _registry_change(lambda: getattr(_registry(kind), change)(name))

    def _route(name: str) -> None:
        _known("route", name)

    @app.get("/api/routes", tags=["routes"], dependencies=auth)
    async def routes() -> dict[str, Any]:
        """Each route (docs/routes.md): its sink, its consumer's acknowledged sequence,
        pending and in-flight messages, its dead letters."""
        from tidelake.route.registry import RouteRegistry
        from tidelake.route.runner import route_status

        names = sorted(RouteRegistry(cfg).routes())

        async def work(js: Any) -> list[Any]:
            return [await route_status(js, cfg, name) for name in names]

        return {"routes": [dataclasses.asdict(s) for s in await _on_bus(work)]}

    @app.post("/api/routes", tags=["routes"], dependencies=auth)
    async def route_add(body: RouteRequest) -> dict[str, Any]:
        """Add a route at run time (``<home>/routes.yaml``); ``tidelake run`` starts its
        process within seconds. Secrets only through ``password_file``/``signing_key_file``."""
        from tidelake.route.registry import RouteRegistry

        route = _registry_change(lambda: RouteRegistry(cfg).add(body.name, body.route))
        return {"route": body.name, "sink": route.sink.kind, "added": True}

    @app.post("/api/routes/{name}/pause", tags=["routes"], dependencies=auth)
    async def route_pause(name: str) -> dict[str, Any]:
        """Pause a route: it stops fetching within seconds; its consumer keeps its place."""
        _change("route", name, "pause")
        return {"route": name, "paused": True}

    @app.post("/api/routes/{name}/resume", tags=["routes"], dependencies=auth)
    async def route_resume(name: str) -> dict[str, Any]:
        """Resume a route paused at run time."""
        _change("route", name, "resume")
        return {"route": name, "paused": False}

    @app.delete("/api/routes/{name}", tags=["routes"], dependencies=auth)
    async def route_remove(name: str) -> dict[str, Any]:
        """Remove a route: its process exits; its consumer stays on the bus."""
        _change("route", name, "remove")
        return {"route": name, "removed": True}

    @app.get("/api/routes/{name}/messages", tags=["routes"], dependencies=auth)
    async def route_messages(
        name: str,
        table: Annotated[str | None, Query(description="<db>.<table>")] = None,
        start_seq: Annotated[int | None, Query(ge=1)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        """A page of the CDC stream as one route sees it: each message ``applied`` (the route
        acknowledged it: in the sink, or not taken by the route), ``in_flight``, ``pending``
        or ``dead_lettered`` (with the reason)."""
        from tidelake.route.runner import dead_letter_reasons, route_state, route_status

        _route(name)
        try:
            page = await mon.bus.explore(
                subject=None, table=table, start_seq=start_seq, start_time_ms=None, limit=limit
            )
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

        async def work(js: Any) -> tuple[Any, dict[int, str]]:
            return await route_status(js, cfg, name), await dead_letter_reasons(js, cfg, name)

        status, dead = await _on_bus(work)
        for row in page["messages"]:
            row["route_state"] = route_state(row["seq"], status, dead)
            if row["seq"] in dead:
                row["route_reason"] = dead[row["seq"]]
        return {"route": name, **page}

    @app.post("/api/routes/{name}/reprocess", tags=["routes"], dependencies=auth)
    async def route_reprocess(name: str) -> dict[str, Any]:
        """Apply the route's dead letters through its sink again; each one that lands is
        removed (``tidelake route reprocess``). 503 when the sink is unreachable."""
        from tidelake.route.change import SinkError
        from tidelake.route.runner import RouteRunner, reprocess

        _route(name)
        runner = RouteRunner(cfg, name)
        try:
            result = await _on_bus(lambda js: reprocess(js, runner))
        except SinkError as exc:
            raise HTTPException(503, f"route {name}: the sink failed: {exc}") from exc
        finally:
            runner.sink.close()
        return {"route": name, **dataclasses.asdict(result)}

    @app.get("/api/sources", tags=["sources"], dependencies=auth)
    async def sources() -> dict[str, Any]:
        """Each source (docs/rest-source.md, Managed sources): its table, state, saved
        cursor, last poll and last success, totals (polls, records read and published,
        duplicates, failed polls) and its last error."""
        from tidelake.capture.source_runner import source_statuses

        statuses = await asyncio.to_thread(_registry_change, lambda: source_statuses(cfg))
        return {"sources": [dataclasses.asdict(s) for s in statuses]}

    @app.post("/api/sources", tags=["sources"], dependencies=auth)
    async def source_add(body: SourceRequest) -> dict[str, Any]:
        """Add a source at run time (``<home>/sources.yaml``); ``tidelake run`` starts its
        process within seconds. Secrets only through ``token_file``."""
        from tidelake.capture.source_registry import SourceRegistry

        source = _registry_change(lambda: SourceRegistry(cfg).add(body.name, body.source))
        return {
            "source": body.name,
            "kind": source.kind,
            "table": f"{source.database}.{source.table}",
            "added": True,
        }

    @app.post("/api/sources/{name}/pause", tags=["sources"], dependencies=auth)
    async def source_pause(name: str) -> dict[str, Any]:
        """Pause a source: it stops polling within seconds; its cursor stays where it is."""
        _change("source", name, "pause")
        return {"source": name, "paused": True}

    @app.post("/api/sources/{name}/resume", tags=["sources"], dependencies=auth)
    async def source_resume(name: str) -> dict[str, Any]:
        """Resume a source paused at run time: it polls from its saved cursor."""
        _change("source", name, "resume")
        return {"source": name, "paused": False}

    @app.delete("/api/sources/{name}", tags=["sources"], dependencies=auth)
    async def source_remove(name: str) -> dict[str, Any]:
        """Remove a source: its process exits; its cursor file stays."""
        _change("source", name, "remove")
        return {"source": name, "removed": True}

    @app.post("/api/capture/snapshot", tags=["capture"], dependencies=auth)
    async def capture_snapshot(body: SnapshotRequest) -> dict[str, Any]:
        """Ask the running capture for an incremental snapshot of ``table`` while it streams
        (docs/capture.md, Snapshots on demand): the same request record as
        ``tidelake capture snapshot TABLE``, picked up within seconds; progress in
        ``/api/status`` (capture.snapshot)."""
        from tidelake.capture.incremental import request_path, request_record
        from tidelake.runtime.storage import open_storage

        try:
            path = request_path(body.table)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        staging = open_storage(cfg.stage_root, cfg.storage.s3)
        await asyncio.to_thread(staging.put, path, request_record(body.table))
        return {"table": body.table, "requested": True, "request": staging.uri(path)}

    @app.post("/api/replay", tags=["replay"], dependencies=auth)
    async def replay(body: ReplayRequest) -> dict[str, Any]:
        """Republish the stream from a sequence or a time (docs/operations.md)."""
        try:
            when = parse_time_ms(body.from_time) if body.from_time else None
            subject = body.subject
            if body.table:
                from tidelake.api.jetstream import table_subject

                subject = table_subject(cfg.bus, body.table)
            return await mon.bus.replay(
                from_seq=body.from_seq,
                from_time_ms=when,
                to_seq=body.to_seq,
                subject=subject,
                dry_run=body.dry_run,
            )
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        except Exception as exc:
            if is_bus_error(exc):
                raise bus_failed(exc) from exc
            raise

    if (static / "index.html").is_file():
        app.mount("/", StaticFiles(directory=static, html=True), name="dashboard")
    else:

        @app.get("/", include_in_schema=False)
        async def no_dashboard() -> HTMLResponse:
            return HTMLResponse(_MISSING_DASHBOARD)

    return app


def serve(
    cfg: Config,
    *,
    stale_after_s: float = STALE_AFTER_S,
    log_level: str = "warning",
) -> None:
    """Run the server in this process until SIGTERM / Ctrl-C."""
    import uvicorn

    app = create_app(cfg, stale_after_s=stale_after_s)
    # log_config=None: uvicorn's loggers keep no handlers of their own and reach the root
    # handler runtime/logs.py set up, so `log_format: json` holds for its lines too.
    uvicorn.run(
        app,
        host=cfg.api.host,
        port=cfg.api.port,
        log_level=log_level,
        access_log=False,
        log_config=None,
    )
