"""Headless Chromium for browser tests: the system browser driven by Playwright.

Playwright's own browser download cannot run here; `.ci/run` installs Debian's
chromium, and CHROMIUM_PATH may point elsewhere. Tests using it carry the
``chromium`` marker (tests/tiers.py).

The pages send a Content-Security-Policy without 'unsafe-eval'. Playwright's
``wait_for_function`` evaluates its predicate with eval in the page, which that
policy refuses, so by default the contexts made here ignore the policy;
``chromium(enforce_csp=True)`` keeps it (tests/annotation/test_browser_csp.py runs
the scripted pages under it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

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


class _CspBypassingBrowser:
    """A Browser whose new contexts and pages ignore the page's CSP."""

    def __init__(self, browser: Browser) -> None:
        self._browser = browser

    def new_context(self, **options: Any) -> BrowserContext:
        return self._browser.new_context(bypass_csp=True, **options)

    def new_page(self, **options: Any) -> Page:
        return self._browser.new_page(bypass_csp=True, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)


@contextmanager
def chromium(enforce_csp: bool = False) -> Iterator[Browser]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium_path(), headless=True, args=FLAGS
        )
        try:
            yield browser if enforce_csp else _CspBypassingBrowser(browser)  # type: ignore[misc]
        finally:
            browser.close()
