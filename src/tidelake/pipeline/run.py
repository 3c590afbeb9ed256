"""``tidelake run``: every stage of the pipeline on this machine, supervised.

The stack (``pipeline/stack.py``): without ``bus.url`` an embedded nats-server is started
with its store under ``home``; the capture (when ``capture.source`` is set), the stager and
the continuous ingest run as child processes (one per stage, as in production). A child
that dies is restarted with the retriers' growing back-off (``retry.backoff_s``): every
stage resumes from its durable state, so a restart loses nothing. SIGTERM/SIGINT stops the
children gracefully (each finishes its current batch, in the stack's order) and then the
server; the exit status is 0.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import structlog

from tidelake.config import Config
from tidelake.pipeline.stack import LocalStack
from tidelake.retry import backoff_s

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

    stack = LocalStack(cfg.home, cfg=cfg, config_path=config_path, ingest_interval_s=interval_s)
    try:
        stack.start()
        restarts = {c.name: 0 for c in stack.children}
        healthy_logged = False
        while not stop:
            for child in stack.children:
                if not child.alive() and not stop:
                    restarts[child.name] += 1
                    pause = backoff_s(restarts[child.name], max_wait_s=MAX_BACKOFF_S)
                    log.warning(
                        "stage exited; restarting",
                        stage=child.name,
                        status=child.returncode(),
                        backoff_s=round(pause, 2),
                        log_tail=child.log_tail(5),
                    )
                    time.sleep(pause)
                    child.start()
            if not healthy_logged and stack.healthy():
                healthy_logged = True
                log.info("pipeline healthy", bus=stack.bus_url)
            time.sleep(0.5)
    finally:
        stack.stop()
    return 0
