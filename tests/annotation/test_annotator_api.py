"""The annotator API contract: exact JSON shapes, drafts, submit rules, 404s."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from annotation.models import Assignment, AssignmentStatus, Grade
from tests.annotation.factories import full_grades

pytestmark = pytest.mark.django_db

PAYLOAD_KEYS = {
    "assignment",
    "status",
    "query",
    "instructions",
    "questions",
    "documents",
    "options",
    "expires_at",
    "progress",
}


def _next(client, study):
    return client.post(f"/api/v1/studies/{study.pk}/assignments/next")


def test_next_returns_the_contract_shape(study, members, api_client_for):
    response = _next(api_client_for(members[0]), study)
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == PAYLOAD_KEYS
    assert isinstance(body["assignment"], int)
    assert body["query"].startswith("How does topic")
    assert "**query**" in body["instructions"]
    assert [q["key"] for q in body["questions"]] == ["C1", "C2", "C3", "C4", "C5"]
    assert all(set(q) == {"key", "text"} for q in body["questions"])
    assert 5 <= len(body["documents"]) <= 10
    assert all(set(d) == {"key", "title", "text"} for d in body["documents"])
    assert body["progress"] == {
        "documents": len(body["documents"]),
        "contests_done": 0,
        "contests_left": 5,
    }
    assert body["options"] == {"order": False, "comment": True}
    assert body["expires_at"].endswith("Z") or "+" in body["expires_at"]


def test_next_resumes_then_204_when_nothing_is_left(
    make_study, members, api_client_for
):
    study = make_study(name="one contest", n_contests=1)
    from annotation.services import study_member_add

    study_member_add(study=study, annotator=members[0])
    client = api_client_for(members[0])
    first = _next(client, study).json()
    assert _next(client, study).json()["assignment"] == first["assignment"]
    grades = full_grades(first)
    url = f"/api/v1/assignments/{first['assignment']}/submit"
    assert client.post(url, {"grades": grades}, format="json").status_code == 200
    response = _next(client, study)
    assert response.status_code == 204 and response.content == b""


def test_draft_round_trip_and_lease_renewal(study, members, api_client_for):
    client = api_client_for(members[0])
    body = _next(client, study).json()
    aid = body["assignment"]
    key = body["documents"][0]["key"]
    draft = {
        key: {
            "answers": {"C1": True, "C2": False, "C3": None},
            "order": None,
            "comment": "hmm",
            "seconds": 12.5,
        }
    }
    Assignment.objects.filter(pk=aid).update(expires_at=timezone.now())
    response = client.put(
        f"/api/v1/assignments/{aid}/draft", {"grades": draft}, format="json"
    )
    assert response.status_code == 200, response.content
    assert set(response.json()) == {"assignment", "draft_saved_at", "expires_at"}
    detail = client.get(f"/api/v1/assignments/{aid}").json()
    assert set(detail) == PAYLOAD_KEYS | {"draft", "draft_saved_at"}
    assert detail["draft"] == {
        "grades": {
            key: {
                "answers": {"C1": True, "C2": False, "C3": None},
                "order": None,
                "comment": "hmm",
                "seconds": 12.5,
            }
        }
    }
    assert Assignment.objects.get(pk=aid).expires_at > timezone.now() + timedelta(
        minutes=29
    )
    assert [d["key"] for d in detail["documents"]] == [
        d["key"] for d in body["documents"]
    ]


def test_submit_validates_is_idempotent_and_says_so(study, members, api_client_for):
    client = api_client_for(members[0])
    body = _next(client, study).json()
    url = f"/api/v1/assignments/{body['assignment']}/submit"
    grades = full_grades(body, np.random.default_rng(2))
    partial = {k: v for k, v in list(grades.items())[1:]}
    response = client.post(url, {"grades": partial}, format="json")
    assert response.status_code == 400
    error = response.json()
    assert set(error) == {"message", "extra"}
    assert list(error["extra"]["missing"]) == [body["documents"][0]["key"]]
    response = client.post(url, {"grades": grades}, format="json")
    assert response.status_code == 200
    first = response.json()
    assert first["already_submitted"] is False and first["status"] == "submitted"
    again = client.post(url, {"grades": grades}, format="json").json()
    assert again["already_submitted"] is True
    assert again["submitted_at"] == first["submitted_at"]
    assert Grade.objects.filter(assignment_id=body["assignment"]).count() == len(
        body["documents"]
    )
    bad = client.post(url, {"grades": "nope"}, format="json")
    assert bad.status_code in (200, 400)  # already submitted wins over a bad body
    nxt = _next(client, study).json()
    assert nxt["progress"]["contests_done"] == 1


def test_bad_bodies_get_the_one_error_shape(study, members, api_client_for):
    client = api_client_for(members[0])
    body = _next(client, study).json()
    url = f"/api/v1/assignments/{body['assignment']}/draft"
    key = body["documents"][0]["key"]
    for grades in (
        {"not-a-key": {"answers": {}}},
        {key: {"answers": {"C9": True}}},
        {key: {"answers": {"C1": "yes"}}},
        {key: {"answers": {}, "order": 0}},
        {key: {"answers": {}, "seconds": "long"}},
    ):
        response = client.put(url, {"grades": grades}, format="json")
        assert response.status_code == 400, grades
        assert set(response.json()) == {"message", "extra"}
    assert client.put(url, {}, format="json").status_code == 400


def test_other_annotators_assignments_are_404(study, members, api_client_for):
    mine = _next(api_client_for(members[0]), study).json()["assignment"]
    other = api_client_for(members[1])
    for method, tail in (("get", ""), ("put", "/draft"), ("post", "/submit")):
        response = getattr(other, method)(
            f"/api/v1/assignments/{mine}{tail}", {"grades": {}}, format="json"
        )
        assert response.status_code == 404, (method, tail)
    assert other.get("/api/v1/assignments/999999").status_code == 404


def test_expired_and_taken_lease_is_refused_with_409(
    make_study, members, api_client_for
):
    from annotation.services import study_member_add

    study = make_study(name="tight", n_contests=1, per_contest=1)
    for user in members[:2]:
        study_member_add(study=study, annotator=user)
    a_client, b_client = api_client_for(members[0]), api_client_for(members[1])
    a = _next(a_client, study).json()
    Assignment.objects.filter(pk=a["assignment"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert _next(b_client, study).status_code == 201
    response = a_client.post(
        f"/api/v1/assignments/{a['assignment']}/submit",
        {"grades": full_grades(a)},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["extra"] == {"reason": "lease_expired"}
    assert Assignment.objects.get(pk=a["assignment"]).status == AssignmentStatus.EXPIRED


def test_draft_study_and_non_member_get_404(make_study, members, api_client_for):
    from annotation.services import study_member_add

    draft = make_study(name="draft", open_now=False)
    study_member_add(study=draft, annotator=members[0])
    assert _next(api_client_for(members[0]), draft).status_code == 404
    opened = make_study(name="not mine")
    assert _next(api_client_for(members[0]), opened).status_code == 404


def _statements(captured) -> list[str]:
    """SQL statements of a request, without the test transaction's savepoints
    (in production the service's transaction is a BEGIN/COMMIT pair)."""
    return [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


def test_next_and_submit_run_in_a_handful_of_queries(study, members):
    """With token authentication (external tools, the load benchmark): a new lease
    takes 8 statements (token, permission, membership lock reading the study and its
    rubric, lease in progress, candidate contest lock with its query and the
    progress, its slots, its documents with their text, insert), a resumed one 7
    (lease in progress, renewal, progress, document texts), a submit 5 (token,
    permission, assignment, status flip, grades). Was 12 for a new lease, 8
    resumed, and the ORM compiled ~4 ms per nested subquery on every request."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=members[0])}")
    with CaptureQueriesContext(connection) as new:
        body = _next(api, study).json()
    with CaptureQueriesContext(connection) as resumed:
        assert _next(api, study).json()["assignment"] == body["assignment"]
    url = f"/api/v1/assignments/{body['assignment']}/submit"
    with CaptureQueriesContext(connection) as submit:
        response = api.post(url, {"grades": full_grades(body)}, format="json")
    assert response.status_code == 200
    assert len(_statements(new)) == 8, _statements(new)
    assert len(_statements(resumed)) == 7, _statements(resumed)
    assert len(_statements(submit)) == 5, _statements(submit)
    assert body["progress"] == {"documents": len(body["documents"]),
                                "contests_done": 0, "contests_left": 5}  # fmt: skip
    with CaptureQueriesContext(connection) as second:
        nxt = _next(api, study).json()
    assert len(_statements(second)) == 8
    assert nxt["progress"]["contests_done"] == 1
    assert nxt["progress"]["contests_left"] == 4


def test_next_runs_in_bounded_queries(
    study, members, api_client_for, django_assert_max_num_queries
):
    """Session/forced authentication, savepoints included."""
    client = api_client_for(members[0])
    with django_assert_max_num_queries(11):
        assert _next(client, study).status_code == 201
    with django_assert_max_num_queries(8):
        assert _next(client, study).status_code == 201


def test_token_auth_works_for_external_tools(study, members, client):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    token = Token.objects.create(user=members[0])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    body = _next(api, study).json()
    response = api.post(
        f"/api/v1/assignments/{body['assignment']}/submit",
        {"grades": full_grades(body)},
        format="json",
    )
    assert response.status_code == 200
