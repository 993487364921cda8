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
            _close_this_contexts_connections()
            browser.close()


def _close_this_contexts_connections() -> None:
    """Close the database connections the test body opened inside this block.

    Playwright's sync API runs the body in a greenlet with a context of its own, and
    Django keeps connections per context: a query made inside the block opens a
    connection that the test database's teardown never sees, so on PostgreSQL the
    test database could not be dropped ("accessed by other users"). A connection
    inside a transaction (a non-transactional test's) is left alone."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()
