"""The inference section reaches every surface (page, API, ``study_report``
command) with a chosen system's slices, and the study's settings (verdict rule,
draw depth) reach the report and the sampling (issue 14)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from annotation import selectors
from annotation.models import Contest
from annotation.services import study_create, study_report_build
from tests.annotation.factories import build_truth_world

pytestmark = pytest.mark.django_db


def test_focus_system_on_page_api_and_command(simulated_study, admin_user):
    study, _users = simulated_study
    name = study.systems.order_by("name").first().name
    report, _ = study_report_build(study=study, focus_system=name)
    slices = report["inference"]["slices"]
    assert {f"system:{name}", f"system:{name}/win_rate"} <= set(slices)
    client = Client()
    client.force_login(admin_user)
    page = client.get(
        f"/annotation/studies/{study.pk}/report", {"system": name}
    ).content.decode()
    assert f'<option value="{name}" selected>' in page
    assert f"system:{name}/rcp_favours_it_qrels_its_opponent" in page
    win = slices[f"system:{name}/win_rate"]
    assert f"{win['k']} / {win['n']}" in page
    main = slices["all"]
    assert f"{main['wilson'][0]:.3f}–{main['wilson'][1]:.3f}" in page
    assert f"{main['ci_twoway'][0]:.3f}–{main['ci_twoway'][1]:.3f}" in page
    test = report["inference"]["main_test"]["design_exact"]
    assert f'id="exact-p">{test["p_two_sided"]:.4f}' in page
    api = client.get(f"/api/v1/studies/{study.pk}/report", {"system": name}).json()
    assert api == json.loads(json.dumps(report))
    out = io.StringIO()
    call_command(
        "study_report", study=str(study.pk), json=True, system=name, stdout=out
    )
    assert json.loads(out.getvalue()) == json.loads(json.dumps(report))
    out = io.StringIO()
    call_command("study_report", study=str(study.pk), system=name, stdout=out)
    text = out.getvalue()
    assert f"  system:{name}/win_rate: " in text and "exact test p" in text
    assert "margin AUC RCP - qrel" in text


def test_unknown_focus_system_is_a_readable_error(simulated_study, admin_user):
    study, _ = simulated_study
    client = Client()
    client.force_login(admin_user)
    response = client.get(f"/api/v1/studies/{study.pk}/report", {"system": "nope"})
    assert response.status_code == 400
    assert "involves 'nope'" in json.dumps(response.json())


def test_verdict_rule_and_draw_depth_are_study_settings(admin_user):
    """A plurality study reports under plurality; metric_k reaches the sampling: the
    contests' design cells are those of the candidates at that depth."""
    tw = build_truth_world(seed=6)
    study = study_create(
        name="Plural",
        datasets=[tw.world.dataset],
        systems=tw.world.systems,
        n_contests=12,
        seed=1,
        metric_k=3,
        verdict_rule="plurality",
        created_by=admin_user,
    )
    assert study.design["metric_k"] == 3
    assert study.design["verdict_rule"] == "plurality"
    cands = selectors.contest_candidates(
        fit=study.fit, systems=tw.world.systems, depth=study.depth, metric_k=3
    )
    cells = {(c.ref.query_id, frozenset(c.ref.system_ids)): c.cell for c in cands}
    at_10 = {
        (c.ref.query_id, frozenset(c.ref.system_ids)): c.cell
        for c in selectors.contest_candidates(
            fit=study.fit, systems=tw.world.systems, depth=study.depth, metric_k=10
        )
    }
    rows = Contest.objects.filter(study=study)
    assert rows.count() == 12
    # The depth matters: some drawn contests sit in another cell at depth 10.
    assert any(
        row.cell != at_10[row.query_id, frozenset((row.system_a_id, row.system_b_id))]
        for row in rows
    )
    for row in rows:
        assert (
            row.cell
            == cells[row.query_id, frozenset((row.system_a_id, row.system_b_id))]
        )
    report, _ = study_report_build(study=study)
    assert report["inference"]["verdict_rule"] == "plurality"
