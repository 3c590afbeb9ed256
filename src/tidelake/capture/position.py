"""The capture's saved position: one small JSON file, replaced atomically.

Written only with a state whose every message JetStream has acknowledged (docs/architecture.md §1),
so a restart resumes at a transaction boundary with nothing lost; messages published after the
saved state and before a crash are published again with the same ``Nats-Msg-Id`` and
dropped by JetStream (or by the ingest's position watermark past the duplicate window).

The state is source-specific plain data (see ``capture/mysql.py`` and
``capture/postgres.py``); this module only makes it durable, through
:func:`tidelake.runtime.durable.write_atomic` (temporary file fsync-ed, renamed over the old
one, directory fsync-ed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tidelake.errors import ConfigError
from tidelake.runtime.durable import write_atomic


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
        write_atomic(
            self.path, orjson.dumps(state, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
        )
        self.saves += 1
