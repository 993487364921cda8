"""Label AUC, matched-flag-rate recall, ECE of gains vs useful-or-better, Spearman."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score

from annotation.analysis.label_quality import (
    ece,
    label_auc,
    matched_flag_recall,
    query_spearman,
)


def test_label_auc_binary_qrels_pay_for_their_ties():
    """Useful: docs 0, 1. Gains .9 .6 | .5 .1 separate perfectly (1.0); qrels
    1 0 | 0 0 -> (1 + 1 + 1/2 + 1/2) / 4 = 0.75, the cost of tied labels."""
    useful = [True, True, False, False]
    assert label_auc([0.9, 0.6, 0.5, 0.1], useful) == 1.0
    assert label_auc([1, 0, 0, 0], useful) == 0.75


def test_label_auc_matches_sklearn():
    """Random gains and 0/1/2 qrels against sklearn roc_auc_score (ties averaged)."""
    rng = np.random.default_rng(5)
    truth = rng.normal(size=400)
    useful = truth + rng.normal(0, 0.5, 400) > 0.3
    gains = 1 / (1 + np.exp(-truth))
    qrels = np.where(rng.random(400) < 0.3, np.clip(np.round(truth + 1), 0, 2), 0)
    for labels in (gains, qrels):
        assert label_auc(labels, useful) == pytest.approx(
            roc_auc_score(useful, labels), abs=1e-12
        )


def test_matched_flag_recall_hand_computed():
    """qrels flag m = 2 of 6 documents (0 and 3). RCP flags the 2 highest gains: .9
    fully, then the two .8 share one place (1/2 each). Useful: 0, 1, 3.
    RCP recall (1 + 1/2) / 3 = 0.5, precision 1.5 / 2; qrel recall 2/3, precision 1.
    Useful among qrel-negatives: doc 1 of {1,2,4,5} = 1/4; useless positives 0/2."""
    out = matched_flag_recall(
        [0.9, 0.8, 0.8, 0.3, 0.1, 0.0],
        [1, 0, 0, 1, 0, 0],
        [True, True, False, True, False, False],
    )
    assert out["flagged"] == 2
    assert out["flag_rate"] == pytest.approx(1 / 3)
    assert out["recall"] == pytest.approx({"rcp": 0.5, "qrel": 2 / 3})
    assert out["precision"] == pytest.approx({"rcp": 0.75, "qrel": 1.0})
    assert out["useful_without_positive_qrel"] == 0.25
    assert out["useless_with_positive_qrel"] == 0.0


def test_matched_flag_recall_without_positive_qrels_flags_nothing():
    """m = 0: nobody is flagged, both recalls 0, precision undefined."""
    out = matched_flag_recall([0.5, 0.2], [0, 0], [True, False])
    assert out["recall"] == {"rcp": 0.0, "qrel": 0.0}
    assert out["precision"] == {"rcp": None, "qrel": None}


def test_ece_hand_computed():
    """p .05 | .15 .15 | .95 .95 1.0 (1.0 joins the last bin), y 0 | 0 1 | 1 1 0.
    Sum over bins of |observed - predicted| counts: |0 - .05| + |1 - .3| + |2 - 2.9|
    = 1.65; / 6 = 0.275."""
    cal = ece([0.05, 0.15, 0.15, 0.95, 0.95, 1.0], [0, 0, 1, 1, 1, 0])
    assert cal.ece == pytest.approx(0.275)
    assert cal.n == 6
    assert [b["count"] for b in cal.bins] == [1, 1 + 1, 0, 0, 0, 0, 0, 0, 0, 3]
    assert cal.bins[1]["observed"] == 0.5
    assert cal.bins[2]["predicted"] is None


def test_ece_bins_are_left_closed():
    """p = 0.2 falls in [0.2, 0.3) (bin 2), as in rcp.diagnostics."""
    cal = ece([0.2], [1])
    assert cal.bins[2]["count"] == 1
    assert cal.ece == pytest.approx(0.8)


def test_ece_matches_sklearn_calibration_curve_off_the_edges():
    """Away from bin edges our bins equal sklearn's; counts by its searchsorted."""
    rng = np.random.default_rng(11)
    p = rng.random(2000)
    y = rng.random(2000) < p**1.5
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    ids = np.searchsorted(np.linspace(0, 1, 11)[1:-1], p)
    cnt = np.bincount(ids, minlength=10)
    oracle = (cnt[cnt > 0] / len(p) * np.abs(prob_true - prob_pred)).sum()
    assert ece(p, y).ece == pytest.approx(oracle, abs=1e-12)


