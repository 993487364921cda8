"""Exclusion while others grade: threads of annotators call next/submit while staff
exclude an annotator who holds reviews and an open lease. Real row locks on
PostgreSQL (CI's second run), serialised writers on SQLite; the promise is the same:
every contest ends with exactly N valid reviews by distinct annotators."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
from django.db import connection

from annotation.models import Assignment, AssignmentStatus
from annotation.selectors import assignment_payload
from annotation.services import (
    annotator_exclude,
    assignment_next,
    assignment_submit,
    study_member_add,
)
from tests.annotation.factories import full_grades
from tests.factories import AnnotatorFactory


@pytest.mark.django_db(transaction=True)
def test_exclusion_during_grading_ends_with_exactly_n_valid(make_study):
    study = make_study(n_contests=8, per_contest=2)
    bad, *good = AnnotatorFactory.create_batch(5)
    for user in (bad, *good):
        study_member_add(study=study, annotator=user)
    rng = np.random.default_rng(0)
    for _ in range(3):
        a = assignment_next(study=study, annotator=bad)
        assignment_submit(
            assignment=a, grades=full_grades(assignment_payload(assignment=a), rng)
        )
    lease = assignment_next(study=study, annotator=bad)  # open when excluded
    started = threading.Barrier(len(good) + 1)
    errors: list[BaseException] = []

    def grade(user, seed):
        local = np.random.default_rng(seed)
        try:
            started.wait()
            while True:
                a = assignment_next(study=study, annotator=user)
                if a is None:
                    break
                payload = assignment_payload(assignment=a)
                assignment_submit(assignment=a, grades=full_grades(payload, local))
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=grade, args=(user, i)) for i, user in enumerate(good)
    ]
    for t in threads:
        t.start()
    started.wait()
    counts = annotator_exclude(study=study, annotator=bad, reason="careless")
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert counts == {"reviews": 3, "leases": 1, "contests": 4}
    # Annotators who were still waiting for room when the others finished come back.
    for user in good:
        while (a := assignment_next(study=study, annotator=user)) is not None:
            assignment_submit(
                assignment=a, grades=full_grades(assignment_payload(assignment=a), rng)
            )
    rows = list(
        Assignment.objects.filter(
            contest__study=study, status=AssignmentStatus.SUBMITTED, valid=True
        ).values_list("contest_id", "annotator_id")
    )
    per = Counter(c for c, _ in rows)
    assert len(per) == 8 and set(per.values()) == {2}
    assert all(len({u for cc, u in rows if cc == c}) == 2 for c in per)
    assert bad.pk not in {u for _c, u in rows}
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.EXPIRED and lease.slot is None
