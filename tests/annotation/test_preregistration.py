"""Pre-registration and interim looks (issue 14): the plan freezes at opening, reports
of an open study are recorded as looks with alpha-spending boundaries recomputed from
every look, a fixed-sample plan labels interim numbers uncorrected, deviations listed."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from annotation.analysis.sequential import boundaries, wald_z
from annotation.models import StudyLook
from annotation.services import (
    study_analysis_plan_set,
    study_close,
    study_create,
    study_member_add,
    study_open,
    study_report_requested,
)
from rcp_platform.exceptions import ApplicationError, ConflictError
from tests.annotation.factories import build_truth_world, simulate_grading
from tests.factories import AnnotatorFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def planned(admin_user):
    tw = build_truth_world(seed=4)
    study = study_create(
        name="Registered",
        datasets=[tw.world.dataset],
        systems=tw.world.systems,
        n_contests=30,
        seed=2,
        created_by=admin_user,
        analysis_plan={"stopping_rule": {"kind": "obrien_fleming"}, "alpha": 0.05},
    )
    users = AnnotatorFactory.create_batch(4)
    for user in users:
        study_member_add(study=study, annotator=user)
    return study, users, tw


def _expected_z(report):
    rows = [r for r in report["per_contest"] if r["class"] in ("rcp", "qrel")]
    return wald_z(
        [r["class"] == "rcp" for r in rows],
        [r["query_id"] for r in rows],
        report["main"]["chance"],
    )


def test_plan_freezes_when_the_study_opens(planned, admin_user):
    study, _, _ = planned
    study = study_analysis_plan_set(study=study, plan={"slices": ["all"]})
    assert study.registered_plan is None
    with pytest.raises(ApplicationError, match="study setting"):
        study_analysis_plan_set(study=study, plan={"verdict_rule": "plurality"})
    with pytest.raises(ApplicationError, match="stopping rule"):
        study_analysis_plan_set(study=study, plan={"stopping_rule": {"kind": "x"}})
    study = study_open(study=study)
    assert study.registered_plan == {
        "primary_endpoint": "main",
        "verdict_rule": "majority",
        "slices": ["all"],
        "alpha": 0.05,
        "planned_contests": 30,
        "stopping_rule": {"kind": "obrien_fleming"},
    }
    first = study.registered_at
    with pytest.raises(ConflictError, match="frozen"):
        study_analysis_plan_set(study=study, plan={"alpha": 0.01})
    study_close(study=study)
    study = study_open(study=study)  # reopening keeps the registration
    assert study.registered_at == first
    client = Client()
    client.force_login(admin_user)
    got = client.get(f"/api/v1/studies/{study.pk}/plan").json()
    assert got["registered"] == study.registered_plan
    refused = client.post(
        f"/api/v1/studies/{study.pk}/plan",
        {"alpha": 0.01},
        content_type="application/json",
    )
    assert refused.status_code == 409


def test_interim_looks_with_obrien_fleming_boundaries(planned, admin_user):
    study, users, tw = planned
    study_open(study=study)
    simulate_grading(
        study=study, annotators=users[:3], truth=tw.truth, seed=1, limit=36
    )
    r1, _ = study_report_requested(study=study)
    look1 = StudyLook.objects.get(study=study)
    assert 0 < look1.complete_contests < 30
    assert look1.information == pytest.approx(look1.complete_contests / 30)
    # z is None when the counted contests all side one way (no clustered SE yet).
    assert look1.z == (
        None if _expected_z(r1) is None else pytest.approx(_expected_z(r1))
    )
    seq = r1["sequential"]
    assert seq["interim"] is True and seq["corrected"] is True
    c1 = boundaries([look1.information], alpha=0.05, kind="obrien_fleming")[0]
    assert seq["looks"][0]["boundary"] == pytest.approx(c1)
    assert seq["looks"][0]["crossed"] == (look1.z is not None and abs(look1.z) >= c1)
    # Reading again over the same data records no new look.
    study_report_requested(study=study)
    assert StudyLook.objects.filter(study=study).count() == 1
    simulate_grading(
        study=study, annotators=users[1:], truth=tw.truth, seed=2, limit=24
    )
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report").content.decode()
    look2 = StudyLook.objects.get(study=study, number=2)
    assert look2.complete_contests > look1.complete_contests
    assert 'id="interim-label"' in page and 'id="stopping-rule">obrien_fleming<' in page
    simulate_grading(study=study, annotators=users, truth=tw.truth, seed=3)
    study_close(study=study)
    final, _ = study_report_requested(study=study)
    seq = final["sequential"]
    fractions = [x.information for x in (look1, look2) if x.information < 1]
    expected = boundaries([*fractions, 1.0], alpha=0.05, kind="obrien_fleming")
    assert [x["boundary"] for x in seq["looks"]] == pytest.approx(expected)
    assert seq["looks"][-1]["look"] == "final"
    assert seq["looks"][-1]["z"] == pytest.approx(_expected_z(final))
    assert seq["looks"][-1]["crossed"] == (abs(_expected_z(final)) >= expected[-1])
    assert seq["interim"] is False
    out = io.StringIO()
    call_command("study_report", study=str(study.pk), stdout=out)
    assert "looks (group-sequential):" in out.getvalue()


def test_fixed_plan_labels_interim_numbers_and_lists_deviations(admin_user):
    tw = build_truth_world(seed=5)
    study = study_create(
        name="Fixed",
        datasets=[tw.world.dataset],
        systems=tw.world.systems,
        n_contests=20,
        seed=1,
        open_now=True,
        created_by=admin_user,
    )
    users = AnnotatorFactory.create_batch(3)
    for user in users:
        study_member_add(study=study, annotator=user)
    simulate_grading(study=study, annotators=users, truth=tw.truth, seed=1, limit=30)
    report, _ = study_report_requested(study=study)
    seq = report["sequential"]
    assert seq["label"] == "interim, uncorrected" and seq["corrected"] is False
    assert seq["looks"][0]["boundary"] is None
    system = study.systems.order_by("name").first().name
    sub, _ = study_report_requested(study=study, exclude_systems=[system])
    assert StudyLook.objects.filter(study=study).count() == 1  # subsets are no looks
    assert any(
        d.startswith("subset not in the plan") for d in sub["plan"]["deviations"]
    )
    study_close(study=study)
    closed, _ = study_report_requested(study=study)
    devs = closed["plan"]["deviations"]
    assert "1 interim look(s) under a fixed-sample plan (numbers uncorrected)" in devs
    complete = sum(sum(r["picks"].values()) >= 3 for r in closed["per_contest"])
    assert f"closed with {complete} of 20 planned contests complete" in devs
    json.dumps(closed, allow_nan=False)


def test_admin_shows_looks_and_the_registered_plan_read_only(planned, admin_user):
    study, users, tw = planned
    study_open(study=study)
    simulate_grading(
        study=study, annotators=users[:3], truth=tw.truth, seed=1, limit=36
    )
    study_report_requested(study=study)
    client = Client()
    client.force_login(admin_user)
    page = client.get("/admin/annotation/studylook/").content.decode()
    assert "Registered" in page  # the study name in the list
    look = StudyLook.objects.get(study=study)
    detail = client.get(f"/admin/annotation/studylook/{look.pk}/change/")
    assert (
        detail.status_code == 200
        and str(look.complete_contests) in detail.content.decode()
    )
    assert client.get("/admin/annotation/studylook/add/").status_code == 403
    change = client.get(f"/admin/annotation/study/{study.pk}/change/").content.decode()
    assert "obrien_fleming" in change
