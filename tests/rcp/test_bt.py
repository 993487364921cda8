"""Stage A Bradley-Terry: window pairs, soft-label fit, aggregation, SE, oracles."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize
from scipy.special import expit, log_expit
from sklearn.linear_model import LogisticRegression

from rcp import bt
from rcp.bt import (
    aggregate_pairs,
    fit_bt,
    ragged_window_pairs,
    window_pairs,
    window_pairs_batch,
)


def _simulate_windows(seed: int, n_docs: int, n_windows: int, w: int = 10):
    rng = np.random.default_rng(seed)
    truth = rng.normal(0.0, 1.5, n_docs)
    rows = []
    for _ in range(n_windows):
        idx = rng.choice(n_docs, size=w, replace=False)
        scores = truth[idx] + rng.normal(0.0, 0.5, w)
        rows.append(window_pairs(idx, scores))
        # Mirrored copy, as the schedule asks: same documents, reversed order.
        rows.append(window_pairs(idx[::-1], scores[::-1] + rng.normal(0.0, 0.2, w)))
    return truth, tuple(np.concatenate(parts) for parts in zip(*rows, strict=True))


def _brute_force_bt(winners, losers, labels, weights, n_docs, l2):
    """Unaggregated objective written from rcp_facts 1.2, minimised independently."""

    def f(raw):
        d = raw[winners] - raw[losers]
        bce = -(labels * log_expit(d) + (1 - labels) * log_expit(-d))
        return weights @ bce / weights.sum() + 0.5 * l2 * raw @ raw

    res = minimize(f, np.zeros(n_docs), method="BFGS", options={"gtol": 1e-12})
    return res.x


def test_window_pairs_labels_weights_and_ties():
    """Every unordered pair once; higher score wins; label sigmoid(|ds|) clipped to
    [0.01, 0.99]; weight 2/w; exact tie -> earlier-listed doc wins with 0.5."""
    doc = np.array([7, 3, 5, 9])
    scores = np.array([1.0, 2.5, 1.0, -4.0])
    winners, losers, labels, weights = window_pairs(doc, scores)
    pairs = {
        (int(a), int(b)): float(y)
        for a, b, y in zip(winners, losers, labels, strict=True)
    }
    assert pairs == pytest.approx(
        {
            (3, 7): expit(1.5),
            (7, 5): 0.5,  # tie: 7 is listed before 5
            (7, 9): 0.99,  # sigmoid(5) = 0.9933 is clipped
            (3, 5): expit(1.5),
            (3, 9): 0.99,
            (5, 9): 0.99,
        }
    )
    assert_allclose(weights, np.full(6, 0.5))
    assert weights.sum() == pytest.approx(3.0)  # w - 1


def test_window_pairs_small_window_weight_and_low_clip():
    """A 2-document window has pair weight 2/max(2, 2) = 1; a near tie gives the
    higher-scored document the label sigmoid(0.001)."""
    w, _l, y, wt = window_pairs(np.array([0, 1]), np.array([0.0, 0.001]))
    assert_array_equal(w, [1])
    assert y[0] == pytest.approx(expit(0.001))
    assert_allclose(wt, [1.0])


def test_aggregation_preserves_weights_and_mean_labels():
    """Aggregated rows carry summed weight and the weighted mean label per pair."""
    winners = np.array([0, 1, 0, 2])
    losers = np.array([1, 0, 1, 0])
    labels = np.array([0.8, 0.6, 0.7, 0.9])
    weights = np.array([1.0, 0.5, 0.25, 2.0])
    w, lo, y, wt = aggregate_pairs(winners, losers, labels, weights)
    # Pair {0,1}: P(0 beats 1) = (0.8*1 + 0.4*0.5 + 0.7*0.25) / 1.75.
    assert_array_equal(w, [0, 2])
    assert_array_equal(lo, [1, 0])
    assert_allclose(y, [(0.8 + 0.2 + 0.175) / 1.75, 0.9])
    assert_allclose(wt, [1.75, 2.0])


def test_fit_aggregated_equals_unaggregated_and_brute_force():
    """Fitting pre-aggregated pairs gives the optimum of the unaggregated objective,
    checked against an independent BFGS minimisation of that objective."""
    _, (w, lo, y, wt) = _simulate_windows(seed=1, n_docs=25, n_windows=12)
    full = fit_bt(w, lo, y, wt, 25)
    agg = fit_bt(*aggregate_pairs(w, lo, y, wt), 25)
    brute = _brute_force_bt(w, lo, y, wt, 25, 1e-4)
    assert len(aggregate_pairs(w, lo, y, wt)[0]) < len(w)
    assert_allclose(agg.theta, full.theta, atol=1e-9)
    assert_allclose(agg.se, full.se, atol=1e-12)
    assert_allclose(full.raw, brute, atol=2e-5)
    assert_allclose(full.theta, brute - brute.mean(), atol=2e-5)


def test_fit_matches_sklearn_map_oracle():
    """The ridge fit equals sklearn's MAP logistic regression on duplicated rows
    (y=1 weight p, y=0 weight 1-p) with C = 1 / (l2 * total weight)."""
    _, (w, lo, y, wt) = _simulate_windows(seed=2, n_docs=15, n_windows=6)
    l2 = 0.05
    x = np.zeros((w.size, 15))
    x[np.arange(w.size), w] = 1.0
    x[np.arange(w.size), lo] = -1.0
    model = LogisticRegression(C=1.0 / (l2 * wt.sum()), fit_intercept=False, tol=1e-12)
    model.fit(
        np.vstack([x, x]),
        np.r_[np.ones(w.size), np.zeros(w.size)],
        sample_weight=np.r_[wt * y, wt * (1 - y)],
    )
    res = fit_bt(w, lo, y, wt, 15, l2=l2)
    assert_allclose(res.raw, model.coef_[0], atol=1e-6)


def test_hard_comparisons_golden_mle():
    """16 hard comparisons on 4 items (oracles.md 5) give the centred MLE."""
    data = [(0, 1), (0, 1), (1, 0), (0, 2), (2, 0), (0, 2), (1, 2), (1, 2), (2, 1)]
    data += [(2, 3), (3, 2), (2, 3), (1, 3), (3, 0), (0, 3), (3, 1)]
    w, lo = np.array(data).T
    res = fit_bt(w, lo, np.ones(16), np.ones(16), 4, l2=0.0)
    assert_allclose(res.theta, [0.395005, 0.021667, -0.170455, -0.246217], atol=2e-6)


def test_se_formula():
    """SE_i = 1/sqrt(sum over i's comparisons of weight*p*(1-p) + l2), raw weights."""
    _, (w, lo, y, wt) = _simulate_windows(seed=3, n_docs=12, n_windows=5)
    res = fit_bt(w, lo, y, wt, 12)
    p = expit(res.theta[w] - res.theta[lo])
    info = np.zeros(12)
    for a, b, pk, wk in zip(w, lo, p, wt, strict=True):
        info[a] += wk * pk * (1 - pk)
        info[b] += wk * pk * (1 - pk)
    assert_allclose(res.se, 1.0 / np.sqrt(info + 1e-4), rtol=1e-10)
    assert np.all(res.se < 5.0)  # every doc is compared, far below the prior-only 100


def test_recovers_known_abilities_and_identification():
    """Simulated judge: abilities recovered (corr > 0.98), mean-zero; a document never
    compared sits at 0 with the prior-only SE; warm start reaches the same optimum."""
    truth, (w, lo, y, wt) = _simulate_windows(seed=4, n_docs=40, n_windows=40)
    res = fit_bt(w, lo, y, wt, 41)  # doc 40 never appears
    assert np.corrcoef(res.theta[:40], truth)[0, 1] > 0.98
    assert res.theta[:40].mean() == pytest.approx(0.0, abs=1e-12)
    assert res.theta[40] == 0.0
    assert res.se[40] == pytest.approx(1.0 / np.sqrt(1e-4))
    warm = fit_bt(w, lo, y, wt, 41, init=res.raw + 0.3)
    assert_allclose(warm.theta, res.theta, atol=1e-6)


def test_choix_oracle_if_installed():
    """Soft labels k/m replicated m times as hard pairs: choix's ML equals ours."""
    import choix

    rng = np.random.default_rng(0)
    n, m = 12, 4
    s_true = rng.normal(0, 1, n)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, min(i + 5, n))]
    i, j = np.array(pairs).T
    p = np.round(expit(s_true[i] - s_true[j]) * m) / m
    rep = []
    for a, b, pk in zip(i, j, p, strict=True):
        k = int(round(pk * m))
        rep += [(int(a), int(b))] * k + [(int(b), int(a))] * (m - k)
    ref = choix.ilsr_pairwise(n, rep, alpha=0.0, tol=1e-12, max_iter=1000)
    res = fit_bt(i, j, p, np.ones(len(i)), n, l2=0.0)
    assert_allclose(res.theta, ref - ref.mean(), atol=1e-5)


