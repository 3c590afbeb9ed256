"""The capture's saved position: one small JSON file, replaced atomically.

Written only with a state whose every message JetStream has acknowledged (docs/architecture.md §1),
so a restart resumes at a transaction boundary with nothing lost; messages published after the
saved state and before a crash are published again with the same ``Nats-Msg-Id`` and
dropped by JetStream (or by the ingest's position watermark past the duplicate window).

The state is source-specific plain data (see ``capture/mysql.py`` and
``capture/postgres.py``); this module only makes it durable: write a temporary file in the
same directory, fsync it, rename it over the old one, fsync the directory.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import orjson

from tidelake.errors import ConfigError


class PositionStore:
    """Load and atomically save the capture state at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.saves = 0

    def load(self) -> dict[str, Any] | None:
        """The last saved state, or None when capture never saved one."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            state = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            # A rename is atomic, so a torn file means someone else wrote it.
            raise ConfigError(f"{self.path}: not a capture position file: {exc}") from exc
        if not isinstance(state, dict):
            raise ConfigError(f"{self.path}: not a capture position file")
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Replace the saved state; on return it survives a crash of this machine."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):  # some filesystems refuse a directory fsync
                os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.saves += 1
