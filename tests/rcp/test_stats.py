"""Leaderboard statistics against scipy/pingouin and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pingouin
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats as sps

from rcp.stats import (
    bootstrap_ci,
    failure_modes,
    kendall_tau,
    leaderboard_sign_flips,
    pair_tests,
    paired_t,
    query_sign_flips,
    sensitivity,
)


def test_paired_t_matches_scipy_and_pingouin():
    """paired_t(a, b) tests b - a exactly like ttest_rel(b, a) and pingouin."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 40)
    b = a + rng.normal(0.03, 0.1, 40)
    res = paired_t(a, b)
    ref = sps.ttest_rel(b, a)
    ping = pingouin.ttest(b, a, paired=True)
    assert res.delta == pytest.approx(np.mean(b - a))
    assert res.t == pytest.approx(ref.statistic, rel=1e-12)
    assert res.p == pytest.approx(ref.pvalue, rel=1e-12)
    assert res.p == pytest.approx(
        float(ping.filter(regex="^p.val$").iloc[0, 0]), rel=1e-10
    )
    assert res.n == 40


def test_paired_t_undefined_is_not_significant():
    """Constant differences or a single query give NaN t/p and are not significant."""
    res = paired_t(np.array([0.2, 0.4, 0.6]), np.array([0.3, 0.5, 0.7]))
    assert math.isnan(res.p) and not res.significant()
    assert res.delta == pytest.approx(0.1)
    assert math.isnan(paired_t(np.array([0.1]), np.array([0.9])).t)


def test_pair_tests_vectorised_equals_per_pair_scipy_with_missing_queries():
    """Every pair's t/p equals ttest_rel on the queries both systems have."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (4, 30)) + np.array([[0.0], [0.05], [0.2], [0.21]])
    x[1, 3] = np.nan
    x[2, [5, 6]] = np.nan
    res = pair_tests(x)
    for i, j, t, p, n in zip(res.i, res.j, res.t, res.p, res.n, strict=True):
        ok = ~np.isnan(x[i]) & ~np.isnan(x[j])
        ref = sps.ttest_rel(x[j][ok], x[i][ok])
        assert n == ok.sum()
        assert t == pytest.approx(ref.statistic, rel=1e-10)
        assert p == pytest.approx(ref.pvalue, rel=1e-10)


def test_sensitivity_is_mean_share_over_datasets():
    """Dataset 1: C far above A and B (2 of 3 pairs separated); dataset 2: two
    indistinguishable systems (0 of 1). Sensitivity = mean(2/3, 0) = 1/3."""
    rng = np.random.default_rng(2)
    base = rng.uniform(0.3, 0.6, 25)
    d1 = np.vstack([base, base + rng.normal(0, 0.05, 25), base + 0.3])
    d2 = np.vstack([base, base + rng.normal(0, 0.05, 25)])
    assert pair_tests(d1).separated().tolist() == [False, True, True]
    assert sensitivity([d1, d2]) == pytest.approx(1 / 3)


def test_bootstrap_ci_same_draw_and_normal_approximation():
    """Seeded: reproducible; each system row uses the same query draw; for a large
    sample the 95% percentile interval is close to mean +- 1.96 SE."""
    rng = np.random.default_rng(3)
    x = rng.normal(0.5, 0.2, (2, 400))
    ci = bootstrap_ci([x], rng=0, n_boot=2000)
    assert_array_equal(ci, bootstrap_ci([x], rng=0, n_boot=2000))
    assert_allclose(ci[0], bootstrap_ci([x[0]], rng=0, n_boot=2000))
    se = x[0].std(ddof=1) / np.sqrt(400)
    assert_allclose(ci[0], x[0].mean() + np.array([-1.96, 1.96]) * se, atol=0.25 * se)


def test_bootstrap_ci_dataset_mean_then_mean():
    """Two datasets of constant values average unweighted: 0.2 and 0.8 -> 0.5,
    however many queries each dataset has."""
    ci = bootstrap_ci([np.full(3, 0.2), np.full(50, 0.8)], rng=np.random.default_rng(1))
    assert_allclose(ci, [0.5, 0.5])


def test_sign_flips_and_kendall():
    """Query flips sorted by |d_rcp - d_qrel|; leaderboard flips are discordant pairs;
    Kendall tau = (concordant - discordant) / pairs without ties."""
    d_rcp = np.array([0.1, -0.2, 0.05, 0.3, 0.0])
    d_qrel = np.array([0.2, 0.1, -0.4, 0.1, 0.2])
    assert query_sign_flips(d_rcp, d_qrel).tolist() == [2, 1]
    a = np.array([0.9, 0.8, 0.7, 0.6])
    b = np.array([0.85, 0.88, 0.6, 0.65])
    assert leaderboard_sign_flips(a, b).tolist() == [[0, 1], [2, 3]]
    assert kendall_tau(a, b) == pytest.approx((4 - 2) / 6)


def test_failure_modes():
    """Saturation: every system 1; floor: every system 0; compression: more than half
    of system pairs with exactly equal scores (the paper's definition); the 0.02
    tie zone is counted separately under its own name."""
    x = np.array(
        [
            [1.0, 0.0, 0.50, 0.500, 0.9, 0.7],
            [1.0, 0.0, 0.51, 0.515, 0.5, 0.7],
            [1.0, 0.0, 0.90, 0.530, 0.1, 0.7],
        ]
    )
    fm = failure_modes(x)
    assert fm.saturation.tolist() == [True, False, False, False, False, False]
    assert fm.floor.tolist() == [False, True, False, False, False, False]
    # Exact ties: columns 0, 1 and 5 only; near ties do not compress.
    assert_allclose(fm.tied_share, [1, 1, 0, 0, 0, 1])
    assert fm.compression.tolist() == [True, True, False, False, False, True]
    # Column 2: 1 of 3 pairs within 0.02; column 3: 2 of 3 (0.015, 0.015; not 0.03).
    assert_allclose(fm.tie_zone_share, [1, 1, 1 / 3, 2 / 3, 0, 1])
    assert fm.tie_zone.tolist() == [True, True, False, True, False, True]
