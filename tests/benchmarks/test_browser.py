"""A real headless Chromium logs in and browses the demo data."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from tests.browser import chromium

# Playwright's sync API runs an event loop in this thread; Django's ORM calls in the
# test body are made before the browser starts.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_admin_logs_in_and_browses_demo_dataset(live_server, tmp_path):
    call_command("demo", verbosity=0)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{live_server.url}/")
        assert "/login/" in page.url
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin-demo-password")
        page.click("button[type=submit]")
        page.wait_for_selector("#datasets")
        rows = page.locator("#datasets tbody tr")
        assert rows.count() == 2
        assert "1200" in rows.filter(has_text="demo-synthetic").inner_text()
        page.click("text=tiny")
        page.wait_for_selector("#queries")
        assert page.locator("#systems tbody tr").count() == 2
        page.click("text=q2")
        page.wait_for_selector("#pool")
        assert page.locator("#pool tbody tr").count() == 8
        assert "mRNA" in page.inner_text("h1")
        page.screenshot(path=str(tmp_path / "query.png"))


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_annotator_sees_no_benchmark_data_in_the_browser(live_server):
    call_command("demo", verbosity=0)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "annotator1")
        page.fill("#id_password", "annotator-demo-password")
        page.click("button[type=submit]")
        page.wait_for_selector("h1")
        text = page.inner_text("main")
        assert "Welcome, annotator1" in text and "tiny" not in text
        response = page.goto(f"{live_server.url}/api/v1/datasets")
        assert response.status == 403
