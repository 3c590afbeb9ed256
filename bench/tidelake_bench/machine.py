"""What a run is measured on: machine, load and versions (recorded with every result)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def cpu_model(cpuinfo: str | None = None) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (or the platform's processor name)."""
    text = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else (platform.processor() or "unknown")


def memory_gib(meminfo: str | None = None) -> float | None:
    """``MemTotal`` of ``/proc/meminfo`` in GiB."""
    text = _read("/proc/meminfo") if meminfo is None else meminfo
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return round(int(match.group(1)) / 1024 / 1024, 1) if match else None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """nproc, memory, CPU model, kernel."""
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "memory_gib": memory_gib(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def _first_line(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else None


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions(nats_cli: str | None = None) -> dict[str, str | None]:
    """Versions of everything a number depends on."""
    from tidelake.bus.server import nats_server_binary
    from tidelake.lake.spark import HUDI_BUNDLE_JAR

    return {
        "tidelake": _dist("tidelake"),
        "pyspark": _dist("pyspark"),
        "hudi_bundle": HUDI_BUNDLE_JAR.removesuffix(".jar"),
        "hudi_rs": _dist("hudi"),
        "nats_py": _dist("nats-py"),
        "orjson": _dist("orjson"),
        "pyarrow": _dist("pyarrow"),
        "java": _first_line(["java", "-version"]),
        "nats_server": _first_line([nats_server_binary(), "--version"]),
        "nats_cli": _first_line([nats_cli, "--version"]) if nats_cli else None,
    }
