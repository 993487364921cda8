"""HTML pages of calibration: who sees what, the calibrate button, and pages that
render their SVG plots with the fit's real numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.urls import reverse

from benchmarks.models import Qrel, RankingEntry, System
from calibration import tasks
from calibration.figures import QUESTIONS
from calibration.models import CalibrationFit, FitStatus
from calibration.selectors import leaderboard_compute
from calibration.services import calibration_fit, gains_import
from tests.calibration.conftest import write_released_gains
from tests.calibration.factories import simulated_suite
from tests.figures import assert_downloads, csv_rows, figure_svg, links, marks, texts

pytestmark = pytest.mark.django_db


@pytest.fixture
def sim_fit():
    suite = simulated_suite(name="pages", n_queries=4)
    return calibration_fit(datasets=[suite.dataset])


def test_fit_page_shows_item_curves_tau_reliability_and_coverage(
    client, reviewer, sim_fit
):
    """Four figures drawn from the fit's own numbers: curves labelled with each
    criterion's question, one histogram bar group per tau bin summing to the
    queries, one reliability point per non-empty bin; every CSV equals the page."""
    client.force_login(reviewer)
    page = client.get(
        reverse("calibration:fit-detail", args=[sim_fit.pk])
    ).content.decode()
    assert page.count("<svg") == 4
    assert page.count("<script") == 1  # static/js/site.js only: figures need none
    curves = texts(figure_svg(page, "item-curves"))
    params = list(
        zip(
            sim_fit.items["criteria"],
            sim_fit.items["gamma"],
            sim_fit.items["beta"],
            strict=True,
        )
    )
    for c, g, b in params:
        assert f"{c} (β = {b:.2f}): {QUESTIONS[c]}" in " ".join(curves)
        assert f'<td>{QUESTIONS[c]}</td><td class="num">{g:.3f}</td>' in page
    assert "calibrated ability θ̃ (logit scale)" in curves
    assert "P(criterion passed) (%)" in curves
    items = csv_rows(client, page, "item-curves")
    assert [(r["criterion"], float(r["gamma"]), float(r["beta"])) for r in items] == [
        (c, pytest.approx(g), pytest.approx(b)) for c, g, b in params
    ]
    taus = [
        t for t in sim_fit.query_rows.values_list("tau", flat=True) if t is not None
    ]
    tau_rows = csv_rows(client, page, "tau")
    assert sum(int(r["queries"]) for r in tau_rows) == len(taus)
    assert min(float(r["bin_lo"]) for r in tau_rows) == pytest.approx(min(taus))
    tau_texts = texts(figure_svg(page, "tau"))
    assert "queries (count)" in tau_texts
    assert any(t.startswith("p5 = ") for t in tau_texts)
    bins = sim_fit.diagnostics["reliability"]["bins"]
    rel = figure_svg(page, "reliability")
    assert marks(rel, "reliability-points") == sum(1 for b in bins if b["count"])
    assert [int(r["verdicts"]) for r in csv_rows(client, page, "reliability")] == [
        b["count"] for b in bins
    ]
    ece = sim_fit.diagnostics["reliability"]["ece"]
    assert f'<strong id="ece">{ece:.4f}</strong>' in page
    cov = sim_fit.diagnostics["coverage"]
    shares = {r["part"]: float(r["share"]) for r in csv_rows(client, page, "coverage")}
    assert shares["invalid Stage A windows"] == pytest.approx(
        cov["invalid_share"]["tournament"]
    )
    assert "Queries calibrated" in page
    for name in ("item-curves", "tau", "reliability", "coverage"):
        assert_downloads(client, page, name)


def test_leaderboard_page_has_ci_bars_pair_matrix_and_rank_changes(
    client, reviewer, tiny, tmp_path
):
    """CI plots name every system on their axis and their CSV holds the table's
    numbers; the pair matrix's CSV holds each ordered pair's delta and class."""
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    client.force_login(reviewer)
    page = client.get(
        reverse("calibration:leaderboard"),
        {"dataset": "tiny", "k": "5", "protocol": "plain"},
    ).content.decode()
    # Count-nDCG is empty for released gains: two CI plots, two pair matrices.
    assert page.count("<svg") == 4
    rows = re.findall(r"<tr><td>(\d)</td><td>(\w+)</td>", page)
    assert rows == [("1", "reranker"), ("2", "bm25")]
    assert "0.8665" in page and ("0.9866" in page or "0.9865" in page)
    ci = figure_svg(page, "ci-rcp-ndcg")
    assert {"reranker", "bm25"} <= set(texts(ci))
    assert "RCP-nDCG@5 (0–1, higher is better)" in texts(ci)
    points = [marks(ci, f"ci-rcp-ndcg-point-{i}") > 0 for i in range(3)]
    assert points == [True, True, False]  # one point per system
    for r in csv_rows(client, page, "ci-rcp-ndcg"):
        cell = re.search(
            rf"<td>{r['system']}</td>\s*<td class=\"num\">([\d.]+) "
            rf'<span class="muted">\[([\d.]+), ([\d.]+)\]',
            page,
        )
        assert f"{float(r['value']):.4f}" == cell.group(1)
        assert f"{float(r['ci_lo']):.3f}" == cell.group(2)
        assert r["rank_changed"] == "False"
    pairs = csv_rows(client, page, "pairs-rcp-ndcg")
    assert len(pairs) == 2  # both orders of the one pair
    up = next(r for r in pairs if r["column_system"] == "reranker")
    assert f"{float(up['delta']):+.4f}" == "+0.1201"
    assert up["class"] == "open"  # not separated at p < 0.05, outside tie zone
    assert "+12.0" in texts(figure_svg(page, "pairs-rcp-ndcg"))
    assert_downloads(client, page, "ci-rcp-ndcg")
    missing = links(page, "ci-rcp-ndcg")["csv"].replace("ci-rcp-ndcg", "nope")
    assert client.get(missing).status_code == 404


def test_rank_changes_are_highlighted(client, admin_user):
    """ "truth" ranks by true ability, "by-grade" by qrel grade (random inside a
    grade): both score qrel-nDCG 1, so the name tie-break puts "by-grade" first under
    qrel while RCP-nDCG puts "truth" first; the changed cells are highlighted."""
    suite = simulated_suite(name="flip", n_queries=4, systems={"truth": 0.0}, seed=5)
    by_grade = System.objects.create(dataset=suite.dataset, name="by-grade")
    rng = np.random.default_rng(0)
    grades = {
        (q, d): g
        for q, d, g in Qrel.objects.filter(query__dataset=suite.dataset).values_list(
            "query_id", "document_id", "grade"
        )
    }
    RankingEntry.objects.bulk_create(
        RankingEntry(
            system=by_grade,
            query_id=e.query_id,
            document_id=e.document_id,
            rank=e.rank,
            score=grades.get((e.query_id, e.document_id), 0) + 0.1 * rng.random(),
        )
        for e in RankingEntry.objects.filter(system__dataset=suite.dataset)
    )
    calibration_fit(datasets=[suite.dataset])
    client.force_login(admin_user)
    page = client.get(
        reverse("calibration:leaderboard"), {"dataset": "flip"}
    ).content.decode()
    board = leaderboard_compute(datasets=[suite.dataset])
    ranks = {s["system"]: s["rank"] for s in board["systems"]}
    assert ranks["truth"]["rcp_ndcg"] == 1 and ranks["by-grade"]["qrel_ndcg"] == 1
    assert (
        page.count('class="num rank-changed"')
        == 2 + (ranks["truth"]["count_ndcg"] != 1) * 2
    )
    changed = sum(
        r["rank_changed"] == "True"
        for name in ("ci-rcp-ndcg", "ci-count-ndcg", "ci-qrel-ndcg")
        for r in csv_rows(client, page, name)
    )
    assert changed == page.count('class="num rank-changed"')
    assert "▼2" in page and "▲1" in page


def test_calibrate_button_queues_a_fit_that_the_task_runs(
    client, admin_user, monkeypatch, django_capture_on_commit_callbacks
):
    suite = simulated_suite(name="button", n_queries=3)
    client.force_login(admin_user)
    index = client.get(reverse("calibration:index")).content.decode()
    assert 'id="calibrate"' in index and '<option value="button">' in index
    queued = []
    monkeypatch.setattr(tasks.calibration_fit_run, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("calibration:fit-create"), {"dataset": ["button"], "mode": "auto"}
        )
    fit = CalibrationFit.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(
        f"/fits/{fit.pk}/"
    )
    assert queued == [fit.pk]
    pending = client.get(response["Location"]).content.decode()
    assert 'http-equiv="refresh"' in pending and "pending" in pending
    tasks.calibration_fit_run(fit.pk)
    fit.refresh_from_db()
    assert fit.status == FitStatus.DONE and fit.mode == "tournament"
    assert suite.dataset in fit.datasets.all()
    done = client.get(response["Location"]).content.decode()
    assert 'http-equiv="refresh"' not in done and "<svg" in done


def test_calibrate_button_errors_are_shown(client, admin_user):
    client.force_login(admin_user)
    response = client.post(
        reverse("calibration:fit-create"), {"dataset": ["nope"]}, follow=True
    )
    assert "dataset &#x27;nope&#x27; not found" in response.content.decode()
    assert not CalibrationFit.objects.exists()


@pytest.mark.parametrize("role", ["annotator", "outsider"])
def test_annotators_and_outsiders_see_nothing(client, request, role, sim_fit):
    client.force_login(request.getfixturevalue(role))
    for url in (
        reverse("calibration:index"),
        reverse("calibration:fit-detail", args=[sim_fit.pk]),
        reverse("calibration:leaderboard") + "?dataset=pages",
    ):
        assert client.get(url).status_code == 403
    assert (
        client.post(
            reverse("calibration:fit-create"), {"dataset": ["pages"]}
        ).status_code
        == 403
    )


def test_reviewer_cannot_press_calibrate(client, reviewer, sim_fit):
    client.force_login(reviewer)
    assert (
        'id="calibrate"'
        not in client.get(reverse("calibration:index")).content.decode()
    )
    assert (
        client.post(
            reverse("calibration:fit-create"), {"dataset": ["pages"]}
        ).status_code
        == 403
    )


def test_index_lists_fits_in_bounded_queries(
    client, admin_user, tiny, tmp_path, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(admin_user)
    gains_import(dataset=tiny, path=write_released_gains(tmp_path / "g.tsv"))
    url = reverse("calibration:index")
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    for i in range(5):
        gains_import(dataset=tiny, path=write_released_gains(tmp_path / f"g{i}.tsv"))
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get(url).content.decode()
    assert page.count('href="/calibration/fits/') == 6


@pytest.mark.parametrize(
    "model", ["calibrationfit", "querycalibration", "documentability"]
)
def test_admin_changelists_are_read_only(client, admin_user, sim_fit, model):
    client.force_login(admin_user)
    assert (
        client.get(reverse(f"admin:calibration_{model}_changelist")).status_code == 200
    )
    assert client.get(reverse(f"admin:calibration_{model}_add")).status_code == 403


def test_staff_nav_links_calibration_next_to_judging(client, admin_user, reviewer):
    """Staff see a Calibration link right after Judging in the nav; others do not."""
    client.force_login(admin_user)
    nav = client.get(reverse("calibration:index")).content.decode()
    judging = f'<a href="{reverse("judging:job-list")}">Judging</a>'
    calibration = f'<a href="{reverse("calibration:index")}">Calibration</a>'
    assert f"{judging} {calibration}" in nav
    client.force_login(reviewer)
    assert calibration not in client.get(reverse("calibration:index")).content.decode()
