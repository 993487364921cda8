"""The power planner's surfaces: command, API and page give the same plan as the
pure function; a study fills the chance rate and counted share (issue 14)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from annotation.analysis.planning import expected_counted_share, plan_contests, power_at
from annotation.services import power_plan_build, study_report_build

pytestmark = pytest.mark.django_db


def test_expected_counted_share_by_hand():
    """Disagreement 1, one-sided 1/2 each, agreement and both-tie 0: (1 + .5 + .5)/5."""
    assert expected_counted_share(
        ["A", "A", "tie", "B", "tie"], ["B", "tie", "A", "B", "tie"]
    ) == pytest.approx(0.4)
    assert expected_counted_share([], []) is None


def test_command_api_and_page_agree_with_the_pure_planner(admin_user):
    expected = plan_contests(
        power=0.9,
        true_rate=0.64,
        chance_rate=0.55,
        counted_share=0.7,
        design_effect=1.3,
    )
    at = power_at(
        150, true_rate=0.64, chance_rate=0.55, counted_share=0.7, design_effect=1.3
    )
    args = dict(
        true_rate=0.64,
        chance_rate=0.55,
        counted_share=0.7,
        power=0.9,
        design_effect=1.3,
    )
    out = io.StringIO()
    call_command("plan_study", json=True, contests=150, stdout=out, **args)
    plan = json.loads(out.getvalue())
    assert plan["contests"] == expected.contests
    assert plan["power"] == pytest.approx(expected.power)
    assert plan["power_at"] == {"contests": 150, "power": pytest.approx(at)}
    out = io.StringIO()
    call_command("plan_study", stdout=out, **args)
    assert out.getvalue().startswith(f"{expected.contests} contests")
    client = Client()
    client.force_login(admin_user)
    api = client.get("/api/v1/studies/power", {**args, "contests": 150}).json()
    assert api == json.loads(json.dumps(plan))
    page = client.get("/annotation/studies/power", args).content.decode()
    assert f'id="power-contests">{expected.contests}<' in page
    assert (
        client.get("/annotation/studies/").content.decode().count('id="power-link"')
        == 1
    )
    bad = client.get("/api/v1/studies/power", {"true_rate": 0.5, "chance_rate": 0.5})
    assert bad.status_code == 400 and "equals the chance" in json.dumps(bad.json())
    with pytest.raises(CommandError, match="give a chance rate"):
        call_command("plan_study", true_rate=0.6, stdout=io.StringIO())


def test_a_study_fills_chance_rate_and_counted_share(simulated_study):
    study, _ = simulated_study
    report, _ = study_report_build(study=study)
    plan = power_plan_build(true_rate=0.7, study=study)
    assert plan["chance_rate"] == pytest.approx(report["main"]["chance"])
    assert plan["counted_share"] == pytest.approx(
        report["main"]["n"] / report["contests"]
    )
    assert plan["inputs"]["counted_share"] == f"study {study.pk}: observed"
    direct = plan_contests(
        true_rate=0.7,
        chance_rate=report["main"]["chance"],
        counted_share=report["main"]["n"] / report["contests"],
    )
    assert plan["contests"] == direct.contests
