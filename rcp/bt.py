"""Weighted soft-label Bradley-Terry fit for listwise tournament windows (Stage A).

Conventions follow rcp_facts sections 1.1 and 1.2; see README.md beside this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dposv
from scipy.special import expit

__all__ = [
    "LABEL_CLIP",
    "BT_L2",
    "BTResult",
    "aggregate_pairs",
    "fit_bt",
    "ragged_window_pairs",
    "window_pair_weight",
    "window_pairs",
    "window_pairs_batch",
]

LABEL_CLIP = (0.01, 0.99)
BT_L2 = 1e-4
# Pair aggregation sums on a dense n x n key grid up to this many cells (pools of a
# few hundred documents); beyond it, a sort of the 1-D keys.
_DENSE_KEYS = 1 << 22


def window_pair_weight(w: int) -> float:
    """Pair weight in a window of ``w`` docs: 2 / max(w, 2), so w - 1 in total."""
    return 2.0 / max(int(w), 2)


def window_pairs(
    doc_index: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All unordered pairs of one window as (winners, losers, labels, weights).

    ``doc_index[i]`` is the document shown at prompt position i, ``scores[i]`` its
    judge score. Winner = higher score, label = clip(sigmoid(|ds|), 0.01, 0.99),
    weight = 2 / max(w, 2); on an exact tie the earlier-listed document wins at 0.5.
    """
    doc_index = np.asarray(doc_index, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if doc_index.ndim != 1 or doc_index.shape != scores.shape:
        raise ValueError("doc_index and scores must be 1-D arrays of equal length")
    if not np.all(np.isfinite(scores)):
        raise ValueError("window scores must be finite")
    w = doc_index.size
    first, second = np.triu_indices(w, k=1)
    diff = scores[first] - scores[second]
    # diff >= 0 keeps the earlier-listed document as winner on an exact tie.
    first_wins = diff >= 0
    winners = np.where(first_wins, doc_index[first], doc_index[second])
    losers = np.where(first_wins, doc_index[second], doc_index[first])
    labels = np.clip(expit(np.abs(diff)), *LABEL_CLIP)
    weights = np.full(first.size, window_pair_weight(w))
    return winners, losers, labels, weights


def window_pairs_batch(
    doc_index: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``window_pairs`` of W windows of equal size w at once, from (W, w) arrays.

    Row i of ``doc_index``/``scores`` is one window in prompt order. The output is
    exactly the concatenation of ``window_pairs(doc_index[i], scores[i])`` over i
    (same rows, same order, same floats).
    """
    doc_index = np.asarray(doc_index, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    if doc_index.ndim != 2 or doc_index.shape != scores.shape:
        raise ValueError("doc_index and scores must be (windows, w) arrays alike")
    if not np.all(np.isfinite(scores)):
        raise ValueError("window scores must be finite")
    w = doc_index.shape[1]
    first, second = np.triu_indices(w, k=1)
    diff = (scores[:, first] - scores[:, second]).ravel()
    first_wins = diff >= 0
    a = doc_index[:, first].ravel()
    b = doc_index[:, second].ravel()
    winners = np.where(first_wins, a, b)
    losers = np.where(first_wins, b, a)
    labels = np.clip(expit(np.abs(diff)), *LABEL_CLIP)
    weights = np.full(diff.size, window_pair_weight(w))
    return winners, losers, labels, weights


def ragged_window_pairs(
    sizes: np.ndarray, doc_index: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``window_pairs`` of windows of any sizes, given flat: window i holds the next
    ``sizes[i]`` entries of ``doc_index``/``scores``.

    Windows of one size are paired in one vectorised call; the output is exactly the
    concatenation of the per-window ``window_pairs`` in window order.
    """
    sizes = np.asarray(sizes, dtype=np.int64).ravel()
    doc_index = np.asarray(doc_index, dtype=np.int64).ravel()
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if np.any(sizes < 0) or sizes.sum() != doc_index.size:
        raise ValueError("window sizes must be non-negative and cover doc_index")
    if scores.shape != doc_index.shape:
        raise ValueError("doc_index and scores must have equal length")
    starts = np.cumsum(sizes) - sizes
    n_pairs = sizes * (sizes - 1) // 2
    pair_starts = np.cumsum(n_pairs) - n_pairs
    total = int(n_pairs.sum())
    winners = np.empty(total, dtype=np.int64)
    losers = np.empty(total, dtype=np.int64)
    labels = np.empty(total)
    weights = np.empty(total)
    for w in np.unique(sizes[sizes > 1]).tolist():
        which = np.flatnonzero(sizes == w)
        take = starts[which, None] + np.arange(w)
        parts = window_pairs_batch(doc_index[take], scores[take])
        where = (pair_starts[which, None] + np.arange(w * (w - 1) // 2)).ravel()
        for out, part in zip((winners, losers, labels, weights), parts, strict=True):
            out[where] = part
    return winners, losers, labels, weights


def aggregate_pairs(
    winners: np.ndarray,
    losers: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Collapse soft pairs to one row per unordered document pair.

    Weights add and labels become weight-averaged (orientation-corrected), so the BT
    objective, its gradient and the SE are unchanged. Rows are oriented so that
    label >= 0.5 and sorted by (winner, loser); zero-weight pairs are dropped.
    """
    return _aggregate(*_as_pair_arrays(winners, losers, labels, weights))


def _aggregate(
    winners: np.ndarray, losers: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lo = np.minimum(winners, losers)
    hi = np.maximum(winners, losers)
    # Probability that `lo` beats `hi`, whatever the row's orientation.
    p_lo = np.where(winners == lo, labels, 1.0 - labels)
    # One integer key per unordered pair; bincount adds in input order on either
    # path, so the sums do not depend on which path runs.
    span = int(hi.max()) + 1 if hi.size else 1
    if span > 2**31:  # pragma: no cover - keys would overflow int64
        raise ValueError("document indices beyond 2^31 are not supported")
    key = lo * span + hi
    if span * span <= _DENSE_KEYS:
        total_w = np.bincount(key, weights=weights, minlength=span * span)
        sum_wp = np.bincount(key, weights=weights * p_lo, minlength=span * span)
        uniq = np.flatnonzero(np.bincount(key, minlength=span * span))
        total_w, sum_wp = total_w[uniq], sum_wp[uniq]
    else:
        uniq, inverse = np.unique(key, return_inverse=True)
        total_w = np.bincount(inverse, weights=weights, minlength=uniq.size)
        sum_wp = np.bincount(inverse, weights=weights * p_lo, minlength=uniq.size)
    uniq_lo, uniq_hi = np.divmod(uniq, span)
    keep = total_w > 0
    uniq_lo, uniq_hi = uniq_lo[keep], uniq_hi[keep]
    total_w, sum_wp = total_w[keep], sum_wp[keep]
    p = sum_wp / total_w
    lo_wins = p >= 0.5
    out_w = np.where(lo_wins, uniq_lo, uniq_hi)
    out_l = np.where(lo_wins, uniq_hi, uniq_lo)
    out_y = np.where(lo_wins, p, 1.0 - p)
    order = np.lexsort((out_l, out_w))
    return out_w[order], out_l[order], out_y[order], total_w[order]


@dataclass(frozen=True)
class BTResult:
    """Fitted BT abilities: ``theta`` mean-zero over compared docs, ``se`` per doc,
    ``raw`` the uncentred optimum (use as ``init`` for warm starts)."""

    theta: np.ndarray
    se: np.ndarray
    raw: np.ndarray
    converged: bool = True
    n_iter: int = 0


def fit_bt(
    winners: np.ndarray,
    losers: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    n_docs: int,
    *,
    l2: float = BT_L2,
    init: np.ndarray | None = None,
    gtol: float = 1e-11,
    ftol: float = 1e-15,
) -> BTResult:
    """Weighted soft-label BT: minimise sum_k w_k BCE_k / sum_k w_k + l2/2 |raw|^2.

    Pairs may be raw window rows or ``aggregate_pairs`` output (same optimum); the fit
    aggregates internally. ``init`` is a previous ``raw`` (warm start). SE_i =
    1/sqrt(sum_k w_k p_k(1-p_k) + l2) over i's comparisons (unnormalised weights).
    Documents without comparisons get theta 0 and are excluded from the centring.
    The default tolerances converge fully (calibration); window scheduling passes the
    reference's looser live-fit tolerances (gtol 1e-7, ftol 1e-9), ~50x faster.
    """
    if n_docs < 0:
        raise ValueError("n_docs must be non-negative")
    winners, losers, labels, weights = _as_pair_arrays(winners, losers, labels, weights)
    if winners.size and (
        min(winners.min(), losers.min()) < 0
        or max(winners.max(), losers.max()) >= n_docs
    ):
        raise ValueError("document index out of range [0, n_docs)")
    if init is None:
        x0 = np.zeros(n_docs)
    else:
        x0 = np.asarray(init, dtype=np.float64).copy()
        if x0.shape != (n_docs,):
            raise ValueError("init must have shape (n_docs,)")

    win, los, y, w = _aggregate(winners, losers, labels, weights)
    compared = np.zeros(n_docs, dtype=bool)
    compared[win] = True
    compared[los] = True
    if win.size == 0:
        zeros = np.zeros(n_docs)
        return BTResult(theta=zeros, se=np.full(n_docs, 1.0 / np.sqrt(l2)), raw=zeros)

    total = w.sum()
    wn = w / total

    def objective(raw: np.ndarray) -> tuple[float, np.ndarray]:
        d = raw[win] - raw[los]
        # BCE(y, sigmoid(d)) = softplus(d) - y d, stable for large |d|.
        loss = float(wn @ (np.logaddexp(0.0, d) - y * d)) + 0.5 * l2 * float(raw @ raw)
        r = wn * (expit(d) - y)
        grad = np.bincount(win, r, n_docs) - np.bincount(los, r, n_docs) + l2 * raw
        return loss, grad

    x, converged, n_iter = _newton(
        objective, win, los, wn, n_docs, l2, x0, gtol=gtol, ftol=ftol
    )
    raw = np.where(compared, x, 0.0)
    theta = np.where(compared, raw - raw[compared].mean(), 0.0)
    p = expit(raw[win] - raw[los])
    info = np.bincount(win, w * p * (1 - p), n_docs) + np.bincount(
        los, w * p * (1 - p), n_docs
    )
    se = 1.0 / np.sqrt(info + l2)
    return BTResult(theta=theta, se=se, raw=raw, converged=converged, n_iter=n_iter)


def _newton(
    objective,
    win: np.ndarray,
    los: np.ndarray,
    wn: np.ndarray,
    n: int,
    l2: float,
    x0: np.ndarray,
    *,
    gtol: float,
    ftol: float,
    maxiter: int = 200,
) -> tuple[np.ndarray, bool, int]:
    """Damped Newton on the (strictly convex, ridge l2 > 0) BT objective.

    The Hessian is the weighted pair Laplacian plus l2*I, dense n x n: at pool sizes
    (<= a few hundred documents) one solve costs far less than the hundreds of
    gradient steps a quasi-Newton method needs on this ill-conditioned problem.
    Stops when max|grad| <= gtol or the objective improves by less than ftol
    (converged); returns (x, converged, iterations).
    """
    x = x0
    fx, g = objective(x)
    diag_idx = np.arange(n)
    for it in range(maxiter):
        if np.max(np.abs(g)) <= gtol:
            return x, True, it
        p = expit(x[win] - x[los])
        h = wn * p * (1.0 - p)
        hess = np.bincount(win * n + los, h, n * n).reshape(n, n)
        hess = -(hess + hess.T)
        hess[diag_idx, diag_idx] += np.bincount(win, h, n) + np.bincount(los, h, n) + l2
        # Cholesky (the Hessian is symmetric positive definite for l2 > 0); with one
        # BLAS thread this is the cheapest dense solve at pool sizes.
        _c, step, info = dposv(hess.T, g, lower=1, overwrite_a=1)
        if info != 0:  # pragma: no cover - l2 > 0 keeps it definite
            step = g
        t, slope = 1.0, float(g @ step)
        while True:
            x_new = x - t * step
            f_new, g_new = objective(x_new)
            if f_new <= fx - 1e-4 * t * slope or t < 1e-10:
                break
            t *= 0.5
        improved = fx - f_new
        x, fx, g = x_new, f_new, g_new
        if improved <= ftol * max(1.0, abs(fx)):
            return x, True, it + 1
    return x, bool(np.max(np.abs(g)) <= gtol), maxiter


def _as_pair_arrays(
    winners: np.ndarray, losers: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    winners = np.asarray(winners, dtype=np.int64).ravel()
    losers = np.asarray(losers, dtype=np.int64).ravel()
    labels = np.asarray(labels, dtype=np.float64).ravel()
    weights = np.asarray(weights, dtype=np.float64).ravel()
    n = winners.size
    if not (losers.size == labels.size == weights.size == n):
        raise ValueError("winners, losers, labels and weights must have equal length")
    if np.any(winners == losers):
        raise ValueError("a document cannot be compared with itself")
    if np.any((labels < 0) | (labels > 1)) or not np.all(np.isfinite(labels)):
        raise ValueError("labels must lie in [0, 1]")
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("weights must be finite and non-negative")
    return winners, losers, labels, weights
