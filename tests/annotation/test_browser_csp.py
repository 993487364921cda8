"""The scripted pages work in headless Chromium under the enforced
Content-Security-Policy: no violation is reported and their scripts run."""

from __future__ import annotations

import os

import pytest

from tests.browser import chromium

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _login(page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_grading_and_study_pages_run_under_the_csp(
    live_server, study, members, admin_user
):
    base = live_server.url
    violations: list[str] = []
    with chromium(enforce_csp=True) as browser:
        annotator = browser.new_context().new_page()
        annotator.on(
            "console",
            lambda m: (
                violations.append(m.text)
                if "Content Security Policy" in m.text
                else None
            ),
        )
        _login(annotator, base, members[0].username, "pw-test-123")
        annotator.goto(f"{base}/annotation/studies/{study.pk}/grading")
        annotator.wait_for_selector(
            "#documents .doc"
        )  # fetched and drawn by the script
        annotator.wait_for_selector("#doc-0.current")
        annotator.keyboard.press("1")  # the keyboard handler answers
        assert "Grade so far: 1" in annotator.inner_text("#doc-0 .live-grade")

        staff = browser.new_context().new_page()
        staff.on(
            "console",
            lambda m: (
                violations.append(m.text)
                if "Content Security Policy" in m.text
                else None
            ),
        )
        _login(staff, base, admin_user.username, "pw-test-123")
        staff.goto(f"{base}/annotation/studies/{study.pk}/")
        staff.wait_for_selector("#chart path.axis", state="attached")  # monitor drew
        staff.goto(f"{base}/api/docs/")
        staff.wait_for_selector(".swagger-ui .info", timeout=20_000)
    assert violations == []
