"""What every CLI verb writes to stdout for a machine: one JSON document per line."""

from __future__ import annotations

import sys
from typing import Any

import orjson


def print_json(data: Any) -> None:
    """Write ``data`` as one JSON line and flush, so a pipe sees it at once."""
    sys.stdout.write(orjson.dumps(data).decode() + "\n")
    sys.stdout.flush()
