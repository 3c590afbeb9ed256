"""Every tidelake error, and whether retrying can help.

A concrete error mixes in :class:`Transient` (a retry may succeed: a server restarting, a
timeout) or :class:`Terminal` (retrying the same input fails the same way: a malformed
message, an invalid config). Loops decide retry-or-fail in one place by checking the marker.
"""

from __future__ import annotations


class TidelakeError(Exception):
    """Base of every error tidelake raises on purpose."""


class Transient:
    """Marker: the operation may succeed if retried."""


class Terminal:
    """Marker: retrying the same input cannot succeed."""


class ConfigError(TidelakeError, Terminal):
    """The configuration is invalid; the message names the field path and the reason."""


class DecodeError(TidelakeError, Terminal):
    """A message could not be decoded into change events. Goes to the dead-letter stream."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BusError(TidelakeError, Transient):
    """NATS / JetStream is unreachable or answered with an error."""


class StorageError(TidelakeError, Transient):
    """Staging storage failed to read or write."""


class ManifestError(TidelakeError, Terminal):
    """A manifest is unreadable or inconsistent with its staged files."""


class IngestError(TidelakeError):
    """The ingest failed to apply a batch to Hudi."""


class TableRefused(IngestError, Terminal):  # noqa: N818 -- named for what the caller sees
    """A table cannot be written (no primary key, paused, ...); the message says why."""


def is_retryable(exc: BaseException) -> bool:
    """True when retrying may help: the one place that decides."""
    return isinstance(exc, Transient)