def test_ece_rejects_predictions_outside_unit_interval_and_handles_empty():
    """Gains are probabilities; an empty input has no ECE."""
    with pytest.raises(ValueError):
        ece([1.2], [1])
    assert ece([], []).ece is None


def test_query_spearman_hand_computed():
    """Per-query means (score, grade): q1 (.3, 2), q2 (.9, 4), q3 (.6, .5),
    q4 (.1, 0). Ranks score 2 4 3 1, grade 3 4 2 1: d^2 = 1 + 0 + 1 + 0 = 2,
    rho = 1 - 6*2 / (4*15) = 0.8."""
    rho = query_spearman(
        ["q1", "q1", "q2", "q3", "q3", "q4"],
        [0.2, 0.4, 0.9, 0.5, 0.7, 0.1],
        [1, 3, 4, 0, 1, 0],
    )
    assert rho == pytest.approx(0.8)


def test_query_spearman_matches_scipy_on_per_query_means():
    """Random data: equal to scipy spearmanr of the per-query means."""
    rng = np.random.default_rng(2)
    q = rng.integers(0, 30, 300).astype(str)
    s = rng.normal(size=300)
    g = np.round(s + rng.normal(0, 1, 300))
    keys = sorted(set(q))
    ms = [s[q == k].mean() for k in keys]
    mg = [g[q == k].mean() for k in keys]
    assert query_spearman(q, s, g) == pytest.approx(spearmanr(ms, mg).statistic)


def test_query_spearman_undefined_cases():
    """Fewer than three queries, or a constant side, give None."""
    assert query_spearman(["a", "b"], [1, 2], [1, 2]) is None
    assert query_spearman(["a", "b", "c"], [1, 1, 1], [1, 2, 3]) is None


def test_query_spearman_ranks_exactly_equal_mean_grades_as_ties():
    """Issue 9 item 8. Queries a and b both have mean grade 5/6 exactly: a's documents
    are graded (0,0,0) and (0,2,3) (means 0 and 5/3), b's (0,0,1) and (0,1,3) (means
    1/3 and 4/3). Averaging the rounded float means gives 0.8333333333333334 and
    0.8333333333333333, a spurious order. Exact means tie, so the result equals scipy
    on the exact per-query means [5/6, 5/6, 2, 0] (ties averaged)."""
    from fractions import Fraction

    q = ["a", "a", "b", "b", "c", "d"]
    doc_grades = [(0, 0, 0), (0, 2, 3), (0, 0, 1), (0, 1, 3), (2, 2, 2), (0, 0, 0)]
    floats = [np.mean(g) for g in doc_grades]
    assert (floats[0] + floats[1]) / 2 != (floats[2] + floats[3]) / 2  # the trap
    exact = [Fraction(sum(g), len(g)) for g in doc_grades]
    scores = [0.2, 0.4, 0.9, 0.1, 0.95, 0.05]
    expected = spearmanr([0.3, 0.5, 0.95, 0.05], [5 / 6, 5 / 6, 2, 0]).statistic
    assert query_spearman(q, scores, exact) == pytest.approx(expected)
    # Averaging the float means (the old path) splits the tie and changes rho.
    naive = [(floats[0] + floats[1]) / 2, (floats[2] + floats[3]) / 2, 2.0, 0.0]
    assert spearmanr([0.3, 0.5, 0.95, 0.05], naive).statistic != pytest.approx(expected)
