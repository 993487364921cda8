"""The report page (server-rendered SVG plots with the real numbers, subset form)
and the release button: queued on a worker, shown on the study page, zip download."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest
from django.test import Client

from annotation import tasks
from annotation.models import Release, ReleaseStatus
from annotation.services import study_report_build, study_report_requested
from tests.annotation.conftest import SECRET_COMMENT

pytestmark = pytest.mark.django_db


def test_report_page_shows_the_real_numbers_and_plots(simulated_study, admin_user):
    study, users = simulated_study
    report, _names = study_report_build(study=study)
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    assert page.count("<svg") == 5 and "<script" not in page
    for plot in ("margin", "reliability", "classes", "agreement", "seconds"):
        assert f'id="plot-{plot}"><svg' in page
    main = report["main"]
    assert f"{main['rate']:.3f}" in page and f"{main['chance']:.3f}" in page
    assert f"[{main['ci'][0]:.3f}, {main['ci'][1]:.3f}]" in page
    assert f"{main['k']} of {main['n']} contests" in page
    assert f"{report['margin_auc']['rcp']:.3f}" in page
    assert f"{report['icc1k']:.3f}" in page
    rcp_all = report["hit_rates"]["rcp"]["all"]
    assert f"rcp all: {rcp_all['rate']:.0%} of {rcp_all['n']}" in page
    bins = [b for b in report["reliability_bins"] if b["count"]]
    assert page.count('class="bin"') == len(bins)
    assert page.count('class="hbar"') >= len(users)  # per annotator bars
    for user in users:  # admins see who is who
        assert user.username in page
    assert SECRET_COMMENT not in page


def test_report_subset_form_excludes_a_system(simulated_study, admin_user):
    study, _users = simulated_study
    name = study.systems.order_by("name").first().name
    client = Client()
    client.force_login(admin_user)
    page = client.get(
        f"/annotation/studies/{study.pk}/report", {"exclude_system": name}
    ).content.decode()
    subset, _ = study_report_requested(study=study, exclude_systems=[name])
    assert f"{subset['contests']} contests" in page and f"without {name}" in page
    assert re.search(rf'value="{name}" checked', page)
    api = client.get(
        f"/api/v1/studies/{study.pk}/report", {"exclude_system": name}
    ).json()
    assert api == json.loads(json.dumps(subset))


def test_release_button_builds_on_a_worker_and_offers_the_zip(
    simulated_study, admin_user, monkeypatch, django_capture_on_commit_callbacks
):
    study, _users = simulated_study
    client = Client()
    client.force_login(admin_user)
    queued = []
    monkeypatch.setattr(tasks.release_build_task, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/annotation/studies/{study.pk}/releases")
    assert response.status_code == 302
    release = Release.objects.get()
    assert queued == [release.pk] and release.status == ReleaseStatus.PENDING
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    assert 'http-equiv="refresh"' in page and "pending" in page
    assert (
        client.get(f"/annotation/studies/{study.pk}/releases/1.zip").status_code == 404
    )
    assert tasks.release_build_task(release.pk) == ReleaseStatus.DONE
    assert tasks.release_build_task(release.pk) == "skipped"  # safe to run twice
    page = client.get(f"/annotation/studies/{study.pk}/").content.decode()
    assert "Download zip" in page and 'http-equiv="refresh"' not in page
    download = client.get(f"/annotation/studies/{study.pk}/releases/1.zip")
    assert download.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert "manifest.json" in archive.namelist()
    assert "grades.jsonl" in archive.namelist()


def test_release_button_refused_without_hash_key(simulated_study, admin_user, settings):
    study, _users = simulated_study
    settings.RELEASE_HASH_KEY = ""
    client = Client()
    client.force_login(admin_user)
    response = client.post(f"/annotation/studies/{study.pk}/releases", follow=True)
    assert "RELEASE_HASH_KEY" in response.content.decode()
    assert not Release.objects.exists()


def test_annotators_never_reach_reports_or_flags(simulated_study, api_client_for):
    """Annotators of the study get 403 from every report/release address, and no
    response of theirs carries flags or figures."""
    study, users = simulated_study
    client = Client()
    client.force_login(users[0])
    for url in (
        f"/annotation/studies/{study.pk}/report",
        f"/annotation/studies/{study.pk}/releases/1.zip",
        f"/api/v1/studies/{study.pk}/report",
    ):
        response = client.get(url)
        assert response.status_code == 403, url
        body = response.content.decode()
        assert "flags" not in body and "straight" not in body
    assert client.post(f"/annotation/studies/{study.pk}/releases").status_code == 403
    assert not Release.objects.exists()
    body = api_client_for(users[0]).get("/annotation/").content.decode()
    assert "report" not in body.lower()
