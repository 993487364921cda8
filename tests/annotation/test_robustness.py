"""No client causes a 5xx (issue 10, item 4): each input that once did is a 4xx with a
clear message, and a property-based fuzz (hypothesis) of every annotator endpoint's
JSON asserts no 5xx.

Everything here runs on the suite's database (SQLite by default), and
``test_the_module_passes_on_postgresql`` runs this whole module again on PostgreSQL
(NUL characters, lone surrogates and integer overflow are PostgreSQL's errors).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from annotation.models import Assignment, AssignmentStatus, Grade
from annotation.services import (
    assignment_draft_save,
    assignment_next,
    assignment_submit,
    study_member_add,
)
from rcp_platform.exceptions import ApplicationError
from tests.annotation.factories import full_grades
from tests.factories import AnnotatorFactory

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
NEXT = "/api/v1/studies/{}/assignments/next"
TOKEN = "/api/v1/auth/token"


def _raw(client, method: str, url: str, body: str | bytes):
    return client.generic(method, url, body, content_type="application/json")


@pytest.fixture
def leased(study, members, api_client_for):
    """bob's client and his leased assignment's payload."""
    client = api_client_for(members[0])
    body = client.post(NEXT.format(study.pk)).json()
    return client, body


# ---------------------------------------------------------------------------- found cases


@pytest.mark.parametrize("number", ["1" * 400, "-" + "9" * 400, "1e400"])
def test_draft_with_an_overflowing_seconds_is_a_400(leased, number):
    """A 400-digit integer (OverflowError in float()) or 1e400 (infinity) is refused;
    the draft is not touched."""
    client, body = leased
    key = body["documents"][0]["key"]
    raw = '{"grades": {"KEY": {"answers": {}, "seconds": NUMBER}}}'
    raw = raw.replace("KEY", key).replace("NUMBER", number)
    response = _raw(
        client, "put", f"/api/v1/assignments/{body['assignment']}/draft", raw
    )
    assert response.status_code == 400, response.content
    assert response.json()["message"] == (
        f"grades[{key}].seconds must be a finite number of seconds (0 to 86400)"
    )
    assert Assignment.objects.get(pk=body["assignment"]).draft is None


@pytest.mark.parametrize("order", [10**400, 40_000, 11])
def test_order_beyond_the_documents_is_a_400(leased, order):
    """``order`` is a position among the documents (a smallint column): larger ones
    are refused before the database."""
    client, body = leased
    grades = full_grades(body)
    key = body["documents"][0]["key"]
    grades[key]["order"] = order
    url = f"/api/v1/assignments/{body['assignment']}/submit"
    response = _raw(client, "post", url, json.dumps({"grades": grades}))
    n = len(body["documents"])
    assert response.status_code == 400, response.content
    assert response.json()["message"] == (
        f"grades[{key}].order must be an integer from 1 to {n}"
    )
    grades[key]["order"] = n
    assert client.post(url, {"grades": grades}, format="json").status_code == 200


@pytest.mark.parametrize("comment", ["a\x00b", "\ud800", "ok \udfff"])
@pytest.mark.parametrize("endpoint", ["draft", "submit"])
def test_unstorable_comment_is_a_400_and_the_assignment_recovers(
    leased, comment, endpoint
):
    """NUL and lone surrogates (PostgreSQL: DataError after the status flip) are a
    400 naming the problem; the assignment stays leased with no grade, and a
    corrected submit then goes through."""
    client, body = leased
    aid = body["assignment"]
    grades = full_grades(body)
    key = body["documents"][0]["key"]
    grades[key]["comment"] = comment
    method = "put" if endpoint == "draft" else "post"
    url = f"/api/v1/assignments/{aid}/{endpoint}"
    response = _raw(client, method, url, json.dumps({"grades": grades}))
    assert response.status_code == 400, response.content
    assert "NUL characters" in response.json()["message"]
    assert "unpaired surrogates" in response.json()["message"]
    assignment = Assignment.objects.get(pk=aid)
    assert assignment.status == AssignmentStatus.LEASED and assignment.draft is None
    assert not Grade.objects.filter(assignment_id=aid).exists()
    grades[key]["comment"] = "fine"
    done = client.post(f"/api/v1/assignments/{aid}/submit", {"grades": grades}, "json")
    assert done.status_code == 200 and done.json()["status"] == "submitted"
    assert Grade.objects.get(assignment_id=aid, comment="fine")


@pytest.mark.parametrize("comment", ["a\x00b", "\ud800"])
def test_services_refuse_unstorable_comments_too(study, members, comment):
    """Callers that skip the HTTP parser (scripts, simulations) get the same rule."""
    assignment = assignment_next(study=study, annotator=members[0])
    payload = {"documents": [{"key": k} for k in assignment.keys]}
    payload["questions"] = [{"key": k} for k in assignment.rubric.keys]
    grades = full_grades(payload)
    grades[assignment.keys[0]]["comment"] = comment
    message = "comment must not contain NUL characters or unpaired surrogates"
    with pytest.raises(ApplicationError, match=message):
        assignment_draft_save(assignment=assignment, grades=grades)
    with pytest.raises(ApplicationError, match=message):
        assignment_submit(assignment=assignment, grades=grades)


def test_token_endpoint_refuses_deep_nesting_without_login(db):
    """100k nested ``[`` (RecursionError in the decoder) and a 65-level object are
    400s with the one error shape, before any authentication."""
    client = APIClient()
    response = _raw(client, "post", TOKEN, "[" * 100_000)
    assert response.status_code == 400
    assert response.json() == {
        "message": "JSON parse error - nested deeper than 64 levels",
        "extra": {},
    }
    deep: dict = {"username": "x", "password": "y"}
    for _ in range(65):
        deep = {"a": deep}
    response = _raw(client, "post", TOKEN, json.dumps(deep))
    assert response.status_code == 400
    assert response.json()["message"] == (
        "JSON parse error - JSON nested deeper than 64 levels"
    )


@pytest.mark.parametrize("minutes", [1e308, 10_081])
def test_staff_lease_minutes_out_of_range_is_a_400(world, admin_user, minutes):
    """``lease_minutes: 1e308`` overflowed timedelta; at most a week is accepted."""
    body = {
        "name": "huge lease",
        "datasets": [world.dataset.name],
        "systems": [s.name for s in world.systems],
        "contests": 2,
        "lease_minutes": minutes,
    }
    client = APIClient()
    client.force_authenticate(admin_user)
    response = client.post("/api/v1/studies", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["extra"]["fields"]["lease_minutes"] == [
        "Ensure this value is less than or equal to 10080."
    ]


def test_study_create_refuses_a_lease_beyond_a_week(make_study):
    with pytest.raises(ApplicationError, match="at most 10080 minutes"):
        make_study(name="long", lease_duration=timedelta(days=10**6))
    with pytest.raises(ApplicationError, match="more than 0"):
        make_study(name="none", lease_duration=timedelta(0))


def _concurrently(*calls):
    """Run each call in its own thread (own database connection) at once."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # reported, not swallowed: the test asserts on it
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("state", ["lapsed", "reclaimed"])
def test_concurrent_submits_of_an_expired_assignment(make_study, annotator, state):
    """Three submits and a draft of one expired lease at once, while another
    annotator asks for work: no 5xx, the grades are written once, exactly one submit
    reports ``already_submitted: false``."""
    study = make_study(name="race", n_contests=1, per_contest=2)
    other = AnnotatorFactory()
    for user in (annotator, other):
        study_member_add(study=study, annotator=user)
    client = APIClient()
    client.force_authenticate(annotator)
    body = client.post(NEXT.format(study.pk)).json()
    aid = body["assignment"]
    past = timezone.now() - timedelta(seconds=5)
    if state == "lapsed":
        Assignment.objects.filter(pk=aid).update(expires_at=past)
    else:
        Assignment.objects.filter(pk=aid).update(
            expires_at=past, status=AssignmentStatus.EXPIRED, slot=None
        )
    grades = {"grades": full_grades(body)}

    def as_user(user, method, url, data=None):
        def call():
            api = APIClient()
            api.force_authenticate(user)
            return getattr(api, method)(url, data, format="json")

        return call

    submit = as_user(annotator, "post", f"/api/v1/assignments/{aid}/submit", grades)
    draft = as_user(annotator, "put", f"/api/v1/assignments/{aid}/draft", grades)
    nxt = as_user(other, "post", NEXT.format(study.pk))
    results = _concurrently(submit, submit, draft, submit, nxt)
    assert all(not isinstance(r, Exception) for r in results), results
    codes = [r.status_code for r in results]
    assert all(c < 500 for c in codes), [r.content[:300] for r in results]
    submits = [results[i] for i in (0, 1, 3)]
    assert [r.status_code for r in submits] == [200, 200, 200]
    fresh = [r.json()["already_submitted"] for r in submits]
    assert fresh.count(False) == 1, fresh
    assert results[2].status_code in (200, 409)
    assert Grade.objects.filter(assignment_id=aid).count() == len(body["documents"])
    assert Assignment.objects.get(pk=aid).status == AssignmentStatus.SUBMITTED


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_logins_get_one_token(annotator):
    """Two token requests of an account without a token: both 200, the same token
    (the loser of the insert race used to hit the unique user: IntegrityError)."""
    annotator.set_password("pw-long-enough-1")
    annotator.save(update_fields=["password"])

    def login():
        return APIClient().post(
            TOKEN, {"username": "bob", "password": "pw-long-enough-1"}, format="json"
        )

    first, second = _concurrently(login, login)
    assert not isinstance(first, Exception) and not isinstance(second, Exception)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json()["token"] == second.json()["token"]


# ---------------------------------------------------------------------------- 500 page


@pytest.fixture
def failing_payload(monkeypatch):
    """An unexpected error inside the next endpoint (after the study and contest
    were loaded: their ids and names are in the frames' local variables)."""

    def boom(**kwargs):
        raise RuntimeError("unexpected")

    monkeypatch.setattr("annotation.selectors.assignment_payload", boom)


@pytest.mark.parametrize("accept", ["text/html", "application/json"])
def test_debug_500_page_hides_internals_from_annotators(
    settings, study, members, failing_payload, accept
):
    """With DEBUG on, Django answers with its technical 500 page (not handler500):
    frames with local variables. An annotator gets a plain message instead."""
    settings.DEBUG = True
    client = Client(raise_request_exception=False)
    client.force_login(members[0])
    response = client.post(NEXT.format(study.pk), HTTP_ACCEPT=accept)
    assert response.status_code == 500
    text = response.content.decode()
    assert "Server error (500)" in text
    for secret in (study.name, "Traceback", "contest", "bob", "RuntimeError"):
        assert secret not in text


def test_debug_500_page_keeps_the_traceback_for_staff(
    settings, study, admin_user, monkeypatch
):
    settings.DEBUG = True

    def boom(**kwargs):
        raise RuntimeError("unexpected")

    monkeypatch.setattr("annotation.selectors.study_progress", boom)
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    response = client.get(f"/api/v1/studies/{study.pk}")
    assert response.status_code == 500
    assert "RuntimeError" in response.content.decode()
    assert "Traceback" in response.content.decode()


# ---------------------------------------------------------------------------- fuzz

# Strings with what once broke things: NUL, lone surrogates, non-ASCII.
_text = st.one_of(
    st.text(max_size=12),
    st.lists(
        st.sampled_from(["\x00", "\ud800", "\udfff", "é", "a", "C1", "[", "{"]),
        max_size=6,
    ).map("".join),
)
_numbers = st.one_of(
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -1, 2**15, 2**31, 2**63, 1e308, -1e308]),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)
    ),
    max_leaves=12,
)


