"""Issue 13 done-when, in headless Chromium: staff invite an existing annotator to a
second study (their old password still works), gold documents flag that careless
annotator, staff exclude them, others re-grade their contests to exactly N valid
reviews, and the report shows the results with and without them. Along the way:
the whole-grade shortcut (keys per contest measured before/after), the gentle
contradiction warning and the end states."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

from annotation.models import Assignment, AssignmentStatus, GoldAnswer, StudyMember
from annotation.services import (
    gold_item_add,
    study_create,
    study_gold_rate_set,
    study_member_add,
)
from benchmarks.models import Document
from tests.annotation.factories import build_world
from tests.browser import chromium
from tests.factories import AnnotatorFactory

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

OFF_TOPIC = "Off-topic: a recipe for lemon cake"


class Keys:
    """The page's keyboard, counting presses (the keys-per-contest figure)."""

    def __init__(self, page):
        self.page = page
        self.count = 0

    def press(self, key: str) -> None:
        self.count += 1
        self.page.keyboard.press(key)


def _login(page, base, username, password):
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def _titles(page):
    page.wait_for_selector("#documents .doc")
    return page.locator("#documents .doc .doc-title").all_inner_texts()


def _state(page):
    return page.wait_for_function(
        "document.querySelector('#done:not([hidden])') ? 'done'"
        " : (document.querySelector('#contest:not([hidden]) .doc') ? 'contest' : null)"
    ).json_value()


def _done_count(page):
    return int(re.search(r"Contests done: (\d+)", page.inner_text("#progress-text"))[1])


def _submit(page, keys):
    before = _done_count(page)
    page.wait_for_function("!document.getElementById('submit').disabled")
    keys.press("Control+Enter")
    page.wait_for_function(
        "(d) => !document.getElementById('done').hidden"
        " || document.getElementById('progress-text').textContent.includes("
        "'Contests done: ' + d)",
        arg=before + 1,
    )


def _grade_old_way(page, keys):
    """Question by question: 1, 2, 0 (grade 2) or 0 (off-topic), then j."""
    for i, title in enumerate(_titles(page)):
        page.wait_for_selector(f"#doc-{i}.current")
        if OFF_TOPIC not in title:
            keys.press("1")
            keys.press("2")
        keys.press("0")
        keys.press("j")


