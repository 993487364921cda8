"""The calibration entry point on simulated suites with known truth: convergence
on every stress case, parity with a generic optimiser, honest flags and recovery."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import minimize

from rcp.fit import Judgments, calibrate
from rcp.irt import aggregate_rubric
from rcp.simulate import (
    KINDS,
    NANOBEIR,
    STRESS,
    recovery,
    simulate_suite,
    spec_with,
)
from rcp.tournament import TournamentProblem


def _judgments(suite) -> Judgments:
    t_size, t_doc, t_score = suite.valid_tournament()
    r_doc, r_answers = suite.valid_rubric()
    return Judgments(
        n_queries=suite.n_queries,
        doc_query=suite.doc_query,
        t_size=t_size,
        t_doc=t_doc,
        t_score=t_score,
        r_doc=r_doc,
        r_answers=r_answers,
    )


@pytest.fixture(scope="module")
def stress():
    suite = simulate_suite(STRESS)
    return suite, calibrate(_judgments(suite))


def test_stress_suite_has_every_case(stress):
    """The stress generator draws every case it promises: near-random judges,
    all-pass and all-fail queries, one relevant document, pools of 10 and of 150,
    invalid windows."""
    suite, _fit = stress
    assert set(np.unique(suite.kind)) == set(range(len(KINDS)))
    pools = np.bincount(suite.doc_query)
    assert set(np.unique(pools)) == {10, 150}
    assert 0 < (~suite.t_valid).mean() < 0.1 and 0 < (~suite.r_valid).mean() < 0.1


def test_stress_suite_converges_and_recovers_normal_queries(stress):
    """Every optimiser converges on the stress suite (2PL and every per-query BT
    fit); normal queries are recovered well despite the degenerate ones."""
    suite, fit = stress
    assert fit.converged, fit.optimizer
    assert fit.optimizer["bt"]["converged"] == fit.optimizer["bt"]["fits"]
    assert fit.optimizer["max_grad"] < 1e-12
    rec = recovery(suite, fit.theta, fit.gamma, fit.beta)
    assert rec.pooled > 0.97 and rec.top10 > 0.93 and rec.gain_mae < 0.04


def test_degenerate_queries_are_flagged_and_normal_ones_are_not(stress):
    """All-pass / all-fail queries are flagged (alpha pinned by the prior, far out);
    near-random judges mostly so; normal queries never."""
    suite, fit = stress
    kind = np.array([KINDS[k] for k in suite.kind])
    flagged = np.array([bool(f) for f in fit.query_flags])
    assert flagged[np.isin(kind, ["all_pass", "all_fail"])].all()
    for j in np.flatnonzero(np.isin(kind, ["all_pass", "all_fail"])):
        assert "alpha_extreme" in fit.query_flags[j]
    assert flagged[kind == "near_random"].mean() >= 0.4
    assert not flagged[kind == "normal"].any()


def _reference_problem(suite, fit) -> TournamentProblem:
    """The same objective built independently of the entry point's plumbing."""
    r_doc, r_answers = suite.valid_rubric()
    units, n_u, passes_u = aggregate_rubric(r_doc, r_answers)
    keep = ~np.isnan(fit.theta_bt[units])
    units, n_u, passes_u = units[keep], n_u[keep], passes_u[keep]
    q, th = suite.doc_query[units], fit.theta_bt[units]
    order = np.lexsort((*passes_u.T[::-1], n_u, th, q))
    total = n_u.sum() * 5
    return TournamentProblem(
        q[order],
        th[order],
        n_u[order].astype(float),
        passes_u[order].astype(float),
        n_q=suite.n_queries,
        total=total,
        k_tau=1 / total,
        k_alpha=1 / (4 * total),
        l2_gamma=1e-4,
        l2_beta=1e-4,
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_matches_lbfgsb_on_the_same_objective(seed):
    """On small stress suites (degenerate queries included) the fit's loss equals a
    tight L-BFGS-B run on the reference parameterisation from the same start to
    1e-9 relative (ours is never worse), and every parameter agrees to 1e-5."""
    suite = simulate_suite(spec_with(STRESS, n_queries=30, pool=40, seed=seed))
    fit = calibrate(_judgments(suite))
    problem = _reference_problem(suite, fit)
    n_q = suite.n_queries
    x0 = np.r_[np.zeros(10), np.full(n_q, np.log(np.e - 1)), np.zeros(n_q)]
    ref = minimize(
        lambda x: problem.derivatives(x)[:2],
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 50000, "maxcor": 50, "ftol": 0.0, "gtol": 1e-15},
    )
    loss = fit.optimizer["loss"]
    assert abs(loss - ref.fun) <= 1e-9 * ref.fun
    assert loss <= ref.fun + 1e-15
    u, v = ref.x[:5], ref.x[5:10]
    assert_allclose(fit.gamma, 5 * np.exp(u) / np.exp(u).sum(), atol=1e-5)
    assert_allclose(fit.beta, v - v.mean(), atol=1e-5)
    assert_allclose(fit.tau, np.logaddexp(0.0, ref.x[10 : 10 + n_q]), atol=1e-5)
    assert_allclose(fit.alpha, ref.x[10 + n_q :], atol=1e-5)


