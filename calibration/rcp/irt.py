"""2PL calibration of rubric verdicts (rcp_facts section 4).

Tournament mode: P(pass) = sigmoid(gamma_c (tau_j theta_BT_i + alpha_j - beta_c)) with
frozen BT abilities, shared items and per-query (tau_j > 0, alpha_j), fitted by MAP.
Rubric-only mode: Binomial 2PL with a latent N(0, 1) ability integrated on a grid,
EAP abilities, then rescaled to sum(gamma) = C and mean(beta) = 0.
Inputs are pass counts per (document, criterion) over the document's placements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logsumexp

__all__ = [
    "QUAD",
    "Priors",
    "RubricOnlyFit",
    "TournamentFit",
    "aggregate_rubric",
    "fit_calibration",
    "fit_rubric_only",
    "fit_tournament",
]

QUAD = np.linspace(-18.0, 10.0, 561)
_U_CAP = 10.0  # log-weight cap: gamma_c <= C * exp(10) / (sum of the others)
_GAMMA_BOUNDS = (0.05, 20.0)
_BETA_BOUNDS = (-10.0, 10.0)
_P_CLIP = 1e-9
_MAX_ITEM_WEIGHT = 0.90
_MIN_PASS_SHARE = 0.02


@dataclass(frozen=True)
class Priors:
    """MAP priors: tau ~ N(1, sigma_tau^2), alpha ~ N(0, sigma_alpha^2), ridges on the
    raw item parameters; ``ability_sd`` is the rubric-only latent prior SD."""

    sigma_tau: float = 1.0
    sigma_alpha: float = 2.0
    l2_gamma: float = 1e-4
    l2_beta: float = 1e-4
    ability_sd: float = 1.0


def aggregate_rubric(
    unit: np.ndarray, answers: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Collapse placements to (units, placements, passes[U, C]).

    ``unit[p]`` identifies the (query, document) of placement p and ``answers[p]`` its
    0/1 verdicts; units come back sorted ascending.
    """
    unit = np.asarray(unit).ravel()
    answers = np.asarray(answers)
    if answers.ndim != 2 or answers.shape[0] != unit.size:
        raise ValueError("answers must be (placements, criteria) aligned with unit")
    if not np.isin(answers, (0, 1)).all():
        raise ValueError("verdicts must be 0 or 1")
    units, inverse = np.unique(unit, return_inverse=True)
    inverse = inverse.ravel()
    n = np.bincount(inverse, minlength=units.size)
    passes = np.zeros((units.size, answers.shape[1]), dtype=np.int64)
    np.add.at(passes, inverse, answers.astype(np.int64))
    return units, n, passes


@dataclass(frozen=True)
class TournamentFit:
    """Tournament-mode fit; ``theta``/``theta_se`` per input row (NaN without BT).

    ``query_has_rubric`` marks queries pinned by data rather than by the priors.
    """

    gamma: np.ndarray
    beta: np.ndarray
    tau: np.ndarray
    alpha: np.ndarray
    theta: np.ndarray
    theta_se: np.ndarray
    query_has_rubric: np.ndarray
    n_skipped: int
    loss: float
    converged: bool
    n_iter: int
    mode: Literal["tournament"] = "tournament"