def _grade_with_shortcut(page, keys, level_of):
    """The whole grade in one key per document; the page moves on by itself."""
    titles = _titles(page)
    for i, title in enumerate(titles):
        page.wait_for_selector(f"#doc-{i}.current")
        level = level_of(title)
        keys.press(f"Shift+Digit{level}")
        assert page.inner_text(f"#doc-{i} .live-grade") == f"Grade: {level} of 5"


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_invite_gold_flag_exclude_regrade_report(live_server, admin_user, capsys):
    world = build_world(n_queries=8, pool=12, n_systems=3, seed=3)
    first = study_create(
        name="First",
        datasets=[world.dataset],
        systems=world.systems,
        n_contests=2,
        seed=1,
        open_now=True,
    )
    second = study_create(
        name="Second",
        datasets=[world.dataset],
        systems=world.systems,
        n_contests=4,
        per_contest=2,
        seed=7,
        open_now=True,
    )
    # Gold: one clearly off-topic document per contest query (expected grade 0),
    # mixed into every assignment.
    for i, contest in enumerate(second.contests.select_related("query")):
        doc = Document.objects.create(
            dataset=world.dataset,
            external_id=f"gold-{i}",
            title=OFF_TOPIC,
            text="Beat butter and sugar, add lemon zest, bake for forty minutes.",
        )
        gold_item_add(study=second, query=contest.query, document=doc, expected_grade=0)
    study_gold_rate_set(study=second, rate=1.0)
    careless = AnnotatorFactory(username="careless", password="careless-old-pass-1")
    study_member_add(study=first, annotator=careless)
    careful = AnnotatorFactory.create_batch(2, password="careful-pass-123")
    for user in careful:
        study_member_add(study=second, annotator=user)
    base = live_server.url
    measured = {}
    with chromium() as browser:
        staff = browser.new_context().new_page()
        _login(staff, base, admin_user.username, "pw-test-123")
        # 1. Staff invite the existing annotator to the second study.
        staff.goto(f"{base}/annotation/annotators/")
        staff.select_option("#id_invite-annotator", label="careless")
        staff.select_option("#id_invite-study", label="Second")
        staff.click("#invite-button")
        staff.wait_for_selector("text=password is unchanged")

        # 2. Their old password still works; they grade carelessly (all yes).
        page = browser.new_context().new_page()
        _login(page, base, "careless", "careless-old-pass-1")
        page.wait_for_selector("#my-studies")
        assert page.locator("#my-studies tbody tr").count() == 2
        page.goto(f"{base}/annotation/studies/{second.pk}/grading")
        keys = Keys(page)
        while _state(page) == "contest":
            _grade_with_shortcut(page, keys, lambda title: 5)
            _submit(page, keys)
        # End state: nothing of the last contest is left on screen.
        assert page.inner_text("#query-sticky") == ""
        assert not page.is_visible("#instructions")
        page.goto(f"{base}/annotation/")
        assert page.locator("text=Continue grading").count() == 0
        assert page.locator(".nothing-left").count() == 1

        # 3. A careful annotator: one contest question by question, the rest with
        # the whole-grade shortcut; a contradiction gets a warning, then goes through.
        good = browser.new_context().new_page()
        _login(good, base, careful[0].username, "careful-pass-123")
        good.goto(f"{base}/annotation/studies/{second.pk}/grading")
        keys = Keys(good)
        _grade_old_way(good, keys)
        measured["before"] = keys.count + 1  # + the submit
        measured["before_docs"] = len(_titles(good))
        titles = _titles(good)
        target = next(i for i, t in enumerate(titles) if OFF_TOPIC not in t)
        good.click(f"#doc-{target} .doc-title")
        good.keyboard.press("4")  # "directly answers" yes while "useful" stays no
        good.keyboard.press("0")
        good.wait_for_selector(f"#doc-{target} .contradiction-note:not([hidden])")
        good.keyboard.press("Control+Enter")
        good.wait_for_selector("#message:not([hidden])")
        assert "check and submit again" in good.inner_text("#message")
        _submit(good, keys)
        first_contest = True
        while _state(good) == "contest":
            keys = Keys(good)
            docs = len(_titles(good))
            _grade_with_shortcut(
                good, keys, lambda title: 0 if OFF_TOPIC in title else 2
            )
            _submit(good, keys)
            if first_contest:
                measured["after"] = keys.count
                measured["after_docs"] = docs
                first_contest = False

        # 4. Monitoring flags the careless annotator by gold accuracy.
        staff.goto(f"{base}/annotation/studies/{second.pk}/")
        row = staff.locator('#acceptance tr[data-username="careless"]')
        assert "gold" in row.locator(".flags").inner_text()
        assert row.locator(".gold-accuracy").inner_text().startswith("0.00")
        good_row = staff.locator(
            f'#acceptance tr[data-username="{careful[0].username}"]'
        )
        assert "gold" not in good_row.locator(".flags").inner_text()
        assert good_row.locator(".contradictions").inner_text() == "1"
        # 5. Staff exclude them, with a reason.
        row.locator("input[name=reason]").fill(
            "gold accuracy 0 of 4: answered yes to all"
        )
        row.locator("button", has_text="Exclude").click()
        staff.wait_for_selector("text=contests re-open")
        assert (
            "excluded"
            in staff.locator('#acceptance tr[data-username="careless"]').inner_text()
        )

        # 6. Another annotator re-grades the re-opened contests.
        other = browser.new_context().new_page()
        _login(other, base, careful[1].username, "careful-pass-123")
        other.goto(f"{base}/annotation/studies/{second.pk}/grading")
        keys = Keys(other)
        regraded = 0
        while _state(other) == "contest":
            _grade_with_shortcut(
                other, keys, lambda title: 0 if OFF_TOPIC in title else 3
            )
            _submit(other, keys)
            regraded += 1
        assert regraded == 4

        # 7. The report shows the results with and without the excluded annotator.
        staff.goto(f"{base}/annotation/studies/{second.pk}/report")
        staff.wait_for_selector("#with-excluded")
        assert staff.inner_text("#reviews-without") == "8"
        assert staff.inner_text("#reviews-with") == "12"

    # ORM checks outside the browser block (Playwright's greenlets hold their own
    # connection).
    rows = list(
        Assignment.objects.filter(
            contest__study=second, status=AssignmentStatus.SUBMITTED, valid=True
        ).values_list("contest_id", "annotator__username")
    )
    per = Counter(c for c, _ in rows)
    assert len(per) == 4 and set(per.values()) == {2}
    assert all(len({u for cc, u in rows if cc == c}) == 2 for c in per)
    assert not any(u == "careless" for _c, u in rows)
    member = StudyMember.objects.get(study=second, annotator__username="careless")
    assert member.excluded_reason.startswith("gold accuracy") and not member.active
    assert (
        GoldAnswer.objects.filter(assignment__annotator__username="careless").count()
        == 4
    )
    # The old password still opens the first study.
    assert StudyMember.objects.get(study=first, annotator__username="careless").active
    assert careless.__class__.objects.get(pk=careless.pk).check_password(
        "careless-old-pass-1"
    )
    with capsys.disabled():
        print(
            f"\nkeys per contest (grading page): question by question "
            f"{measured['before']} for {measured['before_docs']} documents, "
            f"whole-grade shortcut {measured['after']} for {measured['after_docs']}"
        )
    # One key per document plus the submit, against three or four per document.
    assert measured["after"] == measured["after_docs"] + 1
    assert measured["before"] >= 2 * measured["before_docs"] + 1
