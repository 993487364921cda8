"""2PL calibration of rubric verdicts (rcp_facts section 4).

Tournament mode: P(pass) = sigmoid(gamma_c (tau_j theta_BT_i + alpha_j - beta_c)) with
frozen BT abilities, shared items and per-query (tau_j > 0, alpha_j), fitted by MAP.
Rubric-only mode: Binomial 2PL with a latent N(0, 1) ability integrated on a grid,
EAP abilities, then rescaled to sum(gamma) = C and mean(beta) = 0.
Inputs are pass counts per (document, criterion) over the document's placements.
"""

from __future__ import annotations

from collections.abc import Iterator
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
    maxiter: int = 200,
) -> TournamentFit:
    """MAP 2PL over frozen BT abilities, one row per (query, document).

    Objective: mean_{placement, c} BCE + prior/(N C) on (tau, alpha) + ridge on the
    softmax logits u (gamma = C softmax(min(u, 10))) and raw v (beta = v - mean v),
    minimised by Newton on its arrow-structured Hessian (``maxiter`` Newton steps).
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
    x0 = np.concatenate([np.zeros(2 * n_crit), np.full(n_q, t0), np.zeros(n_q)])
    problem = _TournamentProblem(
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
    res = problem.minimize(x0, maxiter=maxiter)

    def unpack(x: np.ndarray) -> tuple[np.ndarray, ...]:
        u, v = x[:n_crit], x[n_crit : 2 * n_crit]
        t, a = x[2 * n_crit : 2 * n_crit + n_q], x[2 * n_crit + n_q :]
        return u, v, t, a

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
class _Optimum:
    x: np.ndarray
    fun: float
    success: bool
    nit: int


class _TournamentProblem:
    """The tournament-mode MAP objective in x = (u, v, t, a) and its Newton solver.

    Rows are sorted by query. The Hessian has arrow structure: a dense 2C x 2C item
    block, 2 x 2 blocks per query (tau, alpha) and item-query coupling, so a Newton
    step costs a few passes over the rows plus a 2C x 2C solve (Schur complement),
    whatever the number of queries. Quasi-Newton needs hundreds of passes here.
    """

    def __init__(
        self,
        query: np.ndarray,
        theta: np.ndarray,
        n: np.ndarray,
        passes: np.ndarray,
        *,
        n_q: int,
        total: float,
        k_tau: float,
        k_alpha: float,
        l2_gamma: float,
        l2_beta: float,
    ) -> None:
        # Criterion-major (C, rows) layout: row sums and per-query segment sums run
        # over contiguous memory.
        self.q, self.th, self.n = query, theta, n
        self.s = np.ascontiguousarray(passes.T)
        self.n_q, self.c, self.total = n_q, passes.shape[1], total
        self.k_tau, self.k_alpha = k_tau, k_alpha
        self.l2_gamma, self.l2_beta = l2_gamma, l2_beta
        # Contiguous row segments per query (rows are sorted by query).
        self.seg_q, self.seg_start = np.unique(query, return_index=True)

    def _params(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        c, n_q = self.c, self.n_q
        u, v, t, a = x[:c], x[c : 2 * c], x[2 * c : 2 * c + n_q], x[2 * c + n_q :]
        uc = np.minimum(u, _U_CAP)
        gamma = c * np.exp(uc - logsumexp(uc))
        beta = v - v.mean()
        tau = np.logaddexp(0.0, t)
        return u, v, t, a, gamma, beta, tau

    def _per_query(self, values: np.ndarray) -> np.ndarray:
        """Sum (k, rows) values over each query's rows -> (k, n_q)."""
        out = np.zeros((values.shape[0], self.n_q))
        if values.shape[1]:
            out[:, self.seg_q] = np.add.reduceat(values, self.seg_start, axis=1)
        return out

    def _logits(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        u, v, t, a, gamma, beta, tau = self._params(x)
        xi = tau[self.q] * self.th + a[self.q]
        d = xi - beta[:, None]
        z = gamma[:, None] * d
        # softplus(z) = max(z, 0) + log1p(exp(-|z|)): one exp serves both the
        # loss and the probabilities, about twice as fast as logaddexp + expit.
        ez = np.exp(-np.abs(z))
        nll = (
            self.n * (np.maximum(z, 0.0) + np.log1p(ez)) - self.s * z
        ).sum() / self.total
        prior = 0.5 * (self.k_tau * ((tau - 1.0) ** 2).sum() + self.k_alpha * (a @ a))
        ridge = 0.5 * (self.l2_gamma * (u @ u) + self.l2_beta * (v @ v))
        return float(nll + prior + ridge), d, z, ez

    def value(self, x: np.ndarray) -> float:
        return self._logits(x)[0]

    def derivatives(
        self, x: np.ndarray
    ) -> tuple[float, np.ndarray, _Hessian, _Hessian]:
        """Objective, gradient in x, and the Hessian in x twice: exact, and its
        Gauss-Newton part (residual terms dropped; positive definite)."""
        c = self.c
        u, v, t, a, gamma, beta, tau = self._params(x)
        f, d, z, ez = self._logits(x)
        th = self.th
        prob = np.where(z >= 0.0, 1.0, ez) / (1.0 + ez)
        del z, ez
        n_t = self.n / self.total
        e = n_t * prob - self.s / self.total  # d nll / d z
        w = n_t * prob * (1.0 - prob)  # d2 nll / d z2
        del prob

        # Gradient and Hessian in phi = (gamma, beta, tau, alpha).
        g_gamma = (e * d).sum(axis=1)
        sum_e = e.sum(axis=1)
        g_beta = -gamma * sum_e
        wd = w * d
        h_gg = (wd * d).sum(axis=1)
        h_gb = -gamma * wd.sum(axis=1)
        h_bb = gamma**2 * w.sum(axis=1)
        del d
        # Per-row terms coupling items with xi = tau theta + alpha, summed per query
        # plainly and weighted by theta: d2/dgamma dxi = w d gamma (+ residual e),
        # d2/dbeta dxi = -w gamma^2, d/dxi = gamma . e, d2/dxi2 = gamma^2 . w.
        coupled = np.empty((3 * c + 2, th.size))
        np.multiply(wd, gamma[:, None], out=coupled[:c])
        coupled[c : 2 * c] = e
        np.multiply(w, -(gamma**2)[:, None], out=coupled[2 * c : 3 * c])
        coupled[3 * c] = gamma @ e
        coupled[3 * c + 1] = gamma**2 @ w
        del e, w, wd
        plain = self._per_query(coupled)
        coupled *= th
        by_th = self._per_query(coupled)
        v_th2 = self._per_query(coupled[3 * c + 1 :] * th)[0]
        del coupled
        g_tau = by_th[3 * c] + self.k_tau * (tau - 1.0)
        g_a = plain[3 * c] + self.k_alpha * a
        h_tt = v_th2 + self.k_tau
        h_ta = by_th[3 * c + 1]
        h_aa = plain[3 * c + 1] + self.k_alpha

        # Chain rule to x = (u, v, t, a).
        free = (u < _U_CAP).astype(np.float64)
        s_soft = gamma / c
        j_u = (np.diag(gamma) - np.outer(gamma, gamma) / c) * free[None, :]
        proj = np.eye(c) - 1.0 / c
        j_i = np.zeros((2 * c, 2 * c))
        j_i[:c, :c], j_i[c:, c:] = j_u, proj
        idx = np.arange(c)
        ridge = np.r_[np.full(c, self.l2_gamma), np.full(c, self.l2_beta)]
        sig_t = expit(t)

        def item_block(h_gb: np.ndarray) -> np.ndarray:
            h_phi = np.zeros((2 * c, 2 * c))
            h_phi[idx, idx], h_phi[c + idx, c + idx] = h_gg, h_bb
            h_phi[idx, c + idx] = h_phi[c + idx, idx] = h_gb
            return j_i.T @ h_phi @ j_i + np.diag(ridge)

        def coupling(rows: list[np.ndarray]) -> np.ndarray:
            # (n_q, 2C, 2): (gamma, beta) x (tau, alpha), then to (u, v) x (t, a).
            h = np.stack([np.vstack(rows[0]).T, np.vstack(rows[1]).T], axis=2)
            h = j_i.T @ h
            h[:, :, 0] *= sig_t[:, None]
            return h

        gn_rows = [
            [by_th[:c], by_th[2 * c : 3 * c]],
            [plain[:c], plain[2 * c : 3 * c]],
        ]
        full_rows = [
            [by_th[:c] + by_th[c : 2 * c], by_th[2 * c : 3 * c]],
            [plain[:c] + plain[c : 2 * c], plain[2 * c : 3 * c]],
        ]
        gauss = _Hessian(
            item_block(h_gb),
            coupling(gn_rows),
            sig_t**2 * h_tt,
            sig_t * h_ta,
            h_aa,
        )
        # Residual terms: d2 z / dgamma dbeta, the softmax and softplus curvatures.
        exact_items = item_block(h_gb - sum_e)
        gg = g_gamma * gamma
        tot = gg.sum()
        soft = (
            np.diag(gg)
            - np.outer(gg, s_soft)
            - np.outer(s_soft, gg)
            + tot * np.outer(s_soft, s_soft)
            - tot * (np.diag(s_soft) - np.outer(s_soft, s_soft))
        )
        exact_items[:c, :c] += soft * np.outer(free, free)
        exact = _Hessian(
            exact_items,
            coupling(full_rows),
            sig_t**2 * h_tt + g_tau * sig_t * (1.0 - sig_t),
            sig_t * h_ta,
            h_aa,
        )
        g_u = j_u.T @ g_gamma + self.l2_gamma * u
        g_v = proj @ g_beta + self.l2_beta * v
        grad = np.concatenate([g_u, g_v, g_tau * sig_t, g_a])
        return f, grad, exact, gauss

    def newton_step(self, grad: np.ndarray, hess: _Hessian) -> np.ndarray | None:
        """Solve H step = grad through the Schur complement of the 2 x 2 query
        blocks; None when H is not positive definite."""
        c2, n_q = 2 * self.c, self.n_q
        h_tt, h_ta, h_aa = hess.tt, hess.ta, hess.aa
        det = h_tt * h_aa - h_ta**2
        if not (np.all(h_tt > 0) and np.all(det > 0)):
            return None
        inv = np.empty((n_q, 2, 2))
        inv[:, 0, 0], inv[:, 1, 1] = h_aa / det, h_tt / det
        inv[:, 0, 1] = inv[:, 1, 0] = -h_ta / det
        g_i, g_q = grad[:c2], np.column_stack([grad[c2 : c2 + n_q], grad[c2 + n_q :]])
        hinv = hess.iq @ inv  # (n_q, 2C, 2)
        schur = hess.ii - np.einsum("qik,qjk->ij", hinv, hess.iq)
        rhs = g_i - np.einsum("qik,qk->i", hinv, g_q)
        try:
            chol = np.linalg.cholesky(schur)
        except np.linalg.LinAlgError:
            return None
        step_i = np.linalg.solve(chol.T, np.linalg.solve(chol, rhs))
        rest = g_q - np.einsum("qik,i->qk", hess.iq, step_i)
        step_q = np.einsum("qkl,ql->qk", inv, rest)
        return np.concatenate([step_i, step_q[:, 0], step_q[:, 1]])

    def minimize(
        self, x0: np.ndarray, *, maxiter: int, gtol: float = 1e-13, ftol: float = 1e-15
    ) -> _Optimum:
        """Newton with an Armijo backtracking line search; where the exact Hessian
        is not positive definite (far from the optimum) the Gauss-Newton one serves.

        Converged when max|grad| <= gtol or the step's predicted decrease
        (grad . step / 2) is below ftol * max(1, |f|): the reference's L-BFGS
        tolerances, tested without relying on differences of a sum over millions
        of rows (rounding noise in f would stall the test).
        """
        x = x0.copy()
        nit = 0
        success = False
        fx, g, exact, gauss = self.derivatives(x)
        while nit < maxiter:
            if np.max(np.abs(g)) <= gtol:
                success = True
                break
            step = self.newton_step(g, exact)
            if step is None:
                step = self.newton_step(g, gauss)
            if step is None:  # pragma: no cover - the ridge keeps Gauss-Newton PD
                break
            slope = float(g @ step)
            if slope <= 2.0 * ftol * max(1.0, abs(fx)):
                # Predicted decrease below ftol: inside the quadratic region, so the
                # full step lands at rounding precision; take it and stop.
                x = x - step
                fx = self.value(x)
                success = True
                break
            t = 1.0
            while True:
                x_new = x - t * step
                f_new = self.value(x_new)
                if f_new <= fx - 1e-4 * t * slope or t < 1e-10:
                    break
                t *= 0.5
            nit += 1
            if f_new > fx:  # pragma: no cover - rounding noise at the optimum
                success = slope <= 1e-10 * max(1.0, abs(fx))
                break
            x = x_new
            fx, g, exact, gauss = self.derivatives(x)
        return _Optimum(x=x, fun=fx, success=success, nit=nit)


@dataclass(frozen=True)
class _Hessian:
    """Hessian blocks in x: items (2C, 2C), item-query coupling (n_q, 2C, 2) with
    columns (t, a), and per query the 2 x 2 (t, a) block as tt, ta, aa."""

    ii: np.ndarray
    iq: np.ndarray
    tt: np.ndarray
    ta: np.ndarray
    aa: np.ndarray


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