def test_rejects_bad_input():
    """Out-of-range documents and labels outside [0, 1] are refused."""
    with pytest.raises(ValueError):
        fit_bt([0], [5], [0.7], [1.0], 3)
    with pytest.raises(ValueError):
        fit_bt([0], [1], [1.2], [1.0], 3)


def test_vectorised_pairs_equal_the_per_window_path_exactly():
    """window_pairs_batch (equal sizes) and ragged_window_pairs (any sizes, 0 to 10,
    tied scores) give exactly the concatenated per-window window_pairs rows."""
    rng = np.random.default_rng(8)
    sizes = rng.integers(0, 11, 60)
    docs = [rng.choice(40, w, replace=False) for w in sizes]
    scores = [np.round(rng.normal(0, 2, w), 0) for w in sizes]  # many exact ties
    per_window = [window_pairs(d, s) for d, s in zip(docs, scores, strict=True)]
    expected = [np.concatenate(parts) for parts in zip(*per_window, strict=True)]
    got = ragged_window_pairs(sizes, np.concatenate(docs), np.concatenate(scores))
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype
        assert_array_equal(a, b)
    ten = np.flatnonzero(sizes == 10)
    batch = window_pairs_batch(
        np.stack([docs[i] for i in ten]), np.stack([scores[i] for i in ten])
    )
    for a, b in zip(
        batch, zip(*[per_window[i] for i in ten], strict=True), strict=True
    ):
        assert_array_equal(a, np.concatenate(b))
    with pytest.raises(ValueError):
        ragged_window_pairs([3], [0, 1], [0.0, 1.0])


def test_aggregation_key_paths_agree_exactly(monkeypatch):
    """The dense-key and sorted-key aggregation paths return identical arrays."""
    _, (w, lo, y, wt) = _simulate_windows(seed=6, n_docs=30, n_windows=15)
    dense = aggregate_pairs(w, lo, y, wt)
    monkeypatch.setattr(bt, "_DENSE_KEYS", 0)
    sparse = aggregate_pairs(w, lo, y, wt)
    for a, b in zip(dense, sparse, strict=True):
        assert_array_equal(a, b)
