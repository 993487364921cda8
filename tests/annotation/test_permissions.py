"""The permission matrix: every annotation and staff endpoint (API and HTML) by role.

Roles: anonymous, outsider (no permission), annotator (``bob``, a member who owns
the assignment), other (another member annotator), reviewer (reads benchmarks), admin
(staff superuser, not a member of the study). Annotators reach only their own work
(anything else is a 404) and nothing of the staff UI or API; roles are exclusive, so
staff and reviewers get nothing of the annotator API (403).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from annotation.selectors import assignment_payload
from annotation.services import assignment_next
from tests.annotation.factories import full_grades

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "outsider", "annotator", "other", "reviewer", "admin"]


def row(method, url, body, *codes):
    return (method, url, body, dict(zip(ROLES, codes, strict=True)))


LOGIN = 302  # HTML pages send anonymous users to the login page
# fmt: off
MATRIX = [
    # annotator API (session or token auth)
    row("post", "/api/v1/studies/{study}/assignments/next", None, 403, 403, 201, 201, 403, 403),
    row("get", "/api/v1/assignments/{assignment}", None, 403, 403, 200, 404, 403, 403),
    row("put", "/api/v1/assignments/{assignment}/draft", "draft", 403, 403, 200, 404, 403, 403),
    row("post", "/api/v1/assignments/{assignment}/submit", "grades", 403, 403, 200, 404, 403, 403),
    # staff API (reviewers read, staff write)
    row("get", "/api/v1/studies", None, 403, 403, 403, 403, 200, 200),
    row("post", "/api/v1/studies", "study", 403, 403, 403, 403, 403, 201),
    row("post", "/api/v1/studies/plan", "plan", 403, 403, 403, 403, 403, 200),
    row("get", "/api/v1/studies/{study}", None, 403, 403, 403, 403, 200, 200),
    row("post", "/api/v1/studies/{study}/close", None, 403, 403, 403, 403, 403, 200),
    row("post", "/api/v1/studies/{study}/open", None, 403, 403, 403, 403, 403, 200),
    row("get", "/api/v1/studies/{study}/annotators", None, 403, 403, 403, 403, 200, 200),
    row("post", "/api/v1/studies/{study}/annotators", "members", 403, 403, 403, 403, 403, 201),
    # reports and releases: staff only (they carry annotator flags)
    row("get", "/api/v1/studies/{study}/report", None, 403, 403, 403, 403, 403, 200),
    # HTML pages
    row("get", "/annotation/", None, LOGIN, 403, 200, 200, 302, 302),
    row("get", "/annotation/studies/{study}/grading", None, LOGIN, 403, 200, 200, 403, 403),
    row("get", "/annotation/studies/", None, LOGIN, 403, 403, 403, 200, 200),
    row("post", "/annotation/studies/", "form", LOGIN, 403, 403, 403, 403, 200),
    row("get", "/annotation/studies/{study}/", None, LOGIN, 403, 403, 403, 200, 200),
    row("post", "/annotation/studies/{study}/close", None, LOGIN, 403, 403, 403, 403, 302),
    row("post", "/annotation/studies/{study}/open", None, LOGIN, 403, 403, 403, 403, 302),
    row("get", "/annotation/studies/{study}/report", None, LOGIN, 403, 403, 403, 403, 200),
    row("post", "/annotation/studies/{study}/releases", None, LOGIN, 403, 403, 403, 403, 302),
    row("get", "/annotation/studies/{study}/releases/1.zip", None, LOGIN, 403, 403, 403, 403, 404),
    # Django admin: annotators and reviewers are not staff
    row("get", "/admin/annotation/annotator/", None, LOGIN, LOGIN, LOGIN, LOGIN, LOGIN, 200),
    row("get", "/admin/annotation/annotator/import/", None, LOGIN, LOGIN, LOGIN, LOGIN, LOGIN, 200),
    row("get", "/admin/annotation/study/", None, LOGIN, LOGIN, LOGIN, LOGIN, LOGIN, 200),
    row("get", "/admin/annotation/assignment/", None, LOGIN, LOGIN, LOGIN, LOGIN, LOGIN, 200),
]
# fmt: on


@pytest.fixture
def setting(study, members, world, admin_user, reviewer, outsider):
    bob, other = members[0], members[1]
    assignment = assignment_next(study=study, annotator=bob)
    payload = assignment_payload(assignment=assignment)
    users = {
        "anonymous": None,
        "outsider": outsider,
        "annotator": bob,
        "other": other,
        "reviewer": reviewer,
        "admin": admin_user,
    }
    bodies = {
        "draft": {"grades": {}},
        "grades": {"grades": full_grades(payload)},
        "plan": {
            "datasets": [world.dataset.name],
            "systems": [s.name for s in world.systems],
            "contests": 3,
        },
        "study": {
            "name": "via api",
            "datasets": [world.dataset.name],
            "systems": [s.name for s in world.systems],
            "contests": 3,
        },
        "members": {"usernames": [other.username]},
        "form": {
            "name": "via page",
            "datasets": [world.dataset.pk],
            "systems": [s.pk for s in world.systems],
            "contests": 3,
            "depth": 5,
            "per_contest": 3,
            "quota_decisive": 0.5,
            "quota_marginal": 0.25,
            "quota_concordant": 0.25,
            "seed": 0,
            "lease_minutes": 30,
            "preview": "1",
        },
    }
    return {"study": study.pk, "assignment": assignment.pk}, users, bodies


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(
    ("method", "url", "body", "expected"),
    MATRIX,
    ids=[f"{m.upper()} {u}" for m, u, _b, _e in MATRIX],
)
def test_permission_matrix(setting, role, method, url, body, expected):
    ids, users, bodies = setting
    client = Client()
    if users[role] is not None:
        client.force_login(users[role])
    path = url.format(**ids)
    data = bodies.get(body)
    if data is None:
        response = getattr(client, method)(path)
    elif url.startswith("/api/"):
        response = getattr(client, method)(
            path, json.dumps(data), content_type="application/json"
        )
    else:
        response = client.post(path, data)
    assert response.status_code == expected[role], (role, path, response.content[:300])
    if (
        expected[role] == LOGIN
        and role in ("anonymous",)
        and path.startswith("/annotation")
    ):
        assert response["Location"].startswith("/login/")
