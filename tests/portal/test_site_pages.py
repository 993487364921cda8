"""Pages that finish what they start: job controls re-rendered by the progress
poll at every state, destructive actions styled and confirmed, styled error pages
with navigation, a favicon, the API index, datasets and releases in the nav."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from benchmarks.services import dataset_import
from judging import services as judging
from tests.conftest import DEMO_TINY

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(db):
    tiny = dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        pools=DEMO_TINY / "pools.tsv",
    )
    judge = judging.judge_create(
        name="sim", base_urls=["http://127.0.0.1:9/v1"], model="m", concurrency=2
    )
    return judging.job_create(dataset=tiny, judge=judge, queue=False)


def _controls(client: Client, job) -> tuple[str, set[str]]:
    fragment = client.get(f"/judging/jobs/{job.pk}/progress").content.decode()
    status = re.search(r'id="progress" data-status="(\w+)"', fragment).group(1)
    return status, set(re.findall(r'<button id="(\w+)"', fragment))


def test_progress_fragment_carries_the_controls_of_every_state(client, admin_user, job):
    """The poll swaps the whole block, so the buttons always match the status."""
    client.force_login(admin_user)
    assert _controls(client, job) == ("pending", {"pause", "cancel"})
    judging.job_pause(job=job)
    assert _controls(client, job) == ("paused", {"resume", "cancel"})
    judging.job_cancel(job=job)
    assert _controls(client, job) == ("cancelled", {"resume"})
    page = client.get(f"/judging/jobs/{job.pk}/").content.decode()
    # The poll stops only on a terminal status (a paused job is still watched).
    assert '["done", "cancelled", "failed"].includes(block.dataset.status)' in page


def test_destructive_actions_are_red_and_ask_first(client, admin_user, job):
    client.force_login(admin_user)
    fragment = client.get(f"/judging/jobs/{job.pk}/progress").content.decode()
    cancel = re.search(
        r'<form[^>]*data-confirm="([^"]+)"[^>]*>.*?<button id="cancel" class="danger">',
        fragment,
        re.S,
    )
    assert cancel and f"Cancel job {job.pk}?" in cancel.group(1)
    page = client.get("/").content.decode()
    assert '<script src="/static/js/site.js" defer></script>' in page
    body = open(finders.find("js/site.js")).read()
    assert "window.confirm(question)" in body and "preventDefault" in body


@pytest.mark.parametrize("debug", [False])
def test_error_pages_are_styled_with_navigation(
    client, admin_user, annotator, settings, debug
):
    settings.DEBUG = debug
    client.force_login(admin_user)
    missing = client.get("/no/such/page")
    assert missing.status_code == 404
    body = missing.content.decode()
    assert 'id="error-404"' in body and "<code>/no/such/page</code>" in body
    assert 'class="topbar"' in body and 'href="/benchmarks/datasets/"' in body
    client.force_login(annotator)
    denied = client.get(reverse("calibration:index"))
    assert denied.status_code == 403
    assert 'id="error-403"' in denied.content.decode()
    assert 'class="topbar"' in denied.content.decode()


def test_server_error_page_is_styled(settings):
    """The 500 page renders without a request context (Django's contract)."""
    from django.template import loader

    page = loader.get_template("500.html").render({})
    assert 'id="error-500"' in page and 'href="/"' in page and "favicon.svg" in page


def test_favicon_is_linked_and_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith(
        "/static/img/favicon.svg"
    )
    assert open(finders.find("img/favicon.svg")).read().startswith("<svg")
    page = client.get("/login/").content.decode()
    assert (
        '<link rel="icon" href="/static/img/favicon.svg" type="image/svg+xml">' in page
    )


def test_api_index_lists_every_endpoint(client):
    """/api/v1/ answers JSON naming every route of the API with its methods."""
    index = client.get("/api/v1/")
    assert index.status_code == 200
    data = index.json()
    endpoints = {e["path"]: e for e in data["endpoints"]}
    assert endpoints["/api/v1/datasets"]["methods"] == ["GET"]
    assert endpoints["/api/v1/auth/token"]["methods"] == ["POST"]
    assert "POST" in endpoints["/api/v1/jobs"]["methods"]
    assert endpoints["/api/v1/studies/<int:study_id>/report"]["name"] == (
        "annotation-api:study-report"
    )
    assert all(e["summary"] for e in data["endpoints"])
    assert data["schema"].endswith("/api/schema/")
    from django.urls import get_resolver

    routes = sum(
        len(getattr(p, "url_patterns", [p]))
        for p in get_resolver().url_patterns
        if str(p.pattern).startswith("api/v1/")
    )
    assert len(data["endpoints"]) == routes


def test_nav_links_datasets_and_releases_for_staff(client, admin_user, reviewer):
    client.force_login(admin_user)
    page = client.get(reverse("benchmarks:dataset-list")).content.decode()
    assert '<a href="/benchmarks/datasets/">Datasets</a>' in page
    assert '<a href="/annotation/releases/">Releases</a>' in page
    assert client.get("/annotation/releases/").status_code == 200
    client.force_login(reviewer)
    assert client.get("/annotation/releases/").status_code == 403
