"""Reliability of the human panel: ICC(1,k), Krippendorff's alpha, pick agreement,
grade pairs within one grade. A unit is one (contest, document): the grades it got."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from itertools import combinations

import numpy as np

__all__ = [
    "balanced_units",
    "icc1k",
    "krippendorff_alpha",
    "pick_agreement",
    "within_one_share",
]


def balanced_units(units: Sequence[Sequence[float]]) -> np.ndarray:
    """(units, k) matrix of the units with exactly k ratings, k being the most common
    count among units with at least two (the larger k on a tie); (0, 0) if none."""
    counts = Counter(len(u) for u in units if len(u) >= 2)
    if not counts:
        return np.zeros((0, 0))
    k = max(counts, key=lambda c: (counts[c], c))
    return np.array([list(u) for u in units if len(u) == k], dtype=np.float64)


def icc1k(ratings: np.ndarray) -> float | None:
    """ICC(1,k) (one-way random, mean of k raters) of a complete (units, k) matrix, by
    pingouin.intraclass_corr. Equals (MSB - MSW) / MSB. None with fewer than two units
    or raters, or no between-unit variance."""
    m = np.asarray(ratings, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 2 or m.shape[1] < 2:
        return None
    if np.any(~np.isfinite(m)):
        raise ValueError("ICC needs a complete, finite matrix")
    if np.ptp(m.mean(axis=1)) == 0:
        return None
    import pandas as pd  # heavy imports, only when a report is computed
    import pingouin as pg

    n, k = m.shape
    long = pd.DataFrame(
        {
            "unit": np.repeat(np.arange(n), k),
            "rater": np.tile(np.arange(k), n),
            "rating": m.ravel(),
        }
    )
    with warnings.catch_warnings():
        # pingouin 0.7 calls a pandas API deprecated in pandas 3; not our concern.
        warnings.simplefilter("ignore", DeprecationWarning)
        table = pg.intraclass_corr(
            data=long,
            targets="unit",
            raters="rater",
            ratings="rating",
            nan_policy="raise",
        )
    # pingouin >= 0.7 labels the row "ICC(1,k)"; older versions "ICC1k".
    row = table[table["Type"].isin(["ICC(1,k)", "ICC1k"])]
    return float(row["ICC"].iloc[0])


def krippendorff_alpha(
    units: Sequence[Sequence[float]], *, level: str = "interval"
) -> float | None:
    """Krippendorff's alpha ("nominal", "ordinal", "interval", "ratio") by the
    ``krippendorff`` package; units may hold any number of values (rater identity does
    not enter alpha). None with no pairable unit or a single value overall."""
    import krippendorff

    pairable = [list(u) for u in units if len(u) >= 2]
    if not pairable or len({v for u in pairable for v in u}) < 2:
        return None
    width = max(len(u) for u in pairable)
    data = np.full((width, len(pairable)), np.nan)
    for j, u in enumerate(pairable):
        data[: len(u), j] = u
    value = float(krippendorff.alpha(reliability_data=data, level_of_measurement=level))
    return None if np.isnan(value) else value


def pick_agreement(picks: Sequence[Sequence[str]]) -> float | None:
    """Share of annotator pairs within a contest with the same pick (A, B and tie are
    three categories), pooled over all pairs of all contests."""
    agree = total = 0
    for contest in picks:
        for a, b in combinations(contest, 2):
            total += 1
            agree += a == b
    return agree / total if total else None


def within_one_share(
    units: Sequence[Sequence[float]], *, tolerance: float = 1
) -> float | None:
    """Share of grade pairs on the same unit that differ by at most ``tolerance``,
    pooled over all pairs of all units."""
    near = total = 0
    for u in units:
        for a, b in combinations(u, 2):
            total += 1
            near += abs(a - b) <= tolerance
    return near / total if total else None
