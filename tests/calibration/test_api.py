"""API v1 of calibration: the permission table by role, shapes with real values,
pagination and filters, list endpoints in bounded queries, the create endpoint."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from calibration import tasks
from calibration.models import CalibrationFit, FitStatus
from calibration.services import calibration_fit, gains_import
from tests.calibration.conftest import write_released_gains
from tests.calibration.factories import simulated_suite

pytestmark = pytest.mark.django_db

MATRIX = {  # role -> (status of every read, status of create)
    "anonymous": (403, 403),
    "outsider": (403, 403),
    "annotator": (403, 403),
    "reviewer": (200, 403),
    "admin": (200, 202),
}


def _user(role, request):
    if role == "anonymous":
        return None
    return request.getfixturevalue({"admin": "admin_user"}.get(role, role))


@pytest.fixture
def fit(tiny, tmp_path):
    return gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))


def _reads(fit):
    return [
        "/api/v1/calibration/fits",
        f"/api/v1/calibration/fits/{fit.pk}",
        f"/api/v1/calibration/fits/{fit.pk}/abilities",
        f"/api/v1/calibration/fits/{fit.pk}/gains",
        "/api/v1/calibration/leaderboard?dataset=tiny&k=5",
    ]


@pytest.mark.parametrize("role", sorted(MATRIX))
def test_permission_matrix(role, request, fit, api_client_for, monkeypatch):
    """Staff and reviewers read everything; only staff queue a calibration;
    annotators, outsiders and anonymous users get nothing."""
    client = api_client_for(_user(role, request))
    for url in _reads(fit):
        assert client.get(url).status_code == MATRIX[role][0], url
    monkeypatch.setattr(tasks.calibration_fit_run, "delay", lambda pk: None)
    response = client.post(
        "/api/v1/calibration/fits/create",
        {"datasets": ["tiny"], "mode": "rubric_only"},
        format="json",
    )
    assert response.status_code == MATRIX[role][1], response.content
    assert CalibrationFit.objects.count() == (2 if MATRIX[role][1] == 202 else 1)


def test_fit_detail_abilities_leaderboard_and_gains_shapes(
    fit, admin_user, api_client_for
):
    client = api_client_for(admin_user)
    detail = client.get(f"/api/v1/calibration/fits/{fit.pk}").json()
    assert detail["datasets"] == ["tiny"] and detail["mode"] == "released"
    assert (detail["n_queries"], detail["n_documents"]) == (3, 24)
    assert detail["diagnostics"]["imported"]["rows"] == 24

    page = client.get(
        f"/api/v1/calibration/fits/{fit.pk}/abilities?query=q2&page_size=3"
    ).json()
    assert page["count"] == 8 and len(page["results"]) == 3
    top = page["results"][0]
    assert (top["query_id"], top["doc_id"], top["theta"]) == ("q2", "q2-d0", 2.1)
    assert top["gain"] == pytest.approx(0.834319, abs=1e-6)

    board = client.get(
        "/api/v1/calibration/leaderboard?dataset=tiny&k=5&protocol=plain"
    ).json()
    assert [s["system"] for s in board["systems"]] == ["reranker", "bm25"]
    assert board["systems"][1]["rcp_ndcg"] == pytest.approx(0.866453, abs=1e-6)
    assert board["k"] == 5

    tsv = client.get(f"/api/v1/calibration/fits/{fit.pk}/gains")
    assert tsv["Content-Type"] == "text/tab-separated-values"
    lines = tsv.content.decode().splitlines()
    assert (
        lines[0] == "query_id\tdoc_id\ttheta\tgain\tcount_gain\tqrel"
        and len(lines) == 25
    )


def test_errors_use_the_one_json_shape(fit, admin_user, api_client_for):
    client = api_client_for(admin_user)
    missing = client.get("/api/v1/calibration/fits/9999")
    assert missing.status_code == 404 and "not found" in missing.json()["message"]
    bad = client.get("/api/v1/calibration/leaderboard?dataset=tiny&protocol=nope")
    assert bad.status_code == 400 and "protocol" in bad.json()["extra"]["fields"]
    create = client.post(
        "/api/v1/calibration/fits/create", {"datasets": ["nope"]}, format="json"
    )
    assert create.status_code == 404


def test_created_fit_runs_as_a_task(
    tiny, admin_user, api_client_for, monkeypatch, django_capture_on_commit_callbacks
):
    suite = simulated_suite(name="api-sim", n_queries=3)
    queued = []
    monkeypatch.setattr(tasks.calibration_fit_run, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client_for(admin_user).post(
            "/api/v1/calibration/fits/create",
            {"datasets": [suite.dataset.name]},
            format="json",
        )
    assert response.status_code == 202 and response.json()["status"] == "pending"
    assert queued == [response.json()["id"]]
    tasks.calibration_fit_run(queued[0])
    assert CalibrationFit.objects.get(pk=queued[0]).status == FitStatus.DONE


def _count(client, url):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_list_endpoints_run_in_bounded_queries(
    fit, tiny, tmp_path, admin_user, api_client_for, django_assert_max_num_queries
):
    """Fits list and abilities list: the query count does not grow with rows."""
    client = api_client_for(admin_user)
    fits_url = "/api/v1/calibration/fits"
    abil_url = f"/api/v1/calibration/fits/{fit.pk}/abilities"
    few_fits, few_abil = (
        _count(client, fits_url),
        _count(client, abil_url + "?page_size=2"),
    )
    for i in range(6):
        gains_import(dataset=tiny, path=write_released_gains(tmp_path / f"g{i}.tsv"))
    suite = simulated_suite(name="bounded", n_queries=2)
    calibration_fit(datasets=[suite.dataset])
    with django_assert_max_num_queries(few_fits):
        page = client.get(fits_url).json()
    assert page["count"] == 8
    assert {tuple(f["datasets"]) for f in page["results"]} == {("tiny",), ("bounded",)}
    with django_assert_max_num_queries(few_abil):
        rows = client.get(abil_url + "?page_size=24").json()
    assert len(rows["results"]) == 24
