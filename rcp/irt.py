"""2PL calibration of rubric verdicts (rcp_facts section 4).

Tournament mode: P(pass) = sigmoid(gamma_c (tau_j theta_BT_i + alpha_j - beta_c)) with
frozen BT abilities, shared items and per-query (tau_j > 0, alpha_j), fitted by MAP.
Rubric-only mode: Binomial 2PL with a latent N(0, 1) ability integrated on a grid,
EAP abilities, then rescaled to sum(gamma) = C and mean(beta) = 0.
Inputs are pass counts per (document, criterion) over the document's placements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logsumexp

from rcp.tournament import TournamentProblem

__all__ = [
    "FLAG_TEXT",
    "QUAD",
    "Priors",
    "RubricOnlyFit",
    "TournamentFit",
    "aggregate_rubric",
    "fit_calibration",
    "fit_rubric_only",
    "fit_tournament",
    "query_flags",
]

QUAD = np.linspace(-18.0, 10.0, 561)
_GAMMA_BOUNDS = (0.05, 20.0)
_BETA_BOUNDS = (-10.0, 10.0)
_P_CLIP = 1e-9
_MAX_ITEM_WEIGHT = 0.90
_MIN_PASS_SHARE = 0.02
_PATTERN_BLOCK = 2048  # patterns per block of the (patterns x grid) posterior


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
    if not ((answers == 0) | (answers == 1)).all():
        raise ValueError("verdicts must be 0 or 1")
    integral = unit.dtype.kind in "iu"
    lo = int(unit.min()) if unit.size and integral else 0
    span = int(unit.max()) - lo + 1 if unit.size and integral else 0
    if integral and 0 < span <= 4 * unit.size + 1024:
        # Dense unit ids (query * n_docs + doc): count with bincount, no sort.
        key = (unit - lo).astype(np.int64)
        n_all = np.bincount(key, minlength=span)
        present = np.flatnonzero(n_all)
        units, n = present + lo, n_all[present]
    else:
        units, key = np.unique(unit, return_inverse=True)
        key = key.ravel()
        span, present = units.size, slice(None)
        n = np.bincount(key, minlength=span)
    passes = np.empty((units.size, answers.shape[1]), dtype=np.int64)
    for c in range(answers.shape[1]):
        col = np.bincount(key, weights=answers[:, c], minlength=span)
        passes[:, c] = col[present]
    return units.astype(unit.dtype, copy=False), n, passes


# Per-query flags: the query's scale is pinned by the priors or a bound rather than
# by its data (rcp_facts 4.2 priors; thresholds are ours, see SOLVER.md).
TAU_SMALL = 0.05
TAU_LARGE = 20.0
ALPHA_SIGMAS = 3.0
PRIOR_SHARE = 0.5
FLAG_TEXT = {
    "no_rubric": "no rubric answers: tau and alpha are the priors' (1, 0)",
    "tau_at_bound": "tau at its lower bound: the tournament order does not predict "
    "the rubric answers, every document gets the same calibrated ability",
    "tau_small": f"tau < {TAU_SMALL}: calibrated abilities barely spread",
    "tau_large": f"tau > {TAU_LARGE:g}: tournament abilities barely spread",
    "alpha_extreme": f"|alpha| > {ALPHA_SIGMAS:g} prior SDs: the documents pass or "
    "fail nearly every criterion",
    "prior_dominated": f"the priors hold over {PRIOR_SHARE:.0%} of the curvature of "
    "tau or alpha: the data barely pin this query's scale",
}


@dataclass(frozen=True)
class TournamentFit:
    """Tournament-mode fit; ``theta``/``theta_se`` per input row (NaN without BT).

    ``converged`` is the solver's verdict (see ``message``); ``query_flags[j]`` lists
    the codes of FLAG_TEXT that apply to query j (empty: pinned by its data).
    """

    gamma: np.ndarray
    beta: np.ndarray
    tau: np.ndarray
    alpha: np.ndarray
    theta: np.ndarray
    theta_se: np.ndarray
    query_has_rubric: np.ndarray
    query_flags: tuple[tuple[str, ...], ...]
    n_skipped: int
    loss: float
    converged: bool
    n_iter: int
    inner_iterations: int = 0
    method: str = "profile-newton"
    max_grad: float = 0.0
    message: str = ""
    mode: Literal["tournament"] = "tournament"


def query_flags(
    *,
    tau: np.ndarray,
    alpha: np.ndarray,
    has_rubric: np.ndarray,
    prior_share: np.ndarray,
    priors: Priors = Priors(),
) -> tuple[tuple[str, ...], ...]:
    """FLAG_TEXT codes per query; ``prior_share`` is the larger of the priors'
    shares of the curvature of tau and of alpha at the optimum."""
    out = []
    for j in range(tau.size):
        if not has_rubric[j]:
            out.append(("no_rubric",))
            continue
        flags = []
        if tau[j] <= 1e-6:
            flags.append("tau_at_bound")
        elif tau[j] < TAU_SMALL:
            flags.append("tau_small")
        if tau[j] > TAU_LARGE:
            flags.append("tau_large")
        if abs(alpha[j]) > ALPHA_SIGMAS * priors.sigma_alpha:
            flags.append("alpha_extreme")
        if prior_share[j] > PRIOR_SHARE:
            flags.append("prior_dominated")
        out.append(tuple(flags))
    return tuple(out)


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
    maxiter: int = 100,
    progress: Callable[[int], None] | None = None,
) -> TournamentFit:
    """MAP 2PL over frozen BT abilities, one row per (query, document).

    Objective: mean_{placement, c} BCE + prior/(N C) on (tau, alpha) + ridge on the
    softmax logits u (gamma = C softmax(min(u, 10))) and raw v (beta = v - mean v),
    minimised by ``TournamentProblem.minimize`` (``maxiter`` item Newton steps; a
    fit that stops early says so in ``converged``/``message``). Rows with NaN
    ``theta_bt`` are skipped; rows with n = 0 only receive a theta.
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
    x0 = np.concatenate([np.zeros(2 * n_crit), np.full(n_q, t0), np.zeros(n_q)])
    problem = TournamentProblem(
        q_f,
        th_f,
        n_f,
        s_f,
        n_q=n_q,
        total=total,
        k_tau=k_tau,
        k_alpha=k_alpha,
        l2_gamma=p.l2_gamma,
        l2_beta=p.l2_beta,
    )
    res = problem.minimize(x0, maxiter=maxiter, callback=progress)
    _u, _v, gamma, beta = problem.items(res.x[: 2 * n_crit])
    tau, a = res.tau, res.alpha
    theta = np.where(usable, tau[query] * theta_bt + a[query], np.nan)
    if theta_bt_se is None:
        theta_se = np.full(theta.shape, np.nan)
    else:
        se = np.asarray(theta_bt_se, dtype=np.float64).ravel()
        theta_se = np.where(usable, tau[query] * se, np.nan)
    has_rubric = np.bincount(q_f, n_f, n_q) > 0
    *_f, h_tt, _h_ta, h_aa = problem.query_derivatives(gamma, beta, tau, a)
    share = np.maximum(k_tau / h_tt, k_alpha / h_aa)
    return TournamentFit(
        gamma=gamma,
        beta=beta,
        tau=tau,
        alpha=a.copy(),
        theta=theta,
        theta_se=theta_se,
        query_has_rubric=has_rubric,
        query_flags=query_flags(
            tau=tau, alpha=a, has_rubric=has_rubric, prior_share=share, priors=p
        ),
        n_skipped=int((~usable & (n > 0)).sum()),
        loss=float(res.fun),
        converged=bool(res.success),
        n_iter=int(res.nit),
        inner_iterations=res.inner_iterations,
        method=res.method,
        max_grad=res.max_grad,
        message=res.message,
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


def _item_logs(
    gamma: np.ndarray, beta: np.ndarray, grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(log p and log(1 - p) stacked (2C, G), p (G, C), z (G, C), unclipped mask)."""
    z = gamma * (grid[:, None] - beta)
    raw = expit(z)
    prob = np.clip(raw, _P_CLIP, 1.0 - _P_CLIP)
    inside = (raw > _P_CLIP) & (raw < 1.0 - _P_CLIP)
    logs = np.vstack([np.log(prob).T, np.log1p(-prob).T])
    return logs, prob, z, inside


def _posterior_chunks(
    design: np.ndarray, logs: np.ndarray, log_w: np.ndarray
) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Per block of patterns: (rows, unnormalised posterior e (B, G), log of its
    normaliser). ``design`` is (P, 2C) = [s, n - s]; log-likelihood = design @ logs.
    Blocks bound memory at P x G scale and keep the block in cache."""
    for lo in range(0, design.shape[0], _PATTERN_BLOCK):
        rows = slice(lo, lo + _PATTERN_BLOCK)
        joint = design[rows] @ logs
        joint += log_w
        top = joint.max(axis=1)
        joint -= top[:, None]
        e = np.exp(joint, out=joint)
        norm = e.sum(axis=1)
        yield rows, e, top + np.log(norm)


def _unique_patterns(
    n: np.ndarray, passes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(rows, axis=0) of [n, passes] (same order, inverse and counts), via
    one integer key per row when counts are small integers (sorting 1-D keys is
    far faster than sorting rows)."""
    rows = np.column_stack([n, passes])
    if rows.size and np.all(rows == np.round(rows)):
        base = int(rows.max()) + 1
        width = rows.shape[1]
        if base**width < 2**62:
            radix = base ** np.arange(width - 1, -1, -1, dtype=np.int64)
            key = rows.astype(np.int64) @ radix
            _u, index, inverse, counts = np.unique(
                key, return_index=True, return_inverse=True, return_counts=True
            )
            return rows[index], inverse.ravel(), counts
    patterns, inverse, counts = np.unique(
        rows, axis=0, return_inverse=True, return_counts=True
    )
    return patterns, inverse.ravel(), counts


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
    patterns, inverse, counts = _unique_patterns(n, passes)
    pn, ps = patterns[:, 0], patterns[:, 1:]
    counts = counts.astype(np.float64)
    design = np.column_stack([ps, pn[:, None] - ps])
    observed = np.column_stack([ps, pn])
    log_w = -0.5 * (grid / priors.ability_sd) ** 2
    log_w -= logsumexp(log_w)

    # Summed (not mean) NLL with scipy's default tolerances, as the reference does:
    # its published item values are this stopping point, ~3e-4 from the full optimum.
    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        gamma, beta = np.exp(x[:n_crit]), x[n_crit:]
        logs, prob, z, inside = _item_logs(gamma, beta, grid)
        loglik = 0.0
        expected = np.zeros((grid.size, n_crit + 1))  # posterior-weighted [s, n]
        for rows, e, log_m in _posterior_chunks(design, logs, log_w):
            loglik += counts[rows] @ log_m
            e *= (counts[rows] / e.sum(axis=1))[:, None]
            expected += e.T @ observed[rows]
        s_q, n_q = expected[:, :n_crit], expected[:, n_crit]
        dz = np.where(inside, s_q - n_q[:, None] * prob, 0.0)
        g_loggamma = -(dz * z).sum(axis=0)
        g_beta = (dz * gamma).sum(axis=0)
        return float(-loglik), np.concatenate([g_loggamma, g_beta])

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
    logs, *_ = _item_logs(raw_gamma, raw_beta, grid)
    eap = np.empty(len(patterns))
    second = np.empty(len(patterns))
    for rows, e, _log_m in _posterior_chunks(design, logs, log_w):
        e /= e.sum(axis=1)[:, None]
        eap[rows], second[rows] = e @ grid, e @ grid**2
    sd = np.sqrt(np.clip(second - eap**2, 0.0, None))
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
