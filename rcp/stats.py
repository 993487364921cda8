"""Leaderboard statistics (rcp_facts 5.4): paired t-tests, bootstrap intervals,
sensitivity, sign flips, Kendall tau and per-query nDCG failure modes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

__all__ = [
    "DECISIVE_MARGIN",
    "FailureModes",
    "PairTests",
    "PairedT",
    "bootstrap_ci",
    "failure_modes",
    "kendall_tau",
    "leaderboard_sign_flips",
    "pair_tests",
    "paired_t",
    "query_sign_flips",
    "sensitivity",
]

DECISIVE_MARGIN = 0.02


@dataclass(frozen=True)
class PairedT:
    """Paired t-test of B - A over queries: mean delta, t, two-sided p, n queries."""

    delta: float
    t: float
    p: float
    n: int

    def significant(self, alpha: float = 0.05) -> bool:
        """True iff p < alpha; an undefined test (NaN p) is never significant."""
        return bool(self.p < alpha)


def paired_t(a: np.ndarray, b: np.ndarray) -> PairedT:
    """One-sample t-test (scipy ``ttest_1samp``) of b - a on queries both have.

    NaN marks a query a system lacks. Fewer than 2 queries or zero variance gives
    t = p = NaN (not significant).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("a and b must be 1-D arrays over the same queries")
    d = b - a
    d = d[~np.isnan(d)]
    if d.size == 0:
        return PairedT(delta=np.nan, t=np.nan, p=np.nan, n=0)
    delta = float(d.mean())
    if d.size < 2 or np.ptp(d) == 0:
        return PairedT(delta=delta, t=np.nan, p=np.nan, n=int(d.size))
    res = sps.ttest_1samp(d, 0.0)
    return PairedT(
        delta=delta, t=float(res.statistic), p=float(res.pvalue), n=int(d.size)
    )


@dataclass(frozen=True)
class PairTests:
    """All system pairs (i < j) of one dataset; delta/t/p refer to system j minus i."""

    i: np.ndarray
    j: np.ndarray
    delta: np.ndarray
    t: np.ndarray
    p: np.ndarray
    n: np.ndarray

    def separated(self, alpha: float = 0.05) -> np.ndarray:
        """Boolean mask of pairs with p < alpha (NaN p is not separated)."""
        return np.nan_to_num(self.p, nan=1.0) < alpha


