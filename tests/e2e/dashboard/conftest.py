"""Browser fixtures: Debian's chromium driven by Python playwright (no browser download).

``make test`` installs chromium (``SETUP_CHROMIUM=1 scripts/setup``); the dashboard itself
is built by the setup (``scripts/dashboard``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "api"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from browserkit import CHROMIUM, CHROMIUM_ARGS, STATIC_INDEX


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "e2e/dashboard" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian chromium for the whole module."""
    if not CHROMIUM.exists():
        pytest.fail("no /usr/bin/chromium: run `SETUP_CHROMIUM=1 scripts/setup` (make test does)")
    if not STATIC_INDEX.exists():
        pytest.fail("the dashboard is not built: run `make dashboard`")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (own context) at a desktop size."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    yield pg
    context.close()
