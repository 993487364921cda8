"""Annotator severity: a many-facet Rasch model (rating scale) over the grades.

Grades are ordered categories 0..K (the rubric's "most stringent yes"). For the
grade x of item i (a document of a query) by annotator a,

    P(x = k) ∝ exp(k (θ_i − s_a) − Σ_{j≤k} τ_j),

with θ_i ~ N(0, σ²) the item's measure, s_a the annotator's severity (higher =
harsher: they give lower grades to the same documents) and τ_j the step
difficulties shared by everyone. Identification: severities and steps sum to zero.
Fitted by marginal maximum likelihood (items integrated out by Gauss-Hermite
quadrature) with L-BFGS and the analytic gradient.

It is reported *beside* the raw panel means, never instead of them: the fair grade
of an item is its expected grade for an annotator of average severity. Picks and
verdicts never use it. Pure numerics, no Django.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

__all__ = ["SeverityFit", "rasch_severity"]


@dataclass(frozen=True)
class SeverityFit:
    severity: dict[str, float]  # annotator -> logits, mean 0, higher = harsher
    measure: dict[Hashable, float]  # item -> logits
    steps: tuple[float, ...]  # τ_1..τ_K, sum 0
    sigma: float  # spread of the item measures
    raw_mean: dict[Hashable, float]  # item -> mean grade given
    fair_mean: dict[Hashable, float]  # item -> expected grade at severity 0
    ratings: int
    converged: bool

    def as_dict(self) -> dict:
        return {
            "model": "many-facet Rasch (rating scale), marginal ML",
            "ratings": self.ratings,
            "converged": self.converged,
            "severity": dict(sorted(self.severity.items())),
            "steps": list(self.steps),
            "item_sd": self.sigma,
            "severity_sd": float(np.std(list(self.severity.values())))
            if self.severity
            else None,
        }


def _category_probs(eta: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """P(x = k) for every eta (any shape) and category k (last axis)."""
    m = np.arange(cum.size)
    logits = eta[..., None] * m - cum
    return np.exp(logits - logsumexp(logits, axis=-1, keepdims=True))


def rasch_severity(
    ratings: Sequence[tuple[str, Hashable, int]],
    *,
    nodes: int = 41,
    penalty: float = 0.01,
    max_iter: int = 500,
) -> SeverityFit:
    """Fit the model to (annotator, item, grade) triples; grades are integers >= 0.

    Marginal maximum likelihood: item measures are integrated out over N(0, σ²)
    (Gauss-Hermite, ``nodes`` points) and σ is estimated, so severities are not
    inflated the way joint ML inflates them when each item has only a few grades
    (a contest's panel). Item measures and fair grades are posterior means. K is
    the highest grade given; a tiny L2 penalty on the steps keeps a category no
    one used finite. Deterministic. Raises ValueError with fewer than two
    annotators or a single grade value.
    """
    rows = sorted(((str(a), i, int(g)) for a, i, g in ratings), key=repr)
    if not rows:
        raise ValueError("no ratings")
    if min(g for _a, _i, g in rows) < 0:
        raise ValueError("grades must be >= 0")
    raters = sorted({a for a, _i, _g in rows})
    items = sorted({i for _a, i, _g in rows}, key=repr)
    levels = max(g for _a, _i, g in rows)
    if len(raters) < 2 or levels < 1:
        raise ValueError("need two annotators and two grade values")
    r_pos = {a: n for n, a in enumerate(raters)}
    i_pos = {item: n for n, item in enumerate(items)}
    r_idx = np.array([r_pos[a] for a, _i, _g in rows])
    i_idx = np.array([i_pos[i] for _a, i, _g in rows])
    x = np.array([g for _a, _i, g in rows])
    n_i, n_r, n_k = len(items), len(raters), levels
    m = np.arange(n_k + 1)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    log_w = np.log(w / w.sum())
    onehot = np.zeros((x.size, n_k + 1))
    onehot[np.arange(x.size), x] = 1.0

    def unpack(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        s, tau = v[:n_r], v[n_r : n_r + n_k]
        return s - s.mean(), tau - tau.mean(), float(np.exp(v[-1]))

    def posterior(s: np.ndarray, tau: np.ndarray, sigma: float) -> tuple:
        cum = np.concatenate([[0.0], np.cumsum(tau)])
        theta = sigma * z  # (Q,)
        eta = theta[None, :] - s[r_idx][:, None]  # (N, Q)
        p = _category_probs(eta, cum)  # (N, Q, K+1)
        logp = np.log(np.take_along_axis(p, x[:, None, None], axis=2)[..., 0])
        item_ll = np.zeros((n_i, nodes))
        np.add.at(item_ll, i_idx, logp)
        joint = item_ll + log_w
        norm = logsumexp(joint, axis=1)
        post = np.exp(joint - norm[:, None])  # (I, Q)
        return theta, p, post, float(norm.sum())

    def objective(v: np.ndarray) -> tuple[float, np.ndarray]:
        s, tau, sigma = unpack(v)
        theta, p, post, ll = posterior(s, tau, sigma)
        weight = post[i_idx]  # (N, Q): d ll / d logp[n, q]
        resid = weight * (x[:, None] - p @ m)  # d ll / d eta
        g_s = -np.bincount(r_idx, weights=resid.sum(axis=1), minlength=n_r)
        g_s -= g_s.mean()
        g_log_sigma = float((resid * theta[None, :]).sum())
        d_cum = np.einsum("nq,nqk->k", weight, p) - weight.sum(axis=1) @ onehot
        d_tau = np.cumsum(d_cum[::-1])[::-1][1:]
        d_tau -= d_tau.mean()
        value = -ll + 0.5 * penalty * (tau @ tau)
        grad = -np.concatenate([g_s, d_tau, [g_log_sigma]])
        grad[n_r : n_r + n_k] += penalty * tau
        return value, grad

    start = np.zeros(n_r + n_k + 1)
    result = minimize(
        objective,
        start,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "gtol": 1e-7},
    )
    s, tau, sigma = unpack(result.x)
    theta, _p, post, _ll = posterior(s, tau, sigma)
    cum = np.concatenate([[0.0], np.cumsum(tau)])
    fair_at = _category_probs(theta, cum) @ m  # expected grade per node, severity 0
    sums = np.bincount(i_idx, weights=x, minlength=n_i)
    counts = np.bincount(i_idx, minlength=n_i)
    return SeverityFit(
        severity={a: float(s[n]) for n, a in enumerate(raters)},
        measure={item: float(post[n] @ theta) for n, item in enumerate(items)},
        steps=tuple(float(t) for t in tau),
        raw_mean={item: float(sums[n] / counts[n]) for n, item in enumerate(items)},
        fair_mean={item: float(post[n] @ fair_at) for n, item in enumerate(items)},
        sigma=sigma,
        ratings=int(x.size),
        converged=bool(result.success),
    )
