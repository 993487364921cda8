"""The many-facet Rasch severity model recovers simulated truth, and the report
shows it beside the raw means without changing picks or verdicts."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from annotation.analysis.severity import rasch_severity

TRUE_SEVERITY = np.array([-1.0, -0.5, 0.0, 0.0, 0.5, 1.0])
STEPS = np.array([-1.5, -0.5, 0.0, 0.5, 1.5])


def _simulate(n_items, raters_per_item, seed, assign=None):
    rng = np.random.default_rng(seed)
    theta = rng.normal(scale=1.5, size=n_items)
    cum = np.concatenate([[0.0], np.cumsum(STEPS)])
    m = np.arange(cum.size)
    ratings = []
    for i in range(n_items):
        raters = (
            assign(i, rng)
            if assign
            else rng.choice(TRUE_SEVERITY.size, raters_per_item, replace=False)
        )
        for a in raters:
            logits = m * (theta[i] - TRUE_SEVERITY[a]) - cum
            p = np.exp(logits - logits.max())
            ratings.append((f"a{a}", f"d{i}", int(rng.choice(m, p=p / p.sum()))))
    return theta, ratings


def test_severities_are_recovered_from_panels_of_three():
    _theta, ratings = _simulate(300, 3, seed=5)
    fit = rasch_severity(ratings)
    assert fit.converged and fit.ratings == 900
    got = np.array([fit.severity[f"a{a}"] for a in range(TRUE_SEVERITY.size)])
    assert abs(got.sum()) < 1e-9  # identified: severities sum to zero
    assert np.max(np.abs(got - TRUE_SEVERITY)) < 0.3
    assert np.corrcoef(got, TRUE_SEVERITY)[0, 1] > 0.97
    assert np.max(np.abs(np.array(fit.steps) - STEPS)) < 0.5
    assert 1.2 < fit.sigma < 1.8  # the items' spread (true 1.5)


def test_fair_means_track_the_truth_better_than_raw_means_under_uneven_panels():
    """Half the documents go to the two harshest annotators, half to the two most
    lenient: raw means confound document and panel, fair means correct for it."""

    def assign(i, _rng):
        return [4, 5] if i % 2 else [0, 1]

    theta, ratings = _simulate(200, 2, seed=9, assign=assign)
    # A few mixed panels link the two groups (otherwise nothing identifies them).
    _t2, linking = _simulate(60, 3, seed=11)
    ratings += [(a, f"link-{d}", g) for a, d, g in linking]
    fit = rasch_severity(ratings)
    items = [f"d{i}" for i in range(200)]
    raw = [fit.raw_mean[d] for d in items]
    fair = [fit.fair_mean[d] for d in items]
    rho_raw = spearmanr(raw, theta).statistic
    rho_fair = spearmanr(fair, theta).statistic
    assert rho_fair > rho_raw + 0.03
    assert fit.severity["a5"] > fit.severity["a0"] + 1.0


def test_degenerate_inputs_are_refused():
    with pytest.raises(ValueError, match="two annotators"):
        rasch_severity([("a", "d1", 1), ("a", "d2", 2)])
    with pytest.raises(ValueError, match="two grade values"):
        rasch_severity([("a", "d1", 0), ("b", "d1", 0)])


@pytest.mark.django_db
def test_the_report_shows_severity_beside_raw_means_and_picks_do_not_move(
    simulated_study, admin_user
):
    from django.test import Client

    from annotation.models import Grade
    from annotation.services import study_report_build

    study, users = simulated_study
    plain, _names = study_report_build(study=study)
    with_severity, names = study_report_build(study=study, severity=True)
    severity = with_severity.pop("severity")
    assert with_severity == plain  # picks, verdicts, every figure unchanged
    assert set(severity["severity"]) == set(names)
    assert abs(sum(severity["severity"].values())) < 1e-9
    grades = [g.grade for g in Grade.objects.filter(assignment__contest__study=study)]
    raw = [d["raw_mean"] for d in severity["documents"]]
    assert min(raw) >= min(grades) and max(raw) <= max(grades)
    assert severity["converged"] and severity["largest_shift"] >= 0
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/annotation/studies/{study.pk}/report?severity=1")
    html = page.content.decode()
    assert 'id="severity"' in html
    assert all(u.username in html for u in users)
