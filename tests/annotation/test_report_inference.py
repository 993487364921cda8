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
from annotation.services import (
    study_create,
    study_report_build,
    study_report_requested,
)
from tests.annotation.factories import build_truth_world

pytestmark = pytest.mark.django_db


def test_focus_system_on_page_api_and_command(simulated_study, admin_user):
    study, _users = simulated_study
    name = study.systems.order_by("name").first().name
    report, _ = study_report_requested(study=study, focus_system=name)
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


def test_design_controls_reach_the_study_from_command_and_api(world, admin_user):
    """create_study flags and the plan API carry the controls into sampling: no
    concordant contest, at most one per query, balanced pairs, recorded in design."""
    from collections import Counter

    from tests.annotation.test_commands import _create

    _create(world, "--no-controls", "--max-per-query", "2", "--balance-pairs",
            "--verdict-rule", "plurality", "--metric-k", "5", "--contests", "5")  # fmt: skip
    from annotation.models import Study

    study = Study.objects.get(name="cli")
    rows = list(Contest.objects.filter(study=study))
    assert len(rows) == 5 and all(r.cell != "concordant" for r in rows)
    assert max(Counter(r.query_id for r in rows).values()) <= 2
    assert study.design["controls"] == {
        "dataset_quotas": None,
        "balance_pairs": True,
        "max_per_query": 2,
        "concordant_controls": False,
    }
    assert study.design["metric_k"] == 5 and study.design["verdict_rule"] == "plurality"
    assert study.design["quotas"]["concordant"] == 0.0
    client = Client()
    client.force_login(admin_user)
    body = {
        "datasets": [world.dataset.name],
        "systems": [s.name for s in world.systems],
        "contests": 6,
        "concordant_controls": False,
        "dataset_quotas": {world.dataset.name: 1.0},
    }
    plan = client.post("/api/v1/studies/plan", body, content_type="application/json")
    assert plan.status_code == 200, plan.content
    out = plan.json()
    assert out["drawn"]["concordant"] == 0 and sum(out["drawn"].values()) == 6
    assert out["by_dataset"] == {world.dataset.name: 6}
    assert out["controls"]["concordant_controls"] is False and out["metric_k"] == 10
    tight = client.post(
        "/api/v1/studies/plan",
        {**body, "contests": 9, "concordant_controls": True, "max_per_query": 1},
        content_type="application/json",
    )
    assert tight.status_code == 400 and "cap of 1" in json.dumps(tight.json())


def test_report_shows_cells_at_draw_and_shown_depth(simulated_study, admin_user):
    """The cross-table recomputed from per-contest rows with sampling.classify; the
    page shows it labelled with the study's draw depth."""
    from annotation.sampling import classify

    study, _ = simulated_study
    report, _ = study_report_build(study=study)
    got = report["inference"]["cells_by_depth"]
    assert got["draw_depth"] == study.design["metric_k"] == 10
    assert got["shown_depth"] == study.depth
    moved = sum(
        r["design_cell"] != classify(r["rcp_margin"], r["qrel_margin"])
        for r in report["per_contest"]
    )
    assert got["changed"] == moved
    assert sum(sum(v.values()) for v in got["table"].values()) == report["contests"]
    for r in report["per_contest"][:5]:
        assert (
            got["table"][r["design_cell"]][classify(r["rcp_margin"], r["qrel_margin"])]
            >= 1
        )
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    assert f'id="cells-changed">{moved}<' in page and "nDCG@10" in page


def test_create_page_sets_draw_depth_controls_rule_and_stopping(world, admin_user):
    from annotation.models import Study
    from tests.annotation.test_pages import _form

    client = Client()
    client.force_login(admin_user)
    form = _form(
        world,
        create="1",
        open_now="on",
        contests=5,
        quota_decisive=0.6,
        quota_marginal=0.4,
        quota_concordant=0,
        metric_k=5,
        verdict_rule="plurality",
        stopping_rule="pocock",
        max_per_query=2,
        balance_pairs="on",
    )
    assert client.post("/annotation/studies/", form).status_code == 302
    study = Study.objects.get(name="From the page")
    assert study.design["metric_k"] == 5 and study.design["verdict_rule"] == "plurality"
    assert study.design["controls"]["concordant_controls"] is False
    assert study.design["controls"]["max_per_query"] == 2
    assert not Contest.objects.filter(study=study, cell="concordant").exists()
    assert study.registered_plan["stopping_rule"] == {"kind": "pocock"}
