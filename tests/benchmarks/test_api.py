"""API v1 of the benchmarks app: the permission table by role, shapes, pagination,
run upload, token auth and the OpenAPI schema."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from benchmarks import tasks
from benchmarks.models import RankingEntry, System, Upload
from benchmarks.services import dataset_import, run_import
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db

RUN_TEXT = b"q1 Q0 q1-d5 1 9.0 up\nq1 Q0 q1-d0 2 3.0 up\n"


@pytest.fixture(autouse=True)
def _media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture
def tiny():
    dataset = dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        qrels=DEMO_TINY / "qrels.tsv",
        pools=DEMO_TINY / "pools.tsv",
    )
    run_import(dataset=dataset, system_name="bm25", path=DEMO_TINY / "bm25.trec")
    return dataset


READS = [
    "/api/v1/datasets",
    "/api/v1/datasets/tiny",
    "/api/v1/datasets/tiny/queries",
    "/api/v1/datasets/tiny/documents",
    "/api/v1/datasets/tiny/systems",
    "/api/schema/",
]
# role -> expected status for every read, and for the staff-only run upload
MATRIX = {
    "anonymous": (403, 403),
    "outsider": (403, 403),
    "annotator": (403, 403),
    "reviewer": (200, 403),
    "admin": (200, 202),
}


@pytest.mark.parametrize("role", sorted(MATRIX))
@pytest.mark.parametrize("url", READS)
def test_read_permission_matrix(role, url, request, tiny, api_client_for):
    """Only staff and reviewers read; annotators and outsiders get nothing."""
    user = (
        None
        if role == "anonymous"
        else request.getfixturevalue({"admin": "admin_user"}.get(role, role))
    )
    response = api_client_for(user).get(url)
    assert response.status_code == MATRIX[role][0], response.content


@pytest.mark.parametrize("role", sorted(MATRIX))
def test_run_upload_permission_matrix(role, request, tiny, api_client_for):
    user = (
        None
        if role == "anonymous"
        else request.getfixturevalue({"admin": "admin_user"}.get(role, role))
    )
    response = api_client_for(user).post(
        "/api/v1/datasets/tiny/runs",
        {"system": "uploaded", "file": SimpleUploadedFile("up.trec", RUN_TEXT)},
        format="multipart",
    )
    assert response.status_code == MATRIX[role][1], response.content
    assert Upload.objects.filter(system_name="uploaded").exists() == (
        MATRIX[role][1] == 202
    )


def test_dataset_list_shape_and_counts_in_constant_queries(
    tiny, admin_user, api_client_for, django_assert_max_num_queries
):
    client = api_client_for(admin_user)
    dataset_import(
        name="second",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
    )
    with django_assert_max_num_queries(3):
        data = client.get("/api/v1/datasets").json()
    by_name = {d["name"]: d for d in data}
    assert by_name["tiny"] | {"id": 0, "created_at": ""} == {
        "id": 0,
        "created_at": "",
        "name": "tiny",
        "protocol": "plain",
        "description": "",
        "n_queries": 3,
        "n_documents": 24,
        "n_systems": 1,
        "n_qrels": 13,
        "n_pool": 24,
        "n_rankings": 24,
    }
    assert by_name["second"]["n_qrels"] == 0 and by_name["second"]["n_documents"] == 24


def test_documents_are_paginated(tiny, admin_user, api_client_for):
    client = api_client_for(admin_user)
    page = client.get("/api/v1/datasets/tiny/documents?page_size=10&page=3").json()
    assert page["count"] == 24 and len(page["results"]) == 4
    assert page["results"][0] == {
        "id": "q3-d4",
        "title": "",
        "text": page["results"][0]["text"],
    }
    assert page["previous"] and page["next"] is None


def test_upload_is_imported_on_the_worker_and_errors_use_one_shape(
    tiny, admin_user, api_client_for, django_capture_on_commit_callbacks
):
    """202 with the upload; the worker task imports it; its status (and a refused
    file's error, with the name the user sent and the line) is read back."""
    client = api_client_for(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        ok = client.post(
            f"/api/v1/datasets/{tiny.pk}/runs",
            {"system": "uploaded", "file": SimpleUploadedFile("up.trec", RUN_TEXT)},
            format="multipart",
        )
    assert ok.status_code == 202 and ok.json()["status"] == "pending"
    assert ok.json()["files"] == {"run": "up.trec"}
    upload_id = ok.json()["id"]
    assert tasks.upload_import_task(upload_id) == "done"
    status = client.get(f"/api/v1/uploads/{upload_id}").json()
    assert status["status"] == "done" and status["error"] is None
    assert status["progress"]["percent"] == 100.0
    assert (
        RankingEntry.objects.get(system__name="uploaded", rank=1).document.external_id
        == "q1-d5"
    )
    with django_capture_on_commit_callbacks(execute=True):
        bad = client.post(
            "/api/v1/datasets/tiny/runs",
            {
                "system": "broken",
                "file": SimpleUploadedFile("bad.trec", b"q1 Q0 q1-d1 1 x t\n"),
            },
            format="multipart",
        )
    assert bad.status_code == 202
    assert tasks.upload_import_task(bad.json()["id"]) == "failed"
    failed = client.get(f"/api/v1/uploads/{bad.json()['id']}").json()
    assert failed["error"] == {
        "message": "bad.trec, line 1: score 'x' is not a number",
        "file": "bad.trec",
        "line": 1,
    }
    assert not System.objects.filter(name="broken").exists()
    dup = client.post(
        "/api/v1/datasets/tiny/runs",
        {"system": "bm25", "file": SimpleUploadedFile("up.trec", RUN_TEXT)},
        format="multipart",
    )
    assert dup.status_code == 409 and "--replace" in dup.json()["message"]
    missing = client.get("/api/v1/datasets/nope")
    assert (
        missing.status_code == 404
        and missing.json()["message"] == "dataset 'nope' not found"
    )


def test_token_auth_roundtrip(tiny, admin_user):
    client = APIClient()
    bad = client.post("/api/v1/auth/token", {"username": "alice", "password": "wrong"})
    assert bad.status_code == 400
    token = client.post(
        "/api/v1/auth/token", {"username": "alice", "password": "pw-test-123"}
    ).json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/datasets").status_code == 200


def test_openapi_schema_lists_the_endpoints(admin_user, api_client_for):
    response = api_client_for(admin_user).get("/api/schema/?format=json")
    paths = response.json()["paths"]
    for path in (
        "/api/v1/datasets",
        "/api/v1/datasets/{dataset}/documents",
        "/api/v1/datasets/{dataset}/runs",
    ):
        assert path in paths
