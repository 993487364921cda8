"""The annotator API's fixed statements (issue 10, load) read exactly what the ORM
reads: every field of every model they build, with the backend's conversions
(SQLite hands back datetimes, durations and JSON as text and booleans as integers),
and the same access rules. Runs on SQLite and, in CI, on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation import selectors
from annotation.models import Assignment, Rubric, Study
from tests.factories import UserFactory


def _fields(instance) -> dict:
    return {
        f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields
    }


def _token_client(user) -> APIClient:
    client = APIClient()
    token, _new = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_fixed_statements_build_the_models_the_orm_builds(study, members):
    user = members[0]
    client = _token_client(user)
    created = client.post(f"/api/v1/studies/{study.pk}/assignments/next")
    assert created.status_code == 201, created.content
    pk = created.json()["assignment"]
    Assignment.objects.filter(pk=pk).update(
        draft={"grades": {"k": {"answers": {"C1": True}, "seconds": 2.5}}},
        draft_saved_at=timezone.now(),
    )
    orm = Assignment.objects.select_related(
        "contest__study", "contest__query", "rubric"
    ).get(pk=pk)

    fixed = selectors.assignment_get_for_annotator(user=user, assignment_id=pk)
    assert _fields(fixed) == _fields(orm)
    assert _fields(fixed.contest) == _fields(orm.contest)
    assert _fields(fixed.contest.study) == _fields(orm.contest.study)
    assert _fields(fixed.contest.query) == _fields(orm.contest.query)
    assert _fields(fixed.rubric) == _fields(orm.rubric)
    assert isinstance(fixed.contest.study.lease_duration, timedelta)
    assert fixed.draft["grades"]["k"]["answers"] == {"C1": True}

    resumed = selectors.lease_in_progress(study=orm.contest.study, annotator=user)
    assert _fields(resumed) == _fields(orm)
    assert _fields(resumed.contest.query) == _fields(orm.contest.query)
    assert _fields(resumed.rubric) == _fields(orm.rubric)

    with transaction.atomic():
        locked_study, rubric = selectors.member_lock_for_next(
            study_id=study.pk, annotator=user
        )
    assert _fields(locked_study) == _fields(Study.objects.get(pk=study.pk))
    newest = Rubric.objects.filter(study=study).order_by("-version").first()
    assert _fields(rubric) == _fields(newest)


def test_fixed_statements_keep_the_access_rules(study, members, outsider):
    user, other = members[0], members[1]
    pk = _token_client(user).post(f"/api/v1/studies/{study.pk}/assignments/next")
    pk = pk.json()["assignment"]
    from rcp_platform.exceptions import NotFoundError

    with pytest.raises(NotFoundError):  # someone else's
        selectors.assignment_get_for_annotator(user=other, assignment_id=pk)
    with pytest.raises(NotFoundError):  # not an annotator at all
        selectors.assignment_get_for_annotator(user=outsider, assignment_id=pk)
    study.members.filter(annotator=user).update(active=False)
    with pytest.raises(NotFoundError):  # membership no longer active
        selectors.assignment_get_for_annotator(user=user, assignment_id=pk)
    assert selectors.member_lock_for_next(study_id=study.pk, annotator=user) is None
    assert selectors.member_lock_for_next(study_id=study.pk, annotator=other)


def test_token_authentication_reads_the_user_the_orm_reads(db):
    user = UserFactory(username="tok-user", first_name="Ada", is_staff=True)
    user.last_login = timezone.now()
    user.save()
    client = _token_client(user)
    response = client.get("/api/v1/datasets")
    assert response.status_code == 200
    request_user = response.wsgi_request.user
    assert _fields(request_user) == _fields(type(user).objects.get(pk=user.pk))

    user.is_active = False
    user.save(update_fields=["is_active"])
    refused = client.get("/api/v1/datasets")
    assert refused.status_code in (401, 403)
    assert "User inactive or deleted" in refused.json()["message"]

    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    invalid = other.get("/api/v1/datasets")
    assert invalid.status_code in (401, 403)
    assert "Invalid token" in invalid.json()["message"]


@pytest.mark.parametrize(
    ("annotate", "review", "expected"),
    [
        ("group", None, True),
        ("direct", None, True),
        (None, None, False),
        ("group", "group", False),
        ("group", "direct", False),
        ("direct", "group", False),
        (None, "direct", False),
    ],
)
def test_annotator_role_from_sql_agrees_with_has_perm(db, annotate, review, expected):
    """is_annotator's fixed statement: annotate held (directly or by a group) and
    view_dataset not held, exactly what Django's permission backend says."""
    user = UserFactory()
    grants = {
        "annotate": Permission.objects.get(
            content_type__app_label="annotation", codename="annotate"
        ),
        "review": Permission.objects.get(
            content_type__app_label="benchmarks", codename="view_dataset"
        ),
    }
    for name, how in (("annotate", annotate), ("review", review)):
        if how == "direct":
            user.user_permissions.add(grants[name])
        elif how == "group":
            group = Group.objects.create(name=f"g-{name}-{user.pk}")
            group.permissions.add(grants[name])
            user.groups.add(group)
    fresh = type(user).objects.get(pk=user.pk)
    by_django = fresh.has_perm("annotation.annotate") and not fresh.has_perm(
        "benchmarks.view_dataset"
    )
    assert by_django is expected
    assert selectors.is_annotator(type(user).objects.get(pk=user.pk)) is expected


def _open_to(study, user) -> int:
    """Contests still open to ``user`` by the ASSIGNMENT.md rule, with the ORM."""
    from django.db.models import Count, Q

    from annotation.models import AssignmentStatus

    now = timezone.now()
    live = Q(
        assignments__status=AssignmentStatus.SUBMITTED, assignments__valid=True
    ) | Q(assignments__status=AssignmentStatus.LEASED, assignments__expires_at__gt=now)
    return (
        study.contests.exclude(assignments__annotator=user)
        .annotate(n_live=Count("assignments", filter=live))
        .filter(n_live__lt=study.per_contest)
        .count()
    )


def test_progress_from_the_grouped_pick_equals_the_orm_at_every_step(study, members):
    """The candidate pick's grouped statement (contests left, done) against the ORM's
    count of contests open to the annotator, after every lease and submit, and again
    after an exclusion re-opens contests."""
    import numpy as np

    from annotation.services import annotator_exclude, study_member_add
    from tests.annotation.factories import full_grades
    from tests.factories import AnnotatorFactory

    def grade_all(users, seed):
        rng = np.random.default_rng(seed)
        clients = {u.pk: _token_client(u) for u in users}
        active = True
        while active:
            active = False
            for user in users:
                client = clients[user.pk]
                left = _open_to(study, user)
                got = client.post(f"/api/v1/studies/{study.pk}/assignments/next")
                if got.status_code == 204:
                    assert left == 0
                    continue
                active = True
                body = got.json()
                # counted as left before this lease was taken
                assert body["progress"]["contests_left"] == left - 1
                assert body["progress"]["contests_done"] == (
                    Assignment.objects.filter(
                        contest__study=study, annotator=user, status="submitted"
                    ).count()
                )
                sent = client.post(
                    f"/api/v1/assignments/{body['assignment']}/submit",
                    {"grades": full_grades(body, rng)},
                    format="json",
                )
                assert sent.status_code == 200, sent.content

    grade_all(members, seed=1)
    annotator_exclude(study=study, annotator=members[0], reason="test")
    newcomers = AnnotatorFactory.create_batch(2)
    for user in newcomers:
        study_member_add(study=study, annotator=user)
    grade_all([*members[1:], *newcomers], seed=2)
