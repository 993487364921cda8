"""Headless Chromium for browser tests: the system browser driven by Playwright.

Playwright's own browser download cannot run here; `.ci/run` installs Debian's
chromium, and CHROMIUM_PATH may point elsewhere. Tests using it carry the
``chromium`` marker (tests/tiers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, sync_playwright

from tests import tiers

FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    path = tiers.chromium_path()
    if not path:
        raise RuntimeError(
            "Chromium not found: install it (apt-get install -y chromium) or set CHROMIUM_PATH"
        )
    return path


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path(), headless=True, args=FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()
