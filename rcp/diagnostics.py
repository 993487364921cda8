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


def _mean_abs_offdiag_corr(x: np.ndarray) -> float | None:
    if x.shape[0] < 2:
        return None
    sd = x.std(axis=0)
    keep = sd > 0
    if keep.sum() < 2:
        return None
    c = np.corrcoef(x[:, keep], rowvar=False)
    iu = np.triu_indices(c.shape[0], k=1)
    return float(np.abs(c[iu]).mean())


def criterion_correlation(answers: np.ndarray, predicted: np.ndarray) -> dict:
    """Mean |correlation| between criteria over placements: raw answers, and the
    residuals answers - P(pass | ability) (local dependence left after the model).
    Constant criteria are left out; fewer than two usable criteria gives None."""
    y = np.asarray(answers, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    return {
        "raw": _mean_abs_offdiag_corr(y),
        "conditional": _mean_abs_offdiag_corr(y - p),
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