def _check_counts(n: np.ndarray, passes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(n, dtype=np.float64).ravel()
    passes = np.asarray(passes, dtype=np.float64)
    if passes.ndim != 2 or passes.shape[0] != n.size:
        raise ValueError("passes must be (rows, criteria) aligned with n")
    if np.any(n < 0) or np.any(passes < 0) or np.any(passes > n[:, None]):
        raise ValueError("need 0 <= passes <= placements")
    return n, passes


def fit_tournament(
    query: np.ndarray,
    theta_bt: np.ndarray,
    n: np.ndarray,
    passes: np.ndarray,
    *,
    n_queries: int | None = None,
    theta_bt_se: np.ndarray | None = None,
    priors: Priors = Priors(),
    maxiter: int = 5000,
) -> TournamentFit:
    """MAP 2PL over frozen BT abilities, one row per (query, document).

    Objective: mean_{placement, c} BCE + prior/(N C) on (tau, alpha) + ridge on the
    softmax logits u (gamma = C softmax(min(u, 10))) and raw v (beta = v - mean v).
    Rows with NaN ``theta_bt`` are skipped; rows with n = 0 only receive a theta.
    """
    query = np.asarray(query, dtype=np.int64).ravel()
    theta_bt = np.asarray(theta_bt, dtype=np.float64).ravel()
    n, passes = _check_counts(n, passes)
    if not (query.size == theta_bt.size == n.size):
        raise ValueError("query, theta_bt and n must have one entry per row")
    n_q = int(
        n_queries if n_queries is not None else (query.max() + 1 if query.size else 0)
    )
    if query.size and (query.min() < 0 or query.max() >= n_q):
        raise ValueError("query index out of range")
    n_crit = passes.shape[1]
    usable = ~np.isnan(theta_bt)
    fit_rows = usable & (n > 0)
    # Sorting makes float summation, hence the optimum, independent of row order.
    order = np.lexsort(
        (*passes[fit_rows].T[::-1], n[fit_rows], theta_bt[fit_rows], query[fit_rows])
    )
    q_f = query[fit_rows][order]
    th_f = theta_bt[fit_rows][order]
    n_f = n[fit_rows][order]
    s_f = passes[fit_rows][order]
    total = n_f.sum() * n_crit
    if total == 0:
        raise ValueError("no rubric placements on documents with a BT ability")
    p = priors
    k_tau = 1.0 / (p.sigma_tau**2 * total)
    k_alpha = 1.0 / (p.sigma_alpha**2 * total)
    t0 = np.log(np.expm1(1.0))

    def unpack(x: np.ndarray) -> tuple[np.ndarray, ...]:
        u, v = x[:n_crit], x[n_crit : 2 * n_crit]
        t, a = x[2 * n_crit : 2 * n_crit + n_q], x[2 * n_crit + n_q :]
        return u, v, t, a

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        u, v, t, a = unpack(x)
        uc = np.minimum(u, _U_CAP)
        gamma = n_crit * np.exp(uc - logsumexp(uc))
        beta = v - v.mean()
        tau = np.logaddexp(0.0, t)
        xi = tau[q_f] * th_f + a[q_f]
        z = gamma * (xi[:, None] - beta)
        nll = (n_f[:, None] * np.logaddexp(0.0, z) - s_f * z).sum() / total
        prior = 0.5 * (k_tau * ((tau - 1.0) ** 2).sum() + k_alpha * (a**2).sum())
        ridge = 0.5 * (p.l2_gamma * (u @ u) + p.l2_beta * (v @ v))
        r = (n_f[:, None] * expit(z) - s_f) / total
        g_gamma = (r * (xi[:, None] - beta)).sum(axis=0)
        g_beta = -gamma * r.sum(axis=0)
        g_xi = r @ gamma
        g_tau = np.bincount(q_f, g_xi * th_f, n_q) + k_tau * (tau - 1.0)
        g_a = np.bincount(q_f, g_xi, n_q) + k_alpha * a
        g_uc = gamma * g_gamma - gamma / n_crit * (gamma @ g_gamma)
        g_u = np.where(u < _U_CAP, g_uc, 0.0) + p.l2_gamma * u
        g_v = g_beta - g_beta.mean() + p.l2_beta * v
        g_t = g_tau * expit(t)
        grad = np.concatenate([g_u, g_v, g_t, g_a])
        return float(nll + prior + ridge), grad

    x0 = np.concatenate([np.zeros(2 * n_crit), np.full(n_q, t0), np.zeros(n_q)])
    res = minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": maxiter, "maxcor": 100, "ftol": 1e-15, "gtol": 1e-12},
    )
    u, v, t, a = unpack(res.x)
    uc = np.minimum(u, _U_CAP)
    gamma = n_crit * np.exp(uc - logsumexp(uc))
    beta = v - v.mean()
    tau = np.logaddexp(0.0, t)
    theta = np.where(usable, tau[query] * theta_bt + a[query], np.nan)
    if theta_bt_se is None:
        theta_se = np.full(theta.shape, np.nan)
    else:
        se = np.asarray(theta_bt_se, dtype=np.float64).ravel()
        theta_se = np.where(usable, tau[query] * se, np.nan)
    has_rubric = np.bincount(q_f, n_f, n_q) > 0
    return TournamentFit(
        gamma=gamma,
        beta=beta,
        tau=tau,
        alpha=a.copy(),
        theta=theta,
        theta_se=theta_se,
        query_has_rubric=has_rubric,
        n_skipped=int((~usable & (n > 0)).sum()),
        loss=float(res.fun),
        converged=bool(res.success),
        n_iter=int(res.nit),
    )


