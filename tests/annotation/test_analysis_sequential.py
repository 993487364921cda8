"""Alpha-spending boundaries (issue 14) against published values (gsDesign/ldbounds
for symmetric two-sided designs) and a Monte Carlo of the Brownian null."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from annotation.analysis.agreement import clustered_rate
from annotation.analysis.sequential import boundaries, spent, wald_z

FIVE = [0.2, 0.4, 0.6, 0.8, 1.0]


def test_published_boundaries_five_equal_looks():
    np.testing.assert_allclose(
        boundaries(FIVE, alpha=0.05, kind="obrien_fleming"),
        [4.877, 3.357, 2.680, 2.290, 2.031],
        atol=1e-3,
    )
    np.testing.assert_allclose(
        boundaries(FIVE, alpha=0.05, kind="pocock"),
        [2.438, 2.427, 2.410, 2.397, 2.386],
        atol=1e-3,
    )
    assert boundaries([1.0], alpha=0.05, kind="pocock") == pytest.approx(
        [norm.ppf(0.975)]
    )


@pytest.mark.parametrize("kind", ["obrien_fleming", "pocock"])
def test_boundaries_spend_their_alpha_under_the_null(kind):
    """Uneven looks: the share of simulated null paths that crossed by look k equals
    the cumulative alpha spent a(t_k), within Monte Carlo error."""
    t = np.array([0.15, 0.5, 0.72, 1.0])
    c = np.array(boundaries(t.tolist(), alpha=0.05, kind=kind))
    rng = np.random.default_rng(1)
    r = 200_000
    steps = rng.normal(size=(r, len(t))) * np.sqrt(np.diff(t, prepend=0.0))
    z = np.cumsum(steps, axis=1) / np.sqrt(t)
    crossed = np.cumsum(np.abs(z) >= c, axis=1) > 0
    for k, tk in enumerate(t):
        a = spent(float(tk), 0.05, kind)
        mc = math.sqrt(a * (1 - a) / r)
        assert crossed[:, k].mean() == pytest.approx(a, abs=4 * mc + 1e-4)


def test_spending_and_input_checks():
    assert spent(1.0, 0.05, "obrien_fleming") == pytest.approx(0.05)
    assert spent(1.0, 0.05, "pocock") == pytest.approx(0.05)
    assert spent(0.0, 0.05, "pocock") == 0.0
    for bad in ([0.5, 0.5], [0.0, 1.0], [0.4, 1.2], []):
        with pytest.raises(ValueError):
            boundaries(bad, alpha=0.05, kind="pocock")
    with pytest.raises(ValueError, match="spending"):
        spent(0.5, 0.05, "haybittle")


def test_wald_z_matches_the_clustered_interval():
    """z = (rate - chance) / SE with SE = the clustered CI half-width / 1.96."""
    rng = np.random.default_rng(3)
    h = rng.random(80) < 0.7
    q = rng.integers(0, 20, 80).astype(str).tolist()
    rate = clustered_rate(h, q)
    se = (rate.rate - rate.ci[0]) / 1.96
    assert wald_z(h, q, 0.5) == pytest.approx((rate.rate - 0.5) / se)
    assert wald_z([], [], 0.5) is None and wald_z([True], ["a"], 0.5) is None
