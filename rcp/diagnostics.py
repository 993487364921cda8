"""Calibration diagnostics (rcp_facts 4.4): reliability of predicted pass
probabilities, criterion correlations raw vs conditional on ability, spread.

Pure numpy. Inputs are aggregated pass counts, so cost follows documents, not rows.
"""

from __future__ import annotations

import numpy as np

__all__ = ["criterion_correlation", "reliability", "spread"]

N_BINS = 10


def reliability(
    predicted: np.ndarray, n: np.ndarray, passes: np.ndarray, *, bins: int = N_BINS
) -> dict:
    """ECE and Brier of predicted pass probabilities against observed verdicts.

    ``predicted`` and ``passes`` are (rows, C), ``n`` the placements per row; every
    placement x criterion is one prediction. Equal-width bins on [0, 1]; ECE = sum
    over bins of (count / N) |observed rate - mean predicted|. Returns overall and
    per-criterion ECE/Brier and the bins (count, mean predicted, observed rate).
    """
    p = np.asarray(predicted, dtype=np.float64)
    s = np.asarray(passes, dtype=np.float64)
    w = np.broadcast_to(np.asarray(n, dtype=np.float64)[:, None], p.shape)

    def summarise(p: np.ndarray, s: np.ndarray, w: np.ndarray) -> dict:
        total = w.sum()
        if total == 0:
            return {"ece": None, "brier": None, "n": 0, "bins": []}
        b = np.minimum((p * bins).astype(np.int64), bins - 1)
        cnt = np.bincount(b, w, bins)
        pred = np.bincount(b, w * p, bins)
        obs = np.bincount(b, s, bins)
        nz = cnt > 0
        ece = float((np.abs(obs[nz] - pred[nz])).sum() / total)
        brier = float((s * (1 - p) ** 2 + (w - s) * p**2).sum() / total)
        out_bins = [
            {
                "lo": i / bins,
                "hi": (i + 1) / bins,
                "count": int(round(cnt[i])),
                "predicted": float(pred[i] / cnt[i]) if cnt[i] else None,
                "observed": float(obs[i] / cnt[i]) if cnt[i] else None,
            }
            for i in range(bins)
        ]
        return {"ece": ece, "brier": brier, "n": int(round(total)), "bins": out_bins}

    overall = summarise(p.ravel(), s.ravel(), w.ravel())
    per = [summarise(p[:, c], s[:, c], w[:, c]) for c in range(p.shape[1])]
    overall["per_criterion"] = [
        {"ece": x["ece"], "brier": x["brier"], "n": x["n"]} for x in per
    ]
    return overall


def _mean_abs_offdiag_corr(
    n: int, total: np.ndarray, cross: np.ndarray
) -> float | None:
    """Mean |correlation| over criterion pairs from moments: n rows, column sums and
    the cross-product matrix. Constant columns are left out."""
    if n < 2:
        return None
    mean = total / n
    cov = cross / n - np.outer(mean, mean)
    var = np.diag(cov).copy()
    keep = var > 1e-12 * np.maximum(1.0, np.abs(np.diag(cross) / n))
    if keep.sum() < 2:
        return None
    sd = np.sqrt(var[keep])
    c = cov[np.ix_(keep, keep)] / np.outer(sd, sd)
    iu = np.triu_indices(c.shape[0], k=1)
    return float(np.abs(c[iu]).mean())


def criterion_correlation(
    answers: np.ndarray,
    predicted: np.ndarray,
    *,
    unit: np.ndarray | None = None,
    chunk: int = 1 << 20,
) -> dict:
    """Mean |correlation| between criteria over placements: raw answers, and the
    residuals answers - P(pass | ability) (local dependence left after the model).

    ``predicted`` is (placements, C), or with ``unit`` given, (units, C) indexed by
    ``unit[p]`` per placement. Placements are accumulated in chunks as moments, so
    memory stays flat at any scale. Constant criteria are left out; fewer than two
    usable criteria gives None.
    """
    y_all = np.asarray(answers)
    n = y_all.shape[0]
    c = y_all.shape[1] if y_all.ndim == 2 else 0
    sums = {"raw": np.zeros(c), "conditional": np.zeros(c)}
    cross = {"raw": np.zeros((c, c)), "conditional": np.zeros((c, c))}
    for lo in range(0, n, chunk):
        y = y_all[lo : lo + chunk].astype(np.float64)
        if unit is None:
            p = np.asarray(predicted[lo : lo + chunk], dtype=np.float64)
        else:
            p = np.asarray(predicted, dtype=np.float64)[unit[lo : lo + chunk]]
        r = y - p
        for key, x in (("raw", y), ("conditional", r)):
            sums[key] += x.sum(axis=0)
            cross[key] += x.T @ x
    return {
        key: _mean_abs_offdiag_corr(n, sums[key], cross[key]) if c else None
        for key in ("raw", "conditional")
    }


def spread(values: np.ndarray) -> dict:
    """p5 / median / p95 of positive values (e.g. per-query tau) and the p95/p5 ratio."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"p5": None, "median": None, "p95": None, "ratio": None, "n": 0}
    p5, med, p95 = np.quantile(v, [0.05, 0.5, 0.95])
    return {
        "p5": float(p5),
        "median": float(med),
        "p95": float(p95),
        "ratio": float(p95 / p5) if p5 > 0 else None,
        "n": int(v.size),
    }
