"""Main measure, chance rate, clustered intervals, hit rates, margin AUC, LOO range."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu
from sklearn.metrics import roc_auc_score

from annotation.analysis.agreement import (
    auc,
    chance_rate,
    clustered_rate,
    disagreement_measure,
    hit_rates,
    loo_range,
    main_measure,
    margin_auc,
)
from annotation.analysis.verdicts import verdict_class


def test_clustered_rate_hand_computed():
    """h = [1,1,0,1,0], clusters q1 q1 q2 q3 q3: p = 0.6; r = (0.8, -0.6, -0.2),
    sum r^2 = 1.04; half = 1.96 sqrt(3/2 * 1.04 / 25) = 1.96 * 0.249800 = 0.489608;
    CI = [0.110392, 1.089608 -> clipped to 1]."""
    r = clustered_rate([1, 1, 0, 1, 0], ["q1", "q1", "q2", "q3", "q3"])
    assert (r.k, r.n) == (3, 5)
    assert r.rate == pytest.approx(0.6)
    assert r.ci[0] == pytest.approx(0.6 - 1.96 * math.sqrt(1.5 * 1.04 / 25))
    assert round(r.ci[0], 6) == 0.110392
    assert r.ci[1] == 1.0


def test_clustered_rate_one_cluster_has_zero_width_and_empty_is_undefined():
    """G = 1 gives a zero-width interval; n = 0 gives None everywhere."""
    r = clustered_rate([True, False], ["q", "q"])
    assert (r.rate, r.ci) == (0.5, (0.5, 0.5))
    e = clustered_rate([], [])
    assert (e.rate, e.k, e.n, e.ci) == (None, 0, 0, None)
    assert e.as_dict() == {"rate": None, "k": 0, "n": 0, "ci": None, "chance": None}


def test_clustered_rate_is_the_plain_binomial_width_for_singleton_clusters():
    """One contest per cluster: half = 1.96 sqrt(n/(n-1) p(1-p)/n) (hand: p = 0.25,
    n = 4: 1.96 sqrt(4/3 * 0.1875 / 4) = 0.490)."""
    r = clustered_rate([1, 0, 0, 0], ["a", "b", "c", "d"])
    assert r.ci[1] - 0.25 == pytest.approx(1.96 * math.sqrt(4 / 3 * 0.1875 / 4))


def test_chance_rate_hand_cases():
    """(A,B) differ: n 1, k 1/2; (A,tie): n 1/2, k 1/2; (tie,B): n 1/2, k 0;
    (A,A), (tie,tie): never count. -> (1/2 + 1/2) / (1 + 1/2 + 1/2) = 0.5.
    Dropping (tie,B): 1 / 1.5 = 2/3 -- qrel ties push chance above one half."""
    rcp = ["A", "A", "tie", "A", "tie"]
    qrel = ["B", "tie", "B", "A", "tie"]
    assert chance_rate(rcp, qrel) == pytest.approx(0.5)
    assert chance_rate(rcp[:2], qrel[:2]) == pytest.approx(2 / 3)
    assert chance_rate(["A", "tie"], ["A", "tie"]) is None


def test_chance_rate_equals_enumeration_over_random_verdicts():
    """Enumerate every fair-coin verdict vector (A/B per contest, 2^8 cases) and
    compute the expected k and n of the main measure: chance = E[k] / E[n]."""
    rng = np.random.default_rng(3)
    choices = ["A", "B", "tie"]
    for _ in range(5):
        rcp = [str(x) for x in rng.choice(choices, 8)]
        qrel = [str(x) for x in rng.choice(choices, 8)]
        e_k = e_n = 0.0
        for verdicts in itertools.product("AB", repeat=8):
            classes = [
                verdict_class(v, r, q)
                for v, r, q in zip(verdicts, rcp, qrel, strict=True)
            ]
            e_k += classes.count("rcp") / 2**8
            e_n += (classes.count("rcp") + classes.count("qrel")) / 2**8
        expected = e_k / e_n if e_n else None
        got = chance_rate(rcp, qrel)
        assert (got is None) == (expected is None)
        if expected is not None:
            assert got == pytest.approx(expected, abs=1e-12)


VERDICTS = ["A", "B", "A", "A", "tie", "B"]
RCP_W = ["A", "A", "A", "A", "A", "A"]
QREL_W = ["B", "B", "tie", "A", "B", "A"]
CLUSTERS = ["q1", "q1", "q2", "q3", "q4", "q5"]
# classes: rcp, qrel, rcp, both, tie, neither


def test_main_measure_hand_computed():
    """Classes rcp, qrel, rcp (+ both, tie, neither left out): k = 2, n = 3.
    Clusters q1 (h 1,0) q2 (h 1): p = 2/3, r = (-1/3, 1/3), sum r^2 = 2/9,
    half = 1.96 sqrt(2 * (2/9) / 9) = 1.96 * 2/9 = 0.435556.
    Chance over all six: differ c1 c2 c5 (n 3, k 1.5) + rcp-only c3 (n .5, k .5)
    -> 2 / 3.5 = 0.571429."""
    r = main_measure(VERDICTS, RCP_W, QREL_W, CLUSTERS)
    assert (r.k, r.n) == (2, 3)
    assert r.rate == pytest.approx(2 / 3)
    assert r.ci == pytest.approx((2 / 3 - 1.96 * 2 / 9, 1.0))
    assert r.chance == pytest.approx(2 / 3.5)


def test_disagreement_measure_hand_computed():
    """Disagreements (both name winners, differing): c1 (rcp), c2 (qrel), c5 (tie
    verdict, left out) -> 1 / 2; chance is exactly 1/2."""
    r = disagreement_measure(VERDICTS, RCP_W, QREL_W, CLUSTERS)
    assert (r.k, r.n, r.rate, r.chance) == (1, 2, 0.5, 0.5)


def test_hit_rates_by_margin_band():
    """Decided contests with a named winner: 0 (hit, |m| .3), 1 (miss, .01),
    2 (miss, .05); 3 has a tied metric, 4 a tied verdict. all 1/3; lt_0.02 0/1;
    ge_0.02 1/2; ge_0.20 1/1."""
    out = hit_rates(
        ["A", "B", "A", "A", "tie"],
        ["A", "A", "B", "tie", "A"],
        [0.3, 0.01, -0.05, 0.0, 0.5],
        ["a", "b", "c", "d", "e"],
    )
    assert list(out) == ["all", "lt_0.02", "ge_0.02", "ge_0.20"]
    assert [(out[b].k, out[b].n) for b in out] == [(1, 3), (0, 1), (1, 2), (1, 1)]


def test_auc_hand_computed_with_ties():
    """Positives {0.4, 0.8} vs negatives {0.1, 0.4}: 1 + 1/2 + 1 + 1 = 3.5 of 4."""
    assert auc([0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]) == pytest.approx(0.875)
    assert auc([0.1, 0.2], [1, 1]) is None


def test_auc_matches_sklearn_and_mann_whitney_with_ties():
    """oracles.md fixture (0.833333) and a random tied sample against two oracles."""
    y = np.array([0, 0, 1, 1, 1, 0, 1, 0, 1, 1])
    s = np.array([0.1, 0.4, 0.35, 0.8, 0.4, 0.4, 0.9, 0.2, 0.55, 0.4])
    assert auc(s, y) == pytest.approx(0.833333, abs=1e-6)
    rng = np.random.default_rng(0)
    s2 = rng.integers(0, 5, 300) / 4  # heavy ties
    y2 = rng.random(300) < 0.2 + 0.15 * s2
    assert auc(s2, y2) == pytest.approx(roc_auc_score(y2, s2), abs=1e-12)
    u = mannwhitneyu(s2[y2], s2[~y2]).statistic
    assert auc(s2, y2) == pytest.approx(u / (y2.sum() * (~y2).sum()), abs=1e-12)


def test_margin_auc_counts_individual_picks_and_skips_ties():
    """Picks A, B, B, tie with margins .3 .3 -.1 0: the tie leaves; picked-A margin
    .3 vs not-A .3 (1/2) and -.1 (1) -> 0.75."""
    assert margin_auc([0.3, 0.3, -0.1, 0.0], ["A", "B", "B", "tie"]) == 0.75


def test_loo_range_hand_computed():
    """c1 x:A y:A z:B (rcp A / qrel B), c2 x:B y:B z:A (A/B), c3 x:A y:B z:A (A/tie).
    Without x: every verdict ties -> undefined, skipped. Without y: c3 A -> rcp, 1/1.
    Without z: c1 A (rcp), c2 B (qrel), c3 tie -> 1/2. Range [0.5, 1.0]."""
    picks = [
        [("x", "A"), ("y", "A"), ("z", "B")],
        [("x", "B"), ("y", "B"), ("z", "A")],
        [("x", "A"), ("y", "B"), ("z", "A")],
    ]
    assert loo_range(picks, ["A", "A", "A"], ["B", "B", "tie"], ["q1", "q2", "q3"]) == (
        0.5,
        1.0,
    )
    assert loo_range([[("x", "A")]], ["A"], ["B"], ["q"]) is None
