"""Source DSNs: ``mysql://user[:password]@host:port/`` and
``postgresql://user[:password]@host:port/dbname``.

The password may also come from ``capture.password`` (environment) or ``password_file``;
a DSN shown in logs or errors never includes it (:meth:`SourceDsn.redacted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from tidelake.errors import ConfigError

_KINDS = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgres", "postgres": "postgres"}


@dataclass(frozen=True)
class SourceDsn:
    """A parsed source DSN."""

    kind: str
    host: str
    port: int
    user: str
    password: str | None
    database: str

    def redacted(self) -> str:
        scheme = "mysql" if self.kind == "mysql" else "postgresql"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.database}"


def parse_dsn(dsn: str, password: str | None = None) -> SourceDsn:
    """Parse ``dsn``; ``password`` (from the environment) wins over one in the DSN."""
    parts = urlsplit(dsn)
    kind = _KINDS.get(parts.scheme.lower())
    if kind is None:
        raise ConfigError(
            f"capture.source: unknown scheme {parts.scheme!r}; use mysql:// or postgresql://"
        )
    if not parts.hostname:
        raise ConfigError("capture.source: the DSN names no host")
    default_port = 3306 if kind == "mysql" else 5432
    default_user = "root" if kind == "mysql" else "postgres"
    database = unquote(parts.path.lstrip("/"))
    if kind == "postgres" and not database:
        database = "postgres"
    return SourceDsn(
        kind=kind,
        host=parts.hostname,
        port=parts.port or default_port,
        user=unquote(parts.username) if parts.username else default_user,
        password=password
        if password is not None
        else (unquote(parts.password) if parts.password else None),
        database=database,
    )