def pair_tests(per_query: np.ndarray) -> PairTests:
    """Paired t-tests for every pair of systems of a (S, Q) per-query score matrix.

    Vectorised equivalent of ``paired_t`` per pair; NaN = query missing for a system.
    """
    x = np.asarray(per_query, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError("per_query must be a (systems, queries) matrix")
    i, j = np.triu_indices(x.shape[0], k=1)
    d = x[j] - x[i]
    valid = ~np.isnan(d)
    n = valid.sum(axis=1)
    dz = np.where(valid, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = dz.sum(axis=1) / n
        resid = np.where(valid, d - mean[:, None], 0.0)
        var = (resid**2).sum(axis=1) / (n - 1)
        t = mean / np.sqrt(var / n)
    spread = np.where(valid, d, -np.inf).max(axis=1) - np.where(valid, d, np.inf).min(
        axis=1
    )
    undefined = (n < 2) | ~(spread > 0)
    t = np.where(undefined, np.nan, t)
    p = np.where(undefined, np.nan, 2.0 * sps.t.sf(np.abs(t), np.maximum(n - 1, 1)))
    return PairTests(i=i, j=j, delta=mean, t=t, p=p, n=n)


def sensitivity(per_dataset: Sequence[np.ndarray], alpha: float = 0.05) -> float:
    """Share of system pairs separated at p < alpha per dataset, then the unweighted
    mean over datasets (no multiplicity correction). Inputs are (S, Q_d) matrices."""
    shares = [pair_tests(x).separated(alpha).mean() for x in per_dataset]
    if not shares:
        raise ValueError("need at least one dataset")
    return float(np.mean(shares))


def bootstrap_ci(
    per_dataset: Sequence[np.ndarray],
    *,
    rng: np.random.Generator | int = 0,
    n_boot: int = 1000,
    alpha: float = 0.05,
) -> np.ndarray:
    """Percentile interval of the dataset-mean-then-mean aggregate.

    Each element is (Q_d,) or (S, Q_d); queries are resampled with replacement within
    each dataset, the same draw for every system (pass B - A for a paired delta).
    Returns (2,) or (S, 2) = (alpha/2, 1 - alpha/2) quantiles.
    """
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    if not per_dataset:
        raise ValueError("need at least one dataset")
    arrays = [np.asarray(x, dtype=np.float64) for x in per_dataset]
    squeeze = arrays[0].ndim == 1
    arrays = [np.atleast_2d(x) for x in arrays]
    total = np.zeros((n_boot, arrays[0].shape[0]))
    for x in arrays:
        n_q = x.shape[1]
        idx = gen.integers(0, n_q, size=(n_boot, n_q))
        total += x[:, idx].mean(axis=2).T
    agg = total / len(arrays)
    out = np.quantile(agg, [alpha / 2, 1 - alpha / 2], axis=0).T
    return out[0] if squeeze else out


def query_sign_flips(delta_a: np.ndarray, delta_b: np.ndarray) -> np.ndarray:
    """Indices of queries whose two metric deltas have opposite signs, ordered by
    |delta_a - delta_b| descending (e.g. RCP vs qrel delta of one system pair)."""
    da = np.asarray(delta_a, dtype=np.float64)
    db = np.asarray(delta_b, dtype=np.float64)
    flips = np.flatnonzero(np.sign(da) * np.sign(db) < 0)
    return flips[np.argsort(-np.abs(da[flips] - db[flips]), kind="stable")]


def leaderboard_sign_flips(means_a: np.ndarray, means_b: np.ndarray) -> np.ndarray:
    """System pairs (i, j), i < j, ordered one way by leaderboard A and the other way by
    B; shape (n_flips, 2). Pairs tied on either leaderboard are not flips."""
    a = np.asarray(means_a, dtype=np.float64)
    b = np.asarray(means_b, dtype=np.float64)
    i, j = np.triu_indices(a.size, k=1)
    flip = np.sign(a[j] - a[i]) * np.sign(b[j] - b[i]) < 0
    return np.stack([i[flip], j[flip]], axis=1)


def kendall_tau(means_a: np.ndarray, means_b: np.ndarray) -> float:
    """Kendall tau-b between two leaderboards' system means (scipy ``kendalltau``)."""
    return float(sps.kendalltau(means_a, means_b).statistic)


@dataclass(frozen=True)
class FailureModes:
    """Per-query flags over systems: all 1 (saturation), all 0 (floor), more than
    half of system pairs with exactly equal scores (compression, the paper's
    definition), and, reported under its own name, more than half of the pairs
    within the 0.02 decision margin (tie_zone)."""

    saturation: np.ndarray
    floor: np.ndarray
    compression: np.ndarray
    tied_share: np.ndarray
    tie_zone: np.ndarray
    tie_zone_share: np.ndarray


def failure_modes(
    per_query: np.ndarray, *, margin: float = DECISIVE_MARGIN, atol: float = 1e-9
) -> FailureModes:
    """Failure modes of each query's column in a (S, Q) nDCG matrix (S >= 2).

    ``tied_share`` counts pairs with exactly equal values (the same ranking of the
    labelled documents gives the same float); ``tie_zone_share`` pairs closer than
    ``margin``."""
    x = np.asarray(per_query, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError("per_query must be (systems >= 2, queries)")
    i, j = np.triu_indices(x.shape[0], k=1)
    tied_share = (x[j] == x[i]).mean(axis=0)
    zone_share = (np.abs(x[j] - x[i]) < margin).mean(axis=0)
    return FailureModes(
        saturation=np.all(np.abs(x - 1.0) <= atol, axis=0),
        floor=np.all(np.abs(x) <= atol, axis=0),
        compression=tied_share > 0.5,
        tied_share=tied_share,
        tie_zone=zone_share > 0.5,
        tie_zone_share=zone_share,
    )
