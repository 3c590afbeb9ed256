"""constraints.txt pins every dependency pyproject.toml declares for tidelake[all] (images
install under it: `pip install -c constraints.txt`); `make constraints` refreshes it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_name(name)] = version.strip()
    return pins


def test_every_declared_dependency_is_pinned() -> None:
    """Base and the spark, capture, s3, sinks and tracing extras: each name has an exact pin."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [
        *project["dependencies"],
        *(r for extra in ("spark", "capture", "s3", "sinks", "tracing") for r in extras[extra]),
    ]
    names = {_name(r) for r in declared if not r.startswith("tidelake")}
    pins = _pins()
    assert set() == {n for n in names if not pins.get(n)}


def test_pyspark_pin_matches_the_hudi_bundle_line() -> None:
    """PySpark 3.5.7: the Spark line the pinned hudi-spark3.5 bundle is built for."""
    assert "3.5.7" == _pins()["pyspark"]
