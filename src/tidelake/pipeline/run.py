"""``tidelake run``: every stage of the pipeline on this machine, supervised.

Without ``bus.url`` an embedded nats-server is started with its store under ``home``; the
capture (when ``capture.source`` is set), the stager and the continuous ingest run as child
processes (one per stage, as in production)
and a child that dies is restarted with a growing back-off — every stage resumes from its
durable state, so a restart loses nothing. SIGTERM/SIGINT stops the children gracefully
(each finishes its current batch) and then the server.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import structlog

from tidelake.bus.provision import provision
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config
from tidelake.pipeline.processes import StageProcess, tidelake_argv

log = structlog.get_logger(__name__)

#: Longest pause before restarting a child that keeps dying.
MAX_BACKOFF_S = 30.0


def run_pipeline(cfg: Config, config_path: Path | None, *, interval_s: float = 1.0) -> int:
    """Run until signalled; returns the exit status."""
    stop = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True
        log.info("stopping", signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    server: EmbeddedNats | None = None
    env: dict[str, str] = {"TIDELAKE_HOME": str(cfg.home.resolve())}
    if config_path is not None:
        env["TIDELAKE_CONFIG"] = str(config_path.resolve())
    url = cfg.bus.url
    if url is None:
        server = EmbeddedNats.from_config(cfg.bus.embedded, cfg.nats_store_dir).start()
        url = server.url
        env["TIDELAKE_BUS__URL"] = url
        log.info("embedded nats-server started", url=url, store=str(cfg.nats_store_dir))
    logs = cfg.home.resolve() / "logs"
    children = [
        StageProcess("stager", tidelake_argv("stage"), env, logs / "stage.log"),
        StageProcess(
            "ingest",
            tidelake_argv("ingest", "--continuous", "--interval", str(interval_s)),
            env,
            logs / "ingest.log",
        ),
    ]
    if cfg.capture.source:
        # tidelake's own capture (docs/capture.md) when a source database is configured.
        children.insert(
            0, StageProcess("capture", tidelake_argv("capture"), env, logs / "capture.log")
        )
    try:
        asyncio.run(provision(cfg.bus, url))
        for child in children:
            child.start()
            log.info("started", stage=child.name, pid=child.pid, log=str(child.log_path))
        backoff = {c.name: 1.0 for c in children}
        while not stop:
            for child in children:
                if not child.alive() and not stop:
                    log.warning(
                        "stage exited; restarting",
                        stage=child.name,
                        status=child.returncode(),
                        backoff_s=backoff[child.name],
                    )
                    time.sleep(backoff[child.name])
                    backoff[child.name] = min(backoff[child.name] * 2, MAX_BACKOFF_S)
                    child.start()
            time.sleep(0.5)
    finally:
        for child in children:
            child.stop()
        if server is not None:
            server.stop()
    return 0
