"""The power planner against simulation: whole studies simulated under the plan
(queries with correlated verdicts, a share of contests that count), analysed with
the report's own clustered interval, rejections counted (issue 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from annotation.analysis.agreement import clustered_rate
from annotation.analysis.planning import design_effect, plan_contests, power_at

R = 1500  # simulated studies per scenario


def simulated_power(
    contests: int,
    *,
    true_rate: float,
    chance_rate: float,
    share: float,
    per_query: int,
    icc: float,
    seed: int,
) -> float:
    """Share of simulated studies whose query-clustered 95% CI excludes chance.

    Contests come in queries of ``per_query``; each counts with probability
    ``share``; a query's contests side with RCP with a query rate drawn from a Beta
    of mean ``true_rate`` and intra-query correlation ``icc`` (0 = independent)."""
    rng = np.random.default_rng(seed)
    query = np.arange(contests) // per_query
    g = query.max() + 1
    labels = query.astype(str)
    hits = 0
    for _ in range(R):
        if icc > 0:
            ab = 1 / icc - 1
            rate = rng.beta(true_rate * ab, (1 - true_rate) * ab, g)[query]
        else:
            rate = np.full(contests, true_rate)
        counts = rng.random(contests) < share
        side = rng.random(contests) < rate
        ci = clustered_rate(side[counts], labels[counts].tolist()).ci
        hits += ci is not None and not ci[0] <= chance_rate <= ci[1]
    return hits / R


SCENARIOS = [
    # (true rate, chance, counted share, contests per query, ICC)
    (0.66, 0.55, 0.6, 1, 0.0),
    (0.62, 0.5, 1.0, 4, 0.15),
    (0.70, 0.56, 0.5, 6, 0.1),
]


@pytest.mark.parametrize("p1,p0,share,m,icc", SCENARIOS)
def test_planned_size_reaches_its_power_in_simulation(p1, p0, share, m, icc):
    """Counted contests per query average m·share, so the design effect is
    1 + (m·share − share)·ICC (binomial counting spreads the cluster sizes)."""
    deff = design_effect(1 + share * (m - 1), icc)
    plan = plan_contests(
        power=0.8,
        alpha=0.05,
        true_rate=p1,
        chance_rate=p0,
        counted_share=share,
        design_effect=deff,
    )
    assert (
        plan.power
        >= 0.8
        > power_at(
            plan.contests - 1,
            true_rate=p1,
            chance_rate=p0,
            counted_share=share,
            design_effect=deff,
        )
    )
    sim = simulated_power(
        plan.contests,
        true_rate=p1,
        chance_rate=p0,
        share=share,
        per_query=m,
        icc=icc,
        seed=3,
    )
    mc = math.sqrt(plan.power * (1 - plan.power) / R)
    assert abs(sim - plan.power) < 4 * mc + 0.02, (plan, sim)
    half = plan.contests // 2
    predicted = power_at(
        half, true_rate=p1, chance_rate=p0, counted_share=share, design_effect=deff
    )
    sim_half = simulated_power(
        half, true_rate=p1, chance_rate=p0, share=share, per_query=m, icc=icc, seed=4
    )
    mc = math.sqrt(predicted * (1 - predicted) / R)
    assert abs(sim_half - predicted) < 4 * mc + 0.02, (half, predicted, sim_half)


def test_closed_form_and_edge_cases():
    """n = (1.96 + 0.8416)² · .6·.4 / .1² = 188.4 counted -> 189 (two-sided, the far
    tail is negligible); halving the counted share doubles the contests."""
    plan = plan_contests(true_rate=0.6, chance_rate=0.5)
    expected = (norm.ppf(0.975) + norm.ppf(0.8)) ** 2 * 0.24 / 0.01
    assert plan.contests == math.ceil(expected) == 189
    half = plan_contests(true_rate=0.6, chance_rate=0.5, counted_share=0.5)
    assert half.contests in (2 * 189 - 1, 2 * 189)
    twice = plan_contests(true_rate=0.6, chance_rate=0.5, design_effect=2.0)
    assert twice.contests in (2 * 189 - 1, 2 * 189)
    one = plan_contests(true_rate=0.6, chance_rate=0.5, one_sided=True)
    assert one.contests == math.ceil(
        (norm.ppf(0.95) + norm.ppf(0.8)) ** 2 * 0.24 / 0.01
    )
    assert power_at(0, true_rate=0.6, chance_rate=0.5) == 0.0
    with pytest.raises(ValueError, match="equals the chance"):
        plan_contests(true_rate=0.5, chance_rate=0.5)
    with pytest.raises(ValueError, match="counted share"):
        plan_contests(true_rate=0.6, chance_rate=0.5, counted_share=0)