def test_a_fit_stopped_early_says_so():
    """maxiter=1 cannot converge: converged is False and the message says why."""
    suite = simulate_suite(spec_with(NANOBEIR, n_queries=20, seed=3))
    fit = calibrate(_judgments(suite), maxiter=1)
    assert not fit.converged
    assert "stopped after 1 Newton iterations" in fit.optimizer["message"]


def test_recovers_a_nanobeir_like_suite_across_queries():
    """Decisiveness spread 4x across queries: calibrated abilities line up across
    queries (pooled and top-10 Spearman vs truth, gain error), and the same
    data through raw BT abilities do far worse across queries."""
    suite = simulate_suite(spec_with(NANOBEIR, n_queries=60, seed=5))
    fit = calibrate(_judgments(suite))
    assert fit.converged
    rec = recovery(suite, fit.theta, fit.gamma, fit.beta)
    assert rec.pooled >= 0.99 and rec.top10 >= 0.95 and rec.gain_mae <= 0.02
    raw = recovery(suite, fit.theta_bt, fit.gamma, fit.beta)
    assert raw.top10 < rec.top10 - 0.1


def test_mixed_coverage_is_refused_and_rubric_only_runs_without_tournament():
    """auto: some queries without Stage A refuse with their indices; no Stage A at
    all gives rubric-only with NaN tau/alpha."""
    from rcp.fit import CalibrationInputError

    suite = simulate_suite(spec_with(NANOBEIR, n_queries=6, seed=1))
    j = _judgments(suite)
    keep = suite.doc_query[j.t_doc] != 2
    sizes = np.full(keep.sum() // 10, 10)
    mixed = Judgments(
        n_queries=6,
        doc_query=j.doc_query,
        t_size=sizes,
        t_doc=j.t_doc[keep],
        t_score=j.t_score[keep],
        r_doc=j.r_doc,
        r_answers=j.r_answers,
    )
    with pytest.raises(CalibrationInputError, match=r"queries \[2\]"):
        calibrate(mixed)
    empty = np.zeros(0, np.int64)
    rubric = Judgments(
        n_queries=6,
        doc_query=j.doc_query,
        t_size=empty,
        t_doc=empty,
        t_score=np.zeros(0),
        r_doc=j.r_doc,
        r_answers=j.r_answers,
    )
    fit = calibrate(rubric)
    assert fit.mode == "rubric_only" and np.isnan(fit.tau).all()
    assert np.isfinite(fit.gain[fit.placements > 0]).all()


def test_window_order_does_not_change_the_fit():
    """Windows interleaved across queries (as read from a database) give the same
    BT abilities and calibration as windows grouped by query: the per-query gather
    through the window order is the grouped slice, placement for placement."""
    suite = simulate_suite(spec_with(NANOBEIR, n_queries=12, seed=8))
    grouped = _judgments(suite)
    starts = np.concatenate([[0], np.cumsum(grouped.t_size)[:-1]])
    order = np.random.default_rng(0).permutation(grouped.t_size.size)
    idx = np.concatenate(
        [np.arange(starts[w], starts[w] + grouped.t_size[w]) for w in order]
    )
    w_query = grouped.doc_query[grouped.t_doc[starts]]
    assert np.any(np.diff(w_query[order]) < 0)  # really interleaved
    shuffled = Judgments(
        n_queries=grouped.n_queries,
        doc_query=grouped.doc_query,
        t_size=grouped.t_size[order],
        t_doc=grouped.t_doc[idx],
        t_score=grouped.t_score[idx],
        r_doc=grouped.r_doc,
        r_answers=grouped.r_answers,
    )
    a, b = calibrate(grouped), calibrate(shuffled)
    assert a.converged and b.converged
    assert_allclose(b.theta_bt, a.theta_bt, rtol=1e-9, atol=1e-9)
    assert_allclose(b.theta, a.theta, rtol=1e-7, atol=1e-7)
