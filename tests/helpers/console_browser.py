"""Debian's Chromium driven by Playwright for Python, for the console's browser tests.

The browser is the system's (/usr/bin/chromium, `apt-get install chromium`; .ci/run installs it), never
one of Playwright's own downloads. Without it (or without playwright) a test module skips saying so;
in CI no such skip is allowed (tests/helpers/skips_allowed.py), so CI fails instead.

With JOURNAL_ENGINE_SCREENSHOTS=DIR set, ``screenshot`` writes each page's picture as
DIR/console-NAME.png (docs/console.md shows the ones in docs/images).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGUMENTS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                      "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SKIP_MESSAGE = "the console's browser tests need Debian's Chromium (apt-get install chromium) and playwright"


def launched_browser():
    """(playwright, browser) of the system's Chromium; a skip when either is missing."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{SKIP_MESSAGE}: {CHROMIUM} is missing")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(f"{SKIP_MESSAGE}: playwright is not installed (pip install -e '.[test]')")
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGUMENTS)
    except BaseException:
        playwright.stop()
        raise
    return playwright, browser


def screenshot(page, name: str) -> None:
    """The page as DIR/console-NAME.png when JOURNAL_ENGINE_SCREENSHOTS=DIR is set."""
    directory = os.environ.get("JOURNAL_ENGINE_SCREENSHOTS")
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(directory) / f"console-{name}.png"), full_page=True)
