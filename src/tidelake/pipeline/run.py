"""``tidelake run``: every stage of the pipeline on this machine, supervised.

The stack (``pipeline/stack.py``): without ``bus.url`` an embedded nats-server is started
with its store under ``home`` (NATS's default port 4222 when free), its streams and the
stager's consumer are provisioned, and where it listens is recorded in ``<home>/bus.json``
(``bus/discovery.py``) — all before anything reports ready, so a producer or a verb in a
second shell finds the bus and its stream. The capture (when ``capture.source`` is set), the
stager, the continuous ingest, one process per route and per REST source (``sources``,
``<home>/sources.yaml``) and, with ``run.serve`` (``--serve``), the API and dashboard run as
child processes (one per stage, as in production); routes and sources added or removed at run
time are started or stopped within seconds. A child that dies is restarted with the
retriers' growing back-off (``retry.backoff_s``): every stage resumes from its durable state,
so a restart loses nothing. SIGTERM/SIGINT stops the children gracefully (each finishes its
current batch, in the stack's order), removes the record and then stops the server; the exit
status is 0.

What it prints on stderr (stdout stays free): where the bus, its monitoring port and the
dashboard are, once they are, then one line when the stager and the ingest are up.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from tidelake.bus.discovery import RECORD_FILE
from tidelake.config import Config
from tidelake.pipeline.processes import StageProcess, tidelake_argv
from tidelake.pipeline.stack import LocalStack
from tidelake.runtime.metrics_server import beat, serving

log = structlog.get_logger(__name__)

#: How often the supervisor looks for routes and sources added or removed at run time.
ROUTES_EVERY_S = 2.0
#: Longest pause before restarting a child that keeps dying.
MAX_BACKOFF_S = 30.0


def dashboard_url(cfg: Config) -> str:
    """Where ``serve`` answers with ``cfg``'s api settings (a wildcard bind: this machine)."""
    host = cfg.api.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{cfg.api.port}/"


def where_lines(stack: LocalStack, *, serve: bool) -> list[str]:
    """What ``run`` prints once its bus is up: the bus, its record, the dashboard."""
    cfg = stack.cfg
    if stack.on_kafka:
        k = cfg.bus.kafka
        lines = [
            f"bus        kafka {k.bootstrap_servers} topic {k.topic} (dead letters {k.dlq_topic})"
        ]
    else:
        lines = [f"bus        {stack.bus_url}"]
    if stack.nats is not None:
        lines.append(f"monitor    {stack.nats.monitor_url}")
        lines.append(
            f"recorded   {stack.home / RECORD_FILE} (status, dlq, replay, serve, stage and "
            "bus init in another shell find the bus there)"
        )
    if serve:
        lines.append(f"dashboard  {dashboard_url(cfg)}")
    else:
        lines.append("dashboard  `tidelake serve` in another shell, or `tidelake run --serve`")
    if cfg.metrics.port is not None:
        lines.append(
            f"metrics    http://{cfg.metrics.host}:{cfg.metrics.port}/metrics (run; its stages: "
            "the next ports, docs/metrics.md)"
        )
    lines.append(f"home       {stack.home}")
    lines.append(f"logs       {stack.home / 'logs'}")
    return lines


def run_pipeline(
    cfg: Config,
    config_path: Path | None,
    *,
    interval_s: float = 1.0,
    serve: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """Run until signalled; returns the exit status. ``serve`` (or ``run.serve``) also runs
    ``tidelake serve`` as a supervised child; its token rule is checked by the caller
    (:meth:`tidelake.config.ApiConfig.require_token_to_listen`). ``say`` gets the lines an
    operator reads (where things are, when the pipeline is up)."""
    stop = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True
        log.info("stopping", signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    serve = serve or cfg.run.serve
    # die_with_parent: a `run` killed with kill -9 takes its stages and server with it, so
    # the next `run` on the home finds nothing unsupervised holding its store or its lake.
    stack = LocalStack(
        cfg.home,
        cfg=cfg,
        config_path=config_path,
        ingest_interval_s=interval_s,
        die_with_parent=True,
    )
    try:
        # run's own /metrics and /healthz on metrics.port (its children move to the next
        # ports: runtime/metrics_server.py); bound first, so a taken port stops run at once.
        with serving(cfg.metrics, "run"):
            stack.start()
            if serve:
                api = StageProcess(
                    "serve",
                    tidelake_argv("serve"),
                    stack.env,
                    stack.cfg.home.resolve() / "logs" / "serve.log",
                    die_with_parent=True,
                )
                stack.children.append(api)
                api.start()
                log.info("started", stage=api.name, pid=api.pid, log=str(api.log_path))
            for line in where_lines(stack, serve=serve):
                say(line)
            restarts = {c.name: 0 for c in stack.children}
            healthy_logged = False
            routes_looked = time.monotonic()
            while not stop:
                if time.monotonic() - routes_looked >= ROUTES_EVERY_S:
                    routes_looked = time.monotonic()
                    for change in stack.sync_routes():  # added or removed at run time
                        done = "started" if change[0] == "+" else "stopped"
                        say(f"route      {change[1:]} {done}")
                    for change in stack.sync_sources():
                        done = "started" if change[0] == "+" else "stopped"
                        say(f"source     {change[1:]} {done}")
                stack.restart_exited(restarts, stopping=lambda: stop, max_backoff_s=MAX_BACKOFF_S)
                if not healthy_logged and stack.healthy():
                    healthy_logged = True
                    log.info("pipeline healthy", bus=stack.bus_url)
                    say("ready      the stager and the ingest are up; Ctrl-C stops the pipeline")
                beat()  # /healthz: the supervisor's loop turns
                time.sleep(0.5)
    finally:
        stack.stop()
    return 0
