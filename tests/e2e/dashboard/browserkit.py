"""Helpers of the dashboard browser tests: where chromium is, how it starts, screenshots."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
STATIC_INDEX = Path(__file__).resolve().parents[3] / "src/tidelake/api/static/index.html"


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under tests/e2e/dashboard/screenshots/ (in git: reviewed)."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
