"""Where and how every tidelake process logs: structlog to stderr, console or JSON lines.

stdout is for what a verb prints (tables, JSON documents), so logs always go to stderr.
``log_format: json`` (config) renders each event as one JSON object per line with ``level``
and ``timestamp`` (ISO 8601, UTC) added (``logger`` too for stdlib records), for log
shippers; ``console`` keeps the key=value lines a person reads. Records of the standard
``logging`` module (uvicorn, py4j, nats) go through the same renderer, so a JSON log stays
JSON throughout.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

import structlog

LogFormat = Literal["console", "json"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def level_number(level: str | int) -> int:
    """``"info"`` → ``logging.INFO``; an int is already a level."""
    if isinstance(level, int):
        return level
    return _LEVELS.get(level.lower(), logging.ERROR)


class _Stderr:
    """``sys.stderr`` as it is at each write: a test runner (pytest, typer's CliRunner) swaps
    it and closes the old one, which a logger holding the object of configure time would
    then write to."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is at each record (a test runner swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _shared_processors(fmt: LogFormat) -> list[structlog.types.Processor]:
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
    ]
    if fmt == "json":
        return [
            *processors,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
        ]
    # structlog's own default chain: the console lines look as they always did.
    return [
        *processors,
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
    ]


def _renderer(fmt: LogFormat) -> structlog.types.Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())


def configure_logging(level: str | int = "info", fmt: LogFormat = "console") -> None:
    """Send structlog and stdlib logging to stderr at ``level`` in ``fmt``.

    Called again (a verb loads its config after the defaults were set), it replaces the
    previous setup rather than adding a second handler."""
    number = level_number(level)
    structlog.configure(
        processors=[*_shared_processors(fmt), _renderer(fmt)],
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        wrapper_class=structlog.make_filtering_bound_logger(number),
        cache_logger_on_first_use=False,
    )
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *_shared_processors(fmt),
                structlog.stdlib.add_logger_name,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(fmt)],
        )
    )
    handler.set_name("tidelake")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "tidelake"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(number, logging.WARNING))
