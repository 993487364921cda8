"""Judging API and pages: the permission table by role, job controls, the estimate,
and a window page whose re-rendered prompt hashes to what the judge was asked."""

from __future__ import annotations

import os

import pytest

from benchmarks.services import dataset_import
from judging import services
from judging.models import JobStatus, JudgingJob, JudgmentWindow
from judging.runner import job_run
from judging.simulated import start_simulated_judge
from tests.conftest import DEMO_TINY

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def tiny(db):
    return dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        pools=DEMO_TINY / "pools.tsv",
    )


@pytest.fixture
def judge(db):
    return services.judge_create(
        name="sim", base_urls=["http://127.0.0.1:9/v1"], model="m", concurrency=2
    )


ROLES = {
    "anonymous": None,
    "outsider": "outsider",
    "annotator": "annotator",
    "reviewer": "reviewer",
    "admin": "admin_user",
}
# role -> (reads, staff writes)
EXPECTED = {
    "anonymous": (403, 403),
    "outsider": (403, 403),
    "annotator": (403, 403),
    "reviewer": (200, 403),
    "admin": (200, None),
}


@pytest.mark.parametrize("role", sorted(ROLES))
def test_permission_table(role, request, tiny, judge, api_client_for):
    user = request.getfixturevalue(ROLES[role]) if ROLES[role] else None
    client = api_client_for(user)
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    reads, writes = EXPECTED[role]
    for url in ("/api/v1/judges", "/api/v1/jobs", f"/api/v1/jobs/{job.pk}"):
        assert client.get(url).status_code == reads, url
    estimate = client.post(
        "/api/v1/jobs/estimate", {"dataset": "tiny", "judge": "sim"}, format="json"
    )
    pause = client.post(f"/api/v1/jobs/{job.pk}/pause")
    new_judge = client.post(
        "/api/v1/judges",
        {"name": "j2", "base_urls": ["http://127.0.0.1:9/v1"], "model": "m"},
        format="json",
    )
    if writes is None:
        assert estimate.status_code == 200 and estimate.json()["calls"] == 60
        assert pause.status_code == 200 and pause.json()["status"] == "paused"
        assert new_judge.status_code == 201 and new_judge.json()["api_key_env"] == ""
    else:
        assert {estimate.status_code, pause.status_code, new_judge.status_code} == {
            writes
        }
        assert JudgingJob.objects.get(pk=job.pk).status == JobStatus.PENDING
    if user is not None:
        client.force_login(user)
        assert client.get(f"/judging/jobs/{job.pk}/").status_code == (
            200 if reads == 200 else 403
        )


def test_controls_follow_the_job_lifecycle(tiny, judge, admin_user, api_client_for):
    client = api_client_for(admin_user)
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel").json()["status"] == "cancelled"
    conflict = client.post(f"/api/v1/jobs/{job.pk}/pause")
    assert conflict.status_code == 409
    assert (
        conflict.json()["message"]
        == f"job {job.pk} is cancelled; only a pending or running job can pause"
    )
    resumed = client.post(f"/api/v1/jobs/{job.pk}/resume")
    assert resumed.status_code == 200 and resumed.json()["status"] == "pending"
    detail = client.get(f"/api/v1/jobs/{job.pk}").json()
    assert detail["progress"]["windows"] == {"planned": 60, "done": 0}
    assert detail["progress"]["stages"]["rubric"]["random"]["planned"] == 12
    bad = client.post(
        "/api/v1/jobs", {"dataset": "tiny", "judge": "nope"}, format="json"
    )
    assert bad.status_code == 404 and bad.json()["message"] == "judge 'nope' not found"


@pytest.mark.django_db(transaction=True)
def test_window_page_shows_raw_answer_and_the_exact_prompt(
    tiny, client, admin_user, settings, tmp_path
):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"
    server, _t, url = start_simulated_judge(
        seed=1, latency_ms=1, fault_sequence=["malformed"] * 3
    )
    try:
        judge = services.judge_create(
            name="live", base_urls=[url], model="m", concurrency=1
        )
        job = services.job_create(
            dataset=tiny, judge=judge, stages="rubric", query_ids=["q1"], queue=False
        )
        assert job_run(job_id=job.pk) == JobStatus.DONE
    finally:
        server.stop()
    bad = JudgmentWindow.objects.get(job=job, valid=False)
    assert bad.invalid_category == "invalid_json" and bad.attempts == 3
    client.force_login(admin_user)
    page = client.get(f"/judging/windows/{bad.pk}/").content.decode()
    assert "invalid_json" in page and "The documents changed" not in page
    assert 'id="prompt"' in page and "doc_1" in page
    detail = client.get(f"/judging/jobs/{job.pk}/").content.decode()
    assert "invalid JSON: 1" in detail
