"""The assignment rules, one at a time, through the services (see ASSIGNMENT.md)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation import sampling
from annotation.models import Assignment, AssignmentStatus, ContestDocument, Grade
from annotation.selectors import assignment_payload
from annotation.services import (
    annotator_deactivate,
    assignment_draft_save,
    assignment_next,
    assignment_submit,
    grade_of,
    rubric_create,
    study_close,
    study_member_add,
    study_open,
)
from rcp_platform.exceptions import ApplicationError, ConflictError, NotFoundError
from tests.annotation.factories import full_grades
from tests.factories import AnnotatorFactory

pytestmark = pytest.mark.django_db


def _submit(assignment, seed=0):
    payload = assignment_payload(assignment=assignment)
    return assignment_submit(
        assignment=assignment,
        grades=full_grades(payload, np.random.default_rng(seed)),
    )


def _lapse(assignment):
    Assignment.objects.filter(pk=assignment.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_next_resumes_the_lease_in_progress(study, members):
    bob = members[0]
    first = assignment_next(study=study, annotator=bob)
    again = assignment_next(study=study, annotator=bob)
    assert first.pk == again.pk
    assert again.expires_at >= first.expires_at
    assert Assignment.objects.filter(annotator=bob).count() == 1


def test_exactly_n_per_contest_and_never_twice(study, members):
    """Four annotators grade everything: every contest ends with exactly 3 submitted,
    no annotator ever sees a contest twice, then everyone gets None."""
    seen = {u.pk: set() for u in members}
    progress = True
    while progress:
        progress = False
        for i, user in enumerate(members):
            assignment = assignment_next(study=study, annotator=user)
            if assignment is None:
                continue
            assert assignment.contest_id not in seen[user.pk]
            seen[user.pk].add(assignment.contest_id)
            _submit(assignment, seed=i)
            progress = True
    for contest in study.contests.all():
        submitted = contest.assignments.filter(status=AssignmentStatus.SUBMITTED)
        assert submitted.count() == 3
        assert sorted(submitted.values_list("slot", flat=True)) == [1, 2, 3]
    assert all(assignment_next(study=study, annotator=u) is None for u in members)


def test_fullest_contest_is_completed_first(study, members):
    a = assignment_next(study=study, annotator=members[0])
    b = assignment_next(study=study, annotator=members[1])
    c = assignment_next(study=study, annotator=members[2])
    d = assignment_next(study=study, annotator=members[3])
    assert a.contest_id == b.contest_id == c.contest_id != d.contest_id
    assert {a.slot, b.slot, c.slot} == {1, 2, 3}


def test_expired_lease_returns_the_contest_to_the_pool(make_study, members):
    """One contest, one slot: B waits for A's lease; once it lapsed B takes it, A's
    submit is refused (the contest went to someone else) and A never gets it back."""
    study = make_study(name="single", n_contests=1, per_contest=1)
    alice, bob = members[0], members[1]
    for user in (alice, bob):
        study_member_add(study=study, annotator=user)
    a = assignment_next(study=study, annotator=alice)
    assert assignment_next(study=study, annotator=bob) is None
    _lapse(a)
    b = assignment_next(study=study, annotator=bob)
    assert b.contest_id == a.contest_id and b.slot == 1
    a.refresh_from_db()
    assert a.status == AssignmentStatus.EXPIRED and a.slot is None
    with pytest.raises(ConflictError, match="went to another annotator"):
        _submit(a)
    with pytest.raises(ConflictError):
        assignment_draft_save(assignment=a, grades={})
    assert assignment_next(study=study, annotator=alice) is None
    assert _submit(b)[1] is False


def test_lapsed_lease_still_counts_until_reclaimed(study, members):
    """A lapsed lease nobody reclaimed is submitted normally (its slot is still held)."""
    a = assignment_next(study=study, annotator=members[0])
    _lapse(a)
    done, already = _submit(a)
    assert (done.status, already) == (AssignmentStatus.SUBMITTED, False)


def test_reclaimed_lease_is_retaken_when_the_contest_has_room(study, members):
    a = assignment_next(study=study, annotator=members[0])
    _lapse(a)
    other = assignment_next(study=study, annotator=members[1])  # reclaims a's slot
    assert other.contest_id == a.contest_id
    a.refresh_from_db()
    assert a.status == AssignmentStatus.EXPIRED
    saved = assignment_draft_save(
        assignment=a, grades={a.keys[0]: {"answers": {"C1": True}}}
    )
    assert saved.status == AssignmentStatus.LEASED and saved.slot not in (None, 1)
    assert _submit(saved)[1] is False


def test_submit_is_idempotent_and_stores_raw_answers(study, members):
    assignment = assignment_next(study=study, annotator=members[0])
    payload = assignment_payload(assignment=assignment)
    grades = full_grades(payload, np.random.default_rng(1))
    first, already = assignment_submit(assignment=assignment, grades=grades)
    assert not already
    rows = list(Grade.objects.filter(assignment=assignment))
    assert len(rows) == len(assignment.documents)
    again, already = assignment_submit(assignment=first, grades={})
    assert already and Grade.objects.filter(assignment=assignment).count() == len(rows)
    keys = {d["document"]: d["key"] for d in assignment.documents}
    for row in rows:
        sent = grades[keys[row.document_id]]
        assert row.answers == sent["answers"]
        assert row.grade == grade_of(sent["answers"], ["C1", "C2", "C3", "C4", "C5"])
        assert row.rubric_id == assignment.rubric_id
        assert row.seconds == pytest.approx(sent["seconds"], abs=0.01)


@pytest.mark.parametrize(
    ("answers", "grade"),
    [
        ({"C1": False, "C2": False, "C3": False, "C4": False, "C5": False}, 0),
        ({"C1": True, "C2": False, "C3": False, "C4": False, "C5": False}, 1),
        ({"C1": True, "C2": True, "C3": False, "C4": True, "C5": False}, 4),
        ({"C1": False, "C2": False, "C3": False, "C4": False, "C5": True}, 5),
    ],
)
def test_grade_is_the_most_stringent_yes(answers, grade):
    assert grade_of(answers, ["C1", "C2", "C3", "C4", "C5"]) == grade


def test_submit_requires_every_answer(study, members):
    assignment = assignment_next(study=study, annotator=members[0])
    grades = full_grades(assignment_payload(assignment=assignment))
    first = assignment.keys[0]
    del grades[first]["answers"]["C3"]
    with pytest.raises(ApplicationError) as err:
        assignment_submit(assignment=assignment, grades=grades)
    assert err.value.extra["missing"] == {first: ["C3"]}
    with pytest.raises(ApplicationError, match="unknown document key"):
        assignment_draft_save(assignment=assignment, grades={"nope": {}})
    assert not Grade.objects.exists()


def test_closed_study_refuses_work_and_reopens(study, members):
    assignment = assignment_next(study=study, annotator=members[0])
    study_close(study=study)
    with pytest.raises(ConflictError, match="closed"):
        assignment_next(study=study, annotator=members[1])
    with pytest.raises(ConflictError, match="closed"):
        _submit(assignment)
    study_open(study=study)
    assert _submit(assignment)[1] is False


def test_only_active_members_get_contests(study, members, outsider):
    with pytest.raises(NotFoundError):
        assignment_next(study=study, annotator=AnnotatorFactory())
    leased = assignment_next(study=study, annotator=members[0])
    released = annotator_deactivate(user=members[0])
    assert released == 1
    leased.refresh_from_db()
    assert leased.status == AssignmentStatus.EXPIRED and leased.slot is None


def test_new_rubric_version_applies_to_new_assignments_only(study, members):
    old = assignment_next(study=study, annotator=members[0])
    rubric_create(
        study=study,
        questions=[{"key": "R1", "text": "Relevant?"}, {"key": "R2", "text": "Best?"}],
    )
    new = assignment_next(study=study, annotator=members[1])
    assert (old.rubric.version, new.rubric.version) == (1, 2)
    assert [q["key"] for q in assignment_payload(assignment=new)["questions"]] == [
        "R1",
        "R2",
    ]


def test_document_order_and_keys_are_per_assignment(study, members):
    """Order = the seeded shuffle of the union; keys are random, never ids."""
    a = assignment_next(study=study, annotator=members[0])
    b = assignment_next(study=study, annotator=members[1])
    assert a.contest_id == b.contest_id
    base = list(
        ContestDocument.objects.filter(contest=a.contest)
        .order_by("id")
        .values_list("document_id", flat=True)
    )
    for x in (a, b):
        assert [d["document"] for d in x.documents] == sampling.shuffled(base, x.seed)
    assert not set(a.keys) & set(b.keys)
    assert all(len(k) == 12 for k in a.keys)


def test_database_refuses_a_second_holder_of_a_slot(study, members):
    """The unique (contest, slot) and (contest, annotator) constraints hold even if
    the service were bypassed."""
    a = assignment_next(study=study, annotator=members[0])
    fields = {
        f: getattr(a, f)
        for f in ("rubric", "seed", "documents", "leased_at", "expires_at")
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(
            contest=a.contest, annotator=members[1], slot=a.slot, **fields
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(
            contest=a.contest, annotator=members[0], slot=3, **fields
        )