def _entry(questions):
    answer = st.one_of(st.booleans(), st.none(), _json)
    return st.fixed_dictionaries(
        {},
        optional={
            "answers": st.one_of(
                st.dictionaries(st.sampled_from([*questions, "C9"]), answer), _json
            ),
            "order": st.one_of(st.none(), _numbers, _json),
            "comment": st.one_of(st.none(), _text, _json),
            "seconds": st.one_of(_numbers, _json),
        },
    )


def _grades_body(keys, questions):
    """A grades body shaped like the real one (real document and question keys),
    with every value fuzzed; or any JSON at all."""
    grades = st.dictionaries(
        st.one_of(st.sampled_from(keys), _text), _entry(questions), max_size=len(keys)
    )
    return st.one_of(st.fixed_dictionaries({"grades": grades}), _json)


_raw_bodies = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"[" * 5000, b'{"grades": ', b"\xff\xfe", b"1e999999", b"NaN"]),
)


def _encode(body, raw) -> bytes:
    if raw is not None:
        return raw
    return json.dumps(body).encode()  # ASCII: surrogates travel as \\udXXX escapes


@pytest.fixture
def fuzz_setting(study, members):
    bob = members[0]
    bob.set_password("pw-long-enough-1")
    bob.save(update_fields=["password"])
    assignment = assignment_next(study=study, annotator=bob)
    client = APIClient()
    client.force_authenticate(bob)
    return client, study, assignment


FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same examples on every run and database
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _assert_no_5xx(client, method, url, payload: bytes):
    # Each example starts from the same state: its writes are rolled back.
    with transaction.atomic():
        response = client.generic(method, url, payload, content_type="application/json")
        transaction.set_rollback(True)
    assert response.status_code < 500, (url, payload[:200], response.content[:300])
    if response.status_code >= 400:
        assert set(response.json()) == {"message", "extra"}, response.content[:300]
    return response


@FUZZ
@given(data=st.data())
def test_fuzz_draft_and_submit_never_5xx(fuzz_setting, data):
    client, _study, assignment = fuzz_setting
    keys, questions = assignment.keys, assignment.rubric.keys
    endpoint = data.draw(st.sampled_from(["draft", "submit"]))
    body = data.draw(_grades_body(keys, questions))
    raw = data.draw(st.one_of(st.none(), st.none(), _raw_bodies))
    method = "put" if endpoint == "draft" else "post"
    url = f"/api/v1/assignments/{assignment.pk}/{endpoint}"
    _assert_no_5xx(client, method, url, _encode(body, raw))


@FUZZ
@given(body=_json, raw=st.one_of(st.none(), _raw_bodies))
def test_fuzz_next_and_detail_never_5xx(fuzz_setting, body, raw):
    client, study, assignment = fuzz_setting
    payload = _encode(body, raw)
    _assert_no_5xx(client, "post", NEXT.format(study.pk), payload)
    _assert_no_5xx(client, "get", f"/api/v1/assignments/{assignment.pk}", payload)


@FUZZ
@given(
    body=st.one_of(
        st.fixed_dictionaries(
            {"username": st.one_of(_text, st.just("bob"), _json)},
            optional={"password": st.one_of(_text, _json)},
        ),
        _json,
    ),
    raw=st.one_of(st.none(), st.none(), _raw_bodies),
)
def test_fuzz_token_never_5xx(fuzz_setting, body, raw):
    """Anyone (no login) may post here: usernames and passwords of any shape."""
    _assert_no_5xx(APIClient(), "post", TOKEN, _encode(body, raw))


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_the_module_passes_on_postgresql():
    """This module again, on a PostgreSQL test database (a subprocess: the suite's own
    database may be SQLite). NUL, surrogates and overflow are PostgreSQL errors."""
    from tests import tiers

    name = f"rcp_robust_{os.getpid()}_{secrets.token_hex(3)}"
    env = {
        **os.environ,
        "DATABASE_URL": f"{tiers.pg_server_url()}/{name}",
        "PYTHONPATH": str(REPO),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            __file__,
            "-m",
            "not postgres",
            "--create-db",
            "-p",
            "no:randomly",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
