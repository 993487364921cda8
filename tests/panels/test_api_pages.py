"""Panel API and pages: roles, estimate before launch, launch queues a run, live
progress, and the study report (page, API, study_report --json) shows the panel
beside the human results - also for a study nobody has graded yet."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from panels import services
from panels.models import PanelRun, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_api_roles_estimate_launch_and_progress(
    study, servers, make_panel, api_client_for, admin_user, reviewer, outsider
):
    """Reviewers read, only staff launch, outsiders see nothing; the estimate names
    2 calls per judge and contest; a launch plans every request, queued."""
    panel = make_panel(servers(3))
    body = {"study": study.pk, "panel": panel.name, "mode": "lists"}
    assert api_client_for(outsider).get("/api/v1/panels").status_code == 403
    listed = api_client_for(reviewer).get("/api/v1/panels")
    assert listed.status_code == 200 and listed.json()[0]["judges"] == [
        "trio-judge-0",
        "trio-judge-1",
        "trio-judge-2",
    ]
    est = api_client_for(admin_user).post(
        "/api/v1/panel-runs/estimate", body, format="json"
    )
    assert est.status_code == 200 and est.json()["calls"] == 48
    assert (
        api_client_for(reviewer)
        .post("/api/v1/panel-runs", body, format="json")
        .status_code
        == 403
    )
    created = api_client_for(admin_user).post("/api/v1/panel-runs", body, format="json")
    assert created.status_code == 201
    data = created.json()
    assert data["total"] == 48 and data["answered"] == 0
    run = PanelRun.objects.get(pk=data["id"])
    assert services.panel_run_execute(run_id=run.pk) == RunStatus.DONE
    detail = api_client_for(reviewer).get(f"/api/v1/panel-runs/{run.pk}").json()
    assert detail["status"] == "done" and detail["answered"] == 48
    assert {j["done"] for j in detail["judges"].values()} == {16}
    paused = api_client_for(admin_user).post(f"/api/v1/panel-runs/{run.pk}/pause")
    assert paused.status_code == 409  # a finished run cannot be paused


def test_pages_and_report_show_the_panel_beside_humans(
    study, servers, make_panel, client, admin_user, capsys
):
    """The panel page shows the estimate and launches; the run page its progress;
    the study report (no human grades yet) shows the panel section, and
    study_report --json carries the same numbers."""
    panel = make_panel(servers(3, list_signal=400.0))
    client.force_login(admin_user)
    page = client.get(f"/panels/studies/{study.pk}/?panel={panel.pk}&mode=lists")
    assert (
        page.status_code == 200 and b"48</strong> calls over 8 contests" in page.content
    )
    launched = client.post(
        f"/panels/studies/{study.pk}/launch", {"panel": panel.pk, "mode": "lists"}
    )
    run = PanelRun.objects.get()
    assert launched.status_code == 302 and launched.url == f"/panels/runs/{run.pk}/"
    services.panel_run_execute(run_id=run.pk)
    progress = client.get(f"/panels/runs/{run.pk}/progress")
    assert (
        b'data-status="done"' in progress.content
        and b"48 / 48 answered" in progress.content
    )
    report = client.get(f"/annotation/studies/{study.pk}/report")
    assert report.status_code == 200
    html = report.content.decode()
    assert 'id="llm-panels"' in html and f'id="panel-run-{run.pk}"' in html
    assert "Agrees with the RCP-nDCG winner" in html
    call_command("study_report", "--study", str(study.pk), "--json")
    data = json.loads(capsys.readouterr().out)
    (section,) = data["panels"]["runs"]
    assert section["panel"] == "trio" and section["human_graded"] == 0
    assert section["decided"]["k"] == 8  # every judge decides every contest
    assert section["agreement"]["human"]["n"] == 0  # no human verdict yet
    assert section["agreement"]["rcp"]["all"]["n"] >= 1
    shown = f"{section['agreement']['rcp']['all']['rate']:.3f}"
    assert shown in html


def test_run_list_api_is_one_query(
    study, servers, make_panel, api_client_for, reviewer, django_assert_num_queries
):
    """The run list reads runs with their study and panel in one query, whatever
    the number of runs (counters live on the run row)."""
    srv = servers(3)
    for name in ("p1", "p2"):
        panel = make_panel(srv, name=name)
        for mode in ("lists", "rubric"):
            services.panel_run_create(study=study, panel=panel, mode=mode, queue=False)
    client = api_client_for(reviewer)
    with django_assert_num_queries(3):  # auth permission checks + the runs
        response = client.get("/api/v1/panel-runs")
    assert response.status_code == 200 and len(response.json()) == 4
    assert {r["total"] for r in response.json()} == {48}


def test_admin_lists_panels_runs_and_requests_read_only(
    study, servers, make_panel, client, admin_user
):
    """Panels are edited in the admin; runs and requests are listed, never added."""
    panel = make_panel(servers(3))
    services.panel_run_create(study=study, panel=panel, mode="lists", queue=False)
    client.force_login(admin_user)
    for model in ("panel", "panelrun", "panelrequest"):
        assert client.get(f"/admin/panels/{model}/").status_code == 200
    assert client.get("/admin/panels/panelrun/add/").status_code == 403
    assert client.get("/admin/panels/panelrequest/add/").status_code == 403
