"""Inference primitives (issue 14) against independent code: statsmodels (Wilson,
two-way clustering, Holm), scipy (binomial), sklearn (AUC) and brute-force
enumeration of every verdict assignment."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import statsmodels.api as sm
from scipy.stats import binom, binomtest, norm, spearmanr
from sklearn.metrics import roc_auc_score
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.sandwich_covariance import cov_cluster_2groups

from annotation.analysis.agreement import chance_rate, clustered_rate
from annotation.analysis.inference import (
    design_exact_test,
    holm,
    jackknife,
    poisson_binomial_pmf,
    poisson_binomial_test,
    twoway_clustered_ci,
    wilson,
)
from annotation.analysis.label_quality import query_spearman
from annotation.analysis.rules import plurality_verdict, verdict_by_rule
from annotation.analysis.verdicts import verdict_class

Z = norm.ppf(0.975)


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 7), (3, 7), (7, 7), (57, 100)])
def test_wilson_matches_statsmodels(k, n):
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert wilson(k, n, z=Z) == pytest.approx((lo, hi), abs=1e-12)
    assert wilson(0, 0) is None


def test_poisson_binomial_pmf_equals_enumeration_and_binomial():
    rng = np.random.default_rng(3)
    probs = rng.random(10)
    brute = np.zeros(11)
    for bits in itertools.product((0, 1), repeat=10):
        b = np.array(bits)
        brute[b.sum()] += np.prod(np.where(b == 1, probs, 1 - probs))
    np.testing.assert_allclose(poisson_binomial_pmf(probs), brute, atol=1e-15)
    np.testing.assert_allclose(
        poisson_binomial_pmf([0.3] * 25), binom.pmf(np.arange(26), 25, 0.3), atol=1e-14
    )


@pytest.mark.parametrize("k,n", [(0, 5), (3, 10), (14, 20), (31, 40)])
def test_poisson_binomial_test_equals_binomtest_for_equal_probabilities(k, n):
    t = poisson_binomial_test(k, [0.5] * n)
    assert t.p_two_sided == pytest.approx(binomtest(k, n, 0.5).pvalue, rel=1e-12)
    assert t.p_greater == pytest.approx(
        binomtest(k, n, 0.5, alternative="greater").pvalue, rel=1e-12
    )
    assert t.p_less == pytest.approx(
        binomtest(k, n, 0.5, alternative="less").pvalue, rel=1e-12
    )


def _brute_design_test(rcp_w, qrel_w, k_obs, n_obs):
    """Every one of the 2^m fair-coin verdict assignments, weighted 2^-m."""
    ge = le = 0.0
    m = len(rcp_w)
    for verdicts in itertools.product("AB", repeat=m):
        classes = [
            verdict_class(v, r, q)
            for v, r, q in zip(verdicts, rcp_w, qrel_w, strict=True)
        ]
        n = sum(c in ("rcp", "qrel") for c in classes)
        k = sum(c == "rcp" for c in classes)
        if n == 0:
            continue
        if Fraction(k, n) >= Fraction(k_obs, n_obs):
            ge += 0.5**m
        if Fraction(k, n) <= Fraction(k_obs, n_obs):
            le += 0.5**m
    return ge, le


@pytest.mark.parametrize("seed", range(6))
def test_design_exact_test_equals_enumeration_of_verdict_coins(seed):
    rng = np.random.default_rng(seed)
    m = 11
    rcp_w = rng.choice(["A", "B", "tie"], m, p=[0.45, 0.45, 0.1]).tolist()
    qrel_w = rng.choice(["A", "B", "tie"], m, p=[0.35, 0.35, 0.3]).tolist()
    verdicts = rng.choice(["A", "B"], m).tolist()
    classes = [verdict_class(*t) for t in zip(verdicts, rcp_w, qrel_w, strict=True)]
    n_obs = sum(c in ("rcp", "qrel") for c in classes)
    k_obs = sum(c == "rcp" for c in classes)
    t = design_exact_test(rcp_w, qrel_w, k_obs, n_obs)
    ge, le = _brute_design_test(rcp_w, qrel_w, k_obs, n_obs)
    assert t.p_greater == pytest.approx(ge, abs=1e-12)
    assert t.p_less == pytest.approx(le, abs=1e-12)
    assert t.p_two_sided == pytest.approx(min(1.0, 2 * min(ge, le)), abs=1e-12)
    assert t.expected == pytest.approx(chance_rate(rcp_w, qrel_w))


def test_design_exact_test_on_disagreements_only_is_the_binomial_test():
    """All contests disagreements: N is fixed, K ~ Bin(n, 1/2)."""
    rcp_w, qrel_w = ["A", "B"] * 15, ["B", "A"] * 15
    t = design_exact_test(rcp_w, qrel_w, 21, 30)
    assert t.p_greater == pytest.approx(
        binomtest(21, 30, 0.5, alternative="greater").pvalue, rel=1e-12
    )
    assert design_exact_test([], [], 0, 0).p_two_sided is None


def test_twoway_ci_matches_statsmodels_with_one_annotator_per_contest():
    """Intercept-only OLS, statsmodels cov_cluster_2groups (CGM, G/(G-1) each)."""
    rng = np.random.default_rng(11)
    n = 300
    q = rng.integers(0, 40, n)
    a = rng.integers(0, 7, n)
    h = (rng.random(n) < 0.55 + 0.1 * (a % 2)).astype(float)
    res = sm.OLS(h, np.ones((n, 1))).fit()
    cov, _, _ = cov_cluster_2groups(res, q, a)
    half = Z * np.sqrt(cov[0, 0])
    lo, hi = twoway_clustered_ci(h, q.tolist(), [[x] for x in a.tolist()], z=Z)
    assert (lo, hi) == pytest.approx((h.mean() - half, h.mean() + half), abs=1e-12)


def test_twoway_ci_with_private_annotators_is_the_query_clustered_ci():
    """Annotators who each review a single contest add no dependence: the annotator
    and intersection meats cancel and the interval is the query-clustered one."""
    rng = np.random.default_rng(4)
    n = 120
    q = rng.integers(0, 25, n).astype(str).tolist()
    h = rng.random(n) < 0.6
    panels = [[f"{i}-x", f"{i}-y", f"{i}-z"] for i in range(n)]
    assert twoway_clustered_ci(h, q, panels) == pytest.approx(
        clustered_rate(h, q).ci, abs=1e-12
    )


def test_holm_matches_statsmodels():
    rng = np.random.default_rng(8)
    p = rng.random(12) ** 3
    expected = multipletests(p, method="holm")[1]
    np.testing.assert_allclose(holm(p.tolist()), expected, atol=1e-15)
    assert holm([0.01, None, 0.04]) == pytest.approx([0.02, None, 0.04])


def test_jackknife_of_auc_equals_hand_loop_with_sklearn():
    rng = np.random.default_rng(2)
    q = rng.integers(0, 15, 200)
    s = rng.normal(size=200)
    y = s + rng.normal(0, 1, 200) > 0
    full = roc_auc_score(y, s)
    leave = np.array([roc_auc_score(y[q != g], s[q != g]) for g in np.unique(q)])
    se = np.sqrt(14 / 15 * ((leave - leave.mean()) ** 2).sum())

    def stat(g):
        keep = np.ones(200, bool) if g is None else q != g
        return float(roc_auc_score(y[keep], s[keep]))

    jk = jackknife(stat, q.tolist(), bounds=(0.0, 1.0))
    assert jk.estimate == pytest.approx(full)
    assert jk.se == pytest.approx(se, rel=1e-12)
    assert jk.ci == pytest.approx((full - 1.96 * se, min(1.0, full + 1.96 * se)))
    assert jk.clusters == 15


def test_query_spearman_handles_exact_ties_like_scipy():
    """q1 = (0.1, 0.2) and q2 = (0.15): equal means in exact arithmetic, but
    (0.1 + 0.2) / 2 = 0.15000000000000002 in floats. The result must equal scipy's
    spearmanr on the exact means, where q1 and q2 share the averaged rank."""
    qs = ["q1", "q1", "q2", "q3", "q4", "q4", "q5"]
    scores = [0.1, 0.2, 0.15, 0.7, 0.3, 0.3, 0.05]
    grades = [1, 2, 2, 3, 0, 3, 1]
    exact = {}
    for q, s, g in zip(qs, scores, grades, strict=True):
        exact.setdefault(q, []).append((Fraction(str(s)), Fraction(g)))
    keys = sorted(exact)
    ms = [float(sum(s for s, _ in exact[k]) / len(exact[k])) for k in keys]
    mg = [float(sum(g for _, g in exact[k]) / len(exact[k])) for k in keys]
    assert ms[0] == ms[1]  # the tie is exact once computed exactly
    expected = spearmanr(ms, mg).statistic
    assert query_spearman(qs, scores, grades) == pytest.approx(expected, abs=1e-12)
    naive = np.array([np.mean([0.1, 0.2]), 0.15, 0.7, 0.3, 0.05])
    assert spearmanr(naive, mg).statistic != pytest.approx(expected)  # the old bug


def test_plurality_and_majority_rules():
    assert plurality_verdict(["A", "A", "B", "tie"]) == "A"
    assert verdict_by_rule(["A", "A", "B", "tie"], "majority") == "tie"
    assert plurality_verdict(["A", "tie"]) == "tie"
    assert plurality_verdict(["B", "B", "A"]) == "B"
    assert plurality_verdict(["A", "B", "tie"]) == "tie"
    assert plurality_verdict([]) == "tie"
    with pytest.raises(ValueError, match="unknown verdict rule"):
        verdict_by_rule(["A"], "unanimity")
