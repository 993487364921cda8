"""An admin adds a judge in the browser: fills the form, tests the connection against
the simulated judge (models and the tiny answer shown), saves, and finds it listed."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from judging.models import Judge
from judging.simulated import start_simulated_judge
from tests.browser import chromium

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_admin_adds_a_judge_after_testing_its_connection(
    live_server, settings, tmp_path
):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"
    call_command("demo", verbosity=0)
    server, _thread, url = start_simulated_judge(seed=2, model="sim-7b")
    try:
        with chromium() as browser:
            page = browser.new_page()
            page.goto(f"{live_server.url}/login/?next=/judging/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "admin-demo-password")
            page.click("button[type=submit]")
            page.click("#add-judge")
            page.wait_for_selector("#judge-form")
            page.fill("#id_name", "sim-web")
            page.fill("#id_base_urls", url)
            page.fill("#id_model", "sim-7b")
            page.fill("#id_api_key_env", "SECRET_KEY")
            page.fill("#id_concurrency", "3")
            page.click("#test-connection")
            # The platform's own secret is refused before anything is sent.
            assert "platform's own settings" in page.inner_text("#error-api_key_env")
            assert server.stats()["requests"] == 0
            page.fill("#id_api_key_env", "")
            page.click("#test-connection")
            page.wait_for_selector("#connection")
            row = page.inner_text("#connection tbody tr")
            assert "sim-7b" in row
            assert "I can only judge documents given in <doc> elements." in row
            assert page.get_attribute("#connection tbody tr", "data-ok") == "true"
            assert not Judge.objects.filter(name="sim-web").exists()
            page.click("#save-judge")
            page.wait_for_selector("#judges")
            assert "sim-web" in page.inner_text("#judges")
        judge = Judge.objects.get(name="sim-web")
        assert (judge.base_urls, judge.model, judge.concurrency) == ([url], "sim-7b", 3)
    finally:
        server.stop()
