"""The tournament-mode 2PL objective and its solver (rcp_facts 4.1-4.2). No Django.

Objective in the reference's parameterisation x = (u, v, t, a):
gamma = C softmax(min(u, 10)), beta = v - mean(v), tau = softplus(t), alpha = a and

    f = mean_{placement, c} BCE(sigmoid(gamma_c (tau_j theta_i + alpha_j - beta_c)))
        + [sum_j (tau_j - 1)^2 / 2 s_tau^2 + sum_j alpha_j^2 / 2 s_alpha^2] / (N C)
        + l2_gamma |u|^2 / 2 + l2_beta |v|^2 / 2.

The solver (see SOLVER.md beside this module) minimises the same function written in
(u, v, tau, alpha), tau >= TAU_FLOOR, as a profile problem: for fixed items (u, v)
the queries separate into strictly convex 2-D problems, solved exactly and each with
its own line search, so no query can stall the others; the items then take Newton
steps on the profile objective F(u, v) = min_{tau, alpha} f, whose Hessian is the
Schur complement of the query blocks. An L-BFGS-B run on the same function is the
fallback when a Newton line search fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numexpr as ne
import numpy as np
from scipy.optimize import minimize as scipy_minimize
from scipy.special import expit, logsumexp

__all__ = ["TAU_FLOOR", "U_CAP", "Hessian", "SolverResult", "TournamentProblem"]

U_CAP = 10.0  # log-weight cap: gamma_c <= C * exp(10) / (sum of the others)
# tau never reaches 0 under softplus; where the data want tau <= 0 (a query whose
# tournament order does not predict its rubric answers) the infimum is approached
# as tau -> 0. We stop at this floor: the loss is then within ~1e-12 |grad| of the
# infimum, and the query is flagged.
TAU_FLOOR = 1e-12
ITEM_STEP_CAP = 2.0  # max |step| of one item Newton step, in (u, v) units
_ARMIJO = 1e-4


@dataclass(frozen=True)
class Hessian:
    """Hessian blocks: items (2C, 2C), item-query coupling (n_q, 2C, 2) with columns
    (tau or t, alpha), and per query the 2 x 2 block as tt, ta, aa."""

    ii: np.ndarray
    iq: np.ndarray
    tt: np.ndarray
    ta: np.ndarray
    aa: np.ndarray


@dataclass(frozen=True)
class SolverResult:
    """``x`` in the reference parameterisation; ``decrement`` is the last Newton
    decrement g.H^-1.g of the profile problem (the predicted decrease times 2)."""

    x: np.ndarray
    tau: np.ndarray
    alpha: np.ndarray
    fun: float
    success: bool
    nit: int
    inner_iterations: int
    method: str
    decrement: float
    max_grad: float
    message: str


class TournamentProblem:
    """The objective over rows sorted by query, its derivatives and its solver.

    Rows are (query, theta_BT, placements n, passes[C]); the data term is divided by
    ``total`` = N C. Hessians have arrow structure (a dense 2C x 2C item block, a
    2 x 2 block per query, item-query coupling).
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
        self.rows_per_query = np.bincount(query, minlength=n_q)

    def subset(self, keep: np.ndarray) -> TournamentProblem:
        """The same objective restricted to the queries in ``keep`` (renumbered in
        order), for per-query solves once most queries are done."""
        sel = keep[self.q]
        renumber = np.cumsum(keep) - 1
        return TournamentProblem(
            renumber[self.q[sel]],
            self.th[sel],
            self.n[sel],
            self.s[:, sel].T,
            n_q=int(keep.sum()),
            total=self.total,
            k_tau=self.k_tau,
            k_alpha=self.k_alpha,
            l2_gamma=self.l2_gamma,
            l2_beta=self.l2_beta,
        )

    # ------------------------------------------------------------ building blocks

    def items(self, y: np.ndarray) -> tuple[np.ndarray, ...]:
        """(u, v, gamma, beta) of the item vector y = (u, v)."""
        c = self.c
        u, v = y[:c], y[c:]
        uc = np.minimum(u, U_CAP)
        gamma = c * np.exp(uc - logsumexp(uc))
        return u, v, gamma, v - v.mean()

    def _per_query(self, values: np.ndarray) -> np.ndarray:
        """Sum (k, rows) values over each query's rows -> (k, n_q)."""
        out = np.zeros((values.shape[0], self.n_q))
        if values.shape[1]:
            out[:, self.seg_q] = np.add.reduceat(values, self.seg_start, axis=1)
        return out

    def _rows(
        self, gamma: np.ndarray, beta: np.ndarray, tau: np.ndarray, a: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(d = xi - beta, z, exp(-|z|), per-row data loss) over (C, rows).

        Element-wise chains run in numexpr: one pass over memory instead of one per
        operation (about half the time of the same numpy expressions at scale).
        """
        xi = tau[self.q] * self.th + a[self.q]
        d = ne.evaluate("xi - b", local_dict={"xi": xi, "b": beta[:, None]})
        z = ne.evaluate("g * d", local_dict={"g": gamma[:, None], "d": d})
        # softplus(z) = max(z, 0) + log1p(exp(-|z|)): one exp serves both the
        # loss and the probabilities.
        ez = ne.evaluate("exp(-abs(z))", local_dict={"z": z})
        # Summed over criteria one criterion at a time: no (C, rows) temporary.
        loss = np.zeros(z.shape[1])
        for k in range(z.shape[0]):
            loss += ne.evaluate(
                "n * (where(z > 0, z, 0) + log1p(ez)) - s * z",
                local_dict={"n": self.n, "z": z[k], "ez": ez[k], "s": self.s[k]},
            )
        return d, z, ez, loss

    def _ridge(self, u: np.ndarray, v: np.ndarray) -> float:
        return 0.5 * (self.l2_gamma * (u @ u) + self.l2_beta * (v @ v))

    def _prior(self, tau: np.ndarray, a: np.ndarray) -> np.ndarray:
        return 0.5 * (self.k_tau * (tau - 1.0) ** 2 + self.k_alpha * a * a)

    def query_values(
        self, gamma: np.ndarray, beta: np.ndarray, tau: np.ndarray, a: np.ndarray
    ) -> np.ndarray:
        """Per-query objective f_j (data / total + priors); f = sum f_j + ridge."""
        loss = self._rows(gamma, beta, tau, a)[3]
        return self._per_query(loss[None])[0] / self.total + self._prior(tau, a)

    def value_phi(self, y: np.ndarray, tau: np.ndarray, a: np.ndarray) -> float:
        u, v, gamma, beta = self.items(y)
        return float(self.query_values(gamma, beta, tau, a).sum() + self._ridge(u, v))

    def value(self, x: np.ndarray) -> float:
        """The objective at x = (u, v, t, a), the reference's parameterisation."""
        c2, n_q = 2 * self.c, self.n_q
        tau = np.logaddexp(0.0, x[c2 : c2 + n_q])
        return self.value_phi(x[:c2], tau, x[c2 + n_q :])

    def query_derivatives(
        self, gamma: np.ndarray, beta: np.ndarray, tau: np.ndarray, a: np.ndarray
    ) -> tuple[np.ndarray, ...]:
        """Per query: f_j, gradient (g_tau, g_alpha) and exact Hessian (tt, ta, aa)
        in (tau, alpha) for fixed items. Convex in (tau, alpha): PD thanks to the
        priors."""
        _d, z, ez, loss = self._rows(gamma, beta, tau, a)
        names = {"n": self.n, "s": self.s, "z": z, "ez": ez}
        # p = sigmoid(z) and p (1 - p) = exp(-|z|) / (1 + exp(-|z|))^2 for any sign.
        e = ne.evaluate("n * where(z >= 0, 1, ez) / (1 + ez) - s", local_dict=names)
        w = ne.evaluate("n * ez / (1 + ez) ** 2", local_dict=names)
        d1 = gamma @ e
        d2 = (gamma**2) @ w
        th = self.th
        sums = self._per_query(
            np.vstack([loss, d1, d1 * th, d2, d2 * th, d2 * th * th])
        )
        sums /= self.total
        f_j = sums[0] + self._prior(tau, a)
        g_t = sums[2] + self.k_tau * (tau - 1.0)
        g_a = sums[1] + self.k_alpha * a
        return f_j, g_t, g_a, sums[5] + self.k_tau, sums[4], sums[3] + self.k_alpha

    def derivatives_phi(
        self, y: np.ndarray, tau: np.ndarray, a: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, Hessian, Hessian]:
        """Objective, gradient (items in (u, v), queries in (tau, alpha)) and the
        Hessian twice: exact, and its Gauss-Newton part (positive definite)."""
        c = self.c
        u, v, gamma, beta = self.items(y)
        d, z, ez, loss = self._rows(gamma, beta, tau, a)
        # Scaled by 1/total inside the expressions: no scaled copies of n and s.
        names = {"n": self.n, "s": self.s, "z": z, "ez": ez, "t": float(self.total)}
        e = ne.evaluate(
            "(n * where(z >= 0, 1, ez) / (1 + ez) - s) / t", local_dict=names
        )
        del z
        w = ne.evaluate("n * ez / (1 + ez) ** 2 / t", local_dict=names)  # d2 nll/dz2
        del ez, names
        f = float(
            loss.sum() / self.total + self._prior(tau, a).sum() + self._ridge(u, v)
        )

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
        # One row-sized term at a time (not a (3C+2, rows) block: ~300 MB at ViDoRe
        # scale), each summed per query plainly and weighted by theta.
        th = self.th
        plain = np.empty((3 * c + 2, self.n_q))
        by_th = np.empty((3 * c + 2, self.n_q))

        def per_query(i: int, term: np.ndarray) -> None:
            plain[i] = self._per_query(term[None])[0]
            by_th[i] = self._per_query((term * th)[None])[0]

        for k in range(c):
            per_query(k, wd[k] * gamma[k])
            per_query(c + k, e[k])
            per_query(2 * c + k, w[k] * -(gamma[k] ** 2))
        per_query(3 * c, gamma @ e)
        xi2 = gamma**2 @ w
        per_query(3 * c + 1, xi2)
        v_th2 = self._per_query((xi2 * th * th)[None])[0]
        del e, w, wd, xi2
        g_tau = by_th[3 * c] + self.k_tau * (tau - 1.0)
        g_a = plain[3 * c] + self.k_alpha * a
        h_tt = v_th2 + self.k_tau
        h_ta = by_th[3 * c + 1]
        h_aa = plain[3 * c + 1] + self.k_alpha

        # Chain rule to the items' (u, v).
        free = (u < U_CAP).astype(np.float64)
        s_soft = gamma / c
        j_u = (np.diag(gamma) - np.outer(gamma, gamma) / c) * free[None, :]
        proj = np.eye(c) - 1.0 / c
        j_i = np.zeros((2 * c, 2 * c))
        j_i[:c, :c], j_i[c:, c:] = j_u, proj
        idx = np.arange(c)
        ridge = np.r_[np.full(c, self.l2_gamma), np.full(c, self.l2_beta)]

        def item_block(h_gb: np.ndarray) -> np.ndarray:
            h_phi = np.zeros((2 * c, 2 * c))
            h_phi[idx, idx], h_phi[c + idx, c + idx] = h_gg, h_bb
            h_phi[idx, c + idx] = h_phi[c + idx, idx] = h_gb
            return j_i.T @ h_phi @ j_i + np.diag(ridge)

        def coupling(rows: list[list[np.ndarray]]) -> np.ndarray:
            # (n_q, 2C, 2): (gamma, beta) x (tau, alpha), then to (u, v) x (tau, a).
            h = np.stack([np.vstack(rows[0]).T, np.vstack(rows[1]).T], axis=2)
            return j_i.T @ h

        gauss = Hessian(
            item_block(h_gb),
            coupling(
                [[by_th[:c], by_th[2 * c : 3 * c]], [plain[:c], plain[2 * c : 3 * c]]]
            ),
            h_tt,
            h_ta,
            h_aa,
        )
        # Residual terms: d2 z / dgamma dbeta, the softmax curvature.
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
        exact = Hessian(
            exact_items,
            coupling(
                [
                    [by_th[:c] + by_th[c : 2 * c], by_th[2 * c : 3 * c]],
                    [plain[:c] + plain[c : 2 * c], plain[2 * c : 3 * c]],
                ]
            ),
            h_tt,
            h_ta,
            h_aa,
        )
        g_y = np.concatenate(
            [j_u.T @ g_gamma + self.l2_gamma * u, proj @ g_beta + self.l2_beta * v]
        )
        return f, g_y, g_tau, g_a, exact, gauss

    def derivatives(self, x: np.ndarray) -> tuple[float, np.ndarray, Hessian, Hessian]:
        """Objective, gradient and Hessians (exact, Gauss-Newton) in the reference's
        x = (u, v, t, a): the phi derivatives through tau = softplus(t)."""
        c2, n_q = 2 * self.c, self.n_q
        t = x[c2 : c2 + n_q]
        tau = np.logaddexp(0.0, t)
        f, g_y, g_tau, g_a, exact, gauss = self.derivatives_phi(
            x[:c2], tau, x[c2 + n_q :]
        )
        sig = expit(t)

        def to_x(h: Hessian, curvature: np.ndarray) -> Hessian:
            iq = h.iq.copy()
            iq[:, :, 0] *= sig[:, None]
            return Hessian(h.ii, iq, sig**2 * h.tt + curvature, sig * h.ta, h.aa)

        grad = np.concatenate([g_y, g_tau * sig, g_a])
        return (
            f,
            grad,
            to_x(exact, g_tau * sig * (1.0 - sig)),
            to_x(gauss, np.zeros(n_q)),
        )

    def newton_step(self, grad: np.ndarray, hess: Hessian) -> np.ndarray | None:
        """Solve H step = grad (x-space arrow blocks) through the Schur complement of
        the 2 x 2 query blocks; None when H is not positive definite."""
        c2, n_q = 2 * self.c, self.n_q
        det = hess.tt * hess.aa - hess.ta**2
        if not (np.all(hess.tt > 0) and np.all(det > 0)):
            return None
        g_q = np.column_stack([grad[c2 : c2 + n_q], grad[c2 + n_q :]])
        schur, rhs, inv = _reduce(grad[:c2], g_q, hess, np.zeros(n_q, dtype=bool))
        try:
            chol = np.linalg.cholesky(schur)
        except np.linalg.LinAlgError:
            return None
        step_i = np.linalg.solve(chol.T, np.linalg.solve(chol, rhs))
        rest = g_q - np.einsum("qik,i->qk", hess.iq, step_i)
        step_q = np.einsum("qkl,ql->qk", inv, rest)
        return np.concatenate([step_i, step_q[:, 0], step_q[:, 1]])

    # ---------------------------------------------------------------- the solver

    def solve_queries(
        self,
        gamma: np.ndarray,
        beta: np.ndarray,
        tau: np.ndarray,
        a: np.ndarray,
        *,
        maxiter: int = 100,
        tol: float = 1e-24,
    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
        """Minimise every query's (tau, alpha) for fixed items, tau >= TAU_FLOOR.

        Projected Newton per query (a query at the floor whose gradient pushes
        down moves alpha only), each with its own Armijo backtracking: the
        problems are separate, so one query's step never limits another's.
        A query is solved when its Newton decrement is below ``tol`` |f_j|.
        Returns (tau, alpha, iterations, converged per query).
        """
        tau = np.maximum(tau, TAU_FLOOR)
        a = a.copy()
        n_q = self.n_q
        # finished: converged, or last step taken blind (see below); failed: no
        # Armijo step found with a decrement above rounding (reported).
        finished = np.zeros(n_q, dtype=bool)
        failed = np.zeros(n_q, dtype=bool)
        cur = self.query_derivatives(gamma, beta, tau, a)
        scale = np.maximum(np.abs(cur[0]), 1e-300)
        it = 0
        while True:
            f_j, g_t, g_a, h_tt, h_ta, h_aa = cur
            active = (tau <= TAU_FLOOR * (1.0 + 1e-9)) & (g_t > 0.0)
            det = h_tt * h_aa - h_ta**2
            d_t = np.where(active, 0.0, (h_aa * g_t - h_ta * g_a) / det)
            d_a = np.where(active, g_a / h_aa, (h_tt * g_a - h_ta * g_t) / det)
            dec = g_t * d_t + g_a * d_a
            finished |= dec <= tol * scale
            if finished.all() or it >= maxiter:
                break
            it += 1
            # Below 1e-13 |f_j| the decrease is under the rounding noise of f_j,
            # where Armijo cannot judge a step; the full Newton step is exact to
            # second order there: take it unchecked and call the query solved.
            blind = ~finished & (dec <= 1e-13 * scale)
            pending = ~finished & ~blind
            step = np.ones(n_q)
            new_tau = np.where(finished, tau, np.maximum(tau - d_t, TAU_FLOOR))
            new_a = np.where(finished, a, a - d_a)
            # One pass per trial gives values and derivatives; only rejected
            # queries move between trials, so the last pass is valid for all.
            for _ in range(60):
                trial = self.query_derivatives(gamma, beta, new_tau, new_a)
                if not pending.any():
                    break
                decrease = g_t * (tau - new_tau) + g_a * (a - new_a)
                pending &= ~(trial[0] <= f_j - _ARMIJO * decrease)
                if not pending.any():
                    break
                step = np.where(pending, 0.5 * step, step)
                new_tau = np.where(
                    pending, np.maximum(tau - step * d_t, TAU_FLOOR), new_tau
                )
                new_a = np.where(pending, a - step * d_a, new_a)
            if pending.any():
                # No step found (rounding): those queries keep their point.
                new_tau = np.where(pending, tau, new_tau)
                new_a = np.where(pending, a, new_a)
                trial = self.query_derivatives(gamma, beta, new_tau, new_a)
            failed |= pending & (dec > 1e-10 * scale)
            finished |= blind | pending
            tau, a, cur = new_tau, new_a, trial
            rest = ~finished
            if rest.any() and self.rows_per_query[rest].sum() < 0.25 * self.q.size:
                # Most rows belong to solved queries: go on over the others' rows.
                sub_tau, sub_a, k, sub_ok = self.subset(rest).solve_queries(
                    gamma, beta, tau[rest], a[rest], maxiter=maxiter - it, tol=tol
                )
                tau[rest], a[rest] = sub_tau, sub_a
                finished[rest] = sub_ok
                failed[rest] = ~sub_ok
                it += k
                break
        converged = finished & ~failed
        return tau, a, it, converged

    def minimize(
        self,
        x0: np.ndarray,
        *,
        maxiter: int = 100,
        ftol: float = 1e-15,
        gtol: float = 1e-13,
        callback: Callable[[int], None] | None = None,
    ) -> SolverResult:
        """Profile Newton on the items with exact per-query solves (module doc).

        Converged when every query's problem is solved and the items' Newton
        decrement g.H^-1.g is below 2 ftol max(1, |f|) (or max|g| <= gtol), the
        reference's L-BFGS tolerances; the step that decrement predicts is then
        taken. ``maxiter`` counts item Newton steps. When a line search fails,
        L-BFGS-B on the same function continues from the current point.
        """
        c2, n_q = 2 * self.c, self.n_q
        y = x0[:c2].astype(np.float64, copy=True)
        tau = np.maximum(np.logaddexp(0.0, x0[c2 : c2 + n_q]), TAU_FLOOR)
        a = x0[c2 + n_q :].astype(np.float64, copy=True)
        _u, _v, gamma, beta = self.items(y)
        tau, a, inner, q_ok = self.solve_queries(gamma, beta, tau, a, tol=1e-6)
        fx = self.value_phi(y, tau, a)
        nit, success, method, message = 0, False, "profile-newton", ""
        decrement = np.inf
        tight = False  # whether the query solves behind the current point are exact
        while True:
            _f, g_y, g_t, g_a, exact, _gn = self.derivatives_phi(y, tau, a)
            active = (tau <= TAU_FLOOR * (1.0 + 1e-9)) & (g_t > 0.0)
            g_q = np.column_stack([g_t, g_a])
            schur, rhs, inv = _reduce(g_y, g_q, exact, active)
            step = _pd_solve(schur, rhs)
            decrement = float(rhs @ step)
            # The joint Newton step's query part: a warm start for the inner solves.
            step_q = np.einsum(
                "qkl,ql->qk", inv, g_q - exact.iq.transpose(0, 2, 1) @ step
            )

            # Inexact inner solves while the items are far from their optimum: the
            # line search judges f itself, which every inner step lowers, so
            # descent holds; the tolerance tightens with the decrement.
            inner_tol = min(1e-6, max(1e-24, 1e-3 * decrement / max(abs(fx), 1e-300)))

            small = decrement <= 2.0 * ftol * max(1.0, abs(fx)) or (
                np.max(np.abs(rhs)) <= gtol
            )
            if small and not tight:
                # Converged on inexact query solves: solve them exactly, go on.
                _u, _v, gamma, beta = self.items(y)
                tau, a, k, q_ok = self.solve_queries(gamma, beta, tau, a)
                inner += k
                fx = self.value_phi(y, tau, a)
                tight = True
                continue
            if small and q_ok.all():
                # Inside the quadratic region: the full step lands at rounding
                # precision; keep it unless rounding made it worse.
                y_new = y - step
                _u, _v, gamma, beta = self.items(y_new)
                t_new, a_new, k, ok_new = self.solve_queries(
                    gamma,
                    beta,
                    np.maximum(tau - step_q[:, 0], TAU_FLOOR),
                    a - step_q[:, 1],
                )
                inner += k
                f_new = self.value_phi(y_new, t_new, a_new)
                if f_new <= fx + 1e-14 * max(1.0, abs(fx)) and ok_new.all():
                    y, tau, a, fx = y_new, t_new, a_new, f_new
                success = True
                break
            if nit >= maxiter:
                message = f"stopped after {maxiter} Newton iterations"
                break
            top = np.max(np.abs(step))
            s = min(1.0, ITEM_STEP_CAP / top) if top > 0 else 1.0
            accepted = False
            while s >= 1e-10:
                y_new = y - s * step
                _u, _v, gamma, beta = self.items(y_new)
                t_new, a_new, k, ok_new = self.solve_queries(
                    gamma,
                    beta,
                    np.maximum(tau - s * step_q[:, 0], TAU_FLOOR),
                    a - s * step_q[:, 1],
                    tol=inner_tol,
                )
                inner += k
                f_new = self.value_phi(y_new, t_new, a_new)
                if np.isfinite(f_new) and f_new <= fx - _ARMIJO * s * decrement:
                    accepted = True
                    break
                s *= 0.5
            nit += 1
            if not accepted:
                message = "Newton line search failed; continued with L-BFGS-B"
                break
            y, tau, a, fx, q_ok = y_new, t_new, a_new, f_new, ok_new
            tight = inner_tol <= 1e-24
            if callback is not None:
                callback(nit)
        if not success and message.startswith("Newton line search"):
            y, tau, a, fx, success, extra = self._lbfgs(y, tau, a, ftol=ftol)
            method, nit = "profile-newton+lbfgs", nit + extra
            if not success:
                message = "L-BFGS-B fallback did not converge"
        t = np.log(np.expm1(tau))
        x = np.concatenate([y, t, a])
        grad = self.derivatives(x)[1]
        return SolverResult(
            x=x,
            tau=tau,
            alpha=a,
            fun=float(fx),
            success=bool(success),
            nit=nit,
            inner_iterations=inner,
            method=method,
            decrement=decrement,
            max_grad=float(np.max(np.abs(grad))) if grad.size else 0.0,
            message=message,
        )

    def _lbfgs(
        self, y: np.ndarray, tau: np.ndarray, a: np.ndarray, *, ftol: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool, int]:
        """L-BFGS-B on f(u, v, tau, alpha) with tau >= TAU_FLOOR, from the given
        point; success when scipy converges and the profile decrement is small."""
        c2, n_q = 2 * self.c, self.n_q

        def fun(p: np.ndarray) -> tuple[float, np.ndarray]:
            f, g_y, g_t, g_a, _e, _g = self.derivatives_phi(
                p[:c2], p[c2 : c2 + n_q], p[c2 + n_q :]
            )
            return f, np.concatenate([g_y, g_t, g_a])

        bounds = [(None, None)] * c2 + [(TAU_FLOOR, None)] * n_q + [(None, None)] * n_q
        res = scipy_minimize(
            fun,
            np.concatenate([y, tau, a]),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 20000, "maxcor": 50, "ftol": ftol, "gtol": 1e-14},
        )
        p = res.x
        y, tau, a = p[:c2], np.maximum(p[c2 : c2 + n_q], TAU_FLOOR), p[c2 + n_q :]
        fx = self.value_phi(y, tau, a)
        _f, g_y, g_t, g_a, exact, _gn = self.derivatives_phi(y, tau, a)
        active = (tau <= TAU_FLOOR * (1.0 + 1e-9)) & (g_t > 0.0)
        schur, rhs, _inv = _reduce(g_y, np.column_stack([g_t, g_a]), exact, active)
        dec = float(rhs @ _pd_solve(schur, rhs))
        ok = bool(res.success) and dec <= 1e-10 * max(1.0, abs(fx))
        return y, tau, a, fx, ok, int(res.nit)


def _reduce(
    g_i: np.ndarray, g_q: np.ndarray, hess: Hessian, active: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eliminate the query blocks: the Schur complement H_ii - sum_j B_j K_j^-1 B_j',
    the matching right-hand side g_i - sum_j B_j K_j^-1 g_j and the K_j^-1. An
    ``active`` query (tau held at its bound) keeps only its alpha row."""
    n_q = hess.tt.size
    det = hess.tt * hess.aa - hess.ta**2
    inv = np.zeros((n_q, 2, 2))
    free = ~active
    inv[free, 0, 0] = hess.aa[free] / det[free]
    inv[free, 1, 1] = hess.tt[free] / det[free]
    inv[free, 0, 1] = inv[free, 1, 0] = -hess.ta[free] / det[free]
    inv[active, 1, 1] = 1.0 / hess.aa[active]
    hinv = hess.iq @ inv  # (n_q, 2C, 2)
    schur = hess.ii - np.einsum("qik,qjk->ij", hinv, hess.iq)
    rhs = g_i - np.einsum("qik,qk->i", hinv, g_q)
    return schur, rhs, inv


def _pd_solve(h: np.ndarray, g: np.ndarray) -> np.ndarray:
    """H^-1 g with H made positive definite: eigenvalues replaced by their absolute
    values, floored at 1e-10 of the largest (far from the optimum the exact profile
    Hessian may be indefinite; near it this is the plain Newton step)."""
    h = 0.5 * (h + h.T)
    evals, evecs = np.linalg.eigh(h)
    mod = np.maximum(np.abs(evals), 1e-10 * max(float(np.abs(evals).max()), 1e-300))
    return evecs @ ((evecs.T @ g) / mod)
