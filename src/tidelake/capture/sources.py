"""The source named by ``capture.source``: MySQL/MariaDB or PostgreSQL."""

from __future__ import annotations

from tidelake.capture.dsn import parse_dsn
from tidelake.capture.runner import Source
from tidelake.config import Config
from tidelake.errors import ConfigError


def open_source(cfg: Config) -> Source:
    """The :class:`~tidelake.capture.runner.Source` for ``cfg.capture.source``."""
    if not cfg.capture.source:
        raise ConfigError("capture.source is not set (a mysql:// or postgresql:// DSN)")
    dsn = parse_dsn(cfg.capture.source, cfg.capture.resolved_password())
    if dsn.kind == "mysql":
        from tidelake.capture.mysql import MySQLSource

        return MySQLSource(cfg.capture, dsn)
    from tidelake.capture.postgres import PostgresSource

    return PostgresSource(cfg.capture, dsn)
