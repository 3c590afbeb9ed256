"""The built dashboard in git (api/static/) is the build of the dashboard's sources in git."""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STATIC = ROOT / "src" / "tidelake" / "api" / "static"
SOURCES = (
    "dashboard/src",
    "dashboard/public",
    "dashboard/astro.config.mjs",
    "dashboard/package.json",
    "dashboard/package-lock.json",
)


def source_sha256() -> str:
    """What scripts/dashboard records: sha256sum of each source file (sorted by path), then
    the SHA-256 of that listing."""
    files: list[str] = []
    for name in SOURCES:
        path = ROOT / name
        if path.is_file():
            files.append(name)
        elif path.is_dir():
            files += [str(p.relative_to(ROOT)) for p in path.rglob("*") if p.is_file()]
    listing = "".join(
        f"{hashlib.sha256((ROOT / f).read_bytes()).hexdigest()}  {f}\n" for f in sorted(files)
    )
    return hashlib.sha256(listing.encode()).hexdigest()


def test_the_built_dashboard_matches_its_sources() -> None:
    """A change of dashboard/ is committed with its build: run `scripts/dashboard --force`
    and commit src/tidelake/api/static/ when this fails."""
    recorded = (STATIC / ".source-sha256").read_text().strip()
    assert (STATIC / "index.html").is_file()
    assert source_sha256() == recorded