@dataclass(frozen=True)
class RubricOnlyFit:
    """Rubric-only fit on the reported scale (sum gamma = C, mean beta = 0).

    ``theta``/``theta_se`` are EAP means/SDs per input row; the ability prior on the
    reported scale is N(prior_mean, prior_sd). ``raw_*`` are the un-rescaled optimum.
    """

    gamma: np.ndarray
    beta: np.ndarray
    theta: np.ndarray
    theta_se: np.ndarray
    prior_mean: float
    prior_sd: float
    raw_gamma: np.ndarray
    raw_beta: np.ndarray
    ordinal_only: bool
    loss: float
    converged: bool
    n_iter: int
    mode: Literal["rubric_only"] = "rubric_only"


def _grid_loglik(
    gamma: np.ndarray, beta: np.ndarray, grid: np.ndarray, n: np.ndarray, s: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log-likelihood (P, G), p (G, C), z (G, C), unclipped mask) for patterns."""
    z = gamma * (grid[:, None] - beta)
    raw = expit(z)
    prob = np.clip(raw, _P_CLIP, 1.0 - _P_CLIP)
    inside = (raw > _P_CLIP) & (raw < 1.0 - _P_CLIP)
    loglik = s @ np.log(prob).T + (n[:, None] - s) @ np.log1p(-prob).T
    return loglik, prob, z, inside


def fit_rubric_only(
    n: np.ndarray,
    passes: np.ndarray,
    *,
    priors: Priors = Priors(),
    grid: np.ndarray = QUAD,
    maxiter: int = 800,
) -> RubricOnlyFit:
    """Marginal-ML Binomial 2PL over a latent ability grid, then EAP abilities.

    One row per (query, document) with its placements ``n`` and pass counts. Raises if
    one criterion holds > 90% of the gamma weight; flags ``ordinal_only`` when every
    gamma sits at the upper bound or < 2% of documents pass any criterion.
    """
    n, passes = _check_counts(n, passes)
    if n.size == 0 or np.any(n == 0):
        raise ValueError("every row needs at least one rubric placement")
    n_crit = passes.shape[1]
    patterns, inverse, counts = np.unique(
        np.column_stack([n, passes]), axis=0, return_inverse=True, return_counts=True
    )
    inverse = inverse.ravel()
    pn, ps = patterns[:, 0], patterns[:, 1:]
    counts = counts.astype(np.float64)
    log_w = -0.5 * (grid / priors.ability_sd) ** 2
    log_w -= logsumexp(log_w)

    # Summed (not mean) NLL with scipy's default tolerances, as the reference does:
    # its published item values are this stopping point, ~3e-4 from the full optimum.
    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        gamma, beta = np.exp(x[:n_crit]), x[n_crit:]
        loglik, prob, z, inside = _grid_loglik(gamma, beta, grid, pn, ps)
        joint = loglik + log_w
        log_m = logsumexp(joint, axis=1)
        post = np.exp(joint - log_m[:, None]) * counts[:, None]
        s_q = post.T @ ps
        n_q = post.T @ pn
        dz = np.where(inside, s_q - n_q[:, None] * prob, 0.0)
        g_loggamma = -(dz * z).sum(axis=0)
        g_beta = (dz * gamma).sum(axis=0)
        return float(-(counts @ log_m)), np.concatenate([g_loggamma, g_beta])

    x0 = np.concatenate([np.zeros(n_crit), np.linspace(1.0, 4.0, n_crit)])
    bounds = [tuple(np.log(_GAMMA_BOUNDS))] * n_crit + [_BETA_BOUNDS] * n_crit
    res = minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": maxiter},
    )
    raw_gamma, raw_beta = np.exp(res.x[:n_crit]), res.x[n_crit:]
    if raw_gamma.max() / raw_gamma.sum() > _MAX_ITEM_WEIGHT:
        raise ValueError(
            "one criterion holds more than 90% of the discrimination weight; "
            "the rubric does not identify a 2PL scale"
        )
    loglik, *_ = _grid_loglik(raw_gamma, raw_beta, grid, pn, ps)
    joint = loglik + log_w
    post = np.exp(joint - logsumexp(joint, axis=1)[:, None])
    eap = post @ grid
    sd = np.sqrt(np.clip(post @ grid**2 - eap**2, 0.0, None))
    scale = raw_gamma.sum() / n_crit
    shift = -scale * raw_beta.mean()
    ordinal_only = bool(
        np.all(raw_gamma >= 0.999 * _GAMMA_BOUNDS[1])
        or (passes.sum(axis=1) > 0).mean() < _MIN_PASS_SHARE
    )
    return RubricOnlyFit(
        gamma=raw_gamma / scale,
        beta=scale * (raw_beta - raw_beta.mean()),
        theta=scale * eap[inverse] + shift,
        theta_se=scale * sd[inverse],
        prior_mean=float(shift),
        prior_sd=float(scale * priors.ability_sd),
        raw_gamma=raw_gamma,
        raw_beta=raw_beta,
        ordinal_only=ordinal_only,
        loss=float(res.fun),
        converged=bool(res.success),
        n_iter=int(res.nit),
    )


def fit_calibration(
    query: np.ndarray,
    n: np.ndarray,
    passes: np.ndarray,
    *,
    theta_bt: np.ndarray | None = None,
    theta_bt_se: np.ndarray | None = None,
    n_queries: int | None = None,
    mode: Literal["auto", "tournament", "rubric_only"] = "auto",
    priors: Priors = Priors(),
) -> TournamentFit | RubricOnlyFit:
    """Fit in the requested mode. ``auto``: tournament if every query has BT abilities
    (finite ``theta_bt`` on some row), rubric-only if none; mixed coverage raises
    ValueError listing the counts. Rubric-only uses rows with placements only."""
    query = np.asarray(query, dtype=np.int64).ravel()
    n_q = int(
        n_queries if n_queries is not None else (query.max() + 1 if query.size else 0)
    )
    if mode == "auto":
        if theta_bt is None:
            with_bt = np.zeros(n_q, dtype=bool)
        else:
            finite = ~np.isnan(np.asarray(theta_bt, dtype=np.float64).ravel())
            with_bt = np.bincount(query[finite], minlength=n_q) > 0
        if with_bt.all():
            mode = "tournament"
        elif not with_bt.any():
            mode = "rubric_only"
        else:
            raise ValueError(
                f"mixed coverage: {int(with_bt.sum())} of {n_q} queries have "
                f"tournament abilities (missing: {np.flatnonzero(~with_bt).tolist()})"
            )
    if mode == "tournament":
        if theta_bt is None:
            raise ValueError("tournament mode needs theta_bt")
        return fit_tournament(
            query,
            theta_bt,
            n,
            passes,
            n_queries=n_q,
            theta_bt_se=theta_bt_se,
            priors=priors,
        )
    if mode == "rubric_only":
        return fit_rubric_only(n, passes, priors=priors)
    raise ValueError(f"unknown mode {mode!r}")
