"""Helpers of the demo end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson


def run_demo(home: Path, *flags: str, timeout_s: float = 900) -> dict[str, Any]:
    """``tidelake demo FLAGS --json --home HOME`` in a child process: its JSON summary (the
    last line), after checking the demo ran without error and the lake equals the source."""
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "demo", *flags, "--json", "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=os.environ,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary: dict[str, Any] = orjson.loads(proc.stdout.strip().splitlines()[-1])
    assert None is summary["error"], proc.stderr[-3000:]
    assert 0 == summary["mismatches"], summary["per_table"]
    return summary
