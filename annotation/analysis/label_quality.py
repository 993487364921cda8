"""Label quality against blind human grades: label AUC, matched-flag-rate recall, ECE of
gains against "useful or better", per-query Spearman (README.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.stats import spearmanr

from annotation.analysis.agreement import auc

__all__ = [
    "ECE_BINS",
    "USEFUL_GRADE",
    "Calibration",
    "ece",
    "label_auc",
    "matched_flag_recall",
    "query_spearman",
]

USEFUL_GRADE = 2
ECE_BINS = 10


def label_auc(
    labels: Sequence[float] | np.ndarray, useful: Sequence[bool] | np.ndarray
) -> float | None:
    """AUC of a document label (RCP gain or qrel; ties averaged) for useful documents
    (panel-mean grade >= 2) against the rest. None without both classes."""
    return auc(labels, useful)


def matched_flag_recall(
    scores: Sequence[float] | np.ndarray,
    qrels: Sequence[float] | np.ndarray,
    useful: Sequence[bool] | np.ndarray,
) -> dict:
    """Recall of useful documents when RCP flags as many documents as qrels do.

    qrels flag m = #(qrel > 0) documents; RCP flags the m highest scores, documents tied
    at the cut sharing the remaining places fractionally. Returns flag rate, recall and
    precision for both, and the qrel error rates in both directions.
    """
    s = np.asarray(scores, dtype=np.float64)
    q = np.asarray(qrels, dtype=np.float64) > 0
    u = np.asarray(useful, dtype=bool)
    if not (s.shape == q.shape == u.shape):
        raise ValueError("scores, qrels and useful differ in shape")
    n, m, n_useful = len(s), int(q.sum()), int(u.sum())
    weight = np.zeros(n)
    if m > 0:
        cut = np.sort(s)[::-1][m - 1]
        above = s > cut
        at = s == cut
        weight[above] = 1.0
        weight[at] = (m - above.sum()) / at.sum()
    rcp_hits, qrel_hits = float(weight[u].sum()), float((q & u).sum())

    def share(num: float, den: int) -> float | None:
        return num / den if den else None

    return {
        "documents": n,
        "useful": n_useful,
        "flagged": m,
        "flag_rate": share(m, n),
        "recall": {
            "rcp": share(rcp_hits, n_useful),
            "qrel": share(qrel_hits, n_useful),
        },
        "precision": {"rcp": share(rcp_hits, m), "qrel": share(qrel_hits, m)},
        "useful_without_positive_qrel": share(float((~q & u).sum()), int((~q).sum())),
        "useless_with_positive_qrel": share(float((q & ~u).sum()), m),
    }


@dataclass(frozen=True)
class Calibration:
    """ECE and the reliability bins (count, mean predicted, observed rate per bin)."""

    ece: float | None
    n: int
    bins: tuple[dict, ...]


def ece(
    predicted: Sequence[float] | np.ndarray,
    outcomes: Sequence[bool] | np.ndarray,
    *,
    bins: int = ECE_BINS,
) -> Calibration:
    """ECE = sum over equal-width bins of (count / N) |observed - mean predicted|.

    Bin b = min(floor(p * bins), bins - 1), i.e. [lo, hi) with the last bin closed,
    as in rcp.diagnostics. Predictions must lie in [0, 1].
    """
    p = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64)
    if p.shape != y.shape:
        raise ValueError("predicted and outcomes differ in shape")
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("predictions must lie in [0, 1]")
    n = len(p)
    if n == 0:
        return Calibration(None, 0, ())
    b = np.minimum((p * bins).astype(np.int64), bins - 1)
    cnt = np.bincount(b, minlength=bins)
    pred = np.bincount(b, p, bins)
    obs = np.bincount(b, y, bins)
    value = float(np.abs(obs - pred).sum() / n)
    out = tuple(
        {
            "lo": i / bins,
            "hi": (i + 1) / bins,
            "count": int(cnt[i]),
            "predicted": float(pred[i] / cnt[i]) if cnt[i] else None,
            "observed": float(obs[i] / cnt[i]) if cnt[i] else None,
        }
        for i in range(bins)
    )
    return Calibration(value, n, out)


TIE_RELATIVE = 1e-9


def _snap_ties(values: np.ndarray) -> np.ndarray:
    """Means equal in exact arithmetic can differ in the last bits (0.1 + 0.2 over 2
    is not 0.15 in floats), which would rank an exact tie as a strict order. Values
    within ``TIE_RELATIVE`` of the largest magnitude of their neighbour (sorted, chained)
    are set to the group's first value, so they get scipy's averaged tie ranks."""
    out = values.astype(np.float64).copy()
    if len(out) < 2:
        return out
    order = np.argsort(out, kind="stable")
    scale = max(1.0, float(np.abs(out).max()))
    start = out[order[0]]
    for prev, cur in zip(order[:-1], order[1:], strict=True):
        if values[cur] - values[prev] <= TIE_RELATIVE * scale:
            out[cur] = start
        else:
            start = out[cur]
    return out


def query_spearman(
    query_ids: Sequence[str],
    scores: Sequence[float] | np.ndarray,
    grades: Sequence[float | Fraction],
) -> float | None:
    """Spearman, across queries, of the per-query mean score against the per-query
    mean grade (one entry per document; every document weighs the same). None with
    fewer than 3 queries or a constant side.

    Grades are averaged exactly (``Fraction``; pass a document's mean grade as
    ``Fraction(sum, count)``): queries whose mean grades are equal are tied ranks, as
    the paper reads them. Averaging rounded floats would split such ties by the last
    bit (e.g. documents graded 7/3 and 8/3 against 5/3 and 10/3). Scores are floats:
    per-query means equal up to float rounding are exact ties (``_snap_ties``)."""
    s = np.asarray(scores, dtype=np.float64)
    if not (len(query_ids) == len(s) == len(grades)):
        raise ValueError("query_ids, scores and grades differ in length")
    keys, inv = np.unique(
        np.asarray(query_ids, dtype=object).astype(str), return_inverse=True
    )
    if len(keys) < 3:
        return None
    cnt = np.bincount(inv)
    mean_s = _snap_ties(np.bincount(inv, s) / cnt)
    sums = [Fraction(0)] * len(keys)
    for q, g in zip(inv.tolist(), grades, strict=True):
        sums[q] += g if isinstance(g, Fraction) else Fraction(g)
    exact = [total / int(n) for total, n in zip(sums, cnt, strict=True)]
    # Spearman depends on ranks only: rank the exact means by their sorted position.
    order = {value: rank for rank, value in enumerate(sorted(set(exact)))}
    mean_g = np.array([order[value] for value in exact], dtype=np.float64)
    if np.ptp(mean_s) == 0 or np.ptp(mean_g) == 0:
        return None
    rho = float(spearmanr(mean_s, mean_g).statistic)
    return None if math.isnan(rho) else rho
