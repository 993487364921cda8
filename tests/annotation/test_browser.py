"""A real headless Chromium: three annotators complete the demo study with the
keyboard (one reloads half-way and finds the draft), while the admin's monitoring
page updates live."""

from __future__ import annotations

import os
import re

import pytest
from django.core.management import call_command

from annotation.models import Assignment, AssignmentStatus, Grade, Study
from tests.browser import chromium

# Playwright's sync API runs an event loop in this thread.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

PASSWORD = "annotator-demo-password"


def _login(page, base, username, password):
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def _grade(page, start, stop):
    """Documents start..stop-1 get C1 yes, C2 yes, the rest no (grade 2), by keyboard."""
    for i in range(start, stop):
        page.wait_for_selector(f"#doc-{i}.current")
        page.keyboard.press("1")
        page.keyboard.press("2")
        page.keyboard.press("0")
        assert page.inner_text(f"#doc-{i} .live-grade") == "Grade: 2 of 5"
        page.keyboard.press("j")


def _complete_contest(page):
    page.wait_for_selector("#documents .doc")
    n = page.locator("#documents .doc").count()
    _grade(page, 0, n)
    page.wait_for_function("!document.getElementById('submit').disabled")
    done_before = _done(page)
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "(d) => !document.getElementById('done').hidden"
        " || document.getElementById('progress-text').textContent.includes("
        "'Contests done: ' + d)",
        arg=done_before + 1,
    )


def _next_state(page):
    """Wait until the page shows a contest or says nothing is left; which one?"""
    handle = page.wait_for_function(
        "document.querySelector('#done:not([hidden])') ? 'done'"
        " : (document.querySelector('#contest:not([hidden]) .doc') ? 'contest' : null)"
    )
    return handle.json_value()


def _done(page):
    match = re.search(r"Contests done: (\d+)", page.inner_text("#progress-text"))
    return int(match.group(1))


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_three_annotators_complete_the_demo_study_by_keyboard(live_server):
    call_command("demo", verbosity=0)
    study = Study.objects.get(name="Demo study")
    n_contests = study.contests.count()
    base = live_server.url
    with chromium() as browser:
        admin = browser.new_context().new_page()
        _login(admin, base, "admin", "admin-demo-password")
        admin.goto(f"{base}/annotation/studies/{study.pk}/")
        assert admin.inner_text("#n-complete") == "0"

        page = browser.new_context(viewport={"width": 1366, "height": 768}).new_page()
        _login(page, base, "annotator1", PASSWORD)
        page.wait_for_selector("#my-studies")  # "/" sent the annotator to their studies
        assert "Welcome, annotator1" in page.inner_text("h1")
        page.click("text=Start grading")
        page.wait_for_selector("#documents .doc")
        query = page.inner_text("#query")
        n = page.locator("#documents .doc").count()
        half = n // 2
        page.keyboard.press("?")
        assert page.is_visible("#help")
        page.keyboard.press("Escape")
        _grade(page, 0, half)
        page.wait_for_function(
            "document.getElementById('save-status').textContent === 'All changes saved'"
        )
        assert page.is_disabled("#submit")

        page.reload()
        page.wait_for_selector("#documents .doc")
        assert page.inner_text("#query") == query
        for i in range(half):
            assert (
                page.get_attribute(f"#doc-{i} button.yes[data-q=C2]", "aria-pressed")
                == "true"
            )
            assert (
                page.get_attribute(f"#doc-{i} button.no[data-q=C5]", "aria-pressed")
                == "true"
            )
        assert (
            page.get_attribute(f"#doc-{half} button.yes[data-q=C1]", "aria-pressed")
            == "false"
        )
        assert "current" in page.get_attribute(f"#doc-{half}", "class")  # resumes here
        _grade(page, half, n)
        assert f"Documents answered: {n} of {n}" in page.inner_text("#progress-text")
        page.keyboard.press("Control+Enter")
        page.wait_for_function(
            "document.getElementById('progress-text').textContent.includes('Contests done: 1')"
        )
        assert page.inner_text("#query") != query  # straight into the next contest

        while _next_state(page) == "contest":
            _complete_contest(page)
        for name in ("annotator2", "annotator3"):
            other = browser.new_context().new_page()
            _login(other, base, name, PASSWORD)
            other.goto(f"{base}/annotation/studies/{study.pk}/grading")
            while _next_state(other) == "contest":
                _complete_contest(other)

        # the monitoring page picked the progress up without a reload
        admin.wait_for_function(
            f"document.getElementById('n-complete').textContent === '{n_contests}'",
            timeout=15_000,
        )
        assert admin.inner_text("#n-not-started") == "0"
        assert admin.locator("#chart polyline").count() == 1
    # ORM checks only outside the browser block: Playwright's greenlets would open
    # (and leave open) a database connection of their own.
    first = (
        Assignment.objects.filter(annotator__username="annotator1")
        .order_by("submitted_at")
        .first()
    )
    grades = list(Grade.objects.filter(assignment=first))
    assert len(grades) == n and {g.grade for g in grades} == {2}
    assert all(g.answers["C2"] is True and g.answers["C3"] is False for g in grades)
    assert all(g.seconds >= 0 for g in grades)
    for contest in study.contests.all():
        assert (
            contest.assignments.filter(status=AssignmentStatus.SUBMITTED).count() == 3
        )
