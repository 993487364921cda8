"""2PL calibration: rubric-only anchor (10.3), tournament recovery (10.5), oracles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import spearmanr

from rcp import irt
from rcp.bt import fit_bt, window_pairs
from rcp.irt import (
    aggregate_rubric,
    fit_calibration,
    fit_rubric_only,
    fit_tournament,
)
from rcp.tournament import TournamentProblem

ANCHOR = (
    Path(__file__).resolve().parents[1] / "data/reference/nanobeir_rubric_anchor.json"
)


@pytest.fixture(scope="module")
def anchor():
    queries = json.loads(ANCHOR.read_text())["queries"]
    keys: dict[tuple[str, str], int] = {}
    unit, answers = [], []
    for q, body in queries.items():
        for window in body["windows"]:
            for doc, *verdicts in window:
                unit.append(keys.setdefault((q, doc), len(keys)))
                answers.append(verdicts)
    qids = list(queries)
    units, n, passes = aggregate_rubric(np.array(unit), np.array(answers))
    query = np.array([qids.index(q) for q, _ in keys])[units]
    return query, n, passes


def test_rubric_only_anchor_reproduces_reference_items(anchor):
    """rcp_facts 10.3: auto mode picks rubric_only on 747 documents / 1,200
    placements and reproduces gamma and beta within 1e-3."""
    query, n, passes = anchor
    assert (len(n), n.sum()) == (747, 1200)
    fit = fit_calibration(query, n, passes)
    assert fit.mode == "rubric_only"
    gamma = [
        1.6495678696710352,
        1.289852639837022,
        0.723537070788223,
        0.9731263134922336,
        0.3639161062114862,
    ]
    beta = [
        -4.7186716111726446,
        -4.504898381938539,
        -0.6181378437315566,
        1.9196043739084772,
        7.922103462934263,
    ]
    assert_allclose(fit.gamma, gamma, atol=1e-3)
    assert_allclose(fit.beta, beta, atol=1e-3)
    assert fit.gamma.sum() == pytest.approx(5.0)
    assert fit.beta.mean() == pytest.approx(0.0, abs=1e-12)
    assert_allclose(fit.raw_gamma, [9.781, 7.648, 4.290, 5.770, 2.158], atol=5e-3)
    assert_allclose(fit.raw_beta, [0.704, 0.741, 1.396, 1.824, 2.836], atol=5e-3)
    assert (fit.prior_mean, fit.prior_sd) == pytest.approx((-8.896, 5.930), abs=1e-3)
    assert not fit.ordinal_only


def test_rubric_only_abilities_are_rescaled_eap(anchor):
    """Abilities are ordered by pass pattern strength and live on the reported scale:
    documents failing everything share one EAP below every one passing C1..C4."""
    query, n, passes = anchor
    fit = fit_rubric_only(n, passes)
    zero = (passes.sum(axis=1) == 0) & (n == 1)
    strong = (passes[:, :4] == n[:, None]).all(axis=1)
    assert np.ptp(fit.theta[zero]) == 0.0
    assert fit.theta[zero].max() < fit.theta[strong].min()
    assert np.all(fit.theta_se > 0)
    # A document failing everything once sits near C1's difficulty or below.
    assert fit.theta[zero][0] < fit.beta[0]


def _simulate_tournament(seed: int):
    """rcp_facts 10.5 design: 6 queries x 40 docs x 12 placements."""
    rng = np.random.default_rng(seed)
    gamma = np.array([1.3, 1.1, 0.8, 1.0, 0.8])
    beta = np.array([-2.5, -1.5, 0.0, 1.2, 2.8])
    tau = np.array([0.6, 0.9, 1.2, 1.5, 2.0, 1.0])
    alpha = np.array([-1.0, 0.5, -0.3, 1.0, 0.0, -2.0])
    query = np.repeat(np.arange(6), 40)
    theta_bt = rng.normal(0.0, 1.2, query.size)
    prob = expit(gamma * ((tau[query] * theta_bt + alpha[query])[:, None] - beta))
    passes = rng.binomial(12, prob)
    return (query, theta_bt, np.full(query.size, 12), passes), (gamma, beta, tau, alpha)


def test_tournament_recovers_synthetic_parameters():
    """10.5: gamma/beta within 0.15, tau/alpha within 0.2, theta = tau*theta_BT + alpha
    to 1e-9, identification sum(gamma) = C and mean(beta) = 0."""
    (query, theta_bt, n, passes), (gamma, beta, tau, alpha) = _simulate_tournament(7)
    fit = fit_calibration(
        query, n, passes, theta_bt=theta_bt, theta_bt_se=np.full(240, 0.3)
    )
    assert fit.mode == "tournament" and fit.converged
    assert_allclose(fit.gamma, gamma, atol=0.15)
    assert_allclose(fit.beta, beta, atol=0.15)
    assert_allclose(fit.tau, tau, atol=0.2)
    assert_allclose(fit.alpha, alpha, atol=0.2)
    assert_allclose(fit.theta, fit.tau[query] * theta_bt + fit.alpha[query], atol=1e-9)
    assert_allclose(fit.theta_se, 0.3 * fit.tau[query])
    assert fit.gamma.sum() == pytest.approx(5.0, abs=1e-12)
    assert fit.beta.mean() == pytest.approx(0.0, abs=1e-12)


def _reference_objective(x, query, theta_bt, n, passes, n_q):
    """rcp_facts 4.2 written out plainly (loops, no shared code with the module)."""
    c = passes.shape[1]
    u, v, t, a = x[:c], x[c : 2 * c], x[2 * c : 2 * c + n_q], x[2 * c + n_q :]
    gamma = c * np.exp(u) / np.exp(u).sum()
    beta = v - v.mean()
    tau = np.log1p(np.exp(t))
    total = n.sum() * c
    nll = 0.0
    for i in range(len(n)):
        for k in range(c):
            z = gamma[k] * (tau[query[i]] * theta_bt[i] + a[query[i]] - beta[k])
            p = expit(z)
            nll -= passes[i, k] * np.log(p) + (n[i] - passes[i, k]) * np.log(1 - p)
    prior = ((tau - 1) ** 2 / 2).sum() + (a**2 / 8).sum()
    return nll / total + prior / total + 0.5e-4 * (u @ u + v @ v)


def test_tournament_fit_is_the_map_of_the_reference_objective():
    """On a small problem the fit matches an independent finite-difference BFGS
    minimisation of the reference objective (parameters within 1e-4)."""
    rng = np.random.default_rng(5)
    query = np.repeat(np.arange(2), 12)
    theta_bt = rng.normal(0, 1, 24)
    n = rng.integers(1, 4, 24)
    passes = rng.binomial(
        n[:, None], expit(1.2 * (theta_bt[:, None] - np.array([-1, 0, 1])))
    )
    fit = fit_tournament(query, theta_bt, n, passes)
    x0 = np.r_[np.zeros(6), np.full(2, np.log(np.e - 1)), np.zeros(2)]
    ref = minimize(
        _reference_objective,
        x0,
        args=(query, theta_bt, n, passes, 2),
        method="BFGS",
        options={"gtol": 1e-10},
    ).x
    u, v = ref[:3], ref[3:6]
    assert_allclose(fit.gamma, 3 * np.exp(u) / np.exp(u).sum(), atol=1e-4)
    assert_allclose(fit.beta, v - v.mean(), atol=1e-4)
    assert_allclose(fit.tau, np.log1p(np.exp(ref[6:8])), atol=1e-4)
    assert_allclose(fit.alpha, ref[8:], atol=1e-4)


def test_tournament_is_row_order_invariant_and_reports_gaps():
    """Shuffled rows give the same fit; a row without BT ability is skipped and
    reported; a query without rubric rows stays at its prior (tau 1, alpha 0)."""
    (query, theta_bt, n, passes), _ = _simulate_tournament(3)
    theta_bt = theta_bt.copy()
    theta_bt[0] = np.nan
    extra_q, extra_th = np.r_[query, 6, 6], np.r_[theta_bt, 0.5, -0.5]
    extra_n, extra_s = np.r_[n, 0, 0], np.vstack([passes, np.zeros((2, 5), int)])
    fit = fit_tournament(extra_q, extra_th, extra_n, extra_s)
    perm = np.random.default_rng(0).permutation(extra_q.size)
    shuffled = fit_tournament(
        extra_q[perm], extra_th[perm], extra_n[perm], extra_s[perm]
    )
    assert_allclose(shuffled.gamma, fit.gamma, atol=1e-12)
    assert_allclose(shuffled.theta, fit.theta[perm], atol=1e-12)
    assert fit.n_skipped == 1 and np.isnan(fit.theta[0])
    assert fit.query_has_rubric.tolist() == [True] * 6 + [False]
    assert (fit.tau[6], fit.alpha[6]) == pytest.approx((1.0, 0.0), abs=1e-6)
    assert fit.theta[-2:] == pytest.approx([0.5, -0.5], abs=1e-6)


def test_auto_mode_refuses_mixed_coverage():
    """auto: a suite where only some queries have tournament abilities is refused."""
    theta_bt = np.array([0.1, -0.1, np.nan, np.nan])
    with pytest.raises(ValueError, match="mixed coverage"):
        fit_calibration(
            np.array([0, 0, 1, 1]), np.ones(4), np.zeros((4, 5)), theta_bt=theta_bt
        )


def test_rubric_only_flags_ordinal_when_almost_nothing_passes():
    """< 2% of documents passing any criterion sets ordinal_only."""
    n = np.full(200, 3)
    passes = np.zeros((200, 3), dtype=int)
    passes[0] = [3, 2, 1]
    passes[1] = [2, 1, 1]
    fit = fit_rubric_only(n, passes)
    assert fit.ordinal_only


def test_aggregate_rubric_counts():
    """Placements collapse to per-unit placements and per-criterion pass counts."""
    units, n, passes = aggregate_rubric(
        np.array([5, 2, 5, 5]), np.array([[1, 0], [0, 0], [1, 1], [0, 1]])
    )
    assert units.tolist() == [2, 5]
    assert n.tolist() == [1, 3]
    assert passes.tolist() == [[0, 0], [2, 2]]


def test_calibration_ranks_across_queries_better_than_raw_bt():
    """Simulated suite, judge decisiveness differing 3x across queries and query
    quality offsets: calibrated abilities rank the pooled top-10 of every query by
    truth far better (Spearman) than mean-zero, query-scaled raw BT abilities."""
    rng = np.random.default_rng(2024)
    gamma = np.array([1.4, 1.2, 0.9, 0.8, 0.7])
    beta = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
    offset = np.array([-1.5, -0.5, 0.0, 0.5, 1.0, 2.0])
    decisiveness = np.array([0.7, 2.1, 1.0, 1.6, 0.8, 1.2])
    n_q, n_d = 6, 30
    truth = offset[:, None] + rng.normal(0.0, 1.0, (n_q, n_d))
    theta_bt = np.zeros((n_q, n_d))
    for j in range(n_q):
        rows = []
        for _ in range(12):
            idx = rng.choice(n_d, 10, replace=False)
            scores = decisiveness[j] * truth[j, idx] + rng.normal(0.0, 0.3, 10)
            rows.append(window_pairs(idx, scores))
        parts = [np.concatenate(p) for p in zip(*rows, strict=True)]
        theta_bt[j] = fit_bt(*parts, n_d).theta
    passes = rng.binomial(4, expit(gamma * (truth.reshape(-1, 1) - beta)))
    query = np.repeat(np.arange(n_q), n_d)
    fit = fit_tournament(query, theta_bt.ravel(), np.full(n_q * n_d, 4), passes)
    top = np.argsort(-truth, axis=1)[:, :10]

    def pooled(m: np.ndarray) -> np.ndarray:
        return np.take_along_axis(m, top, axis=1).ravel()

    calibrated = spearmanr(pooled(fit.theta.reshape(n_q, n_d)), pooled(truth)).statistic
    raw = spearmanr(pooled(theta_bt), pooled(truth)).statistic
    assert calibrated > 0.9
    assert calibrated - raw > 0.4


def _problem(seed: int, n_q: int = 5, rows: int = 80) -> tuple:
    rng = np.random.default_rng(seed)
    query = np.sort(rng.integers(0, n_q - 1, rows))  # the last query has no rows
    theta = rng.normal(0.0, 1.0, rows)
    n = rng.integers(1, 5, rows).astype(float)
    passes = rng.binomial(n[:, None].astype(int), 0.4, (rows, 5)).astype(float)
    total = n.sum() * 5
    problem = TournamentProblem(
        query,
        theta,
        n,
        passes,
        n_q=n_q,
        total=total,
        k_tau=1 / total,
        k_alpha=1 / (4 * total),
        l2_gamma=1e-4,
        l2_beta=1e-4,
    )
    return problem, rng


def _dense(h, n_crit: int, n_q: int) -> np.ndarray:
    size = 2 * n_crit + 2 * n_q
    out = np.zeros((size, size))
    out[: 2 * n_crit, : 2 * n_crit] = h.ii
    for j in range(n_q):
        t, a = 2 * n_crit + j, 2 * n_crit + n_q + j
        out[: 2 * n_crit, t] = out[t, : 2 * n_crit] = h.iq[j, :, 0]
        out[: 2 * n_crit, a] = out[a, : 2 * n_crit] = h.iq[j, :, 1]
        out[t, t], out[a, a] = h.tt[j], h.aa[j]
        out[t, a] = out[a, t] = h.ta[j]
    return out


def test_tournament_derivatives_match_finite_differences():
    """The Newton solver's gradient and exact Hessian (arrow blocks assembled) equal
    central differences, with one softmax logit past its cap; the Gauss-Newton
    Hessian is positive definite; the Schur-complement step solves H step = grad."""
    problem, rng = _problem(1)
    x = rng.normal(0.0, 0.5, 2 * 5 + 2 * 5)
    x[0] = 10.5
    _f, grad, exact, gauss = problem.derivatives(x)
    eps = 1e-6
    num_g, num_h = np.zeros(x.size), np.zeros((x.size, x.size))
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        num_g[i] = (problem.value(x + e) - problem.value(x - e)) / (2 * eps)
        num_h[:, i] = (
            problem.derivatives(x + e)[1] - problem.derivatives(x - e)[1]
        ) / (2 * eps)
    h = _dense(exact, 5, 5)
    assert_allclose(grad, num_g, atol=1e-8)
    assert_allclose(h, num_h, atol=1e-8)
    assert np.linalg.eigvalsh(_dense(gauss, 5, 5)).min() > 0
    for blocks in (exact, gauss):
        step = problem.newton_step(grad, blocks)
        assert_allclose(step, np.linalg.solve(_dense(blocks, 5, 5), grad), atol=1e-10)


def test_tournament_newton_reaches_the_lbfgs_optimum():
    """Newton stops at the optimum a long L-BFGS-B run on the same objective
    approaches (parameters within 1e-6), at a loss no higher, in a few iterations."""
    (query, theta_bt, n, passes), _ = _simulate_tournament(11)
    fit = fit_tournament(query, theta_bt, n, passes)
    q_order = np.lexsort((*passes.T[::-1], n, theta_bt, query))
    total = n.sum() * 5
    problem = TournamentProblem(
        query[q_order],
        theta_bt[q_order],
        n[q_order].astype(float),
        passes[q_order].astype(float),
        n_q=6,
        total=total,
        k_tau=1 / total,
        k_alpha=1 / (4 * total),
        l2_gamma=1e-4,
        l2_beta=1e-4,
    )
    x0 = np.r_[np.zeros(10), np.full(6, np.log(np.e - 1)), np.zeros(6)]
    ref = minimize(
        lambda x: problem.derivatives(x)[:2],
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 20000, "maxcor": 100, "ftol": 0.0, "gtol": 1e-14},
    )
    assert fit.converged and fit.n_iter < 20
    assert fit.loss <= ref.fun + 1e-15
    tau = np.logaddexp(0.0, ref.x[10:16])
    assert_allclose(fit.tau, tau, atol=1e-6)
    assert_allclose(fit.alpha, ref.x[16:], atol=1e-6)
    assert_allclose(fit.beta, ref.x[5:10] - ref.x[5:10].mean(), atol=1e-6)


def test_rubric_only_blocks_and_pattern_keys_change_nothing(anchor, monkeypatch):
    """Pattern keys give np.unique(axis=0)'s patterns, inverse and counts (and fall
    back for non-integer counts); posterior blocks of 7 patterns give the same fit as
    one block, to rounding."""
    query, n, passes = anchor
    rows = np.column_stack([n, passes])
    want = np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    for got, ref in zip(irt._unique_patterns(n, passes), want, strict=True):
        assert_array_equal(got, np.asarray(ref).reshape(got.shape))
    half = passes / 2.0
    want = np.unique(np.column_stack([n, half]), axis=0, return_counts=True)[1]
    assert_array_equal(irt._unique_patterns(n, half)[2], want)
    whole = fit_rubric_only(n, passes)
    monkeypatch.setattr(irt, "_PATTERN_BLOCK", 7)
    blocked = fit_rubric_only(n, passes)
    assert_allclose(blocked.gamma, whole.gamma, atol=1e-9)
    assert_allclose(blocked.theta, whole.theta, atol=1e-9)


def test_aggregate_rubric_dense_and_sorted_paths_agree():
    """Sparse unit ids (sorted path) and dense ones (bincount path) give the same
    counts for the same placements."""
    rng = np.random.default_rng(3)
    unit = rng.integers(0, 50, 400)
    answers = rng.integers(0, 2, (400, 5))
    dense = aggregate_rubric(unit, answers)
    sparse = aggregate_rubric(unit * 10**9, answers)
    assert_array_equal(sparse[0], dense[0] * 10**9)
    assert_array_equal(sparse[1], dense[1])
    assert_array_equal(sparse[2], dense[2])
    with pytest.raises(ValueError, match="0 or 1"):
        aggregate_rubric(unit, answers * 2)
