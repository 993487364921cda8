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
from tests.figures import assert_downloads, csv_rows, figure_svg, marks, texts

pytestmark = pytest.mark.django_db


def test_report_page_shows_the_real_numbers_and_plots(simulated_study, admin_user):
    """Five figures drawn from the report: agreement rates equal the report's,
    one reliability point per non-empty bin, annotators named on their bars, and
    every figure's CSV equals the numbers the page prints."""
    study, users = simulated_study
    report, _names = study_report_build(study=study)
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    assert page.count("<svg") == 5 and page.count("<script") == 1  # site.js
    main = report["main"]
    assert f"{main['rate']:.3f}" in page and f"{main['chance']:.3f}" in page
    assert f"[{main['ci'][0]:.3f}, {main['ci'][1]:.3f}]" in page
    assert f"{main['k']} of {main['n']} contests" in page
    assert f"{report['margin_auc']['rcp']:.3f}" in page
    assert f"{report['icc1k']:.3f}" in page
    margin = csv_rows(client, page, "margin")
    rcp_all = report["hit_rates"]["rcp"]["all"]
    row = next(r for r in margin if r["band"] == "all" and r["metric"] == "rcp")
    assert float(row["rate"]) == pytest.approx(rcp_all["rate"])
    assert int(row["contests"]) == rcp_all["n"]
    drawn = texts(figure_svg(page, "margin"))
    assert f"{rcp_all['rate'] * 100:.0f}%" in drawn  # the bar's label, two lines
    assert f"n={rcp_all['n']}" in drawn
    assert "RCP-nDCG winner" in drawn and "all decided" in drawn
    assert "verdicts matching the metric's winner (%)" in drawn
    bins = [b for b in report["reliability_bins"] if b["count"]]
    assert marks(figure_svg(page, "reliability"), "reliability-points") == len(bins)
    classes = {
        r["class"]: int(r["contests"]) for r in csv_rows(client, page, "classes")
    }
    assert sum(classes.values()) == report["contests_graded"] == report["contests"]
    agreement = figure_svg(page, "agreement")
    for user in users:  # admins see who is who, on the axis
        assert user.username in texts(agreement)
    seconds = csv_rows(client, page, "seconds")
    for r in seconds:
        # The table's median-seconds column (the 4th number after the name), equal
        # to the CSV's value to the table's one decimal; compared as numbers, since
        # the page and the CSV round a value like 22.85 independently.
        cell = re.search(
            rf"<td>{r['annotator']}</td>(?:<td class=\"num\">[^<]*</td>){{3}}"
            rf"<td class=\"num\">([^<]*)</td>",
            page,
        )
        assert (
            cell
            and abs(float(cell.group(1)) - float(r["median_seconds"])) <= 0.05 + 1e-9
        )
    assert SECRET_COMMENT not in page
    for name in ("margin", "reliability", "classes", "agreement", "seconds"):
        assert_downloads(client, page, name)


def test_report_before_any_grading_shows_empty_states_not_ties(study, admin_user):
    """Nothing graded yet: no contest is a "verdict tie", the figures say there is
    nothing to show, and the downloads are empty tables."""
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    report, _ = study_report_build(study=study)
    assert report["contests"] > 0 and report["contests_graded"] == 0
    assert report["verdicts"] == {"A": 0, "B": 0, "tie": 0}
    assert report["verdict_classes"]["tie"] == 0
    assert {r["class"] for r in report["per_contest"]} == {"ungraded"}
    assert "(0 graded)" in page
    for name in ("margin", "reliability", "classes"):
        assert "No graded contests yet." in texts(figure_svg(page, name))
        assert csv_rows(client, page, name) == []
    assert "verdict tie" not in page


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
